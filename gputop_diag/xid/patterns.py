"""The evidence → next-question table (docs/xid.md, "Patterns") read from an Xid history, and the
follow-up chains between events. Pure; called by `triage.triage`.

| evidence | next question |
|---|---|
| repeated Xid on one device | same physical GPU, same job type, or same time window? |
| Xid after driver update | driver/runtime compatibility or reboot/module state? |
| Xid during high utilization | power, thermal, memory pressure, or workload-specific kernel? |
| Xid across many devices | host, driver, PCIe, power, or scheduler-wide event? |

Each finding says what the history answers already (which processes, which window, the GPU's
power/temperature/memory at the time, what the GPUs share) and the action once answered.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model import Snapshot
from ..model.formats import count
from .catalog import SYMPATHETIC_XIDS, entry
from .events import KernelEvent
from .types import (
    BUSY_POWER_PCT,
    BUSY_UTIL_PCT,
    DRIVER_UPDATE_S,
    HISTORY_MATCH_S,
    HOT_C,
    MEMORY_FULL_PCT,
    WIDE_WINDOW_S,
    Finding,
    TriageContext,
    XidGroup,
    gpu_name,
    info_of,
    sev_rank,
    span,
    subject_of,
    title_of,
    when,
    words,
)

# --- evidence → next question ---------------------------------------------------------------------
REPEATED = ("repeated Xid on one device", "same physical GPU, same job type, or same time window?")
AFTER_UPDATE = ("Xid after driver update", "driver/runtime compatibility or reboot/module state?")
UNDER_LOAD = (
    "Xid during high utilization",
    "power, thermal, memory pressure, or workload-specific kernel?",
)
ACROSS = ("Xid across many devices", "host, driver, PCIe, power, or scheduler-wide event?")
_DIAG = "drain it and run DCGM diagnostics (dcgmi diag -r 3), then NVIDIA's field diagnostic"


def repeated(groups: Sequence[XidGroup], private: bool = True) -> list[Finding]:
    out = []
    for g in groups:
        if g.follows or g.count < 2 or g.kind not in ("xid", "sxid"):
            continue
        others = sorted(
            {o.gpu for o in groups if o.code == g.code and o.kind == g.kind and o.gpu != g.gpu}
        )
        parts = [f"{g.title} ×{g.count} on {g.gpu}"]
        if g.gpu_uuid and private:
            parts[0] += f" ({g.gpu_uuid})"
        if g.first is not None and g.last is not None:
            parts.append(f"over {span(g.last - g.first)}, last at {when(g.last)}")
        if len(g.process_names) == 1:
            parts.append(f"every time from {g.process_names[0] if private else 'one process'}")
        elif g.process_names:
            names = f" ({', '.join(g.process_names[:4])})" if private else ""
            parts.append(f"from {len(g.process_names)} different processes{names}")
        elif private:
            parts.append("no process named in the log")
        parts.append(f"also on {words(others)}" if others else "no other GPU had it")
        info = entry(g.code) if g.kind == "xid" else None
        app_code = info is not None and "app" in info.causes[:1]
        same_unit = len(g.locations) >= 2 and len(set(g.locations)) == 1
        if same_unit:
            parts.append(f"always at {g.locations[0]}: the same unit of the chip")
        if same_unit or len(g.process_names) > 1:
            why = "the same unit every time" if same_unit else "different jobs hit it on one GPU"
            action = f"{why}: suspect the GPU; {_DIAG}"
            severity = "critical"
        elif app_code and not others:
            action = (
                "run the same job on another GPU: if the Xid follows the job, it is the "
                "application (run it under compute-sanitizer); if it stays on this GPU, " + _DIAG
            )
            severity = "warning"
        else:
            action = g.step
            severity = g.severity
        out.append(Finding(REPEATED[0], REPEATED[1], "; ".join(parts), action, severity, (g.gpu,)))
    return out


def after_driver_update(
    device: Sequence[KernelEvent], loads: Sequence[KernelEvent], ctx: TriageContext
) -> list[Finding]:
    details = []
    changes = []
    for prev, cur in zip(loads, loads[1:], strict=False):
        if prev.version and cur.version and prev.version != cur.version:
            changes.append((prev.version, cur))
    xids = [e for e in device if e.kind == "xid" and e.code not in SYMPATHETIC_XIDS]
    for old, load in changes:
        after = [
            e
            for e in xids
            if e.timestamp is not None
            and load.timestamp is not None
            and 0 <= e.timestamp - load.timestamp <= DRIVER_UPDATE_S
        ]
        if after:
            codes = ", ".join(str(c) for c in sorted({e.code for e in after}))
            details.append(
                f"driver {old} → {load.version} loaded at {when(load.timestamp)}; "
                f"{count(len(after), 'Xid event')} since (Xid {codes})"
            )
    module, library = ctx.module_version, ctx.library_version
    mismatch = [e for e in device if e.kind in ("api_mismatch", "nvml_mismatch")]
    if module and library and module != library:
        details.append(
            f"the loaded kernel module is {module} but NVML's library is {library}: "
            "the driver was upgraded and the old module is still loaded"
        )
    elif mismatch:
        m = next((e for e in mismatch if e.version), mismatch[0])
        versions = (
            f" (user space {m.client_version}, kernel module {m.version})" if m.version else ""
        )
        details.append(f"the driver reported a version mismatch{versions} at {when(m.timestamp)}")
    if not details:
        return []
    restart = bool(mismatch) or (module and library and module != library)
    if restart:
        action = (
            "reboot (or reload the nvidia modules once the GPUs are idle), then pin the driver "
            "packages"
        )
    else:  # say of the module and the library only what was read (a log read offline: neither)
        if module and library:
            known = f"the loaded module and NVML's library agree ({module}): "
        elif module or library:
            which = "loaded kernel module" if module else "NVML library"
            known = (
                f"only the {which} was read ({module or library}): compare it with "
                f"{'NVML' if module else 'cat /proc/driver/nvidia/version'} on the node; "
            )
        else:
            known = (
                "the loaded module's and NVML's versions are not known here (a log read "
                "offline): on the node, compare cat /proc/driver/nvidia/version with nvidia-smi; "
            )
        action = (
            known + "check the CUDA runtime the framework bundles (torch.version.cuda) against "
            "the driver's CUDA version (nvidia-smi); if the Xids began with the new driver, try "
            "the previous one"
        )
    return [
        Finding(
            AFTER_UPDATE[0],
            AFTER_UPDATE[1],
            "; ".join(details),
            action,
            "critical" if restart else "warning",
        )
    ]


def _state_at(history: Sequence[Snapshot], ev: KernelEvent):
    """(GPU state, snapshot) sampled last before `ev` (within HISTORY_MATCH_S; else the first
    after it), skipping samples where the GPU was already lost: how it ran when the Xid hit."""
    if ev.timestamp is None or ev.gpu_index is None or not history:
        return None, None
    before, after = None, None
    for s in history:
        dt = s.timestamp - ev.timestamp
        if abs(dt) > HISTORY_MATCH_S:
            continue
        g = s.gpu(ev.gpu_index)
        if g is None or g.lost:
            continue
        if dt <= 0:
            before = (g, s)
        elif after is None:
            after = (g, s)
    return before or after or (None, None)


def _facts(g) -> tuple[list[str], list[str]]:
    """What a sampled GPU showed (figures), and what in it points at a cause."""
    facts, causes = [], []
    if g.util_gpu_pct is not None:
        facts.append(f"{g.util_gpu_pct:.0f} % busy")
    p = g.power_pct_of_limit
    if g.power_w is not None:
        facts.append(f"{g.power_w:.0f} W" + (f" ({p:.0f} % of the limit)" if p else ""))
    if p is not None and p >= BUSY_POWER_PCT:
        causes.append(
            "power at the limit: check the PSU and power cabling, and compare with the other GPUs"
        )
    thermal = any("thermal" in r for r in g.clock_event_reasons)
    if g.temperature_c is not None:
        facts.append(f"{g.temperature_c:.0f} °C" + (" with thermal slowdown" if thermal else ""))
    if thermal or (g.temperature_c or 0) >= HOT_C:
        causes.append("hot: check cooling and airflow (nvidia-smi -q -d TEMPERATURE)")
    m = g.mem_used_pct
    if m is not None:
        facts.append(f"memory {m:.0f} % full")
        if m >= MEMORY_FULL_PCT:
            causes.append(
                "memory nearly full: look for out-of-bounds access or oversubscription in the job"
            )
    return facts, causes


def _running(snap: Snapshot, g) -> str:
    """ "; running pid 41280 pt_main_thread (Slurm job 48213)": what ran on the GPU then."""
    who = []
    for pr in snap.gpu_processes:
        if pr.gpu_index == g.index:
            info = snap.process(pr.pid)
            who.append(f"pid {pr.pid} {info.name if info and info.name else ''}".strip())
    out = f"; running {', '.join(who[:3])}" if who else ""
    jobs = [j.job_id for j in snap.scheduler_jobs or () if not j.pending]
    if jobs:
        out += f" (Slurm job {', '.join(jobs[:2])})"
    return out


def under_load(
    device: Sequence[KernelEvent], follows: dict[int, str], ctx: TriageContext, notes: list[str]
) -> list[Finding]:
    busy_by_gpu: dict[str, tuple[list[str], list[str], str]] = {}  # lines, causes, severity
    covered = 0
    quiet = []
    for k, e in enumerate(device):
        if e.kind != "xid" or k in follows or e.code in SYMPATHETIC_XIDS:
            continue
        g, snap = _state_at(ctx.history, e)
        if g is None:
            continue
        covered += 1
        facts, causes = _facts(g)
        busy = (g.util_gpu_pct or 0) >= BUSY_UTIL_PCT or causes
        running = _running(snap, g) if ctx.private else ""
        line = f"{title_of(e)} at {when(e.timestamp)}: {', '.join(facts)}{running}"
        if not busy:
            quiet.append(f"{line} on {gpu_name(e)}")
            continue
        lines, all_causes, sev = busy_by_gpu.get(gpu_name(e), ([], [], "info"))
        lines.append(line)
        all_causes += [c for c in causes if c not in all_causes]
        sev = max(sev, entry(e.code).severity, key=sev_rank)
        busy_by_gpu[gpu_name(e)] = (lines, all_causes, sev)
    out = []
    for gpu, (lines, causes, sev) in busy_by_gpu.items():
        more = f" (+{len(lines) - 3} more)" if len(lines) > 3 else ""
        action = "; ".join(causes) or (
            "no power, thermal or memory limit at the time: a workload-specific kernel? Re-run "
            "that job alone with CUDA_LAUNCH_BLOCKING=1 and under compute-sanitizer"
        )
        detail = f"on {gpu}: " + "; ".join(lines[:3]) + more
        out.append(Finding(UNDER_LOAD[0], UNDER_LOAD[1], detail, action, sev, (gpu,)))
    if quiet and not out:
        out.append(
            Finding(
                "Xid while the GPU was not busy",
                UNDER_LOAD[1],
                "; ".join(quiet[:3]),
                "power and thermal are unlikely: look at the job's own kernels and "
                "the companion Xids",
                "info",
            )
        )
    sampled = (ctx.history[0].timestamp, ctx.history[-1].timestamp) if ctx.history else None
    unsampled = [
        e
        for e in device
        if e.kind == "xid"
        and (
            sampled is None or (e.timestamp is not None and sampled[0] <= e.timestamp <= sampled[1])
        )
    ]
    if not covered and unsampled:
        notes.append(
            "no sampled history at the events' times: keep the live view open (or "
            "`gputop-diag record`) to see power, temperature and memory when the next "
            "Xid hits"
        )
    return out


def across_devices(
    device: Sequence[KernelEvent], follows: dict[int, str], private: bool = True
) -> list[Finding]:
    primary = [  # the GPUs' own events (a NIC's or a process's are not a GPU's)
        e
        for k, e in enumerate(device)
        if k not in follows
        and e.timestamp is not None
        and subject_of(e) == "gpu"
        and e.kind not in ("pcie_aer", "api_mismatch", "nvml_mismatch", "probe_failed")
        and (e.kind != "xid" or e.code not in SYMPATHETIC_XIDS)
    ]
    clusters: list[list[KernelEvent]] = []
    for e in primary:
        if clusters and e.timestamp - clusters[-1][-1].timestamp <= WIDE_WINDOW_S:
            clusters[-1].append(e)
        else:
            clusters.append([e])
    out = []
    for c in clusters:
        devices = _devices(c)
        if len(devices) < 2:
            continue
        c = [e for d in devices for e in d]
        c.sort(key=lambda e: e.timestamp)
        gpus = [_device_name(d) for d in devices]
        codes = sorted({title_of(e) for e in c})
        start, end = c[0].timestamp, c[-1].timestamp
        parts = [
            f"{', '.join(codes)} on {words(gpus)} within {span(end - start)} (from {when(start)})"
        ]
        names = {e.process_name for e in c if e.process_name}
        one_job = len(names) == 1 and all(e.process_name for e in c if e.kind == "xid")
        if one_job:
            who = next(iter(names)) if private else "one process name"
            parts.append(f"all from {who}: one multi-GPU job")
        aer = [
            e
            for e in device
            if e.kind == "pcie_aer"
            and e.timestamp is not None
            and start - 60 <= e.timestamp <= end + 60
        ]
        if aer:
            parts.append(f"{count(len(aer), 'PCIe AER error')} at the same time")
        drv = {
            title_of(e)
            for e in device
            if e.kind in ("api_mismatch", "gsp_timeout", "nvml_mismatch")
            and e.timestamp is not None
            and start - 600 <= e.timestamp <= end + 60
        }
        if drv:
            parts.append("driver: " + ", ".join(sorted(drv)))
        if one_job:
            action = (
                "the job spans them all: check the job first (its kernels, NCCL with "
                "NCCL_DEBUG=INFO), then the host"
            )
        else:
            action = (
                "look at what the GPUs share: the host's power (ipmitool sel list, the PSUs), "
                "PCIe (journalctl -k | grep -i aer, the switches), a driver reload or upgrade, "
                "and whether the scheduler started or ended a job on all of them"
            )
        sev = max((info_of(e, bool(e.fatal))[4] for e in c), key=sev_rank)
        out.append(Finding(ACROSS[0], ACROSS[1], "; ".join(parts), action, sev, tuple(gpus)))
    return out


def _devices(events: Sequence[KernelEvent]) -> list[list[KernelEvent]]:
    """The physical GPUs of `events`, each with its events: two events are one GPU when they
    share its UUID, NVML index or bus id (an Xid 79 named by UUID and the driver's "fallen off
    the bus" line named by bus id are one GPU, not two). An event that names no GPU (no bus id,
    index, UUID or /dev/nvidiaN) is no device and is left out."""
    out: list[list[KernelEvent]] = []
    ids: list[set] = []
    for e in events:
        mine = {
            x
            for x in (
                ("uuid", e.gpu_uuid),
                ("index", e.gpu_index),
                ("pci", e.pci),
                ("minor", e.minor),
            )
            if x[1] is not None
        }
        if not mine:
            continue
        hits = [k for k, known in enumerate(ids) if known & mine]
        if not hits:
            out.append([e])
            ids.append(mine)
            continue
        first = hits[0]
        for k in reversed(hits[1:]):  # the event joins GPUs seen apart: one GPU
            out[first] += out.pop(k)
            ids[first] |= ids.pop(k)
        out[first].append(e)
        ids[first] |= mine
    return out


def _device_name(events: Sequence[KernelEvent]) -> str:
    """A GPU's name: by its NVML index where one of its events has it, else its bus id."""
    named = [e for e in events if e.gpu_index is not None] or list(events)
    return gpu_name(named[0])
