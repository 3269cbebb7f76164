"""The histories the live view draws, cut from the Monitor's history in one frozen `Series`.

The Monitor cuts them inside its tick (`Monitor.tick(series=True)`), under its lock, so the view
never iterates the history while a tick appends to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..diagnose.history import History
from ..diagnose.types import Diagnosis
from ..model import MIB, GpuState, Snapshot
from ..model.stats import slope_per_s

HISTORY_POINTS = 240  # samples kept for the history lines (wider than any pane)
JOB_KEEP_S = 600.0  # the watched job's histories (the Job pane)


@dataclass(frozen=True)
class GpuSeries:
    """One GPU's histories, oldest first, `None` where the GPU gave nothing (or was lost)."""

    util: tuple[float | None, ...] = ()
    memctl: tuple[float | None, ...] = ()
    sm: tuple[float | None, ...] = ()
    power_pct: tuple[float | None, ...] = ()
    clock_pct: tuple[float | None, ...] = ()
    # Memory that rises steadily after the job's ramp-up: the diagnosis's memory-growth alert
    # names the GPU (one computation, in the core); the rate is over the diagnosis's window.
    mem_growing: bool = False
    mem_growth_mib_per_min: float | None = None


@dataclass(frozen=True)
class Series:
    """Every history the live view draws, as of one tick."""

    gpus: dict[int, GpuSeries] = field(default_factory=dict)
    host_cpu: tuple[float | None, ...] = ()
    host_iowait: tuple[float | None, ...] = ()
    # the ticks of the last JOB_KEEP_S that carry the watched job (oldest first; the Job pane)
    job_window: tuple[Snapshot, ...] = ()


def _sm(g: GpuState) -> float | None:
    return g.gpm.sm_util_pct if g.gpm is not None else None


def _mem_mib(g: GpuState) -> float | None:
    return None if g.mem_used_bytes is None else g.mem_used_bytes / MIB


def growing_gpus(d: Diagnosis | None) -> frozenset[int]:
    """The GPUs the diagnosis says grow steadily (its memory-growth alert), none without it."""
    if d is None:
        return frozenset()
    return frozenset(
        g
        for a in d.alerts
        if a.kind == "memory_growth"
        for g in (a.gpus or ((a.gpu_index,) if a.gpu_index is not None else ()))
    )


def _job_window(history: History) -> tuple[Snapshot, ...]:
    last = history.latest
    if last is None or last.job is None:
        return ()
    return tuple(s for s in history.snapshots(JOB_KEEP_S) if s.job is not None)


def cut_series(history: History, diagnosis: Diagnosis | None, window_s: float) -> Series:
    """The histories the panes draw, cut from `history` (oldest first); a growing GPU's rate
    is over the diagnosis's window (`window_s`)."""
    snaps = history.snapshots()[-HISTORY_POINTS:]
    if not snaps:
        return Series()
    growing = growing_gpus(diagnosis)
    window = history.snapshots(window_s) if growing else ()
    times = [s.timestamp for s in window]
    gpus: dict[int, GpuSeries] = {}
    for g in snaps[-1].gpus:
        per_tick = [s.gpu(g.index) for s in snaps]
        live = [None if x is None or x.lost else x for x in per_tick]

        def col(get: Callable[[GpuState], float | None], live=live) -> tuple:
            return tuple(None if x is None else get(x) for x in live)

        rate = None
        if g.index in growing and not g.lost:
            mem = []
            for s in window:
                x = s.gpu(g.index)
                mem.append(None if x is None or x.lost else _mem_mib(x))
            slope = slope_per_s(times, mem)
            rate = None if slope is None else slope * 60.0
        gpus[g.index] = GpuSeries(
            util=col(lambda x: x.util_gpu_pct),
            memctl=col(lambda x: x.util_mem_pct),
            sm=col(_sm),
            power_pct=col(lambda x: x.power_pct_of_limit),
            clock_pct=col(lambda x: x.sm_clock_pct_of_max),
            mem_growing=g.index in growing and not g.lost,
            mem_growth_mib_per_min=rate,
        )
    cpu = tuple(None if s.host is None else s.host.cpu_pct for s in snaps)
    iowait = tuple(None if s.host is None else s.host.iowait_pct for s in snaps)
    return Series(gpus, cpu, iowait, _job_window(history))
