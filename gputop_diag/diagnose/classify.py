"""classify(window) -> Diagnosis: a pure judgement over the sample history.

The rules run in a fixed order of precedence — no data, the scheduler, idle, capacity, then the
shape of GPU busy time (communication, input, synchronization) and finally what the GPU does
while busy (bandwidth, compute). Each class that does not win gets the one figure against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..model import Snapshot
from . import thresholds as T
from .alerts import alerts_for
from .checks import checks_for
from .features import Features, extract
from .slurm import SchedulerEvidence
from .types import BOTTLENECK_CLASSES, Diagnosis, Evidence, RuledOut


def _ev(metric, value, threshold, text, unit="%") -> Evidence:
    return Evidence(metric=metric, value=value, threshold=threshold, text=text, unit=unit)


def _pct(v) -> str:
    return "n/a" if v is None else f"{v:.0f} %"


def _gbs(kib_s) -> str:
    return "n/a" if kib_s is None else f"{kib_s * 1024 / 1e9:.0f} GB/s"


def _scope(f: Features) -> str:
    return f"{len(f.active_gpus)} GPU{'s' if len(f.active_gpus) != 1 else ''}"


# -- per-class tests: each returns (fires, confidence, evidence, the figure against) -----------
def _capacity(f: Features):
    pct = f.mem_used_pct_max
    growth = f.mem_growth_mib_per_min
    grows = (
        growth is not None
        and growth >= T.GROWTH_MIB_PER_MIN
        and f.minutes_to_full is not None
        and f.span_s >= 20
        and growth * f.span_s / 60 >= T.GROWTH_MIN_MIB
    )
    ev = []
    if pct is not None:
        ev.append(
            _ev(
                "mem_used_pct_max",
                pct,
                T.CAPACITY_MEM_PCT,
                f"GPU {f.mem_used_pct_gpu} memory {pct:.1f} % used (of which "
                f"{(f.mem_reserved_bytes or 0) / 2**20:.0f} MiB reserved by the driver)",
            )
        )
    if grows:
        ev.append(
            _ev(
                "mem_growth_mib_per_min",
                growth,
                T.GROWTH_MIB_PER_MIN,
                f"GPU {f.mem_growth_gpu} memory grows {growth:.0f} MiB/min: full in "
                f"~{f.minutes_to_full:.0f} min (graph retention or a logging leak?)",
                "MiB/min",
            )
        )
    full = pct is not None and pct >= T.CAPACITY_MEM_PCT
    filling = grows and f.minutes_to_full <= T.GROWTH_FULL_IN_MIN
    if filling and not full:
        ev.reverse()  # the growth is the reason
    against = _ev(
        "mem_used_pct_max",
        pct,
        T.CAPACITY_MEM_PCT,
        f"memory {_pct(pct)} used at most, below {T.CAPACITY_MEM_PCT:.0f} %, and not "
        f"growing towards the limit",
    )
    conf = 0.9 if full else 0.75
    return full or filling, conf, ev, against


def _communication(f: Features):
    nv_in, nv_out = f.nvlink_in_dips_kib_s, f.nvlink_outside_kib_s
    fires = (
        len(f.active_gpus) > 1
        and f.dip_fraction >= 0.1
        and nv_in is not None
        and nv_in >= T.NVLINK_DIP_KIB_S
        and nv_in >= T.NVLINK_DIP_RATIO * (nv_out or 1.0)
    )
    metric = "SM utilization" if f.has_gpm else "GPU busy time"
    ev = [
        _ev(
            "correlated_dip_fraction",
            100 * f.dip_fraction,
            10.0,
            f"{metric} dips on ≥{T.CORRELATED_DIPS:.0%} of the GPUs at once in "
            f"{f.dip_fraction:.0%} of samples ({f.recent_s:.0f} s)",
        ),
        _ev(
            "nvlink_in_dips",
            nv_in,
            T.NVLINK_DIP_KIB_S,
            f"NVLink {_gbs(nv_in)} per GPU during the dips vs {_gbs(nv_out)} outside them",
            "KiB/s",
        ),
    ]
    if len(f.active_gpus) <= 1:
        text = "a single busy GPU: no collective communication to wait on"
    elif nv_in is None and not f.has_nvlink:
        text = "NVLink throughput not available; GPUs do not dip together with traffic"
    else:
        text = (
            f"GPUs dip together in {f.dip_fraction:.0%} of samples with NVLink "
            f"{_gbs(nv_in)} during dips: no exposed all-reduce"
        )
    conf = 0.85 if f.has_gpm else 0.65
    return fires, conf, ev, _ev("nvlink_in_dips", nv_in, T.NVLINK_DIP_KIB_S, text, "KiB/s")


def _input_pressure(f: Features) -> list[Evidence]:
    out = []
    if f.worker_cpu_mean is not None and f.worker_cpu_mean >= T.WORKER_BUSY_PCT:
        out.append(
            _ev(
                "dataloader_worker_cpu",
                f.worker_cpu_mean,
                T.WORKER_BUSY_PCT,
                f"{f.worker_count} dataloader workers at {f.worker_cpu_mean:.0f} % CPU "
                f"each ({f.worker_cores:.1f} of {f.cpu_count} cores)",
            )
        )
    if f.iowait_median is not None and f.iowait_median >= T.IOWAIT_PCT:
        out.append(
            _ev(
                "iowait",
                f.iowait_median,
                T.IOWAIT_PCT,
                f"iowait {f.iowait_median:.1f} % (median, {f.recent_s:.0f} s)",
            )
        )
    if f.io_pressure_median is not None and f.io_pressure_median >= T.IO_PRESSURE_PCT:
        out.append(
            _ev(
                "io_pressure",
                f.io_pressure_median,
                T.IO_PRESSURE_PCT,
                f"I/O pressure: tasks stalled on I/O {f.io_pressure_median:.0f} % of "
                f"the time (/proc/pressure/io)",
            )
        )
    if f.host_cpu_median is not None and f.host_cpu_median >= T.HOST_CPU_SATURATED_PCT:
        out.append(
            _ev(
                "host_cpu",
                f.host_cpu_median,
                T.HOST_CPU_SATURATED_PCT,
                f"host CPU {f.host_cpu_median:.0f} % busy across {f.cpu_count} cores",
            )
        )
    return out


def _gap_evidence(f: Features) -> Evidence:
    return _ev(
        "gap_fraction",
        100 * f.gap_fraction,
        100 * T.GAPPY_FRACTION,
        f"GPU busy time {_pct(f.util_median)} (median, {f.recent_s:.0f} s), p5 "
        f"{_pct(f.util_p5)}: idle gaps in {f.gap_fraction:.0%} of samples",
    )


def _gappy(f: Features) -> bool:
    return f.has_util and f.gap_fraction >= T.GAPPY_FRACTION


def _input(f: Features):
    pressure = _input_pressure(f)
    fires = _gappy(f) and bool(pressure)
    conf = min(0.95, 0.6 + 0.1 * len(pressure))
    w = _pct(f.worker_cpu_mean)
    against = _ev(
        "dataloader_worker_cpu",
        f.worker_cpu_mean,
        T.WORKER_BUSY_PCT,
        f"input keeps up: loaders at {w} CPU, iowait {_pct(f.iowait_median)}, host "
        f"CPU {_pct(f.host_cpu_median)}"
        if not pressure
        else f"the GPU does not wait: idle gaps in only {f.gap_fraction:.0%} of samples",
    )
    return fires, conf, [_gap_evidence(f), *pressure], against


def _synchronization(f: Features):
    spin = f.main_thread_cpu is not None and f.main_thread_cpu >= T.MAIN_SPIN_PCT
    loaders_idle = f.worker_cpu_mean is None or f.worker_cpu_mean < T.WORKERS_IDLE_PCT
    no_input = not _input_pressure(f)
    fires = _gappy(f) and no_input and (spin or not f.has_threads) and loaders_idle
    ev = [_gap_evidence(f)]
    if f.main_thread_cpu is not None:
        ev.append(
            _ev(
                "main_thread_cpu",
                f.main_thread_cpu,
                T.MAIN_SPIN_PCT,
                f"main thread of pid {f.main_thread_pid} at {f.main_thread_cpu:.0f} % of "
                f"a core while dataloader workers idle ({_pct(f.worker_cpu_mean)})",
            )
        )
    ev.append(
        _ev(
            "iowait",
            f.iowait_median,
            T.IOWAIT_PCT,
            f"no input pressure: iowait {_pct(f.iowait_median)}, host CPU "
            f"{_pct(f.host_cpu_median)}",
        )
    )
    conf = 0.85 if spin else 0.45
    if not _gappy(f):
        text = f"no regular GPU gaps: idle in only {f.gap_fraction:.0%} of samples"
    else:
        text = f"no host thread spinning: main thread at {_pct(f.main_thread_cpu)} CPU"
    return fires, conf, ev, _ev("main_thread_cpu", f.main_thread_cpu, T.MAIN_SPIN_PCT, text)


def _bandwidth(f: Features):
    if f.has_gpm:
        fires = (f.dram_median or 0) >= T.DRAM_BW_PCT and (
            f.tensor_median or 0
        ) < T.TENSOR_ACTIVE_PCT
        ev = [
            _ev(
                "dram_bw_util",
                f.dram_median,
                T.DRAM_BW_PCT,
                f"DRAM bandwidth {_pct(f.dram_median)} of peak (GPM, median) while tensor "
                f"pipes are active {_pct(f.tensor_median)}",
            ),
            _ev(
                "sm_occupancy",
                f.occupancy_median,
                None,
                f"SM utilization {_pct(f.sm_median)}, occupancy {_pct(f.occupancy_median)}",
            ),
        ]
        against = _ev(
            "dram_bw_util",
            f.dram_median,
            T.DRAM_BW_PCT,
            f"DRAM bandwidth {_pct(f.dram_median)} of peak (GPM), below {T.DRAM_BW_PCT:.0f} %",
        )
        return fires, 0.85, ev, against
    fires = (f.memctl_median or 0) >= T.MEMCTL_BW_PCT
    ev = [
        _ev(
            "memctl_util",
            f.memctl_median,
            T.MEMCTL_BW_PCT,
            f"memory controller busy {_pct(f.memctl_median)} of the time (no GPM: a weak "
            f"proxy for bandwidth)",
        )
    ]
    against = _ev(
        "memctl_util",
        f.memctl_median,
        T.MEMCTL_BW_PCT,
        f"memory controller busy {_pct(f.memctl_median)}, below {T.MEMCTL_BW_PCT:.0f} %",
    )
    return fires, 0.5, ev, against


def _compute(f: Features):
    if f.has_gpm:
        fires = (f.sm_median or 0) >= T.SM_ACTIVE_PCT and (
            (f.tensor_median or 0) >= T.TENSOR_ACTIVE_PCT or (f.dram_median or 0) < T.DRAM_BW_PCT
        )
        ev = [
            _ev(
                "sm_util",
                f.sm_median,
                T.SM_ACTIVE_PCT,
                f"SM utilization {_pct(f.sm_median)} (GPM, median, {f.recent_s:.0f} s), "
                f"tensor pipes {_pct(f.tensor_median)}",
            ),
            _ev(
                "util_gpu",
                f.util_median,
                T.BUSY_UTIL_PCT,
                f"GPU busy {_pct(f.util_median)} with no idle gaps ({f.gap_fraction:.0%})",
            ),
            _ev(
                "power_pct",
                f.power_pct_median,
                None,
                f"power {_pct(f.power_pct_median)} of the limit, SM clock "
                f"{_pct(f.clock_pct_median)} of max",
            ),
        ]
        against = _ev(
            "sm_util",
            f.sm_median,
            T.SM_ACTIVE_PCT,
            f"SM utilization {_pct(f.sm_median)} (GPM), below {T.SM_ACTIVE_PCT:.0f} %",
        )
        return fires, 0.85, ev, against
    power = f.power_pct_median or 0
    busy = f.util_median if f.has_util else None
    fires = power >= T.POWER_COMPUTE_PCT and (busy is None or busy >= T.BUSY_UTIL_PCT)
    ev = [
        _ev(
            "power_pct",
            f.power_pct_median,
            T.POWER_COMPUTE_PCT,
            f"power {_pct(f.power_pct_median)} of the limit at SM clock "
            f"{_pct(f.clock_pct_median)} of max (no GPM: judged from power)",
        ),
        _ev(
            "util_gpu",
            busy,
            T.BUSY_UTIL_PCT,
            f"GPU busy time {_pct(busy)}"
            if busy is not None
            else "per-GPU busy time not reported (MIG mode)",
        ),
    ]
    against = _ev(
        "power_pct",
        f.power_pct_median,
        T.POWER_COMPUTE_PCT,
        f"power {_pct(f.power_pct_median)} of the limit, busy {_pct(busy)}: the math "
        f"units are not the limit",
    )
    return fires, 0.55 if busy is not None else 0.4, ev, against


def _scheduler(f: Features, sched: Sequence[SchedulerEvidence]):
    pend = [j for j in sched if j.pending and (j.wait_s or 0) >= T.PENDING_WAIT_S]
    close = [
        j
        for j in sched
        if not j.pending and j.time_left_s is not None and j.time_left_s < T.TIME_LIMIT_CLOSE_S
    ]
    ev = []
    for j in pend[:2]:
        ev.append(
            _ev(
                "queue_wait_s",
                j.wait_s,
                T.PENDING_WAIT_S,
                f"Slurm job {j.job_id} ({j.name or '?'}) PENDING for "
                f"{(j.wait_s or 0) / 3600:.1f} h, reason {j.reason or '?'}",
                "s",
            )
        )
    for j in close[:1]:
        ev.append(
            _ev(
                "time_left_s",
                j.time_left_s,
                T.TIME_LIMIT_CLOSE_S,
                f"Slurm job {j.job_id} has {j.time_left_s / 60:.0f} min left of its time limit",
                "s",
            )
        )
    idle_gpus = not f.active_gpus
    fires = bool(pend) and idle_gpus or bool(close)
    if not sched:
        text = "no Slurm job of this user is pending (or Slurm is not installed)"
    else:
        text = f"{len(sched)} Slurm job(s), none pending long while the GPUs idle"
    job = (pend or close or [None])[0]
    return fires, 0.9, ev, _ev("queue_wait_s", None, T.PENDING_WAIT_S, text, "s"), job


RULES = ("capacity", "communication", "input_pipeline", "synchronization", "bandwidth", "compute")
_FN = {
    "capacity": _capacity,
    "communication": _communication,
    "input_pipeline": _input,
    "synchronization": _synchronization,
    "bandwidth": _bandwidth,
    "compute": _compute,
}


def judge(window: Sequence[Snapshot], scheduler: Sequence[SchedulerEvidence] = ()) -> Diagnosis:
    """The class this window shows, without hysteresis."""
    f = extract(window)
    last_t = window[-1].timestamp if window else 0.0
    s_fire, s_conf, s_ev, s_against, job = _scheduler(f, scheduler)
    results = {c: _FN[c](f) for c in RULES}
    missing = f.missing
    primary, conf, evidence = "balanced", 0.5, []
    if not window or not f.nvml_ok or f.gpu_count == 0 or f.samples < T.MIN_SAMPLES:
        primary, conf = "insufficient_data", 0.9
        why = (
            "no usable NVIDIA driver: NVML did not initialise"
            if not f.nvml_ok
            else f"only {f.samples} samples so far"
            if f.samples < T.MIN_SAMPLES
            else "no GPUs found"
        )
        evidence = [_ev("samples", f.samples, T.MIN_SAMPLES, why, "")]
        if s_fire:
            primary, conf, evidence = "scheduler", s_conf, s_ev
    elif s_fire:
        primary, conf, evidence = "scheduler", s_conf, s_ev
    elif not f.active_gpus:
        primary, conf = "idle", 0.9
        evidence = [
            _ev(
                "util_gpu",
                f.util_median or 0.0,
                T.IDLE_UTIL_PCT,
                f"no GPU processes and busy time {_pct(f.util_median or 0)} on "
                f"{f.gpu_count - len(f.lost_gpus)} GPUs",
            )
        ]
    else:
        for cls in RULES:
            fires, c, ev, _ = results[cls]
            if fires:
                primary, conf, evidence = cls, c, ev
                break
        else:
            evidence = [_gap_evidence(f)]
    if missing and primary in BOTTLENECK_CLASSES:
        conf *= 0.85
    ruled = []
    for cls in BOTTLENECK_CLASSES:
        if cls == primary:
            continue
        against = s_against if cls == "scheduler" else results[cls][3]
        ruled.append(RuledOut(cls, against))
    job_id = job.job_id if job is not None else None
    return Diagnosis(
        primary=primary,
        confidence=round(conf, 2),
        scope_gpus=f.active_gpus,
        scope_job=job_id,
        evidence=tuple(evidence[:3]),
        ruled_out=tuple(ruled),
        checks=checks_for(primary, f, job_id),
        alerts=alerts_for(f),
        missing_evidence=missing,
        window_s=round(f.span_s, 1),
        timestamp=last_t,
        candidate=primary,
        candidate_streak=1,
    )


def classify(
    window: Sequence[Snapshot],
    previous: Diagnosis | None = None,
    scheduler: Sequence[SchedulerEvidence] = (),
) -> Diagnosis:
    """The current bottleneck, with hysteresis: a new class must hold for a few ticks."""
    now = judge(window, scheduler)
    if (
        previous is None
        or previous.primary in ("insufficient_data",)
        or now.primary == "insufficient_data"
    ):
        return now
    if now.primary == previous.primary:
        return now
    streak = previous.candidate_streak + 1 if previous.candidate == now.primary else 1
    if streak >= T.HYSTERESIS_TICKS:
        return replace(now, candidate_streak=streak)
    # Keep the previous verdict, refreshed with this window's alerts, while the new one builds.
    return replace(
        previous,
        alerts=now.alerts,
        timestamp=now.timestamp,
        candidate=now.primary,
        candidate_streak=streak,
    )
