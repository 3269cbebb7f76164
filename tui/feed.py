"""What one tick hands the screen: the snapshot, the diagnosis and the histories, all frozen.

Built in the collector thread, so the UI thread never reads the Sampler's live history.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..diagnose import Diagnosis, classify, collect_scheduler_evidence
from ..diagnose.oom import collect_oom_kills
from ..history import History, slope_per_s
from ..model import MIB, GpuState, Snapshot, XidEvent
from ..sampler import Sampler

HISTORY_POINTS = 120  # samples kept for the history lines
DIAGNOSIS_WINDOW_S = 60.0
TREND_WINDOW_S = 120.0
GROWING_MIB_PER_MIN = 30.0  # the memory pane's "growing" flag (same as the diagnosis alert)
SCHEDULER_EVERY_S = 10.0
MAX_XID_EVENTS = 500


@dataclass(frozen=True)
class GpuSeries:
    util: tuple[float | None, ...] = ()
    memctl: tuple[float | None, ...] = ()
    sm: tuple[float | None, ...] = ()
    power_pct: tuple[float | None, ...] = ()
    clock_pct: tuple[float | None, ...] = ()
    mem_trend_mib_per_min: float | None = None


@dataclass(frozen=True)
class Update:
    snapshot: Snapshot
    diagnosis: Diagnosis
    gpus: dict[int, GpuSeries] = field(default_factory=dict)
    host_cpu: tuple[float | None, ...] = ()
    host_iowait: tuple[float | None, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()  # every event seen so far, newest first


def _sm(g: GpuState) -> float | None:
    return g.gpm.sm_util_pct if g.gpm is not None else None


def _mem_mib(g: GpuState) -> float | None:
    return None if g.mem_used_bytes is None else g.mem_used_bytes / MIB


def series_of(history: History) -> tuple[dict[int, GpuSeries], tuple, tuple]:
    snaps = history.snapshots()[-HISTORY_POINTS:]
    latest = snaps[-1] if snaps else None
    gpus: dict[int, GpuSeries] = {}
    if latest is not None:
        trend_snaps = history.snapshots(TREND_WINDOW_S)
        times = [s.timestamp for s in trend_snaps]
        for g in latest.gpus:

            def col(get, i=g.index):
                out = []
                for s in snaps:
                    x = s.gpu(i)
                    out.append(None if x is None or x.lost else get(x))
                return tuple(out)

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
            )
    cpu = tuple(None if s.host is None else s.host.cpu_pct for s in snaps)
    iowait = tuple(None if s.host is None else s.host.iowait_pct for s in snaps)
    return gpus, cpu, iowait


class Feeder:
    """Owns the per-tick work done off the UI thread: sample, classify, cut histories."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.diagnosis: Diagnosis | None = None
        self._sched: list = []
        self._ooms: list = []
        self._sched_at: float | None = None
        self._xids: list[XidEvent] = []

    def tick(self) -> Update:
        snap = self.sampler.sample()
        if self._sched_at is None or snap.timestamp - self._sched_at >= SCHEDULER_EVERY_S:
            # Slurm and the kernel log are round trips: every SCHEDULER_EVERY_S, not every tick.
            self._sched = collect_scheduler_evidence(self.sampler.sources)
            since = snap.timestamp - DIAGNOSIS_WINDOW_S
            self._ooms = collect_oom_kills(self.sampler.sources, since)
            self._sched_at = snap.timestamp
        hist = self.sampler.history
        window = hist.snapshots(DIAGNOSIS_WINDOW_S)
        self.diagnosis = classify(window, self.diagnosis, self._sched, self._ooms)
        if snap.xid_events:
            self._xids = (list(reversed(snap.xid_events)) + self._xids)[:MAX_XID_EVENTS]
        gpus, cpu, iowait = series_of(hist)
        return Update(snap, self.diagnosis, gpus, cpu, iowait, tuple(self._xids))
