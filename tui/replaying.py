"""Playing a recording in the live view: the pace (speed, single steps), the player thread and
its messages.

The player feeds the recorded snapshots through a replaying Monitor at the recorded pace times
the speed, honouring the Monitor's pause and single steps; the last frame stays at the end. A
Prometheus feed (`fleet_app.py`) plays through the same messages.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import App
from textual.message import Message
from textual.worker import get_current_worker

from gputop_diag.model import Snapshot
from gputop_diag.monitor.run import Done, Run
from gputop_diag.monitor.view import Feeder
from gputop_diag.tui.messages import CollectorFailed, SnapshotReady
from gputop_diag.tui.panes.base import Pane

if TYPE_CHECKING:  # recordings load with a replay, not with the live view
    from gputop_diag.recording.store import Recording

REPLAY_SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
REPLAY_MAX_GAP_S = 60.0  # a longer gap in a recording (a suspended machine) plays as this
REPLAY_POLL_S = 0.05  # how soon a replay notices pause, speed, step and quit


class ReplayEnded(Message):
    """The replay worker reached the end of the recording (the view keeps the last frame)."""

    def __init__(self, warnings: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.warnings = warnings


class ReplayExtent(Message):
    """How long the recording is (read in a thread: a long recording takes a moment)."""

    def __init__(self, count: int, first: float | None, last: float | None) -> None:
        super().__init__()
        self.count = count
        self.first = first
        self.last = last


class ReplayPace:
    """How a replay moves: its speed and single steps (the pause is the Monitor's). The UI
    thread sets them; the replay thread calls `wait()` between two recorded ticks."""

    def __init__(self) -> None:
        self.speed = 1.0
        self._step = threading.Event()

    def change_speed(self, step: int) -> float:
        """One notch faster (`step` 1) or slower (-1) on REPLAY_SPEEDS; the new speed."""
        k = min(range(len(REPLAY_SPEEDS)), key=lambda i: abs(REPLAY_SPEEDS[i] - self.speed))
        self.speed = REPLAY_SPEEDS[max(0, min(len(REPLAY_SPEEDS) - 1, k + step))]
        return self.speed

    def step(self) -> None:
        """Let one more tick through while paused."""
        self._step.set()

    def wait(self, gap_s: float, cancel: threading.Event, paused: Callable[[], bool]) -> bool:
        """Wait `gap_s` recorded seconds at the current speed, not while `paused()` (except
        for a single step); True when `cancel` was set."""
        due = min(max(gap_s, 0.0), REPLAY_MAX_GAP_S)
        while not cancel.is_set():
            if paused():
                if self._step.is_set():
                    self._step.clear()
                    return False
                cancel.wait(REPLAY_POLL_S)
                continue
            self._step.clear()  # a step pressed while playing means nothing once paused
            if due <= 0:
                return False
            speed = self.speed
            t0 = time.monotonic()
            cancel.wait(min(due / speed, REPLAY_POLL_S))
            due -= (time.monotonic() - t0) * speed
        return True


class ReplayClock:
    """The paced loop's clock for a replay: its sleep is a recorded gap waited out at the
    pace's speed, held while paused (`ReplayPace.wait`)."""

    def __init__(self, pace: ReplayPace, paused: Callable[[], bool]) -> None:
        self.pace = pace
        self.paused = paused

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        return self.pace.wait(seconds, cancel or threading.Event(), self.paused)


class Player:
    """A recording played into `app`: the thread workers, the pace, how far it got."""

    def __init__(self, app: App, recording: Recording | None) -> None:
        self.app = app
        self.recording = recording
        self.pace = ReplayPace()
        self.ended = False
        self.total_s: float | None = None  # the recording's length, once measured
        if recording is not None:
            recording.on_warning = lambda text: None  # kept in .warnings, shown at the end

    def start(self, feeder: Feeder) -> None:
        run = self.app.run_worker
        run(lambda: self._play(feeder), thread=True, exit_on_error=False, exclusive=True,
            group="collect", name="replay")  # fmt: skip
        run(self._measure, thread=True, exit_on_error=False, group="replay-extent",
            name="replay-extent")  # fmt: skip

    def _play(self, feeder: Feeder) -> None:
        """The recording through the one paced loop (`monitor/run.py`), at its own pace: each
        snapshot shown, then the recorded gap to the next waited out at the current speed
        (`ReplayClock`: the pause and single steps hold the wait)."""
        from gputop_diag.recording.store import RecordingError

        cancel = get_current_worker().cancelled_event
        post = self.app.post_message
        monitor = feeder.monitor
        try:
            snaps = iter(self.recording.snapshots())
            ahead: list[Snapshot | None] = [next(snaps, None)]

            def step() -> float | None:
                """Show the snapshot in hand; the recorded gap to the next (None: the end)."""
                snap = ahead[0]
                if snap is None:
                    return None
                post(SnapshotReady(feeder.add(snap)))
                ahead[0] = following = next(snaps, None)
                return None if following is None else following.timestamp - snap.timestamp

            def at_the_end(gap: float | None) -> None:
                if gap is None:
                    raise Done

            Run(
                step,
                clock=ReplayClock(self.pace, lambda: monitor.paused),
                interval=REPLAY_POLL_S,  # unused: `gap` paces a replay
                gap=lambda gap: gap or 0.0,
                cancel=cancel,
            ).subscribe(at_the_end).run()
        except RecordingError as e:
            post(CollectorFailed("replay", str(e), "the view keeps the last frame; q quits"))
        except Exception as e:  # noqa: BLE001 - shown as a banner, never a traceback
            post(
                CollectorFailed(
                    "replay",
                    f"the replay failed: {type(e).__name__}: {e}",
                    "the view keeps the last frame; q quits",
                )
            )
        if not cancel.is_set():
            post(ReplayEnded(tuple(self.recording.warnings)))

    def _measure(self) -> None:
        count, first, last = self.recording.extent(get_current_worker().cancelled_event)
        self.app.post_message(ReplayExtent(count, first, last))

    def extent(self, message: ReplayExtent) -> bool:
        """The recording's length is known: True when the header should show it."""
        start = self.recording.header.started or message.first
        if start is None or message.last is None:
            return False
        self.total_s = message.last - start
        return True

    def finish(self) -> None:
        """No tick follows: the next frame draws the last one whole, no figure held back."""
        self.ended = True
        for pane in self.app.query(Pane):
            pane.settle()

    def end(self, message: ReplayEnded, anything_shown: bool) -> None:
        self.ended = True
        notify = self.app.notify
        for text in message.warnings:
            notify(text, severity="warning", timeout=15)
        if not anything_shown:
            notify(f"{self.recording.shown} holds no snapshots", severity="error", timeout=15)
        else:
            notify("end of the recording: the last frame stays; q quits", timeout=10)
