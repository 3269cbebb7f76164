"""A terminal that stops reading loses frames, never the app: while it runs, the writer thread's
queue is written with a bounded wait, and when the terminal reads again the whole screen is
painted again (`tui/hangup.py`, `_Shedding`)."""

from __future__ import annotations

import queue
import time

from gputop_diag.tui import hangup


class StuckWriter:
    """Textual's WriterThread as far as the app sees it: a bounded queue that nobody drains."""

    def __init__(self, size: int = 4) -> None:
        self._queue: queue.Queue = queue.Queue(size)
        self.joined: list[float] = []

    def join(self, timeout: float | None = None) -> None:
        self.joined.append(timeout or 0.0)

    def fileno(self) -> int:
        return 1


class Driver:
    def __init__(self, writer) -> None:
        self._writer_thread = writer


def test_a_full_queue_drops_frames_within_a_bound_then_repaints_once_drained(monkeypatch):
    monkeypatch.setattr(hangup, "SHED_WAIT_S", 0.05)
    writer = StuckWriter(4)
    rooms: list[int] = []
    driver = Driver(writer)
    assert hangup.shed(driver, lambda: rooms.append(1))
    assert not hangup.shed(driver, lambda: None)  # once
    shedding = driver._writer_thread
    t0 = time.monotonic()
    for k in range(50):  # the terminal reads none of it
        shedding.write(f"frame {k}")
    assert time.monotonic() - t0 < 1.0  # one bounded wait, then no waiting at all
    assert writer._queue.qsize() == 4 and shedding.shedding and shedding.dropped == 46
    assert rooms == []
    writer._queue.get_nowait()  # the terminal reads a little: not enough yet
    shedding.write("frame 50")
    assert rooms == [] and shedding.dropped == 47
    while writer._queue.qsize() > 2:  # half the queue drained
        writer._queue.get_nowait()
    shedding.write("frame 51")
    assert rooms == [1] and not shedding.shedding  # the whole screen is painted again
    assert writer._queue.queue[-1] == "frame 51"


def test_leaving_and_a_hang_up_see_through_the_shedding_writer():
    writer = StuckWriter(2)
    driver = Driver(writer)
    hangup.shed(driver, lambda: None)
    assert hangup.bound(driver, wait_s=0.01)
    assert isinstance(driver._writer_thread, hangup._Bounded)
    assert driver._writer_thread._writer is writer
    driver2 = Driver(StuckWriter(2))
    hangup.shed(driver2, lambda: None)
    assert hangup.mute(driver2) and isinstance(driver2._writer_thread, hangup._Sink)
