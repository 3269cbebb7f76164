"""Simulated time: instant (headless commands) or following the wall clock (the live view)."""

from __future__ import annotations

import threading
import time

# 2026-01-15 10:00:00 UTC: a fixed start so demo runs are reproducible.
EPOCH0 = 1768471200.0


class SimClock:
    def __init__(self, realtime: bool = False, start: float = EPOCH0) -> None:
        self.realtime = realtime
        self.start = start
        self._t = start
        self._mono0 = time.monotonic()
        self._lock = threading.Lock()

    def now(self) -> float:
        if self.realtime:
            return self.start + (time.monotonic() - self._mono0)
        return self._t

    def elapsed(self) -> float:
        return self.now() - self.start

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        seconds = max(0.0, seconds)
        if self.realtime:
            if cancel is None:
                time.sleep(seconds)
                return False
            return cancel.wait(seconds)
        if cancel is not None and cancel.is_set():
            return True
        with self._lock:
            self._t += seconds
        return False
