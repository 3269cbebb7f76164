"""What one tick hands the screen: the snapshot, the diagnosis and the histories, all frozen.

The collector thread builds an `Update` right after the Monitor's tick (`monitor/core.py`: sample,
slow sources, classify), so the UI thread never iterates the live history while the thread
appends to it. A replay feeds recorded snapshots through a replaying Monitor the same way;
with the collectors off (tests, screenshots) the app feeds snapshots into a `Feeder` of its own
on the UI thread.

Under `--sanitize` the Feeder passes each snapshot and diagnosis through the session's one
`Sanitizer` (one key for the whole session: an identifier keeps its pseudonym from tick to
tick), so every pane draws pseudonyms; the Monitor's history keeps what was sampled (the `s`
report sanitizes it again, under the same key).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

from ..diagnose.history import History
from ..model.stats import slope_per_s
from ..diagnose.types import Diagnosis
from ..model import MIB, GpuState, Snapshot, XidEvent
from ..monitor.core import WINDOW_S, Monitor, Tick
from ..monitor.sampler import Sampler
from ..sanitize.sanitizer import Sanitizer, seed_from_sources

HISTORY_POINTS = 240  # samples kept for the history lines (wider than any pane)
MAX_XID_EVENTS = 500
REPLAY_SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
REPLAY_MAX_GAP_S = 60.0  # a longer gap in a recording (a suspended machine) plays as this
REPLAY_POLL_S = 0.05  # how soon a replay notices pause, speed, step and quit
WINDOW_WAIT_S = 5.0  # how long `s` waits for a tick in flight before it gives up


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
class Update:
    snapshot: Snapshot
    diagnosis: Diagnosis | None = None
    gpus: dict[int, GpuSeries] = field(default_factory=dict)
    host_cpu: tuple[float | None, ...] = ()
    host_iowait: tuple[float | None, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()  # every event seen so far, newest first
    ticks: int = 0  # snapshots seen so far
    sampled: Snapshot | None = None  # under --sanitize: the snapshot as sampled (None: as shown)


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


def series_of(
    history: History, diagnosis: Diagnosis | None = None
) -> tuple[dict[int, GpuSeries], tuple, tuple]:
    """The histories the panes draw, cut from `history` (oldest first)."""
    snaps = history.snapshots()[-HISTORY_POINTS:]
    if not snaps:
        return {}, (), ()
    growing = growing_gpus(diagnosis)
    window = history.snapshots(WINDOW_S) if growing else ()
    times = [s.timestamp for s in window]
    gpus: dict[int, GpuSeries] = {}
    for g in snaps[-1].gpus:
        per_tick = [s.gpu(g.index) for s in snaps]
        live = [None if x is None or x.lost else x for x in per_tick]

        def col(get, live=live):
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
    return gpus, cpu, iowait


class TickStuck(RuntimeError):
    """A tick did not end in time: the history cannot be read between two ticks."""


class Feeder:
    """The live view's side of a `Monitor`: each tick (sampled, or a snapshot fed in) becomes
    an `Update` with the histories cut and the Xid events accumulated.

    One tick at a time (a lock around the Monitor's tick and the cut of its history), so a
    collector restarted by `r` never races the one it replaced, and the UI thread never reads
    the history while a thread appends to it.
    """

    def __init__(self, monitor: Monitor, sanitizer: Sanitizer | None = None) -> None:
        self.monitor = monitor
        self.sanitizer = sanitizer  # --sanitize: what the screen shows is pseudonyms
        self._lock = threading.Lock()
        self._xids: list[XidEvent] = []
        self._seeded_pids: set[int] = set()
        if sanitizer is not None and monitor.sources is not None:
            seed_from_sources(sanitizer, monitor.sources)  # the machine's names, this shell

    @classmethod
    def over(cls, sampler: Sampler) -> Feeder:
        """A feeder whose ticks sample `sampler` (the collector thread's)."""
        return cls(Monitor(sampler.sources, sampler=sampler))

    @property
    def history(self) -> History:
        return self.monitor.history

    @property
    def diagnosis(self) -> Diagnosis | None:
        return self.monitor.diagnosis

    def tick(self) -> Update:
        """Sample once through the Monitor and derive the update."""
        with self._lock:
            return self._derive(self.monitor.tick())

    def add(self, snap: Snapshot) -> Update:
        """A snapshot made elsewhere (tests, a replay) through the Monitor; the update."""
        with self._lock:
            return self._derive(self.monitor.feed(snap))

    def window(self, wait_s: float = WINDOW_WAIT_S) -> tuple[list[Snapshot], Diagnosis | None]:
        """The snapshots the view holds (oldest first) and the diagnosis of the last one, as
        sampled (not sanitized), read between two ticks. TickStuck when a tick has not ended
        within `wait_s` (an NVML call that does not return)."""
        if not self._lock.acquire(timeout=wait_s):
            raise TickStuck(
                f"a tick has been waiting for the driver for over {wait_s:g} s (a GPU that "
                "stopped answering?); try again once the view updates"
            )
        try:
            return list(self.history.snapshots()), self.monitor.diagnosis
        finally:
            self._lock.release()

    def _derive(self, t: Tick) -> Update:
        snap, diagnosis = t.snapshot, t.diagnosis
        if self.sanitizer is not None:
            snap, diagnosis = self._sanitized(snap, diagnosis)
        if snap.xid_events:
            newest_first = sorted(snap.xid_events, key=lambda x: x.timestamp, reverse=True)
            self._xids = (newest_first + self._xids)[:MAX_XID_EVENTS]
        gpus, cpu, iowait = series_of(self.history, t.diagnosis)
        sampled = t.snapshot if snap is not t.snapshot else None
        return Update(snap, diagnosis, gpus, cpu, iowait, tuple(self._xids), t.count, sampled)

    def _sanitized(
        self, snap: Snapshot, diagnosis: Diagnosis | None
    ) -> tuple[Snapshot, Diagnosis | None]:
        """`snap` and `diagnosis` with every identifier replaced by the session's pseudonym;
        the working directory of each new GPU process seeds its project's name first."""
        s = self.sanitizer
        sources = self.monitor.sources
        if sources is not None:
            for p in snap.gpu_processes:
                if p.pid in self._seeded_pids:
                    continue
                self._seeded_pids.add(p.pid)
                try:
                    s.seed_cwd(sources.psutil.Process(p.pid).cwd())
                except Exception:  # noqa: BLE001 - gone, another user's: nothing to seed
                    continue
        return s.model(snap), None if diagnosis is None else s.model(diagnosis)


def sanitized_update(u: Update, s: Sanitizer) -> Update:
    """`u` as a sanitized view shows it, for an update made by a Feeder without the session's
    sanitizer: its snapshot, diagnosis and Xid events through `s`."""
    if u.sampled is not None:  # sanitized already
        return u
    return replace(
        u,
        snapshot=s.model(u.snapshot),
        diagnosis=None if u.diagnosis is None else s.model(u.diagnosis),
        xid_events=s.xid_events(u.xid_events) if u.xid_events else (),
        sampled=u.snapshot,
    )


class ReplayPace:
    """How a replay moves: its speed, pause and single steps. The UI thread sets them; the
    replay thread calls `wait()` between two recorded ticks."""

    def __init__(self) -> None:
        self.speed = 1.0
        self.paused = False
        self._step = threading.Event()

    def change_speed(self, step: int) -> float:
        """One notch faster (`step` 1) or slower (-1) on REPLAY_SPEEDS; the new speed."""
        k = min(range(len(REPLAY_SPEEDS)), key=lambda i: abs(REPLAY_SPEEDS[i] - self.speed))
        self.speed = REPLAY_SPEEDS[max(0, min(len(REPLAY_SPEEDS) - 1, k + step))]
        return self.speed

    def step(self) -> None:
        """Pause, and let one more tick through."""
        self.paused = True
        self._step.set()

    def wait(self, gap_s: float, cancel: threading.Event) -> bool:
        """Wait `gap_s` recorded seconds at the current speed, not while paused (except for a
        single step); True when `cancel` was set."""
        due = min(max(gap_s, 0.0), REPLAY_MAX_GAP_S)
        while not cancel.is_set():
            if self.paused:
                if self._step.is_set():
                    self._step.clear()
                    return False
                cancel.wait(REPLAY_POLL_S)
                continue
            if due <= 0:
                return False
            speed = self.speed
            t0 = time.monotonic()
            cancel.wait(min(due / speed, REPLAY_POLL_S))
            due -= (time.monotonic() - t0) * speed
        return True
