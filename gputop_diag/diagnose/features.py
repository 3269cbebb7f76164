"""Window features: the few figures the rules judge, extracted once from the snapshots.

Everything here is arithmetic over the frozen snapshots of one window; the rules in `rules.py`
only compare these figures with the thresholds.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..driver.kernel_images import KernelImages
from ..model import GpmMetrics, GpuState, Snapshot, XidEvent
from ..model.stats import median, percentile
from . import thresholds as T
from .host_figures import host_figures
from .measured import (
    MeasuredSplit,
    ProcessMemory,
    measured_split,
    probed_snapshot,
    process_memory,
    recent_probes,
)
from .measured_work import MeasuredWork, devices_of, kernel_checks, measured_work
from .memory_figures import memory_figures

if TYPE_CHECKING:  # the ranks are judged only where two ranks are probed
    from .ranks import RanksView

# The kinds of evidence a window may lack, in the order they are reported, with their names.
EVIDENCE_NAMES = {
    "util": "GPU busy time (utilization.gpu)",
    "gpm": "SM, tensor and DRAM activity (GPM counters)",
    "nvlink": "NVLink throughput",
    "processes": "GPU process list",
    "threads": "per-process thread and dataloader data",
    "host": "host CPU and iowait",
    "probe": "the step split and memory measured inside the job (probe)",
}


@dataclass(frozen=True)
class Features:
    samples: int = 0  # snapshots in the recent window
    tick_s: float = 1.0  # seconds between samples the windows are sized for (see thresholds)
    span_s: float = 0.0  # the whole window
    recent_s: float = 0.0
    timestamp: float = 0.0
    nvml_ok: bool = False
    slurm_unanswered: bool = False  # the last `squeue` ran into its timeout (no answer)
    nvml_problem: str | None = None  # the collector's message when NVML is unusable
    nvml_next_step: str | None = None
    gpu_count: int = 0
    active_gpus: tuple[int, ...] = ()  # GPUs that ran kernels in the recent window
    lost_gpus: tuple[int, ...] = ()
    gpu_pids: tuple[int, ...] = ()
    available: tuple[str, ...] = ()  # keys of EVIDENCE_NAMES present
    missing: tuple[str, ...] = ()  # keys of EVIDENCE_NAMES that would matter but are absent
    # GPU busy time and its shape (recent window, active GPUs)
    util_median: float | None = None
    util_p5: float | None = None
    util_p95: float | None = None
    busy_mean: float | None = None  # mean busy share of the active GPUs (sub-second if given)
    idle_share: float = 0.0  # 1 - busy_mean: the share of time the GPUs wait
    subsecond: bool = False  # the driver's ~1/6 s samples were read
    gap_fraction: float = 0.0
    memctl_median: float | None = None
    power_pct_median: float | None = None
    clock_pct_median: float | None = None
    # GPM (recent window, active GPUs)
    sm_median: float | None = None
    tensor_median: float | None = None
    dram_median: float | None = None
    occupancy_median: float | None = None
    math_median: float | None = None  # the busiest math pipe (tensor, fp16, fp32, fp64)
    math_pipe: str | None = None  # its name
    # communication
    dip_fraction: float = 0.0  # share of samples where most GPUs dip together
    dips_on_sm: bool = False  # the dips are read in SM activity (GPM), else in busy time
    nvlink_in_dips_kib_s: float | None = None
    nvlink_outside_kib_s: float | None = None
    pcie_in_dips_kb_s: float | None = None
    pcie_outside_kb_s: float | None = None
    util_in_dips: float | None = None  # busy time while the SMs dip (GPM only)
    # host (HOST_RECENT_S)
    cpu_count: int = 0
    host_cpu_median: float | None = None
    # The job's own processes (the GPU processes, their descendants, the watched job's) as a
    # share of the machine's CPU, same scale as host_cpu_median; None where a GPU process's
    # figure is missing. The rest of host_cpu_median is other processes' load.
    job_cpu_pct: float | None = None
    iowait_median: float | None = None
    io_pressure_median: float | None = None
    # The job's helpers: every descendant process and every thread but the main one of the GPU
    # processes, whatever their names (DataLoader, multiprocessing pools, tf.data, DALI, ...).
    helper_count: int = 0  # helpers seen
    worker_count: int = 0  # helpers that did work (median CPU >= HELPER_ACTIVE_PCT)
    worker_cpu_mean: float | None = None  # mean CPU of those, % of a core
    worker_cores: float | None = None  # all helpers together, in cores
    workers_named: tuple[str, ...] = ()  # loader names recognized among the busy helpers
    main_thread_cpu: float | None = None  # median over the job's processes
    main_thread_pid: int | None = None  # the busiest main thread's process
    main_thread_name: str | None = None  # its name (pt_main_thread, python3, ...)
    top_pid: int | None = None  # the process holding most GPU memory
    # memory (latest snapshot and the whole window)
    mem_used_pct_max: float | None = None
    mem_used_pct_gpu: int | None = None
    mem_reserved_bytes: int | None = None
    mem_used_where: str | None = None  # "GPU 3", or "GPU 3 MIG 2g.20gb (instance 5)"
    mem_near_full_gpus: tuple[int, ...] = ()
    mem_holders: tuple[tuple[int, int, bool], ...] = ()  # (pid, bytes, another user's) fullest GPU
    mem_growth_mib_per_min: float | None = None
    mem_growth_gpu: int | None = None
    mem_growth_gpu_pct: float | None = None  # how full the growing GPU is now
    minutes_to_full: float | None = None
    # alerts
    growing_gpus: tuple[int, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()
    thermal_fraction: float = 0.0
    power_cap_fraction: float = 0.0
    throttled_gpus: tuple[int, ...] = ()
    power_capped_gpus: tuple[int, ...] = ()
    ecc_uncorrected: int = 0
    ecc_uncorrected_gpus: tuple[int, ...] = ()
    remap_failure_gpus: tuple[int, ...] = ()
    remap_pending_gpus: tuple[int, ...] = ()
    # measured inside the job: the probes of the newest snapshot carrying them that stepped
    # recently (a probed process that exited still speaks for its last steps)
    measured: MeasuredSplit | None = None
    measured_memory: tuple[ProcessMemory, ...] = ()
    # the probe's sampled step (measured_work.py): the work, its precision and shapes
    work: MeasuredWork | None = None
    # each probed process's build against its GPU where it lacks cubins for it (from the
    # probe's first record on: a build without a kernel image never steps)
    kernel_images: tuple[KernelImages, ...] = ()
    # the probed ranks of a distributed job compared (ranks.py): the straggler, the hang
    ranks: RanksView | None = None

    @property
    def multi_gpu(self) -> bool:
        return len(self.active_gpus) > 1

    @property
    def gappy(self) -> bool:
        """The GPUs wait: idle a large share of the time, or in regular gaps between bursts."""
        if "util" not in self.available:
            return False
        return self.idle_share >= T.WAIT_SHARE or self.gap_fraction >= T.GAPPY_FRACTION

    @property
    def others_cpu_pct(self) -> float | None:
        """The machine's CPU busy with processes that are not the job's, % of all cores."""
        if self.host_cpu_median is None or self.job_cpu_pct is None:
            return None
        return max(0.0, self.host_cpu_median - self.job_cpu_pct)

    @property
    def math_share(self) -> float | None:
        """The busiest math pipe as a share of its practical peak (0-100)."""
        if self.math_median is None:
            return None
        return min(100.0, 100.0 * self.math_median / T.MATH_PIPE_PEAK_PCT)

    @property
    def dram_share(self) -> float | None:
        """DRAM bandwidth as a share of its practical peak (0-100)."""
        if self.dram_median is None:
            return None
        return min(100.0, 100.0 * self.dram_median / T.DRAM_PEAK_PCT)

    @property
    def memory_grows(self) -> bool:
        g = self.mem_growth_mib_per_min
        return (
            g is not None
            and g >= T.GROWTH_MIB_PER_MIN
            and self.minutes_to_full is not None
            and self.span_s >= T.GROWTH_MIN_SPAN_S * self.tick_s
            and g * self.span_s / 60.0 >= self._growth_min_mib
        )

    @property
    def _growth_min_mib(self) -> float:
        near_full = (self.mem_growth_gpu_pct or 0.0) >= T.CAPACITY_WARN_PCT
        return T.GROWTH_MIN_MIB_NEAR_FULL if near_full else T.GROWTH_MIN_MIB

    @property
    def measured_steps(self) -> bool:
        """Enough steps were measured inside the job for their split to vote."""
        return self.measured is not None and self.measured.steps_each >= T.MEASURED_MIN_STEPS

    def missing_names(self) -> tuple[str, ...]:
        return tuple(EVIDENCE_NAMES[k] for k in self.missing)

    def available_names(self) -> tuple[str, ...]:
        return tuple(EVIDENCE_NAMES[k] for k in self.available)


def _since(window: Sequence[Snapshot], seconds: float) -> list[Snapshot]:
    cutoff = window[-1].timestamp - seconds
    return [s for s in window if s.timestamp >= cutoff]


# CollectorError.code of a `squeue` that ran into its timeout (`monitor/core.py`)
SLURM_TIMEOUT = "SqueueTimeout"


def extract(window: Sequence[Snapshot], tick_s: float = 1.0) -> Features:
    """The window's features; `tick_s`: the seconds between its samples when they are coarser
    than the one a second the windows are sized for (each window then keeps its sample count)."""
    if not window:
        return Features(tick_s=tick_s)
    newest = window[-1]
    # One failed NVML tick in a good run is a hiccup, not a lost driver: judge on the newest
    # snapshot NVML answered in the last HYSTERESIS_TICKS.
    tail = window[-T.HYSTERESIS_TICKS :]
    last = next((s for s in reversed(tail) if s.nvml_available), newest)
    recent = _since(window, T.RECENT_S * tick_s)
    nvml_err = next((e for e in last.errors if e.source == "nvml" and e.gpu_index is None), None)
    # rows[k][i]: GPU i in recent snapshot k (lost GPUs left out)
    rows = [{g.index: g for g in s.gpus if not g.lost} for s in recent]
    live = [g.index for g in last.gpus if not g.lost]
    util = {i: [r[i].util_gpu_pct if i in r else None for r in rows] for i in live}
    sm = {i: [_gpm(r.get(i), "sm_util_pct") for r in rows] for i in live}
    on_gpu = {p.gpu_index for s in recent for p in s.gpu_processes}

    def is_active(i: int) -> bool:
        u95, s95 = percentile(util[i], 95), percentile(sm[i], 95)
        if u95 is None and s95 is None:  # no busy figure at all (MIG mode): processes decide
            return i in on_gpu
        return max(u95 or 0.0, s95 or 0.0) > T.IDLE_UTIL_PCT

    active = tuple(i for i in live if is_active(i))
    started = _started(window, recent, active)
    # A GPU whose job started in the window is judged from its first work on: its idle run
    # before the job is no figure of the job (an SM median of 0 % beside 94 % busy now).
    first = {i: _first_work(util[i], i in started) for i in active}
    busy_states = [r[i] for k, r in enumerate(rows) for i in active if i in r and k >= first[i]]
    util_all = [v for i in active for v in util[i][first[i] :] if v is not None]
    shape = _busy_shape(active, rows, util, started)

    def busy_median(get) -> float | None:
        return median([get(g) for g in busy_states])

    busy_gpm = [g.gpm for g in busy_states if g.gpm is not None]  # read once for every median

    def gpm_median(name: str) -> float | None:
        return median([getattr(m, name) for m in busy_gpm])

    has_gpm = any(_gpm(g, "sm_util_pct") is not None for g in busy_states)
    has_nvlink = any(g.nvlink_tx_kib_s is not None for r in rows for g in r.values())
    dips_on_sm = has_gpm and tick_s <= T.PROFILING_DIP_MAX_TICK_S
    dips = _dips(active, rows, sm if dips_on_sm else util)
    host_feats = host_figures(
        _since(window, T.HOST_RECENT_S * tick_s), {p.pid for p in last.gpu_processes}
    )
    gpu_pids = tuple(sorted({p.pid for s in recent for p in s.gpu_processes}))
    has_threads = any(p.busiest_threads or p.children for s in recent for p in s.processes)
    probed = probed_snapshot(window)
    probes = recent_probes(probed, at=newest.timestamp)
    split = measured_split(probes)
    probed_memory = process_memory(probed, {p.pid for p in probes}) if probes else ()
    every_probe = probed.probes if probed is not None else ()
    devices = devices_of(process_memory(probed)) if every_probe else {}
    available = {
        "util": bool(util_all),
        "gpm": has_gpm,
        "nvlink": has_nvlink,
        "processes": bool(gpu_pids),
        "threads": has_threads,
        "host": host_feats["host_cpu_median"] is not None,
        "probe": split is not None,
    }
    needed = {
        "util": bool(active),
        "gpm": bool(active),
        "nvlink": len(active) > 1 and any(g.static.nvlink_supported for g in busy_states),
        "processes": bool(active),
        "threads": bool(gpu_pids),
        "host": bool(active),
        "probe": False,  # a job runs without one unless started with it: never missing
    }
    throttle = _throttle(busy_states)
    top = max(last.gpu_processes, key=lambda p: p.used_memory_bytes or 0, default=None)
    return Features(
        samples=len(recent),
        tick_s=tick_s,
        dips_on_sm=dips_on_sm,
        span_s=newest.timestamp - window[0].timestamp,
        recent_s=recent[-1].timestamp - recent[0].timestamp,
        timestamp=newest.timestamp,
        nvml_ok=nvml_err is None,
        slurm_unanswered=any(e.source == "slurm" and e.code == SLURM_TIMEOUT for e in last.errors),
        nvml_problem=nvml_err.message if nvml_err else None,
        nvml_next_step=nvml_err.next_step if nvml_err else None,
        gpu_count=len(last.gpus),
        active_gpus=active,
        lost_gpus=tuple(g.index for g in last.gpus if g.lost),
        gpu_pids=gpu_pids,
        available=tuple(k for k, ok in available.items() if ok),
        missing=tuple(k for k, ok in available.items() if not ok and needed[k]),
        util_median=median(util_all),
        util_p5=percentile(util_all, 5),
        util_p95=percentile(util_all, 95),
        **shape,
        memctl_median=busy_median(lambda g: g.util_mem_pct),
        power_pct_median=busy_median(lambda g: g.power_pct_of_limit),
        clock_pct_median=busy_median(lambda g: g.sm_clock_pct_of_max),
        sm_median=gpm_median("sm_util_pct"),
        tensor_median=gpm_median("tensor_util_pct"),
        dram_median=gpm_median("dram_bw_util_pct"),
        occupancy_median=gpm_median("sm_occupancy_pct"),
        **_math(busy_gpm),
        top_pid=top.pid if top else None,
        xid_events=tuple(x for s in window for x in s.xid_events),
        ecc_uncorrected=sum(g.ecc_uncorrected or 0 for g in last.gpus if not g.lost),
        ecc_uncorrected_gpus=tuple(g.index for g in last.gpus if not g.lost and g.ecc_uncorrected),
        remap_failure_gpus=tuple(g.index for g in last.gpus if g.remap_failure),
        remap_pending_gpus=tuple(g.index for g in last.gpus if g.remap_pending),
        **dips,
        **host_feats,
        **throttle,
        **memory_figures(last, window),
        measured=split,
        measured_memory=probed_memory,
        work=measured_work(probes, devices) if probes else None,
        kernel_images=kernel_checks(every_probe, devices),
        # every probe of the probed tick, recent or not: a hang's ranks stopped stepping
        ranks=_ranks(probed.probes, newest) if probed and len(probed.probes) > 1 else None,
    )


def _ranks(probes, newest: Snapshot | None) -> RanksView | None:
    from .ranks import judge_ranks  # its module loads with a distributed job's probes

    return judge_ranks(probes, newest)


def _started(window: Sequence[Snapshot], recent: Sequence[Snapshot], active) -> set[int]:
    """The GPUs whose job shows signs of starting in the window: a GPU process that was not there
    at the start of the recent window, memory that rose by START_MEM_RISE_SHARE of what it holds
    now (weights loading), or a process whose start time lies in the window. Only their leading
    idle run is ramp-up; on the other GPUs a stall at the window's start is a stall."""
    first, last = recent[0], recent[-1]
    out = set()
    for i in active:
        before = {p.pid for p in first.gpu_processes if p.gpu_index == i}
        now = {p.pid for p in last.gpu_processes if p.gpu_index == i}
        g0, g1 = first.gpu(i), last.gpu(i)
        rose = (
            g0 is not None
            and g1 is not None
            and g0.mem_used_bytes is not None
            and g1.mem_used_bytes is not None
            and g1.mem_used_bytes - g0.mem_used_bytes >= T.START_MEM_RISE_SHARE * g1.mem_used_bytes
        )
        fresh = any(
            (info := last.process(pid)) is not None
            and info.start_time is not None
            and info.start_time >= window[0].timestamp
            for pid in now
        )
        if (now - before) or rose or fresh:
            out.add(i)
    return out


def _busy_shape(active, rows, util: dict[int, list[float | None]], started: set[int]) -> dict:
    """How much of the time the active GPUs wait, from the driver's ~1/6 s samples when it
    gives them (gaps shorter than a tick), else from the tick figures.

    `idle_share` is 1 - the mean busy share: it does not care about the amplitude or the period
    of the stalls. `gap_fraction` is the share of samples under half the GPU's own p90: regular
    gaps between bursts of work.
    """
    per_gpu: dict[int, list[float]] = {}
    subsecond = False
    for i in active:
        fine = [v for r in rows if i in r for v in r[i].util_samples]
        if len(fine) >= T.MIN_SUBSECOND_SAMPLES:
            per_gpu[i], subsecond = _since_start(fine, i in started), True
        else:
            per_gpu[i] = _since_start([v for v in util[i] if v is not None], i in started)
    values = [v for vs in per_gpu.values() for v in vs]
    gaps = total = 0
    for vs in per_gpu.values():
        p90 = percentile(vs, 90)
        if p90 is None or p90 <= T.IDLE_UTIL_PCT:
            continue
        total += len(vs)
        gaps += sum(v < T.GAP_REL * p90 for v in vs)
    mean = statistics.fmean(values) if values else None
    return dict(
        busy_mean=mean,
        idle_share=0.0 if mean is None else max(0.0, 1.0 - mean / 100.0),
        subsecond=subsecond,
        gap_fraction=gaps / total if total else 0.0,
    )


def _first_work(values: Sequence[float | None], started: bool) -> int:
    """The index of a GPU's first tick of work where its job started in the window, else 0:
    the figures of the GPU's work (SM, DRAM, power, busy time) are read from there on, however
    few ticks that leaves (the busy shape waits for a third of the window: `_since_start`)."""
    if not started:
        return 0
    k = 0
    while k < len(values) and (values[k] is None or values[k] < T.IDLE_UTIL_PCT):
        k += 1
    return k if k < len(values) else 0


def _since_start(values: list[float], started: bool) -> list[float]:
    """The samples from the job's first work on: a GPU idle before its job started does not
    wait for anything. The leading idle run is dropped only where the job started in the window,
    and not when it is most of the window."""
    if not started:
        return values
    k = 0
    while k < len(values) and values[k] < T.IDLE_UTIL_PCT:
        k += 1
    return values[k:] if len(values) - k >= T.START_MIN_SHARE * len(values) else values


_PIPES = (
    ("tensor", "tensor_util_pct"),
    ("fp16", "fp16_util_pct"),
    ("fp32", "fp32_util_pct"),
    ("fp64", "fp64_util_pct"),
)


def _math(busy_gpm: Sequence[GpmMetrics]) -> dict:
    """The busiest math pipe over the window (GPM medians of the busy states that have them):
    the compute unit's activity."""
    best, name = None, None
    for label, field_name in _PIPES:
        m = median([getattr(g, field_name) for g in busy_gpm])
        if m is not None and (best is None or m > best):
            best, name = m, label
    return dict(math_median=best, math_pipe=name)


def _gpm(g: GpuState | None, name: str) -> float | None:
    if g is None or g.gpm is None:
        return None
    return getattr(g.gpm, name)


def _link(g: GpuState, nvlink: bool) -> float | None:
    if nvlink:
        if g.nvlink_tx_kib_s is None:
            return None
        return g.nvlink_tx_kib_s + (g.nvlink_rx_kib_s or 0.0)
    if g.pcie_tx_kbps is None:
        return None
    return float(g.pcie_tx_kbps + (g.pcie_rx_kbps or 0))


def _dips(active, rows, series: dict[int, list[float | None]]) -> dict:
    """Share of samples where most GPUs dip together; interconnect and busy time in and out."""
    out = dict(
        dip_fraction=0.0,
        nvlink_in_dips_kib_s=None,
        nvlink_outside_kib_s=None,
        pcie_in_dips_kb_s=None,
        pcie_outside_kb_s=None,
        util_in_dips=None,
    )
    if len(active) < 2 or len(rows) < T.MIN_SAMPLES:
        return out
    p90 = {i: percentile(series[i], 90) or 0.0 for i in active}
    together = 0
    links = {True: ([], []), False: ([], [])}  # nvlink?: (in dips, outside)
    busy_in_dips: list[float | None] = []
    for k, r in enumerate(rows):
        dipping = [
            i for i in active if series[i][k] is not None and series[i][k] < p90[i] - T.DIP_POINTS
        ]
        corr = len(dipping) >= T.CORRELATED_DIPS * len(active)
        together += corr
        for i in active:
            g = r.get(i)
            if g is None:
                continue
            for nv in (True, False):
                v = _link(g, nv)
                if v is not None:
                    links[nv][0 if corr else 1].append(v)
            if corr and i in dipping:
                busy_in_dips.append(g.util_gpu_pct)
    out.update(
        dip_fraction=together / len(rows),
        nvlink_in_dips_kib_s=median(links[True][0]),
        nvlink_outside_kib_s=median(links[True][1]),
        pcie_in_dips_kb_s=median(links[False][0]),
        pcie_outside_kb_s=median(links[False][1]),
        util_in_dips=median(busy_in_dips),
    )
    return out


def _throttle(busy_states: Sequence[GpuState]) -> dict:
    thermal = power = busy = 0
    throttled: set[int] = set()
    capped: set[int] = set()
    for g in busy_states:
        reasons = set(g.clock_event_reasons)
        if "gpu_idle" in reasons:
            continue
        busy += 1
        if reasons & set(T.THERMAL_REASONS):
            thermal += 1
            throttled.add(g.index)
        if reasons & set(T.POWER_REASONS):
            power += 1
            capped.add(g.index)
    return dict(
        thermal_fraction=thermal / busy if busy else 0.0,
        power_cap_fraction=power / busy if busy else 0.0,
        throttled_gpus=tuple(sorted(throttled)),
        power_capped_gpus=tuple(sorted(capped)),
    )
