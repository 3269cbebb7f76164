"""The live view's sampling loop, in a daemon thread of its own.

Not a Textual thread worker: a worker runs in the event loop's executor, and leaving the program
waits for every executor thread to finish. A GPU that stopped answering can hold one NVML call
for minutes, so quitting would wait for it. This loop's thread is a daemon: quitting stops the
loop, waits at most `QUIT_WAIT_S` for a tick in flight (`Sampler.close`), and leaves a call that
does not return behind, without `nvmlShutdown` (the driver cleans up after the process).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gputop_diag.monitor.run import Run
from gputop_diag.monitor.view import Feeder, Update
from gputop_diag.tui.messages import CollectorFailed, SnapshotReady

STUCK_AFTER_S = 5.0  # a tick this long is waiting for the driver: the banner says so


class Collector:
    """Sample through `feeder` every `interval` seconds of its Monitor until `stop()`; post
    each tick. The loop is the one paced loop (`monitor/run.py`), in a daemon thread.

    The Monitor's `paused` is read before each tick (a paused view samples only the first tick
    when `sample_first`); `post` is the app's thread-safe `post_message`; a tick that fails is
    posted as `CollectorFailed` and the loop goes on."""

    def __init__(
        self,
        feeder: Feeder,
        *,
        post: Callable[[object], object],
        sample_first: bool = True,
    ) -> None:
        self.feeder = feeder
        self.monitor = feeder.monitor
        self.run = Run(
            self._step,
            clock=self.monitor.sources.clock,
            interval=self.monitor.interval,
            paused=lambda: self.monitor.paused,
            sample_first=sample_first,
        ).subscribe(post)

    def _step(self) -> object:
        try:
            update: Update = self.feeder.tick()
        except Exception as e:  # noqa: BLE001 - shown as a banner; the loop goes on
            return CollectorFailed(
                "sampler",
                f"sampling failed: {type(e).__name__}: {e}",
                "the view keeps the last figures; r tries again",
            )
        return SnapshotReady(update)

    def start(self) -> Collector:
        self.run.start(name="gputop-collector")
        return self

    def stop(self) -> None:
        """End the loop: at once when it waits, after the tick in flight otherwise."""
        self.run.stop()

    @property
    def thread(self) -> threading.Thread | None:
        return self.run.thread

    @property
    def cancelled(self) -> threading.Event:
        return self.run.cancelled

    @property
    def ticks(self) -> int:
        return self.run.ticks

    @property
    def running(self) -> bool:
        return self.run.running

    def stuck_for(self) -> float:
        """Seconds the tick in flight has been running (0 between ticks)."""
        return self.run.stuck_for()


class Sampling:
    """The live view's sampling: one Collector loop at a time over `feeder`, restarted by
    r, +/- and resume (the old loop ends on its cancel event; a tick in flight finishes first
    and the Monitor's lock keeps the two from overlapping)."""

    def __init__(self, feeder: Feeder, post: Callable[[object], object]) -> None:
        self.feeder = feeder
        self._post = post
        self.collector: Collector | None = None  # the loop now running

    def start(self, sample_first: bool = True) -> Collector:
        self.stop()
        self.collector = Collector(self.feeder, post=self._post, sample_first=sample_first)
        return self.collector.start()

    def stop(self) -> None:
        if self.collector is not None:
            self.collector.stop()

    def stuck(self) -> CollectorFailed | None:
        """A tick that has waited `STUCK_AFTER_S` for NVML: what the banner says (the figures
        on screen are that old)."""
        c = self.collector
        waited = c.stuck_for() if c is not None else 0.0
        if waited < STUCK_AFTER_S:
            return None
        return CollectorFailed(
            "stuck",
            f"the driver has not answered for {waited:.0f} s: a sample is waiting in an NVML "
            "call (a GPU that stopped answering?); the figures shown are that old",
            "nvidia-smi and the kernel log (journalctl -k | grep -i xid) say which GPU; "
            "q quits without waiting",
        )
