"""The Xid triage as the Monitor keeps it for the live views: kernel-log Xid lines turned into
the snapshot's `XidEvent`s (each once, and not when NVML already reported it), the triage of the
run's events with the sampled history (the lines themselves kept for it, so that it names the
log that held each one, whenever it was read), and the error a kernel log nobody may read
becomes."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import replace

from ..collect.kernlog.scan import XidScan, line_key, same_time
from ..collect.kernlog.sources import SourceReport
from ..model import CollectorError, Snapshot, XidEvent
from ..xid.events import KernelEvent
from ..xid.triage import triage
from ..xid.types import NVML_MATCH_S, TriageContext, XidTriage, gpu_refs, map_gpus

HISTORY_SINCE_S = 7 * 86400.0  # how far back the live view reads the kernel log
NVML_MISMATCH = "NVMLError_LibRmVersionMismatch"
FUTURE_SLACK_S = 1.0


def kernel_xid_events(
    events: Sequence[KernelEvent],
    snap: Snapshot,
    recent: Sequence[XidEvent],
    seen: deque,
) -> tuple[tuple[XidEvent, ...], tuple[KernelEvent, ...]]:
    """The Xid lines among `events` not attached before (`seen` remembers them) and not
    already reported by NVML (in `recent` or this snapshot), as XidEvents; the driver's
    "fallen off the bus" without an Xid 79 beside it counts as an Xid 79. Second, every new
    line of these, NVML's too, as it is (`live_triage`'s `lines`)."""
    mapped = map_gpus(events, gpu_refs(snap))
    nvml = [x for x in (*recent, *snap.xid_events) if x.source == "nvml"]
    out, lines = [], []
    for e in mapped:
        if e.timestamp is None or e.timestamp > snap.timestamp + FUTURE_SLACK_S:
            continue  # newer than the snapshot (a feed that lags the clock): a later tick's
        if e.kind == "xid":
            code = e.code
        elif e.kind == "fallen_off_bus" and not any(
            o.kind == "xid" and o.code == 79 and o.pci == e.pci for o in mapped
        ):
            code = 79
        else:
            continue
        key = (round(e.timestamp, 3), code, e.pci, e.detail)
        if key in seen:
            continue
        seen.append(key)
        lines.append(e)
        if any(
            x.xid == code
            and x.gpu_index is not None
            and x.gpu_index == e.gpu_index
            and abs(x.timestamp - e.timestamp) <= NVML_MATCH_S
            for x in nvml
        ):
            continue
        out.append(
            XidEvent(
                timestamp=e.timestamp,
                xid=code,
                gpu_index=e.gpu_index,
                source="kernel-log",
                pci_bus_id=e.pci,
                pid=e.pid,
                process_name=e.process_name,
                message=e.detail,
            )
        )
    return tuple(out), tuple(lines)


def live_triage(
    history_scan: XidScan | None,
    xids: Sequence[XidEvent],
    snapshots: Sequence[Snapshot],
    snap: Snapshot,
    lines: Sequence[KernelEvent] = (),
) -> XidTriage:
    """The triage of the run's Xid events (NVML's and the kernel log's) and, once read, of the
    kernel log before the run, joined with the sampled history. `lines`: the kernel log's Xid
    lines read during the run (`kernel_xid_events`), triaged as the lines they are (named by
    the log that held them, NVML's event joined to its line) as when the log is read after
    the event: the events made of them are not taken again, and a line the read of the log
    before the run holds as well is taken once."""
    ctx = TriageContext(
        gpus=gpu_refs(snap),
        history=snapshots,
        module_version=history_scan.module_version if history_scan else None,
        library_version=snap.system.driver_version,
        nvml_mismatch=any(e.code == NVML_MISMATCH for e in snap.errors),
    )
    logged = history_scan.events if history_scan else ()
    if lines:
        logged = _with_lines(logged, lines)
        made = {(e.timestamp, e.pci, e.detail) for e in lines}
        xids = [
            x
            for x in xids
            if x.source != "kernel-log" or (x.timestamp, x.pci_bus_id, x.message) not in made
        ]
    return triage(logged, ctx, nvml_events=xids)


def _with_lines(
    logged: Sequence[KernelEvent], lines: Sequence[KernelEvent]
) -> tuple[KernelEvent, ...]:
    """The read of the log before the run (`logged`, its sources merged: `scan.merge`) with
    the run's lines: a line it holds too, the same message stamped within the merge window
    (the journal's microseconds against kern.log's seconds, which the merged event keeps), is
    that event, the line's source added to it where another source gave it; each event stands
    for one line (a message repeated within the window is as many events in both reads)."""
    out = list(logged)
    claimed: set[int] = set()
    by_key: dict[tuple, list[int]] = {}
    for k, e in enumerate(out):
        by_key.setdefault(line_key(e), []).append(k)
    for line in lines:
        hit = next(
            (
                k
                for k in by_key.get(line_key(line), ())
                if k not in claimed and same_time(line, out[k])
            ),
            None,
        )
        if hit is None:
            out.append(line)
            continue
        claimed.add(hit)
        if line.source not in out[hit].sources:
            out[hit] = replace(out[hit], sources=(*out[hit].sources, line.source))
    return tuple(out)


def unreadable_error(reports: Sequence[SourceReport]) -> CollectorError:
    """No kernel-log source answered: which ones were tried, and how to get access."""
    tried = "; ".join(f"{r.name}: {r.message or r.status}" for r in reports) or "no source"
    step = next((r.next_step for r in reports if r.status == "denied" and r.next_step), "")
    return CollectorError(
        source="kernel-log",
        message=f"cannot read the kernel log ({tried}): Xid lines and OOM kills are not seen",
        next_step=step
        or "run on the GPU host itself (not in a container without /dev/kmsg), or with sudo",
    )
