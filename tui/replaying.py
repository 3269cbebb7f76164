"""Playing a recording in the live view: the replay worker, its messages and its keys.

A mixin of `GpuTopApp`: the thread worker feeds the recorded snapshots through a replaying
Monitor at the recorded pace times the speed, honouring pause and single steps; the last frame
stays at the end.
"""

from __future__ import annotations

from textual import work
from textual.css.query import NoMatches
from textual.message import Message
from textual.worker import get_current_worker

from ..recording.store import RecordingError
from .messages import CollectorFailed, SnapshotReady


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


class ReplayMixin:
    """The replay side of the app (`self.replay`, `self.pace`, `self.feeder` are the app's).

    Its handlers go by Textual's naming convention (`on_replay_extent`): `@on` decorators on a
    class that is not a message pump are never registered."""

    @work(thread=True, exit_on_error=False, exclusive=True, group="collect", name="replay")
    def play(self) -> None:
        """Feed the recording through the replaying Monitor at the recorded pace (times the
        speed), honouring pause and single steps; the last frame stays at the end."""
        cancel = get_current_worker().cancelled_event
        previous: float | None = None
        try:
            for snap in self.replay.snapshots():
                if previous is not None and self.pace.wait(snap.timestamp - previous, cancel):
                    return
                if cancel.is_set():
                    return
                previous = snap.timestamp
                update = self.feeder.add(snap)
                self.post_message(SnapshotReady(snap, update))
        except RecordingError as e:
            self.post_message(
                CollectorFailed("replay", str(e), "the view keeps the last frame; q quits")
            )
        except Exception as e:  # noqa: BLE001 - shown as a banner, never a traceback
            self.post_message(
                CollectorFailed(
                    "replay",
                    f"the replay failed: {type(e).__name__}: {e}",
                    "the view keeps the last frame; q quits",
                )
            )
        if not cancel.is_set():
            self.post_message(ReplayEnded(tuple(self.replay.warnings)))

    @property
    def replay_speed(self) -> float:
        return self.pace.speed

    @replay_speed.setter
    def replay_speed(self, speed: float) -> None:
        self.pace.speed = speed

    @work(thread=True, exit_on_error=False, group="replay-extent", name="replay-extent")
    def measure_replay(self) -> None:
        count, first, last = self.replay.extent(get_current_worker().cancelled_event)
        self.post_message(ReplayExtent(count, first, last))

    def on_replay_extent(self, message: ReplayExtent) -> None:
        start = self.replay.header.started if self.replay.header.started else message.first
        if start is not None and message.last is not None:
            self.replay_total_s = message.last - start
            try:
                self._render_header()
            except NoMatches:  # measured while the app closes
                pass

    def on_replay_ended(self, message: ReplayEnded) -> None:
        self.replay_ended = True
        try:
            self._render_header()
        except NoMatches:  # the end arrived while the app closes
            return
        for text in message.warnings:
            self.notify(text, severity="warning", timeout=15)
        if self.latest is None:
            self.notify(f"{self.replay.path} holds no snapshots", severity="error", timeout=15)
        else:
            self.notify("end of the recording: the last frame stays; q quits", timeout=10)

    def action_replay_speed(self, step: int) -> None:
        self.pace.change_speed(step)
        self._render_header()

    def action_replay_step(self) -> None:
        """Pause, and show the next recorded tick."""
        self.pace.step()
        if not self.paused:
            self.paused = True
            self._render_header()
