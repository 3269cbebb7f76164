"""What the collector thread posts to the app (`post_message` is thread-safe)."""

from __future__ import annotations

from textual.message import Message

from ..model import Snapshot
from .feed import Update


class SnapshotReady(Message):
    """One tick: the frozen snapshot, and what the collector thread derived from it.

    Post a bare snapshot (tests, replays) and the app derives the rest itself.
    """

    def __init__(self, snapshot: Snapshot, update: Update | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.update = update


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
