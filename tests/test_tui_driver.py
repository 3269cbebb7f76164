"""The terminal driver's input thread (`tui/driver.py`), on a real pty: keys arrive as Textual
parses them, a lone Esc after the parser's own timeout, and nothing wakes the thread while
nobody types; setting the exit event ends the wait at once."""

from __future__ import annotations

import os
import pty
import threading
import time
import tty

import pytest
from textual import events
from textual._xterm_parser import XTermParser
from textual.drivers.headless_driver import HeadlessDriver
from textual.drivers.linux_driver import LinuxDriver

from gputop_diag.tui.driver import QuietInputDriver, WakingEvent, input_loop, quiet


class CountingParser(XTermParser):
    """Textual's parser, counting the loop's passes (one `tick` after each wait)."""

    def __init__(self) -> None:
        super().__init__()
        self.passes = 0

    def tick(self):
        self.passes += 1
        return super().tick()


class Running:
    """`input_loop` on `fd` in a thread of its own, with a wake pipe: what it delivered
    (`keys`), its parser's passes, and what escaped it (`failed`)."""

    def __init__(self, fd: int) -> None:
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.exit_event, self.parser = WakingEvent(), CountingParser()
        self.exit_event.attach(self.wake_w)
        self.keys: list = []
        self.failed: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(fd,), daemon=True)
        self.thread.start()

    def _run(self, fd: int) -> None:
        try:
            input_loop(fd, self.wake_r, self.exit_event, self.parser, self.keys.append)
        except BaseException as e:  # noqa: BLE001 - the test says what escaped
            self.failed.append(e)

    def stop(self) -> float:
        """Set the exit event; the seconds until the loop ended (it must end, cleanly)."""
        started = time.monotonic()
        self.exit_event.set()
        self.thread.join(2.0)
        took = time.monotonic() - started
        for fd in (self.wake_r, self.wake_w):
            os.close(fd)
        assert not self.thread.is_alive(), "the loop did not end when the exit event was set"
        assert self.failed == []
        return took

    def asleep_after(self, settle: float = 0.1, watch: float = 0.3) -> bool:
        """Whether the loop makes no pass in `watch` seconds once `settle` has passed."""
        time.sleep(settle)
        passes = self.parser.passes
        time.sleep(watch)
        return self.parser.passes == passes


@pytest.fixture
def loop():
    """The input loop on a pty's terminal end; yields (write, keys, parser, stop)."""
    parent, child = pty.openpty()
    tty.setraw(child)  # as Textual sets the terminal: each key as it comes, no line editing
    running = Running(child)
    yield (lambda data: os.write(parent, data)), running.keys, running.parser, running.stop
    if running.thread.is_alive():
        running.stop()
    for fd in (parent, child):
        os.close(fd)


def _wait_for(cond, timeout: float = 2.0) -> float:
    started = time.monotonic()
    while not cond():
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(0.005)
    return time.monotonic() - started


def test_keys_arrive_and_the_thread_sleeps_while_nobody_types(loop):
    write, keys, parser, stop = loop
    write(b"q")
    _wait_for(lambda: any(isinstance(k, events.Key) and k.key == "q" for k in keys))
    time.sleep(0.05)
    passes = parser.passes
    time.sleep(0.6)  # Textual's own loop wakes six times in this
    assert parser.passes == passes
    assert stop() < 0.2  # the wake pipe, not a timeout


def test_a_lone_esc_comes_after_the_parsers_timeout(loop):
    """An Esc alone may be the start of a sequence: the parser holds it for its timeout, and
    the loop waits only that long before asking it again."""
    write, keys, parser, stop = loop
    write(b"\x1b")
    took = _wait_for(lambda: any(isinstance(k, events.Key) and k.key == "escape" for k in keys))
    assert took < 0.5
    write(b"\x1b[A")  # a whole sequence at once: the up arrow, not Esc and text
    _wait_for(lambda: any(isinstance(k, events.Key) and k.key == "up" for k in keys))
    assert [k.key for k in keys if isinstance(k, events.Key)] == ["escape", "up"]
    stop()


def test_the_end_of_input_is_not_waited_on_again():
    """Input that ends (stdin a pipe whose writer closed it): the loop stops reading it instead
    of waking for it without end, and still ends on the exit event."""
    r, w = os.pipe()
    running = Running(r)
    os.write(w, b"a")
    _wait_for(lambda: running.keys)
    os.close(w)
    assert running.asleep_after()  # asleep, not spinning on the end of input
    assert running.stop() < 0.2
    os.close(r)
    assert [k.key for k in running.keys if isinstance(k, events.Key)] == ["a"]


def test_the_app_runs_on_the_quiet_driver_where_textual_takes_its_own():
    from gputop_diag import sim
    from gputop_diag.tui.app import GpuTopApp

    assert quiet(LinuxDriver) is QuietInputDriver
    assert quiet(HeadlessDriver) is HeadlessDriver  # tests, TEXTUAL_DRIVER: as they are
    assert issubclass(QuietInputDriver, LinuxDriver)
    if os.environ.get("TEXTUAL_DRIVER") is None:
        assert GpuTopApp(sim.build("idle")).get_driver_class() is QuietInputDriver


def test_a_terminal_that_hangs_up_ends_the_reading_not_the_thread():
    """The pty's other end closed (an SSH session dropped): reading answers EIO. The loop stops
    reading, without an exception (the hangup's own handler exits the app), and ends on the
    exit event."""
    parent, child = pty.openpty()
    tty.setraw(child)
    running = Running(child)
    os.write(parent, b"z")
    _wait_for(lambda: running.keys)
    os.close(parent)
    assert running.asleep_after()
    running.stop()  # ended, nothing escaped
    os.close(child)


def test_a_read_that_fails_ends_the_reading_not_the_thread(tmp_path):
    """A read that fails (EIO from a terminal gone away; here a directory, which select calls
    readable and read refuses): no exception escapes the thread, which stops reading and ends
    on the exit event."""
    fd = os.open(tmp_path, os.O_RDONLY)
    running = Running(fd)
    _wait_for(lambda: running.parser.passes >= 1)
    time.sleep(0.2)
    assert running.parser.passes == 1  # not read again, not spinning
    running.stop()  # ended, nothing escaped
    os.close(fd)


def test_the_exit_event_ends_the_wait_whenever_it_is_set():
    """Set at any moment (while the thread waits, or right as it starts), the exit event ends
    the loop: no wake-up is lost, and the pipe is closed only after the last write to it."""
    for k in range(200):
        r, w = os.pipe()  # input that never comes
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        exit_event = WakingEvent()
        exit_event.attach(wake_w)
        t = threading.Thread(
            target=input_loop, args=(r, wake_r, exit_event, XTermParser(), lambda e: None)
        )
        t.start()
        if k % 3:
            time.sleep(0.0003 * (k % 5))
        exit_event.set()
        t.join(1.0)
        exit_event.detach()
        for fd in (r, w, wake_r, wake_w):
            os.close(fd)
        assert not t.is_alive(), f"the loop missed the exit event (try {k})"


def test_a_read_that_ends_inside_a_character_is_not_the_end_of_input(loop):
    """A read can end inside a UTF-8 character (a paste, an SSH packet's edge): its first bytes
    decode to nothing yet, which is not the end of input; the keys after it still arrive."""
    write, keys, parser, stop = loop
    write(b"a")
    _wait_for(lambda: len(keys) == 1)
    write("é".encode()[:1])
    time.sleep(0.1)
    write("é".encode()[1:] + b"q")
    _wait_for(lambda: any(isinstance(k, events.Key) and k.key == "q" for k in keys))
    assert [k.character for k in keys if isinstance(k, events.Key)] == ["a", "é", "q"]
    stop()
