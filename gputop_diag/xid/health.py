"""The kernel log's messages as health findings (`gputop-diag health`, the live view's health,
docs/health.md "kernel log"): a network port down or flapping, its cable, power or temperature,
`nvidia-peermem` errors (GPUDirect RDMA), NVLink training and RX detection, a process that
crashed in NCCL. Each bears on the class it slows or breaks (communication) or is the job's
failure (a crash in NCCL: an alert, never a vote). Xids keep their own path (the Xid triage and
the classifier's Xid alerts), except a GPU fallen off the bus, with or without an Xid 79
beside the driver's line: the GPU is gone until the node reboots, so health says so too
(`kernel.gpu_fell_off_bus`, critical, the GPU named by its index through NVML's bus ids).
Pure: events in, findings out.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model.health import Finding, HealthEvidence
from .catalog import DRIVER_MESSAGES
from .events import KernelEvent
from .ports import FLAPPING, PortHistory, describe, port_histories
from .types import GpuRef, gpu_name, map_gpus, nic_name, title_of, when

CHECK = "kernel_log"
RECENT_S = 86400.0  # a message older than this (in this boot) is history: info, not a warning
MAX_LINES = 3  # messages quoted per finding

# kind -> (finding id, the classes it bears on, what it does to a job, next step)
KINDS: dict[str, tuple[str, tuple[str, ...], str, str]] = {
    "peermem_error": (
        "kernel.peermem_error",
        ("communication",),
        "GPUDirect RDMA between the GPUs and the NIC is unreliable: NCCL between nodes errors, "
        "hangs or stages through host memory",
        "modinfo nvidia-peermem | grep ^version; cat /proc/driver/nvidia/version  # the same "
        "driver? then retry the job with NCCL_NET_GDR_LEVEL=LOC to confirm",
    ),
    "nvlink_training": (
        "kernel.nvlink_training",
        ("communication",),
        "an NVLink that did not come up: GPU-to-GPU traffic takes a slower path or fails",
        "nvidia-smi nvlink --status",
    ),
    "nccl_segfault": (
        "kernel.nccl_segfault",
        ("communication",),
        "a process crashed inside NCCL: its job failed, and its other ranks hang until their "
        "timeout",
        "rerun the job with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see the failing "
        "transport",
    ),
    "nic_cable_error": (
        "kernel.nic_cable_error",
        ("communication",),
        "the port's cable module reported an error: the port may be down or erroring",
        "ibstat  # then replace the cable or transceiver",
    ),
    "nic_temperature": (
        "kernel.nic_temperature",
        ("communication",),
        "an overheating adapter or module throttles or shuts the port down",
        "check the fans and the airflow over the adapter; ibstat",
    ),
    "nic_power": (
        "kernel.nic_power",
        ("communication",),
        "an adapter short of slot power may not run its ports at full rate",
        "move the adapter to a slot that provides its power, or check the riser",
    ),
}
# The kinds these findings read (a port's link coming back included; an Xid 79 is kind "xid").
HEALTH_KINDS = frozenset({*KINDS, "nic_link_down", "nic_cable", "nic_link_up", "fallen_off_bus"})
FELL_ID = "kernel.gpu_fell_off_bus"
FELL_EFFECT = (
    "the GPU stopped answering on PCIe (Xid 79): its processes fail, and it stays lost until "
    "the node reboots"
)


def is_fall(e: KernelEvent) -> bool:
    """The driver's "GPU has fallen off the bus" line, or an Xid 79: the same fault."""
    return e.kind == "fallen_off_bus" or (e.kind == "xid" and e.code == 79)


def _fall_findings(ordered: Sequence[KernelEvent], gpus: Sequence[GpuRef]) -> list[Finding]:
    """One critical finding per GPU that fell off the bus (the Xid 79 and the driver's line of
    one fall are one GPU's), named by its index where NVML's bus ids place it."""
    by_gpu: dict[str, list[KernelEvent]] = {}
    for e in map_gpus([e for e in ordered if is_fall(e)], gpus):
        key = e.gpu_uuid or (f"index {e.gpu_index}" if e.gpu_index is not None else e.pci or "?")
        by_gpu.setdefault(key, []).append(e)
    out = []
    for evs in by_gpu.values():
        last = evs[-1]
        name = gpu_name(last)
        if last.gpu_index is not None and last.pci:
            name += f" (bus {last.pci})"
        times = f" ×{len(evs)}" if len(evs) > 1 else ""
        out.append(
            Finding(
                id=FELL_ID,
                severity="critical",
                title=f"{name} fell off the bus (Xid 79){times} (last at {when(last.timestamp)})",
                evidence=(*_evidence(evs), HealthEvidence(FELL_EFFECT, "what it does")),
                next_step="nvidia-smi; lspci -d 10de:  # is it still listed? then "
                + DRIVER_MESSAGES["fallen_off_bus"].step,
                check=CHECK,
                gpus=(last.gpu_index,) if last.gpu_index is not None else (),
                pids=tuple(dict.fromkeys(e.pid for e in evs if e.pid is not None)),
            )
        )
    return out


PORT_ID = "kernel.nic_port"
FLAP_ID = "kernel.nic_port_flapping"
PORT_NEXT = "ibstat; ip -br link  # is the port up now? then reseat or swap its cable"


def _evidence(events: Sequence[KernelEvent]) -> tuple[HealthEvidence, ...]:
    """The newest messages, each with where it was read."""
    out = []
    for e in list(events)[-MAX_LINES:]:
        line = e.detail.splitlines()[0][:200] if e.detail else title_of(e)
        out.append(HealthEvidence(f"{when(e.timestamp)}: {line}", ", ".join(e.sources) or "log"))
    return tuple(out)


def _severity(last: float | None, now: float, sev: str) -> str:
    return "info" if last is not None and now - last > RECENT_S else sev


def _port_finding(p: PortHistory, now: float) -> Finding:
    flaps = p.flaps()
    if flaps:
        fid, sev, title = FLAP_ID, "warning", f"{describe(p)}: {FLAPPING[0]}"
    elif p.transient:
        fid, sev, title = PORT_ID, "info", f"{describe(p)}: a port brought up, or a blip"
    else:
        fid, sev, title = PORT_ID, "warning", describe(p)
    said = (
        "collectives between nodes stall or fail each time the port goes down"
        if flaps or not p.transient
        else "no effect once it is back"
    )
    where = ", ".join(p.sources) or "log"
    evidence = (
        HealthEvidence(f"link down at {', '.join(when(t) for t in p.downs[-MAX_LINES:])}", where),
        HealthEvidence(said, "what it does"),
    )
    return Finding(
        id=fid,
        severity=_severity(p.last_down, now, sev),
        title=title,
        evidence=evidence,
        next_step=PORT_NEXT,
        bears_on=("communication",),
        check=CHECK,
    )


def kernel_findings(
    events: Sequence[KernelEvent],
    now: float,
    *,
    since: str = "since boot",
    readable: bool = True,
    problem: str = "",
    next_step: str = "",
    gpus: Sequence[GpuRef] = (),
) -> tuple[Finding, ...]:
    """The health findings of the kernel log's `events` (any order; bookkeeping lines
    included: a port's link coming back tells a flap from a port down). `readable` False: the
    log could not be read (`problem`, `next_step`): one info finding says so. `gpus`: NVML's,
    to name a GPU that fell off the bus by its index."""
    if not readable:
        return (
            Finding(
                id="kernel.unreadable",
                severity="info",
                title=f"the kernel log could not be read: {problem or 'no source answered'}",
                next_step=next_step,
                check=CHECK,
            ),
        )
    ordered = sorted(
        (e for e in events if e.timestamp is not None or e.uptime_s is not None),
        key=lambda e: e.timestamp or 0.0,
    )
    out = [_port_finding(p, now) for p in port_histories(ordered)]
    groups: dict[tuple, list[KernelEvent]] = {}
    for e in ordered:
        if e.kind in KINDS:
            key = (e.kind, (e.pci, e.device) if e.kind.startswith("nic_") else None)
            groups.setdefault(key, []).append(e)
    for (kind, _), evs in groups.items():
        fid, classes, effect, step = KINDS[kind]
        last = evs[-1]
        times = f" ×{len(evs)}" if len(evs) > 1 else ""
        where = f" on {nic_name(last)}" if kind.startswith("nic_") else ""
        who = ""
        pids = tuple(dict.fromkeys(e.pid for e in evs if e.pid is not None))
        if kind == "nccl_segfault":
            who = f": pid {last.pid} ({last.process_name or '?'}) in {last.device}"
        sev = "critical" if kind == "nccl_segfault" else "warning"
        out.append(
            Finding(
                id=fid,
                severity=_severity(last.timestamp, now, sev),
                title=f"{title_of(last)}{times}{where}{who} (last at {when(last.timestamp)})",
                evidence=(*_evidence(evs), HealthEvidence(effect, "what it does")),
                next_step=step,
                bears_on=classes,
                check=CHECK,
                pids=pids,
            )
        )
    if not out:
        out.append(
            Finding(
                id="kernel.neighbours",
                severity="ok",
                title=f"no network port, GPUDirect RDMA, NVLink training or NCCL crash message "
                f"in the kernel log {since}",
                check=CHECK,
            )
        )
    return (*_fall_findings(ordered, gpus), *out)
