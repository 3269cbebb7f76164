"""Alerts: what is not a bottleneck class but must be seen now."""

from __future__ import annotations

from collections.abc import Sequence

from . import thresholds as T
from .features import Features
from .oom import OomKill
from .slurm import SchedulerEvidence
from .types import Alert
from .xid_catalog import describe


def alerts_for(
    f: Features, scheduler: Sequence[SchedulerEvidence] = (), oom: Sequence[OomKill] = ()
) -> tuple[Alert, ...]:
    """What must be seen now, most severe kinds first: lost GPUs, Xids, throttling, memory."""
    out: list[Alert] = []
    for i in f.lost_gpus:
        out.append(
            Alert(
                "gpu_lost",
                "critical",
                f"GPU {i} is lost (fell off the bus): drain "
                "the node and reboot; check power, cooling and seating",
                i,
            )
        )
    seen: dict[tuple[int, int | None], int] = {}
    for x in f.xid_events:
        seen[(x.xid, x.gpu_index)] = seen.get((x.xid, x.gpu_index), 0) + 1
    for (xid, gpu), n in sorted(seen.items(), key=lambda kv: -kv[1]):
        name, meaning, step, sev = describe(xid)
        times = f" ×{n}" if n > 1 else ""
        where = f"GPU {gpu}" if gpu is not None else "a GPU"
        out.append(
            Alert("xid", sev, f"Xid {xid} ({name}){times} on {where}: {meaning}; {step}", gpu)
        )
    if f.thermal_fraction >= T.THROTTLE_FRACTION:
        gpus = ", ".join(map(str, f.throttled_gpus))
        out.append(
            Alert(
                "thermal",
                "warning",
                f"thermal slowdown on GPU {gpus} in "
                f"{f.thermal_fraction:.0%} of busy samples; SM clock "
                f"{f.clock_pct_median or 0:.0f} % of max: check cooling and airflow",
            )
        )
    if f.power_cap_fraction >= T.THROTTLE_FRACTION:
        out.append(
            Alert(
                "power",
                "info",
                f"clocks held by the power cap in {f.power_cap_fraction:.0%} of busy samples",
            )
        )
    g = f.mem_growth_mib_per_min
    if f.memory_grows:
        out.append(
            Alert(
                "memory_growth",
                "warning",
                f"GPU {f.mem_growth_gpu} memory grows "
                f"{g:.0f} MiB/min every step, full in ~{f.minutes_to_full:.0f} min: "
                "graph retention (loss kept with its graph) or a logging leak?",
                f.mem_growth_gpu,
            )
        )
    for k in oom[:3]:
        where = "the job's cgroup memory limit" if k.cgroup else "host memory"
        out.append(
            Alert(
                "oom_kill",
                "critical",
                f"the kernel's OOM killer ended pid {k.pid} ({k.process_name}): {where} ran "
                "out; see `journalctl -k | grep -i 'out of memory'`",
            )
        )
    for j in scheduler:
        left = j.time_left_s
        if not j.pending and left is not None and left < T.TIME_LIMIT_CLOSE_S:
            out.append(
                Alert(
                    "time_limit",
                    "warning",
                    f"Slurm job {j.job_id} reaches its time limit in {max(0.0, left) / 60:.0f} "
                    "min: save a checkpoint (scontrol show job shows EndTime)",
                )
            )
    if f.mem_used_pct_max is not None and T.CAPACITY_WARN_PCT <= f.mem_used_pct_max:
        out.append(
            Alert(
                "memory_full",
                "warning",
                f"GPU {f.mem_used_pct_gpu} memory {f.mem_used_pct_max:.0f} % used",
                f.mem_used_pct_gpu,
            )
        )
    if f.ecc_uncorrected:
        out.append(
            Alert(
                "ecc",
                "critical",
                f"{f.ecc_uncorrected} uncorrectable ECC errors since the driver loaded",
            )
        )
    for i in f.remap_failure_gpus:
        out.append(
            Alert(
                "ecc",
                "critical",
                f"GPU {i}: row remapping failed (an RMA criterion): drain it and contact support",
                i,
            )
        )
    for i in f.remap_pending_gpus:
        out.append(
            Alert(
                "ecc",
                "warning",
                f"GPU {i}: a row remap is pending; reset the GPU when it is idle",
                i,
            )
        )
    return tuple(out)
