"""What one tick hands the screen: the snapshot, the diagnosis and the histories, all frozen.

The collector thread builds an `Update` right after `Sampler.sample()`, so the UI thread never
iterates the Sampler's live history while the thread appends to it. With the collectors off
(tests, screenshots) the app feeds snapshots into a `Feeder` of its own on the UI thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..diagnose import Diagnosis, classify, collect_scheduler_evidence
from ..diagnose.oom import collect_oom_kills
from ..history import History, slope_per_s
from ..model import MIB, GpuState, Snapshot, XidEvent
from ..sampler import Sampler
from ..sources import Sources

HISTORY_POINTS = 120  # samples kept for the history lines (wider than any pane)
DIAGNOSIS_WINDOW_S = 60.0  # what classify() reads, per the diagnosis contract
TREND_WINDOW_S = 120.0  # the memory trend's least-squares window
GROWING_MIB_PER_MIN = 30.0  # the memory pane's "growing" flag (the diagnosis alert's figure)
GROWING_MIN_POINTS = 20  # a slope over fewer samples is noise, not a trend
SLOW_SOURCES_EVERY_S = 10.0  # Slurm and the kernel log are round trips: not every tick
MAX_XID_EVENTS = 500


@dataclass(frozen=True)
class GpuSeries:
    """One GPU's histories, oldest first, `None` where the GPU gave nothing (or was lost)."""

    util: tuple[float | None, ...] = ()
    memctl: tuple[float | None, ...] = ()
    sm: tuple[float | None, ...] = ()
    power_pct: tuple[float | None, ...] = ()
    clock_pct: tuple[float | None, ...] = ()
    mem_trend_mib_per_min: float | None = None
    mem_trend_points: int = 0

    @property
    def mem_growing(self) -> bool:
        t = self.mem_trend_mib_per_min
        return (
            t is not None
            and t >= GROWING_MIB_PER_MIN
            and self.mem_trend_points >= GROWING_MIN_POINTS
        )


@dataclass(frozen=True)
class Update:
    snapshot: Snapshot
    diagnosis: Diagnosis | None = None
    gpus: dict[int, GpuSeries] = field(default_factory=dict)
    host_cpu: tuple[float | None, ...] = ()
    host_iowait: tuple[float | None, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()  # every event seen so far, newest first
    ticks: int = 0  # snapshots seen so far


def _sm(g: GpuState) -> float | None:
    return g.gpm.sm_util_pct if g.gpm is not None else None


def _mem_mib(g: GpuState) -> float | None:
    return None if g.mem_used_bytes is None else g.mem_used_bytes / MIB


def series_of(history: History) -> tuple[dict[int, GpuSeries], tuple, tuple]:
    """The histories the panes draw, cut from `history` (oldest first)."""
    snaps = history.snapshots()[-HISTORY_POINTS:]
    if not snaps:
        return {}, (), ()
    trend_snaps = history.snapshots(TREND_WINDOW_S)
    times = [s.timestamp for s in trend_snaps]
    gpus: dict[int, GpuSeries] = {}
    for g in snaps[-1].gpus:
        per_tick = [s.gpu(g.index) for s in snaps]
        live = [None if x is None or x.lost else x for x in per_tick]

        def col(get, live=live):
            return tuple(None if x is None else get(x) for x in live)

        mem = []
        for s in trend_snaps:
            x = s.gpu(g.index)
            mem.append(None if x is None or x.lost else _mem_mib(x))
        slope = slope_per_s(times, mem)
        gpus[g.index] = GpuSeries(
            util=col(lambda x: x.util_gpu_pct),
            memctl=col(lambda x: x.util_mem_pct),
            sm=col(_sm),
            power_pct=col(lambda x: x.power_pct_of_limit),
            clock_pct=col(lambda x: x.sm_clock_pct_of_max),
            mem_trend_mib_per_min=None if slope is None else slope * 60.0,
            mem_trend_points=sum(v is not None for v in mem),
        )
    cpu = tuple(None if s.host is None else s.host.cpu_pct for s in snaps)
    iowait = tuple(None if s.host is None else s.host.iowait_pct for s in snaps)
    return gpus, cpu, iowait


class Feeder:
    """The per-tick work after sampling: classify, cut the histories, accumulate Xid events.

    One tick at a time (a lock), so a collector restarted by `r` never races the one it
    replaced.
    """

    def __init__(self, sources: Sources, history: History, sampler: Sampler | None = None):
        self.sources = sources
        self.history = history
        self.sampler = sampler
        self.diagnosis: Diagnosis | None = None
        self._lock = threading.Lock()
        self._sched: list = []
        self._ooms: list = []
        self._slow_at: float | None = None
        self._xids: list[XidEvent] = []
        self._ticks = 0

    @classmethod
    def over(cls, sampler: Sampler) -> Feeder:
        """A feeder whose ticks sample `sampler` (the collector thread's)."""
        return cls(sampler.sources, sampler.history, sampler)

    def tick(self) -> Update:
        """Sample once (the Sampler appends to its history) and derive the update."""
        if self.sampler is None:
            raise RuntimeError("this feeder has no sampler; use add()")
        with self._lock:
            return self._derive(self.sampler.sample())

    def add(self, snap: Snapshot) -> Update:
        """Append a snapshot made elsewhere (tests, replays) and derive the update."""
        with self._lock:
            self.history.append(snap)
            return self._derive(snap)

    def _derive(self, snap: Snapshot) -> Update:
        self._ticks += 1
        if self._slow_at is None or snap.timestamp - self._slow_at >= SLOW_SOURCES_EVERY_S:
            self._sched = collect_scheduler_evidence(self.sources)
            self._ooms = collect_oom_kills(self.sources, snap.timestamp - DIAGNOSIS_WINDOW_S)
            self._slow_at = snap.timestamp
        window = self.history.snapshots(DIAGNOSIS_WINDOW_S)
        self.diagnosis = classify(window, self.diagnosis, self._sched, self._ooms)
        if snap.xid_events:
            newest_first = sorted(snap.xid_events, key=lambda x: x.timestamp, reverse=True)
            self._xids = (newest_first + self._xids)[:MAX_XID_EVENTS]
        gpus, cpu, iowait = series_of(self.history)
        return Update(snap, self.diagnosis, gpus, cpu, iowait, tuple(self._xids), self._ticks)
