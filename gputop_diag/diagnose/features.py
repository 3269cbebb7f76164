"""Window features: the few figures the rules judge, extracted once from the snapshots."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..history import median, percentile, slope_per_s
from ..model import MIB, Snapshot, XidEvent
from . import thresholds as T


def _mean(v: Sequence[float]) -> float | None:
    return statistics.fmean(v) if v else None


@dataclass(frozen=True)
class Features:
    samples: int
    span_s: float
    recent_s: float
    nvml_ok: bool
    gpu_count: int
    active_gpus: tuple[int, ...]
    lost_gpus: tuple[int, ...]
    has_processes: bool
    # availability of evidence
    has_gpm: bool
    has_nvlink: bool
    has_util: bool
    has_threads: bool
    # GPU busy time and its shape (recent window, active GPUs)
    util_median: float | None = None
    util_p5: float | None = None
    util_p95: float | None = None
    gap_fraction: float = 0.0
    memctl_median: float | None = None
    power_pct_median: float | None = None
    clock_pct_median: float | None = None
    # GPM (recent window)
    sm_median: float | None = None
    tensor_median: float | None = None
    dram_median: float | None = None
    occupancy_median: float | None = None
    # communication
    dip_fraction: float = 0.0  # share of samples where most GPUs dip together
    nvlink_in_dips_kib_s: float | None = None
    nvlink_outside_kib_s: float | None = None
    # host
    cpu_count: int = 0
    host_cpu_median: float | None = None
    iowait_median: float | None = None
    io_pressure_median: float | None = None
    worker_count: int = 0
    worker_cpu_mean: float | None = None
    worker_cores: float | None = None
    main_thread_cpu: float | None = None
    main_thread_pid: int | None = None
    # memory (latest and long window)
    mem_used_pct_max: float | None = None
    mem_used_pct_gpu: int | None = None
    mem_reserved_bytes: int | None = None
    mem_growth_mib_per_min: float | None = None
    mem_growth_gpu: int | None = None
    minutes_to_full: float | None = None
    # alerts
    xid_events: tuple[XidEvent, ...] = ()
    thermal_fraction: float = 0.0
    power_cap_fraction: float = 0.0
    ecc_uncorrected: int = 0
    remap_failure_gpus: tuple[int, ...] = ()
    remap_pending_gpus: tuple[int, ...] = ()
    throttled_gpus: tuple[int, ...] = ()
    top_pid: int | None = None
    missing: tuple[str, ...] = field(default=())


def extract(window: Sequence[Snapshot]) -> Features:
    if not window:
        return Features(0, 0.0, 0.0, False, 0, (), (), False, False, False, False, False)
    last = window[-1]
    cutoff = last.timestamp - T.RECENT_S
    recent = [s for s in window if s.timestamp >= cutoff]
    nvml_ok = last.nvml_available
    lost = tuple(g.index for g in last.gpus if g.lost)
    live = [g.index for g in last.gpus if not g.lost]
    with_procs = {p.gpu_index for s in recent for p in s.gpu_processes}

    util_by_gpu: dict[int, list[float]] = {i: [] for i in live}
    sm_by_gpu: dict[int, list[float]] = {i: [] for i in live}
    memctl, power, clock, tensor, dram, occ, sms = [], [], [], [], [], [], []
    nvlink: dict[int, list[float | None]] = {i: [] for i in live}
    thermal = power_cap = busy_samples = 0
    throttled: set[int] = set()
    for s in recent:
        for g in s.gpus:
            if g.lost or g.index not in util_by_gpu:
                continue
            if g.util_gpu_pct is not None:
                util_by_gpu[g.index].append(g.util_gpu_pct)
            if g.util_mem_pct is not None:
                memctl.append(g.util_mem_pct)
            if g.power_pct_of_limit is not None:
                power.append(g.power_pct_of_limit)
            if g.sm_clock_pct_of_max is not None:
                clock.append(g.sm_clock_pct_of_max)
            if g.gpm is not None:
                for dst, v in (
                    (sms, g.gpm.sm_util_pct),
                    (tensor, g.gpm.tensor_util_pct),
                    (dram, g.gpm.dram_bw_util_pct),
                    (occ, g.gpm.sm_occupancy_pct),
                ):
                    if v is not None:
                        dst.append(v)
                if g.gpm.sm_util_pct is not None:
                    sm_by_gpu[g.index].append(g.gpm.sm_util_pct)
            tx = None
            if g.nvlink_tx_kib_s is not None:
                tx = g.nvlink_tx_kib_s + (g.nvlink_rx_kib_s or 0.0)
            nvlink[g.index].append(tx)
            if "gpu_idle" not in g.clock_event_reasons:
                busy_samples += 1
                if set(g.clock_event_reasons) & set(T.THERMAL_REASONS):
                    thermal += 1
                    throttled.add(g.index)
                if set(g.clock_event_reasons) & set(T.POWER_REASONS):
                    power_cap += 1

    busy_idx = [
        i
        for i in live
        if i in with_procs
        or (median(util_by_gpu[i]) or 0) > T.IDLE_UTIL_PCT
        or (median(sm_by_gpu[i]) or 0) > T.IDLE_UTIL_PCT
    ]
    all_util = [v for i in busy_idx for v in util_by_gpu[i]]
    gaps = total = 0
    for i in busy_idx:
        p90 = percentile(util_by_gpu[i], 90)
        if not p90:
            continue
        for v in util_by_gpu[i]:
            total += 1
            gaps += v < T.GAP_REL * p90
    dip_frac, nv_in, nv_out = _dips(busy_idx, sm_by_gpu if sms else util_by_gpu, nvlink)

    host = [s.host for s in recent if s.host is not None]
    workers, mains, main_pid = _host_threads(recent)
    worker_cpu = _mean([c for c in workers.values()])
    mem = _memory(last, window)
    xids = tuple(x for s in window for x in s.xid_events)
    has_threads = any(p.busiest_threads for s in recent for p in s.processes)
    missing = []
    if not sms and busy_idx:
        missing.append("GPM (SM, tensor and DRAM activity)")
    has_nv = any(v is not None for vs in nvlink.values() for v in vs)
    if len(busy_idx) > 1 and not has_nv:
        missing.append("NVLink throughput")
    if with_procs and not has_threads:
        missing.append("per-process thread data")
    if busy_idx and not all_util:
        missing.append("GPU utilization")
    cpu_count = host[-1].cpu_count if host else 0
    top = max(last.gpu_processes, key=lambda p: p.used_memory_bytes or 0, default=None)
    return Features(
        samples=len(recent),
        span_s=window[-1].timestamp - window[0].timestamp,
        recent_s=recent[-1].timestamp - recent[0].timestamp,
        nvml_ok=nvml_ok,
        gpu_count=len(last.gpus),
        active_gpus=tuple(busy_idx),
        lost_gpus=lost,
        has_processes=bool(with_procs),
        has_gpm=bool(sms),
        has_nvlink=has_nv,
        has_util=bool(all_util),
        has_threads=has_threads,
        util_median=median(all_util),
        util_p5=percentile(all_util, 5),
        util_p95=percentile(all_util, 95),
        gap_fraction=gaps / total if total else 0.0,
        memctl_median=median(memctl),
        power_pct_median=median(power),
        clock_pct_median=median(clock),
        sm_median=median(sms),
        tensor_median=median(tensor),
        dram_median=median(dram),
        occupancy_median=median(occ),
        dip_fraction=dip_frac,
        nvlink_in_dips_kib_s=nv_in,
        nvlink_outside_kib_s=nv_out,
        cpu_count=cpu_count,
        host_cpu_median=median([h.cpu_pct for h in host]),
        iowait_median=median([h.iowait_pct for h in host]),
        io_pressure_median=median(
            [h.pressure["io"].some_avg10 for h in host if "io" in h.pressure]
        ),
        worker_count=len(workers),
        worker_cpu_mean=worker_cpu,
        worker_cores=sum(workers.values()) / 100.0 if workers else None,
        main_thread_cpu=max(mains.values(), default=None),
        main_thread_pid=main_pid,
        xid_events=xids,
        thermal_fraction=thermal / busy_samples if busy_samples else 0.0,
        power_cap_fraction=power_cap / busy_samples if busy_samples else 0.0,
        ecc_uncorrected=sum(g.ecc_uncorrected or 0 for g in last.gpus),
        remap_failure_gpus=tuple(g.index for g in last.gpus if g.remap_failure),
        remap_pending_gpus=tuple(g.index for g in last.gpus if g.remap_pending),
        throttled_gpus=tuple(sorted(throttled)),
        top_pid=top.pid if top else None,
        missing=tuple(missing),
        **mem,
    )


def _dips(idx, series: dict[int, list[float]], nvlink: dict[int, list[float | None]]):
    """Share of samples where most GPUs dip together, and NVLink traffic in and out of dips."""
    if len(idx) < 2:
        return 0.0, None, None
    n = min(len(series[i]) for i in idx)
    if n < T.MIN_SAMPLES:
        return 0.0, None, None
    p90 = {i: percentile(series[i][-n:], 90) or 0.0 for i in idx}
    together = 0
    nv_in: list[float] = []
    nv_out: list[float] = []
    for k in range(n):
        dipping = [i for i in idx if series[i][-n:][k] < p90[i] - T.DIP_POINTS]
        corr = len(dipping) / len(idx) >= T.CORRELATED_DIPS
        together += corr
        for i in idx:
            nvs = nvlink[i][-n:] if len(nvlink[i]) >= n else []
            v = nvs[k] if nvs else None
            if v is not None:
                (nv_in if corr else nv_out).append(v)
    return together / n, median(nv_in), median(nv_out)


def _host_threads(recent: Sequence[Snapshot]):
    """Dataloader workers' CPU (median per worker) and the main threads' CPU (median)."""
    workers: dict[int, list[float]] = {}
    mains: dict[int, list[float]] = {}
    for s in recent:
        for p in s.processes:
            for c in p.children:
                if c.cpu_pct is not None and (c.name or "").startswith("pt_data_worker"):
                    workers.setdefault(c.pid, []).append(c.cpu_pct)
            for t in p.busiest_threads:
                if t.cpu_pct is not None and (t.name == "pt_main_thread" or t.tid == p.pid):
                    mains.setdefault(p.pid, []).append(t.cpu_pct)
    w = {pid: median(v) for pid, v in workers.items() if len(v) >= 2}
    m = {pid: median(v) for pid, v in mains.items() if len(v) >= 2}
    main_pid = max(m, key=m.get) if m else None
    return w, m, main_pid


def _memory(last: Snapshot, window: Sequence[Snapshot]) -> dict:
    best_pct, best_gpu, reserved = None, None, None
    for g in last.gpus:
        if g.lost or g.mem_used_pct is None:
            continue
        if best_pct is None or g.mem_used_pct > best_pct:
            best_pct, best_gpu, reserved = g.mem_used_pct, g.index, g.mem_reserved_bytes
    growth, growth_gpu, to_full = None, None, None
    if len(window) >= T.MIN_SAMPLES:
        times = [s.timestamp for s in window]
        for g in last.gpus:
            if g.lost or g.mem_used_bytes is None:
                continue
            vals = []
            for s in window:
                x = s.gpu(g.index)
                vals.append(
                    None if x is None or x.mem_used_bytes is None else x.mem_used_bytes / MIB
                )
            slope = slope_per_s(times, vals)
            present = [v for v in vals if v is not None]
            if slope is None or len(present) < 2:
                continue
            per_min = slope * 60.0
            if growth is None or per_min > growth:
                growth, growth_gpu = per_min, g.index
                rise = present[-1] - present[0]
                free = (g.mem_free_bytes or 0) / MIB
                to_full = free / per_min if per_min > 0 and rise > 0 else None
    return dict(
        mem_used_pct_max=best_pct,
        mem_used_pct_gpu=best_gpu,
        mem_reserved_bytes=reserved,
        mem_growth_mib_per_min=growth,
        mem_growth_gpu=growth_gpu,
        minutes_to_full=to_full,
    )
