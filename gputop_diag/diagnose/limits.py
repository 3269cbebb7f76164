"""The limits from outside the kernels: device memory (capacity) and the queue (scheduler)."""

from __future__ import annotations

from collections.abc import Sequence

from ..model import SchedulerEvidence, formats
from . import thresholds as T
from .features import Features
from .measured_rules import memory as measured_memory
from .rules import Verdict, ev, pct

_gib = formats.gib_unit


def capacity(f: Features) -> Verdict:
    """Device memory near full or growing towards full (NVML). A kernel OOM kill is host memory:
    the kernel's OOM killer never sees CUDA out-of-memory, so it is an alert, not this class.
    Where a probe measured the allocator, its figures follow NVML's: true pressure, or the
    cache and fragmentation (`measured_rules.memory`)."""
    used = f.mem_used_pct_max
    full = used is not None and used >= T.CAPACITY_MEM_PCT
    filling = f.memory_grows and f.minutes_to_full <= T.GROWTH_FULL_IN_MIN
    out = []
    if used is not None:
        holders = ", ".join(
            f"pid {pid} {_gib(b)}" + (" (another user)" if foreign else "")
            for pid, b, foreign in f.mem_holders[:3]
        )
        out.append(
            ev(
                "mem_used_pct_max",
                used,
                T.CAPACITY_MEM_PCT,
                f"{f.mem_used_where} memory {used:.1f} % used"
                + (
                    f" (of all but the driver's {_gib(f.mem_reserved_bytes)} reserve)"
                    if f.mem_reserved_bytes
                    else ""
                )
                + (f"; held by {holders}" if holders else ""),
            )
        )
    if f.memory_grows:
        out.insert(
            0 if filling and not full else len(out),
            ev(
                "mem_growth_mib_per_min",
                f.mem_growth_mib_per_min,
                T.GROWTH_MIB_PER_MIN,
                f"GPU {f.mem_growth_gpu} memory grows {f.mem_growth_mib_per_min:.0f} MiB/min "
                f"over {f.span_s:.0f} s: full in ~{f.minutes_to_full:.0f} min",
                "MiB/min",
            ),
        )
    out[1:1] = measured_memory(f)
    against = ev(
        "mem_used_pct_max",
        used,
        T.CAPACITY_MEM_PCT,
        f"device memory at most {pct(used)} used (limit {T.CAPACITY_MEM_PCT:.0f} %), not "
        "growing towards it",
    )
    conf = T.CONF_CAPACITY_FULL if full else T.CONF_CAPACITY_GROWTH
    scope = None
    if full:
        scope = f.mem_near_full_gpus
    elif filling:
        scope = f.growing_gpus or (f.mem_growth_gpu,)
    return Verdict(full or filling, conf, tuple(out), against, ("processes",), scope)


def scheduler(f: Features, jobs: Sequence[SchedulerEvidence]) -> Verdict:
    """The user's job waits in the queue while the GPUs here run nothing.

    A pending job waited on for PENDING_WAIT_S is sure; a fresh one less so (its wait may still
    be start-up). A running job near its time limit is named in the evidence and as an alert.
    """
    pending = [j for j in jobs if j.pending]
    long_wait = [j for j in pending if (j.wait_s or 0) >= T.PENDING_WAIT_S]
    ending = [
        j
        for j in jobs
        if not j.pending and j.time_left_s is not None and j.time_left_s < T.TIME_LIMIT_CLOSE_S
    ]
    out = []
    for j in (long_wait or pending)[:2]:
        wait = "" if j.wait_s is None else f" for {_duration(j.wait_s)}"
        out.append(
            ev(
                "queue_wait_s",
                j.wait_s,
                T.PENDING_WAIT_S,
                f"Slurm job {j.job_id} ({j.name or '?'}) PENDING{wait}, reason "
                f"{j.reason or 'none given'}",
                "s",
            )
        )
    for j in ending[:1]:
        out.append(
            ev(
                "time_left_s",
                j.time_left_s,
                T.TIME_LIMIT_CLOSE_S,
                f"Slurm job {j.job_id} has {_duration(max(0.0, j.time_left_s))} left of its "
                f"{_duration(j.time_limit_s)} time limit",
                "s",
            )
        )
    idle = not f.active_gpus
    if out:
        out.append(
            ev(
                "active_gpus",
                len(f.active_gpus),
                0,
                "no GPU on this machine runs kernels"
                if idle
                else f"{formats.count(len(f.active_gpus), 'GPU')} here "
                f"{'runs' if len(f.active_gpus) == 1 else 'run'} kernels",
                "",
            )
        )
    fires = idle and bool(pending)  # a job near its time limit is an alert, not the limit here
    if not jobs and f.slurm_unanswered:
        text = "Slurm did not answer (squeue timed out): its queue is not known"
    elif not jobs:
        text = "no Slurm job of this user is queued (or Slurm is not installed)"
    elif not pending:
        text = f"{formats.count(len(jobs), 'Slurm job')} of this user, none pending"
    else:
        jobs_pending = formats.count(len(pending), "job")
        text = f"{jobs_pending} pending, but the GPUs here are busy with other work"
    job = (long_wait or pending or [None])[0]
    against = ev("pending_jobs", len(pending), 1, text, "")
    conf = T.CONF_SCHEDULER if long_wait else T.CONF_SCHEDULER_SHORT_WAIT
    return Verdict(fires, conf, tuple(out), against, (), (), job.job_id if job else None)


def _duration(s: float | None) -> str:
    return formats.span(s, none="no")
