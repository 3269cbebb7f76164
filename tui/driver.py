"""The terminal driver: Textual's own (`LinuxDriver`), with an input thread that sleeps while
there is nothing to read.

Textual's input thread waits for a key at most 0.1 s at a time, so that its escape-sequence
parser can time out a lone Esc (https://github.com/Textualize/textual, `drivers/linux_driver.py`,
`run_input_thread`): ten wake-ups a second while nobody types, about a fifth of what the live
view costs the CPU when it is idle. Here the thread waits for input with no time limit, except
while the parser holds an unfinished sequence (then until the parser's own deadline), and a pipe
wakes it when the driver stops reading (`exit_event`, set by Textual's `disable_input`), so
quitting and suspending do not wait either. What is read and how it is parsed are Textual's.

`input_loop` is the loop itself, on any file descriptor (tests drive it through a pty).
"""

from __future__ import annotations

import os
import selectors
import threading
from codecs import getincrementaldecoder
from collections.abc import Callable
from typing import Any

from textual._parser import ParseError
from textual._time import get_time  # the parser's clock
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

READ_SIZE = 1024 * 4  # as Textual reads


class WakingEvent(threading.Event):
    """A `threading.Event` that, once set, writes a byte to `wake_fd` (where one is attached):
    a thread waiting in `select` on the pipe's other end returns and finds the flag up. The
    flag goes first (a thread woken by the byte must see it); the lock keeps a thread that
    ends meanwhile from closing the pipe under the write (`detach`, then close)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.wake_fd: int | None = None

    def attach(self, fd: int) -> None:
        with self._lock:
            self.wake_fd = fd

    def detach(self) -> None:
        """No more writes: the pipe may be closed once this returns."""
        with self._lock:
            self.wake_fd = None

    def set(self) -> None:
        super().set()
        with self._lock:
            if self.wake_fd is not None:
                try:
                    os.write(self.wake_fd, b"x")
                except OSError:  # full (already woken): nothing to add
                    pass


def _deadline(parser: XTermParser) -> float | None:
    """Seconds until the parser times out the sequence it holds (a lone Esc so far), or None
    when it holds none: then only input or the wake pipe ends the wait."""
    at = getattr(parser, "_timeout_time", None)
    if at is None:
        return None
    return max(0.0, at - get_time())


def input_loop(
    fileno: int,
    wake_r: int,
    exit_event: threading.Event,
    parser: XTermParser,
    deliver: Callable[[Any], None],
) -> None:
    """Read `fileno` until `exit_event` is set, feed Textual's parser, hand each event it makes
    to `deliver`; the wait is bounded only by the parser's deadline."""
    selector = selectors.SelectSelector()
    selector.register(fileno, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    decode = getincrementaldecoder("utf-8")().decode

    reading = [True]  # until the end of input

    def process(events: list, final: bool = False) -> None:
        for key, mask in events:
            if key.fd == wake_r:
                try:
                    os.read(wake_r, 64)
                except OSError:
                    pass
                continue
            if mask & selectors.EVENT_READ:
                try:
                    raw = os.read(fileno, READ_SIZE)
                except OSError:  # EIO: the terminal hung up (SIGHUP's handler takes it from
                    raw = b""  # here, `tui/hangup.py`), not a traceback from this thread
                if not raw:  # end of input (a pipe): nothing more comes, none is waited for
                    selector.unregister(fileno)
                    reading[0] = False
                    break
                data = decode(raw, final=final)
                if not data:  # a read that ended inside a character: the rest comes next
                    continue
                for event in parser.feed(data):
                    deliver(event)
        for event in parser.tick():
            deliver(event)

    try:
        while not exit_event.is_set():
            process(selector.select(_deadline(parser)))
        if reading[0]:
            selector.unregister(fileno)
        process(selector.select(0), final=True)  # the parser's last timeout, as Textual ends
    finally:
        selector.close()
        try:
            for _ in parser.feed(""):
                pass
        except (EOFError, ParseError):
            pass


class QuietInputDriver(LinuxDriver):
    """`LinuxDriver` whose input thread sleeps while there is nothing to read (the module's
    docstring). Each input thread has a wake pipe of its own: Textual stops and starts the
    thread (and calls `close`) around a suspend (Ctrl-Z, then `fg`)."""

    def __init__(self, app: Any, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.exit_event = WakingEvent()

    def run_input_thread(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        self.exit_event.attach(wake_w)
        try:
            parser = XTermParser(self._debug)
            input_loop(self.fileno, wake_r, self.exit_event, parser, self.process_message)
        finally:
            self.exit_event.detach()
            os.close(wake_r)
            os.close(wake_w)


def quiet(driver_class: type) -> type:
    """The driver an app runs on: `QuietInputDriver` where Textual would take `LinuxDriver`;
    any other (a driver named in TEXTUAL_DRIVER, the headless one of tests, Windows') as it is."""
    return QuietInputDriver if driver_class is LinuxDriver else driver_class
