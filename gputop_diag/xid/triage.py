"""Xid triage: the event history → groups, follow-up chains, the evidence → next question
table, and the route (question first, then the action). Pure: data in, data out.

An Xid is the first classification step, not a root cause. So every group leads with
the question that confirms its cause (`catalog.py`), and the history is read for four
patterns — repeated on one device (the same GPU by UUID, since indexes move across reboots),
after a driver update, during high utilization (joined with the sampled history: power, thermal,
memory, the process that ran), across many devices — and for the chains the catalog describes
(45 after another Xid, 48 then 63/64, 79 then a lost GPU, 154 after its trigger).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model import XidEvent
from .catalog import SYMPATHETIC_XIDS
from .chains import chains
from .events import KernelEvent
from .patterns import across_devices, after_driver_update, repeated, under_load
from .ports import flapping
from .types import (
    DEVICE_KINDS,
    FOLLOW_S,
    TriageContext,
    XidGroup,
    XidTriage,
    from_nvml,
    gpu_key,
    gpu_name,
    info_of,
    join_nvml,
    map_gpus,
    near,
    same_gpu,
    sev_rank,
    title_of,
)


def triage(
    events: Sequence[KernelEvent],
    context: TriageContext = TriageContext(),  # noqa: B008 - frozen, never mutated
    nvml_events: Sequence[XidEvent] = (),
) -> XidTriage:
    """Everything the triage says about `events` (kernel-log events, any order) and
    `nvml_events` (NVML's, already in the snapshots)."""

    mapped = map_gpus(
        sorted(events, key=lambda e: (e.timestamp is None, e.timestamp or 0.0)), context.gpus
    )
    loads = tuple(e for e in mapped if e.kind == "driver_loaded")
    device = [e for e in mapped if e.kind in DEVICE_KINDS]
    device = join_nvml(device, [from_nvml(x, context.gpus) for x in nvml_events])
    if context.nvml_mismatch and not any(e.kind == "nvml_mismatch" for e in device):
        device.append(
            KernelEvent(
                kind="nvml_mismatch",
                detail="NVML: driver/library version mismatch",
                source="nvml",
                sources=("nvml",),
            )
        )
    follows = _follows(device)
    groups = _groups(device, follows)
    lost = tuple(f"GPU {g.index}" for g in context.gpus if g.lost)
    notes: list[str] = []
    findings = [
        *repeated(groups, context.private),
        *after_driver_update(device, loads, context),
        *under_load(device, follows, context, notes),
        *across_devices(device, follows, context.private),
        *flapping(mapped),
    ]
    findings.sort(key=lambda f: -sev_rank(f.severity))
    return XidTriage(
        events=tuple(device),
        groups=groups,
        findings=tuple(findings),
        chains=tuple(chains(device, follows, context)),
        driver_loads=loads,
        lost_gpus=lost,
        notes=tuple(notes),
    )


def _follows(device: Sequence[KernelEvent]) -> dict[int, str]:
    """For each sympathetic event (by position), the event it follows: Xid 45 "caused by
    previous Xid N", an Xid 43/45/137 soon after another Xid on the same GPU, the driver's
    "fallen off the bus" line beside an Xid 79."""
    out: dict[int, str] = {}
    for k, e in enumerate(device):
        if e.kind == "xid" and e.code in SYMPATHETIC_XIDS:
            if e.caused_by is not None:
                out[k] = f"Xid {e.caused_by}"
                continue
            for j in range(k - 1, -1, -1):
                p = device[j]
                if not near(p, e, FOLLOW_S):
                    break
                if p.kind == "xid" and p.code not in SYMPATHETIC_XIDS and same_gpu(p, e):
                    out[k] = f"Xid {p.code}"
                    break
        elif e.kind == "fallen_off_bus":
            if any(
                o.kind == "xid" and o.code == 79 and same_gpu(o, e) and near(o, e, 60.0)
                for o in device
            ):
                out[k] = "Xid 79"
    return out


def _leaders(led: list[str]) -> str:
    """What a sympathetic group follows: `Xid 13`, or each leader with its count, the most
    frequent first (`Xid 13 ×2, Xid 31 ×1`), so no follow-up is credited to the wrong cause."""
    counts: dict[str, int] = {}
    for name in led:
        counts[name] = counts.get(name, 0) + 1
    if len(counts) == 1:
        return led[0]
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], led.index(kv[0])))
    return ", ".join(f"{name} ×{n}" for name, n in ranked)


def _groups(device: Sequence[KernelEvent], follows: dict[int, str]) -> tuple[XidGroup, ...]:
    buckets: dict[tuple, list[int]] = {}
    for k, e in enumerate(device):
        buckets.setdefault((e.kind, e.code, gpu_key(e)), []).append(k)
    out = []
    for (_kind, code, _key), idx in buckets.items():
        evs = [device[k] for k in idx]
        e0 = evs[-1]
        fatal = any(e.fatal for e in evs)
        meaning, causes, question, step, severity = info_of(e0, fatal)
        led = [follows[k] for k in idx if k in follows]
        times = [e.timestamp for e in evs if e.timestamp is not None]
        out.append(
            XidGroup(
                kind=e0.kind,
                code=code,
                gpu=gpu_name(e0),
                gpu_index=e0.gpu_index,
                gpu_uuid=e0.gpu_uuid,
                pci=e0.pci,
                count=len(evs),
                first=min(times) if times else None,
                last=max(times) if times else None,
                pids=tuple(dict.fromkeys(e.pid for e in evs if e.pid is not None)),
                process_names=tuple(dict.fromkeys(e.process_name for e in evs if e.process_name)),
                title=title_of(e0),
                meaning=meaning,
                causes=causes,
                question=question,
                step=step,
                severity=severity,
                follows=_leaders(led) if len(led) == len(evs) else None,
                sources=tuple(dict.fromkeys(s for e in evs for s in e.sources)),
                locations=tuple(e.location for e in evs if e.location),
            )
        )
    out.sort(
        key=lambda g: (g.follows is not None, -sev_rank(g.severity), -g.count, -(g.last or 0.0))
    )
    return tuple(out)
