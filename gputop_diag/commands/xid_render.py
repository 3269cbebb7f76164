"""The `xid` command's output: human text (the route first) and the `gputop-diag.xid/1` JSON
document. Under `--sanitize` neither holds kernel text, process names, pids, UUIDs or bus ids:
codes, classes, counts and the route only, as a public note should."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..collect.kernlog.files import human_bytes
from ..collect.kernlog.scan import XidScan
from ..collect.kernlog.sources import SourceReport
from ..model.codec import iso_time
from ..model.formats import count
from ..xid.events import KernelEvent
from ..xid.types import XidTriage, gpu_name, span, title_of

XID_SCHEMA = "gputop-diag.xid/1"
NOT_A_CAUSE = "an Xid is a classification step, not a root cause"


def _t(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _source_line(r: SourceReport) -> str:
    what = {
        "ok": count(r.events, "event"),
        "partial": f"{count(r.events, 'event')}, partly read",
        "empty": "nothing relevant",
    }.get(r.status, r.status)
    if r.older:
        what += f", {r.older} older than --since"
    size = f", {human_bytes(r.size)}" if r.size else ""
    msg = f" — {r.message}" if r.message else ""
    return f"  {r.name}: {what}{size}{msg}"


def render_text(
    found: XidScan, result: XidTriage, sanitize: bool, limit: int, note: str = ""
) -> str:
    out: list[str] = []
    gpus = {gpu_name(e) for e in result.events if e.kind in ("xid", "sxid")}
    window = (
        "everything the sources hold" if found.since is None else f"since {_t(found.since)} UTC"
    )
    head = f"Xid triage: {count(len(result.events), 'event')}"
    if gpus:
        head += f" on {count(len(gpus), 'device')}"
    out.append(f"{head}, {window} (read in {found.elapsed_s:.1f} s)")
    if note:
        out.append(note)
    if found.failure:
        out.append(f"! the scan failed: {found.failure}")
    out.append("Sources:")
    for r in found.sources:
        out.append(_source_line(r))
        if r.next_step and r.status in ("denied", "partial", "error"):
            out.append(f"    next: {r.next_step}")
    if found.older:
        out.append(
            f"{count(found.older, 'event')} older than --since left out (per source above): "
            "--since all reads them"
        )
    if not result.events:
        if found.readable and found.older:
            out.append(f"\nNo Xid, SXid or NVIDIA driver error {window}: nothing to triage here.")
        elif found.readable:
            out.append("\nNo Xid, SXid or NVIDIA driver error in what was read: nothing to triage.")
        elif any(r.next_step for r in found.sources):
            out.append("\nNo source could be read: see the next steps above.")
        else:
            out.append("\nNo source could be read: see what each source said above.")
        return "\n".join(out)
    out.append(f"\nRoute, most urgent first ({NOT_A_CAUSE}):")
    k = 0
    for g in result.groups:
        if g.follows:
            continue
        k += 1
        times = f" ×{g.count}" if g.count > 1 else ""
        when = f", last {_t(g.last)} UTC" if g.last is not None else ""
        out.append(f" {k}. {g.title}{times} on {g.gpu} [{g.severity}]{when}")
        out.append(f"    likely: {g.causes or 'unknown'}; {g.meaning}")
        out.append(f"    ask:  {g.question}")
        out.append(f"    then: {g.step}")
        if g.process_names and not sanitize:
            pids = ", ".join(str(p) for p in g.pids[:3])
            out.append(
                f"    from: {', '.join(g.process_names[:3])}" + (f" (pid {pids})" if pids else "")
            )
    followers = [g for g in result.groups if g.follows]
    if followers:
        out.append(
            "    (follow-ups, triaged with the Xid they follow: "
            + ", ".join(f"{g.title} ×{g.count} on {g.gpu} after {g.follows}" for g in followers)
            + ")"
        )
    if result.findings:
        out.append("\nPatterns (evidence → next question):")
        for f in result.findings:
            out.append(f" - {f.evidence} [{f.severity}]: {f.question}")
            out.append(f"   seen: {f.detail}")
            out.append(f"   then: {f.action}")
    if result.chains:
        out.append("\nChains:")
        for c in result.chains:
            out.append(f" - {c.first} → {c.then} on {c.gpu}: {c.meaning}; {c.action}")
    if result.driver_loads:
        loads = ", ".join(f"{e.version} at {_t(e.timestamp)}" for e in result.driver_loads[-3:])
        out.append(f"\nDriver loads (newest last): {loads}")
    if result.lost_gpus:
        out.append(f"NVML reports lost: {', '.join(result.lost_gpus)}")
    out.append(_events_table(result.events, sanitize, limit))
    for n in result.notes:
        out.append(f"note: {n}")
    if found.ooms:
        out.append(
            f"note: {count(len(found.ooms), 'host OOM kill')} in the same log (not GPU memory)"
        )
    return "\n".join(out)


def _events_table(events, sanitize: bool, limit: int) -> str:
    newest = sorted(
        events, key=lambda e: (e.timestamp is not None, e.timestamp or 0.0), reverse=True
    )
    shown = newest if limit == 0 else newest[:limit]
    more = (
        f", {len(shown)} of {len(events)}: --limit N for more" if len(shown) < len(events) else ""
    )
    rows = [f"\nEvents, newest first{more}:", "  TIME (UTC)           DEVICE        EVENT"]
    for e in shown:
        when = (
            _t(e.timestamp)
            if e.timestamp is not None
            else (f"+{e.uptime_s:.1f} s after boot" if e.uptime_s is not None else "?")
        )
        who = ""
        if not sanitize and (e.pid is not None or e.process_name):
            who = f"  pid {e.pid if e.pid is not None else '?'} {e.process_name or ''}".rstrip()
        src = ",".join(e.sources)
        rows.append(f"  {when:<20} {gpu_name(e):<13} {title_of(e)}{who}  [{src}]")
        if not sanitize and e.detail:
            rows.append(f"      {e.detail.splitlines()[0][:160]}")
    return "\n".join(rows)


def event_json(e: KernelEvent, sanitize: bool) -> dict[str, Any]:
    return {
        "time": iso_time(e.timestamp) if e.timestamp is not None else None,
        "uptime_s": e.uptime_s,
        "kind": e.kind,
        "code": e.code,
        "title": title_of(e),
        "gpu_index": e.gpu_index,
        "gpu_uuid": None if sanitize else e.gpu_uuid,
        "pci_bus_id": None if sanitize else e.pci,
        "pid": None if sanitize else e.pid,
        "process_name": None if sanitize else e.process_name,
        "gpu_instance": e.gpu_instance,
        "compute_instance": e.compute_instance,
        "fatal": e.fatal,
        "caused_by": e.caused_by,
        "minor": e.minor,
        "link": e.link,
        "recovery_action": e.recovery_action,
        "device": e.device,  # a NIC's interface ("nic-1" sanitized), a cable module, a library
        "version": e.version,
        "client_version": e.client_version,
        "detail": None if sanitize else e.detail,
        "raw": None if sanitize else e.raw,
        "sources": list(e.sources),
    }


def to_json(found: XidScan, result: XidTriage, sanitize: bool, note: str = "") -> dict[str, Any]:
    def group(g) -> dict[str, Any]:
        return {
            "kind": g.kind,
            "code": g.code,
            "title": g.title,
            "device": g.gpu,
            "gpu_index": g.gpu_index,
            "gpu_uuid": None if sanitize else g.gpu_uuid,
            "pci_bus_id": None if sanitize else g.pci,
            "count": g.count,
            "first": iso_time(g.first) if g.first is not None else None,
            "last": iso_time(g.last) if g.last is not None else None,
            "span": span(g.last - g.first) if g.first is not None and g.last is not None else None,
            "pids": [] if sanitize else list(g.pids),
            "process_names": [] if sanitize else list(g.process_names),
            "process_count": len(g.process_names),
            "meaning": g.meaning,
            "causes": g.causes,
            "question": g.question,
            "action": g.step,
            "severity": g.severity,
            "follows": g.follows,
            "sources": list(g.sources),
        }

    return {
        "schema": XID_SCHEMA,
        "generated_at": iso_time(found.read_at),
        "since": iso_time(found.since) if found.since is not None else None,
        "sanitized": sanitize,
        "note": note,
        "elapsed_s": round(found.elapsed_s, 3),
        "readable": found.readable,
        "older": found.older,
        "sources": [
            {
                "name": r.name,
                "kind": r.kind,
                "status": r.status,
                "events": r.events,
                "older": r.older,
                "lines": r.lines,
                "bytes_read": r.bytes_read,
                "size": r.size,
                "binary_skipped": r.binary_skipped,
                "invalid_utf8": r.invalid_utf8,
                "message": r.message,
                "next_step": r.next_step,
            }
            for r in found.sources
        ],
        "route": [group(g) for g in result.groups if not g.follows],
        "groups": [group(g) for g in result.groups],
        "findings": [
            {
                "evidence": f.evidence,
                "question": f.question,
                "detail": f.detail,
                "action": f.action,
                "severity": f.severity,
                "devices": list(f.gpus),
            }
            for f in result.findings
        ],
        "chains": [
            {
                "first": c.first,
                "then": c.then,
                "device": c.gpu,
                "meaning": c.meaning,
                "action": c.action,
                "severity": c.severity,
            }
            for c in result.chains
        ],
        "events": [event_json(e, sanitize) for e in result.events],
        "driver_loads": [
            {"time": iso_time(e.timestamp) if e.timestamp else None, "version": e.version}
            for e in result.driver_loads
        ],
        "lost_gpus": list(result.lost_gpus),
        "host_oom_kills": len(found.ooms),
        "notes": list(result.notes),
    }
