"""The slow sources of a live view, read in a thread of their own (`monitor/core.py`).

`squeue` against a Slurm controller that does not answer holds its timeout (5 s), a journal
read can take as long: a live view's tick never waits for them. The Monitor starts one read at
a time and each tick takes the answers of the last read that ended.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..model import XidEvent


class SlowRead:
    """One read of the slow sources at a time, in a daemon thread (a `squeue` that never
    answers is killed at its timeout; leaving the program never waits for it). `take()` hands
    the ticks what the last read that ended found: its new Xid events once, whether a read
    ended since the last take, and the fields every snapshot carries until the next one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._xids: tuple[XidEvent, ...] = ()
        self._fresh = False
        self.published: dict | None = None  # the last read's fields (None: none has ended)

    @property
    def running(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive()

    def start(self, read: Callable[[], tuple]) -> None:
        def run() -> None:
            xids, fields = read()
            with self._lock:
                self._xids += xids
                self._fresh = True
                self.published = fields

        self._thread = threading.Thread(target=run, name="slow-sources", daemon=True)
        self._thread.start()

    def seed(self, fields: dict) -> None:
        """The fields of a read made outside the thread (a headless run's first, in its tick)."""
        with self._lock:
            self.published = fields

    def join(self, timeout: float | None = None) -> bool:
        """Wait at most `timeout` for the read in flight: True when none runs."""
        t = self._thread
        if t is not None:
            t.join(timeout)
        return not self.running

    def take(self) -> tuple[tuple[XidEvent, ...], bool, dict] | None:
        """(the Xid events no tick has taken yet, whether a read ended since the last take, the
        fields of the last read); None before the first read ends."""
        with self._lock:
            if self.published is None:
                return None
            xids, fresh = self._xids, self._fresh
            self._xids, self._fresh = (), False
            return xids, fresh, dict(self.published)
