"""Leaving when the terminal goes away: an SSH session that drops, `tmux kill-session`.

The kernel hangs the terminal up: it sends SIGHUP, then SIGCONT, to the foreground process
group, and from then on every write to the terminal fails (EIO). Two things in Textual's Linux
driver turn that into a program that never exits:
- it answers every SIGCONT by starting application mode again (it takes any SIGCONT for the
  end of a Ctrl-Z). A SIGCONT that lands while the program leaves starts a second input thread
  that nothing stops, and the interpreter waits for it forever;
- its writer thread dies on the first failed write, and the next writes wait forever for room
  in its queue (the main thread, stuck in `LinuxDriver.close → WriterThread.stop`).

`TerminalGuard` owns SIGHUP, SIGTSTP and SIGCONT for the app: SIGCONT resumes application mode
only after the app's own suspend (Ctrl-Z), never while leaving; on SIGHUP a terminal that is
gone gets no more writes (a sink stands in for the writer thread) and the app exits. A job that
`gputop-diag watch -- CMD` started is left running (it has its own session) and a line in its
log says that the watcher left (`JobQuit.hung_up`). A last
guard, armed by `run_app` only, ends the process with `HANGUP_EXIT` if it is still alive
`HANGUP_GRACE_S` after the hang-up (nobody is left to stop it by hand).

A hang-up may come without SIGHUP: the kernel signals only the session leader and the
foreground group, and a session leader that catches HUP (`bash -c 'trap … HUP; gputop-diag'`
under `tmux kill-session`) passes nothing on. Textual's input thread then reads end of input
(read returns 0) in a busy loop and nothing ever leaves. So a small daemon thread looks at the
terminal every `WATCH_S` (one `tcgetattr`, which fails with EIO once the terminal is hung up)
and, when it is gone, takes the same path as SIGHUP.
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import termios
import threading
from collections.abc import Callable
from typing import Any

HANGUP_GRACE_S = 8.0
WRITER_WAIT_S = 2.0  # leaving: how long output may wait for a terminal that does not read
SHED_WAIT_S = 0.25  # running: how long a frame may wait for room before frames are dropped
WATCH_S = 0.5  # how often the watcher looks at the terminal
HANGUP_EXIT = 128 + getattr(signal, "SIGHUP", 1)  # 129: what a shell reports for a hang-up


class _Sink:
    """Stands in for the driver's writer thread once the terminal is gone."""

    def __init__(self, fileno: int) -> None:
        self._fileno = fileno

    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fileno


class _Bounded:
    """Stands in for the driver's writer thread while the app leaves: the last writes (the
    terminal's restore sequences) wait at most `WRITER_WAIT_S` for room, and stopping waits at
    most as long for the thread. A terminal that does not read (a stalled SSH link, a pane
    nobody drains) keeps the writer thread blocked in `write` forever; then the rest is dropped
    and the daemon thread is left behind."""

    def __init__(self, writer: Any, wait_s: float) -> None:
        self._writer = writer
        self._wait_s = wait_s
        self.stuck = False

    def write(self, text: str) -> None:
        if self.stuck:
            return
        try:
            self._writer._queue.put(text, timeout=self._wait_s)
        except queue.Full:
            self.stuck = True

    def flush(self) -> None:
        pass

    def stop(self) -> None:
        if not self.stuck:
            try:
                self._writer._queue.put(None, timeout=self._wait_s)
            except queue.Full:
                self.stuck = True
        self._writer.join(0.0 if self.stuck else self._wait_s)

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._writer.fileno()


class _Shedding:
    """Stands in for the driver's writer thread while the app runs. Textual's writer queue holds
    30 frames and a write waits for room: a terminal that stops reading (a stalled SSH link, a
    tmux pane nobody drains) would stop the whole app, keys and `q` included. Here a frame waits
    at most `SHED_WAIT_S`; then frames are dropped until the terminal has drained half the queue,
    and the next frame is preceded by `on_room` (the whole screen painted again, so the terminal
    shows whole frames, not the diff of a dropped one)."""

    def __init__(self, writer: Any, on_room: Callable[[], None]) -> None:
        self._writer = writer
        self._on_room = on_room
        self.shedding = False
        self.dropped = 0

    def write(self, text: str) -> None:
        q = self._writer._queue
        if self.shedding:
            if q.qsize() > q.maxsize // 2:
                self.dropped += 1
                return
            self.shedding = False
            self._on_room()
        try:
            q.put(text, timeout=SHED_WAIT_S)
        except queue.Full:
            self.shedding = True
            self.dropped += 1

    def flush(self) -> None:
        pass

    def stop(self) -> None:
        """Ctrl-Z or the end: what is queued is written (the terminal's restore sequences
        last), waiting for a terminal that does not read at most `WRITER_WAIT_S`."""
        _Bounded(self._writer, WRITER_WAIT_S).stop()

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._writer.fileno()


def shed(driver: Any, on_room: Callable[[], None]) -> bool:
    """Running: a terminal that does not read loses frames, never the app (see `_Shedding`).
    False when the driver has no writer thread of the kind this knows."""
    writer = getattr(driver, "_writer_thread", None)
    if writer is None or isinstance(writer, (_Sink, _Bounded, _Shedding)):
        return False
    if not hasattr(writer, "_queue") or not hasattr(writer, "join"):
        return False
    driver._writer_thread = _Shedding(writer, on_room)
    return True


def bound(driver: Any, wait_s: float = WRITER_WAIT_S) -> bool:
    """Leaving: output waits at most `wait_s` for the terminal (see `_Bounded`). False when the
    driver has no writer thread of the kind this knows."""
    writer = getattr(driver, "_writer_thread", None)
    if isinstance(writer, _Shedding):
        writer = writer._writer
    if writer is None or isinstance(writer, (_Sink, _Bounded)):
        return False
    if not hasattr(writer, "_queue") or not hasattr(writer, "join"):
        return False
    driver._writer_thread = _Bounded(writer, wait_s)
    return True


def terminal_gone(fd: int) -> bool:
    """True when `fd` is a terminal that was hung up (or is no terminal at all any more)."""
    try:
        termios.tcgetattr(fd)
    except (termios.error, OSError, ValueError):
        return True
    return False


def _driver_fd(driver: Any) -> int:
    """The terminal the driver writes to, or -1."""
    out = getattr(driver, "_file", None)
    try:
        fd = out.fileno() if out is not None else driver.fileno
    except (OSError, ValueError, AttributeError):
        return -1
    return fd if isinstance(fd, int) else -1


def mute(driver: Any) -> bool:
    """Send no more output to the terminal: the driver's writer thread gets a sink in its place,
    and the old one is told to end (its queue emptied first, so a write already waiting for
    room goes through). False when this driver has no writer thread."""
    writer = getattr(driver, "_writer_thread", None)
    if writer is None or isinstance(writer, _Sink):
        return False
    if isinstance(writer, _Shedding):
        writer = writer._writer
    if isinstance(writer, _Bounded):
        writer.stuck = True
        writer = writer._writer
    try:
        fileno = writer.fileno()
    except (OSError, ValueError, AttributeError):
        fileno = -1
    driver._writer_thread = _Sink(fileno)
    q = getattr(writer, "_queue", None)
    if q is not None:
        try:
            while True:
                q.get_nowait()
        except queue.Empty:
            pass
        try:
            q.put_nowait(None)
        except queue.Full:
            pass
    return True


class TerminalGuard:
    """SIGHUP, SIGTSTP and SIGCONT for one app (see the module's text)."""

    def __init__(
        self,
        app: Any,
        on_hangup: Callable[[], None],
        on_room: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self._on_hangup = on_hangup
        # a terminal that read nothing for a while reads again: paint the whole screen
        self._on_room = on_room or (lambda: None)
        self.suspended = False  # application mode stopped by our own Ctrl-Z
        self.leaving = False
        self.hung_up = False
        self.muted = False
        self.armed = False  # the last guard: set by run_app, never in tests
        self._done = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, Any] = {}
        self._stop_watch = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- installing ------------------------------------------------------------------------------
    def install(self) -> bool:
        """Take over the three signals (the main thread only; elsewhere nothing changes)."""
        if not hasattr(signal, "SIGHUP"):
            return False
        if threading.current_thread() is not threading.main_thread():
            return False
        self._loop = asyncio.get_running_loop()
        driver = self.app._driver
        wanted: list[tuple[int, Any]] = [(signal.SIGHUP, self._hangup)]
        if driver is not None and hasattr(driver, "_sigcont_application"):
            wanted += [(signal.SIGTSTP, self._suspend), (signal.SIGCONT, self._continue)]
        for sig, handler in wanted:
            try:
                self._previous[sig] = signal.signal(sig, handler)
            except (ValueError, OSError):
                continue
        self._watch(driver)
        self._shed(driver)
        return True

    def _shed(self, driver: Any) -> None:
        if driver is not None and not getattr(driver, "is_headless", False):
            shed(driver, lambda: self.app.call_later(self._on_room))

    def _watch(self, driver: Any) -> None:
        """Start the watcher on the terminal the driver reads and writes (a real one only)."""
        if driver is None or getattr(driver, "is_headless", False):
            return
        fds: list[int] = []
        for fd in (_driver_fd(driver), 0):
            try:
                if fd >= 0 and fd not in fds and os.isatty(fd):
                    fds.append(fd)
            except (OSError, ValueError):
                continue
        if not fds:
            return
        self._stop_watch.clear()
        self._watcher = threading.Thread(
            target=self._watch_loop, args=(fds,), name="gputop-tty-watch", daemon=True
        )
        self._watcher.start()

    def _watch_loop(self, fds: list[int]) -> None:
        while not self._stop_watch.wait(WATCH_S):
            if self.hung_up:
                return
            if any(terminal_gone(fd) for fd in fds):
                # no SIGHUP came (or it is blocked): the same exit, from this thread
                self._hangup(getattr(signal, "SIGHUP", 1), None)
                return

    def uninstall(self) -> None:
        """Give SIGHUP back; SIGTSTP and SIGCONT get their default (the driver that set them
        is closing: a late SIGCONT must not start it again)."""
        self._stop_watch.set()
        for sig, previous in self._previous.items():
            try:
                if sig == signal.SIGHUP:
                    signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
                else:
                    signal.signal(sig, signal.SIG_DFL)
            except (ValueError, OSError, TypeError):
                pass
        self._previous.clear()

    # -- leaving ---------------------------------------------------------------------------------
    def leave(self) -> None:
        """The app is exiting: no SIGCONT starts application mode again from now on, and the
        last output waits for the terminal only so long."""
        self.leaving = True
        driver = self.app._driver
        if driver is not None and hasattr(driver, "_auto_restart"):
            driver._auto_restart = False
        if driver is not None and not self.muted:
            bound(driver)

    def finished(self) -> None:
        """The app has exited: the last guard stands down."""
        self._done.set()

    # -- the handlers (the main thread, between two bytecodes; `_hangup` also from the watcher) --
    def _suspend(self, signum: int, frame: Any) -> None:
        driver = self.app._driver
        if self.leaving or driver is None:
            signal.raise_signal(signal.SIGSTOP)
            return
        self.suspended = True
        driver._sigtstp_application(signum, frame)  # stops here until `fg`

    def _continue(self, signum: int, frame: Any) -> None:
        driver = self.app._driver
        if not self.suspended or self.leaving or self.hung_up or driver is None:
            return  # not ours to resume (a hang-up's SIGCONT, or one while leaving)
        self.suspended = False
        driver._sigcont_application(signum, frame)
        self._shed(driver)  # the driver started a new writer thread

    def _hangup(self, signum: int, frame: Any) -> None:
        if self.hung_up:
            return
        self.hung_up = True
        quitter = getattr(self.app, "quitter", None)
        if quitter is not None:  # a job the view started goes on: its log says we left
            quitter.hung_up()
        self.leave()
        driver = self.app._driver
        if driver is not None:
            fd = _driver_fd(driver)
            if fd < 0 or terminal_gone(fd):
                self.muted = mute(driver)
        if self.armed:
            threading.Thread(target=self._last_guard, name="gputop-hangup", daemon=True).start()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_hangup)

    def _last_guard(self) -> None:
        if not self._done.wait(HANGUP_GRACE_S):
            os._exit(HANGUP_EXIT)
