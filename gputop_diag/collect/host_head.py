"""The host's first readings for a one-shot command, taken before anything else is loaded.

The host's CPU % and disk rates are differences between two readings. `gputop-diag snapshot`
takes the first ones here, as soon as the command line is read (`cli.main`), and its one reading
of everything comes after the model and the collectors have loaded: that loading is the window
the rates are averaged over (at least `RATE_MIN_S`, waited for where loading was quicker), where
a second reading would otherwise cost the wait again. psutil itself does the same for
`cpu_percent(interval=None)` (https://psutil.readthedocs.io/en/latest/#psutil.cpu_percent: the
first call's baseline), but per thread and from whenever psutil was imported: here the baseline
is explicit and timed.

This module imports no model, only psutil (or the simulator's stand-in). `HostCollector(head=)`
takes the readings over instead of taking its own first ones.
"""

from __future__ import annotations

import os
import time
from typing import Any

RATE_MIN_S = 0.05  # the shortest window a one-shot command averages the host's rates over


class _WallClock:
    """This machine's clock as the real sources read it (`sources.RealClock`: `time.time`)."""

    @staticmethod
    def now() -> float:
        return time.time()


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


class HostHead:
    """The first readings of the host's rates: psutil's CPU baselines (the calling thread's:
    the reading that uses them must come from the same thread) and the disks' byte counters,
    with the clock's time after them."""

    def __init__(self, psutil: Any, clock: Any, own_cpu: Any = None) -> None:
        """`own_cpu`: this process's CPU seconds so far, as a callable (`here`: the machine's
        own, `os.times`): the window is mostly this program loading, whose CPU the host's busy
        share then leaves out (`own_cpu_share`). None: a simulated host, which does not see it."""
        self.psutil, self.clock, self.own_cpu = psutil, clock, own_cpu
        self.at: float | None = None  # when the baselines were taken
        self.disk: tuple[float, int, int] | None = None  # (when, bytes read, bytes written)
        self.own_cpu_at: float | None = None  # this process's CPU seconds then

    def begin(self) -> HostHead:
        ps = self.psutil
        ps.cpu_percent(interval=None, percpu=True)  # the next call averages from here
        ps.cpu_times_percent(interval=None)
        try:
            io = ps.disk_io_counters(nowrap=False)  # as HostCollector reads them
        except (OSError, RuntimeError):  # no disks psutil can read: the rates stay unknown
            io = None
        self.at = self.clock.now()
        if self.own_cpu is not None:
            self.own_cpu_at = self.own_cpu()
        if io is not None:
            self.disk = (self.at, io.read_bytes, io.write_bytes)
        return self

    @classmethod
    def here(cls) -> HostHead:
        """Begun on this machine's psutil as soon as the command line is read."""
        import psutil

        return cls(psutil, _WallClock(), own_cpu=_own_cpu_s).begin()

    def own_cpu_share(self, cpu_count: int) -> float | None:
        """This process's CPU since the baselines, as a share (percent) of all `cpu_count`
        CPUs over the window: what the host's busy figure holds of this program's own start."""
        if self.own_cpu is None or self.own_cpu_at is None or self.at is None:
            return None
        window = self.clock.now() - self.at
        if window <= 0:
            return None
        return 100.0 * max(0.0, self.own_cpu() - self.own_cpu_at) / (window * max(1, cpu_count))

    def wait(self) -> float:
        """Seconds until the window since the baselines is `RATE_MIN_S` long (0 when it is)."""
        if self.at is None:
            return 0.0
        return max(0.0, self.at + RATE_MIN_S - self.clock.now())
