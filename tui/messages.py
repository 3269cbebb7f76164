"""What the collector thread posts to the app (`post_message` is thread-safe)."""

from __future__ import annotations

from textual.message import Message

from gputop_diag.model import Snapshot
from gputop_diag.monitor.view import Update


class SnapshotReady(Message):
    """One tick, as a Feeder made it from the Monitor's frozen tick (the collector thread, a
    replay, a Prometheus feed)."""

    def __init__(self, update: Update) -> None:
        super().__init__()
        self.update = update

    @property
    def snapshot(self) -> Snapshot:
        return self.update.snapshot


class XidHistoryRead(Message):
    """The Monitor has read the kernel log before the run (the Xid pane's history)."""


class CollectorFailed(Message):
    """A tick raised: the view keeps its last figures and says so."""

    def __init__(self, source: str, message: str, next_step: str) -> None:
        super().__init__()
        self.source = source
        self.message = message
        self.next_step = next_step


class ReportWritten(Message):
    """The report worker is done: where the report went (`saved`), or why it was not built."""

    def __init__(
        self, saved: object | None, error: str | None, left_out: list | tuple = ()
    ) -> None:
        super().__init__()
        self.saved = saved
        self.error = error
        self.left_out = tuple(left_out)
