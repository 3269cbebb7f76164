"""The histories the live view draws, cut from the Monitor's history in one frozen `Series`.

The Monitor cuts them inside its tick (`Monitor.tick(series=True)`), under its lock, so the view
never iterates the history while a tick appends to it.
"""

from __future__ import annotations

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


def _row(s: Snapshot, index: int) -> tuple[float | None, ...]:
    """GPU `index`'s figures in `s` (util, memctl, SM, power, clock), all None where it gave
    nothing or was lost."""
    x = s.gpu(index)
    if x is None or x.lost:
        return _NO_ROW
    return (x.util_gpu_pct, x.util_mem_pct, _sm(x), x.power_pct_of_limit, x.sm_clock_pct_of_max)


_NO_ROW: tuple[None, ...] = (None,) * 5
_HOST = -1  # the columns' key for the host's CPU and iowait


def _host_row(s: Snapshot) -> tuple[float | None, ...]:
    return (None, None) if s.host is None else (s.host.cpu_pct, s.host.iowait_pct)


class SeriesCutter:
    """Cuts the Series tick after tick, reading only the ticks that are new since its last cut
    (the history moves by one tick a time; the columns drop its oldest and append its newest).
    A history that is not the held one moved on (another history, ticks that are not the ones
    held) is read whole again, so a cut is always what a fresh cutter makes of the same history."""

    def __init__(self) -> None:
        self._snaps: list[Snapshot] = []  # the ticks the columns hold, oldest first
        self._cols: dict[int, list[list[float | None]]] = {}  # GPU index (or _HOST) -> columns

    def cut(self, history: History, diagnosis: Diagnosis | None, window_s: float) -> Series:
        snaps = history.snapshots()[-HISTORY_POINTS:]
        if not snaps:
            self._snaps, self._cols = [], {}
            return Series()
        dropped, new = self._moved(snaps)
        if new is None:  # not the held ticks moved on: read them all
            self._snaps, self._cols, dropped, new = [], {}, 0, snaps
        wanted = [g.index for g in snaps[-1].gpus]
        for key in [k for k in self._cols if k != _HOST and k not in wanted]:
            del self._cols[key]
        for key in [_HOST, *wanted]:
            cols = self._cols.get(key)
            if cols is None:  # a GPU the held columns do not have: read it over every tick
                self._cols[key] = self._columns(key, snaps)
                continue
            for col, more in zip(cols, self._columns(key, new), strict=True):
                del col[:dropped]
                col.extend(more)
        self._snaps = list(snaps)
        return self._series(snaps, history, diagnosis, window_s)

    def _moved(self, snaps: list[Snapshot]) -> tuple[int, list[Snapshot] | None]:
        """(ticks dropped at the front, ticks new at the end) when `snaps` are the held ticks
        moved on; (0, None) when they are not."""
        held = self._snaps
        if not held:
            return 0, None
        first = snaps[0]
        dropped = next((i for i, s in enumerate(held) if s is first), None)
        if dropped is None:
            return 0, None
        kept = len(held) - dropped
        if kept > len(snaps) or any(
            a is not b for a, b in zip(held[dropped:], snaps[:kept], strict=True)
        ):
            return 0, None
        return dropped, snaps[kept:]

    @staticmethod
    def _columns(key: int, snaps: list[Snapshot]) -> list[list[float | None]]:
        rows = [_host_row(s) for s in snaps] if key == _HOST else [_row(s, key) for s in snaps]
        width = 2 if key == _HOST else 5
        return [[r[k] for r in rows] for k in range(width)]

    def _series(
        self, snaps: list[Snapshot], history: History, diagnosis: Diagnosis | None, window_s: float
    ) -> Series:
        growing = growing_gpus(diagnosis)
        window = history.snapshots(window_s) if growing else ()
        times = [s.timestamp for s in window]
        gpus: dict[int, GpuSeries] = {}
        for g in snaps[-1].gpus:
            util, memctl, sm, power, clock = self._cols[g.index]
            rate = None
            if g.index in growing and not g.lost:
                mem = []
                for s in window:
                    x = s.gpu(g.index)
                    mem.append(None if x is None or x.lost else _mem_mib(x))
                slope = slope_per_s(times, mem)
                rate = None if slope is None else slope * 60.0
            gpus[g.index] = GpuSeries(
                util=tuple(util),
                memctl=tuple(memctl),
                sm=tuple(sm),
                power_pct=tuple(power),
                clock_pct=tuple(clock),
                mem_growing=g.index in growing and not g.lost,
                mem_growth_mib_per_min=rate,
            )
        cpu, iowait = self._cols[_HOST]
        return Series(gpus, tuple(cpu), tuple(iowait), _job_window(history))
