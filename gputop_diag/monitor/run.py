"""The one paced loop: every surface that samples more than once runs it.

`Run` owns what a loop over time must get right, once for every command and view:

- the interval, with a floor (`MIN_INTERVAL_S`), and `seconds` as time on the sources' clock
  (wall-clock seconds on a real machine, simulated seconds under the simulator): a tick that
  takes longer than the interval is followed at once by the next, missed ticks are skipped,
  never burst, and no tick starts after the span (`--seconds`) is over;
- pause (a paused run takes no tick; `sample_first` takes the first one anyway), cancel from
  another thread (`stop()`), and how long the tick in flight has waited (`stuck_for()`);
- the stop events, one way for every command (docs/architecture.md, "Stopping"): SIGINT,
  SIGTERM and SIGHUP end the loop after the tick in flight (a signal that lands while the loop
  waits ends the wait at once); a closed standard output (EPIPE) ends it before another byte is
  written. `Ending` says which, and what a command's exit status is for it.

It knows nothing of what a tick is: `step()` returns one, and each subscriber gets it in turn.
A subscriber raises `Done` when there is nothing more to learn (no driver: sampling longer
cannot change the answer). Light (the standard library and the sources' clock): the entry
point's option checks read the floor before a command's modules are imported.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..sources import Clock, RealClock

# The shortest interval any command or view samples at. NVML's GPM metrics need their two
# samples at least 100 ms apart (nvmlGpmSampleGet, NVML API reference), and below it a tick of
# NVML calls is most of the interval: a machine watched that fast is a machine kept busy.
MIN_INTERVAL_S = 0.1

STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
# How long a stop signal waits for the tick in flight before it ends the program without it: the
# live view calls a tick this long stuck (`tui/collector.py` STUCK_AFTER_S).
STUCK_GRACE_S = 5.0

T = TypeVar("T")


# The wall clock, for a loop paced by real time whatever its sources' clock (the fleet's reads
# of Prometheus); named here so the live view, which imports no `sources`, can pace by it.
WallClock = RealClock

_session_key: list[bytes] = []


def session_key() -> bytes:
    """The sanitizer's key for this run of the program, made at its first use: every surface
    of one run (the live view, its reports, what a command prints on stderr, `watch`'s status
    lines and summary) names one identifier by one pseudonym. Never written anywhere."""
    if not _session_key:
        import secrets  # here: its hashlib is not for the start of `snapshot` (cli.py)

        _session_key.append(secrets.token_bytes(32))
    return _session_key[0]


class Done(Exception):
    """Raised by a subscriber: end the run after this tick, nothing more to learn."""


class Stopped(BaseException):
    """A stop signal ended a run before it had an answer to give (a one-shot command's warm-up):
    the entry point exits with `status` (128 + the signal), printing nothing more."""

    def __init__(self, ending: Ending) -> None:
        super().__init__(ending.reason)
        self.status = ending.exit_status() or 130


class OutputClosed(Exception):
    """Raised by a subscriber whose reader is gone (a closed pipe): end the run at once."""


def interval_problem(interval: float) -> str | None:
    """Why `interval` cannot pace a run, or None."""
    if not math.isfinite(interval) or interval <= 0:
        return f"--interval must be a positive number of seconds, not {interval:g}"
    if interval < MIN_INTERVAL_S:
        return (
            f"--interval {interval:g} is below the floor of {MIN_INTERVAL_S:g} s (NVML's GPM "
            "metrics need 100 ms between two samples)"
        )
    return None


def is_closed_pipe(e: BaseException) -> bool:
    """`e` says the reader of what we write is gone (EPIPE)."""
    return isinstance(e, BrokenPipeError) or getattr(e, "errno", None) == errno.EPIPE


@dataclass(frozen=True, slots=True)
class Ending:
    """How a run ended: `reason` is "done" (its span is over, or a subscriber said so),
    "cancelled" (stopped from another thread: the live view quit or restarted its loop),
    "closed" (standard output closed), or the name of the stop signal ("SIGINT", "SIGTERM",
    "SIGHUP"). `ticks`: how many it took."""

    reason: str
    ticks: int

    @property
    def signalled(self) -> bool:
        return self.reason in STOP_SIGNALS

    @property
    def early(self) -> bool:
        """Stopped before its span was over: what it gathered is all there is."""
        return self.reason not in ("done", "cancelled")

    def exit_status(self, until_stopped: bool = False) -> int | None:
        """The status a command exits with for this ending, or None where the command's own
        answer decides (it ran its span). A signal: 128 + its number, as a shell reports a job a
        signal ended, except for a command that runs until stopped (`record` without
        --seconds, `exporter`), for which a signal is how it is meant to end (0). A closed
        output: 141 (128 + SIGPIPE), as `yes | head` reports, whatever the command."""
        if self.reason == "closed":
            return 128 + getattr(signal, "SIGPIPE", 13)
        if not self.signalled:
            return None
        if until_stopped:
            return 0
        return 128 + getattr(signal, self.reason)


class Run(Generic[T]):
    """Call `step()` now and every `interval` seconds of `clock` until `seconds` are over (None:
    until stopped); hand each result to the subscribers.

    `run()` runs the loop in the calling thread and, on the main thread, answers the stop
    signals for as long as it runs (their handlers are put back after). `start()` runs it in a
    daemon thread instead (the live view: its own keys and handlers stop it; a daemon, so a
    tick held by a GPU that stopped answering never holds the program's exit).

    `paused()` is read before each tick. `at_least` ticks are taken even when the span is
    shorter (rates need two readings). `wait_first`: the caller took the first tick itself; the
    loop starts with a wait of an interval (or of that many seconds: a source whose points fall
    on a grid). `cancel`: the event `stop()` sets (a Textual worker's own). `gap(value)`: the
    wait after a tick is what it says of the tick's value, not the interval (a recording played
    at its recorded pace: the clock's sleep then scales it by the speed). `on_signal(name)`,
    when given, is asked first what a stop signal does: True keeps the run going (`watch`
    passes Ctrl-C on to the job it started and waits for it to end).
    """

    def __init__(
        self,
        step: Callable[[], T],
        *,
        clock: Clock,
        interval: float,
        seconds: float | None = None,
        paused: Callable[[], bool] = lambda: False,
        sample_first: bool = True,
        at_least: int = 1,
        on_signal: Callable[[str], bool] | None = None,
        wait_first: bool | float = False,
        cancel: threading.Event | None = None,
        gap: Callable[[T], float] | None = None,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be positive, not {interval!r}")
        self.step = step
        self.clock = clock
        self.interval = interval
        self.seconds = seconds
        self.paused = paused
        self.sample_first = sample_first
        self.at_least = at_least
        self.on_signal = on_signal
        # the caller took the first tick: the loop starts with a wait (a number: that long)
        self.wait_first = wait_first
        self.subscribers: list[Callable[[T], object]] = []
        self.cancelled = cancel if cancel is not None else threading.Event()
        self.gap = gap  # the wait after a tick, from what it gave (a recording's own pace)
        self.ticks = 0
        self.last: T | None = None
        self.tick_started: float | None = None  # monotonic time of the tick in flight
        self.ending: Ending | None = None
        self.thread: threading.Thread | None = None
        self._signals = StopSignals()  # what `run()` catches (a thread of its own: nothing)

    # -- subscribers and control ---------------------------------------------------------------
    def subscribe(self, fn: Callable[[T], object]) -> Run[T]:
        self.subscribers.append(fn)
        return self

    def stop(self) -> None:
        """End the loop from another thread: at once when it waits, after the tick in flight
        otherwise."""
        self.cancelled.set()

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def stuck_for(self) -> float:
        """Seconds the tick in flight has been running (0 between ticks)."""
        started = self.tick_started
        return 0.0 if started is None else max(0.0, time.monotonic() - started)

    def start(self, name: str = "gputop-run") -> Run[T]:
        """Run the loop in a daemon thread (no signal handling: the caller's)."""
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()
        return self

    def run(self, signals: StopSignals | None = None) -> Ending:
        """Run the loop here until it ends; the stop signals are answered while it runs (by
        `signals`, when the caller already catches them: one that came before counts)."""
        if signals is not None:
            self._signals = signals
            return self._loop()
        with StopSignals() as self._signals:
            return self._loop()

    # -- the loop ------------------------------------------------------------------------------
    def _loop(self) -> Ending:
        reason = "done"
        take = self.sample_first
        origin = self.clock.now()  # where the span is counted from
        anchor, k = origin, 0  # the grid: tick k is due at anchor + k * interval (no drift)
        skip = self.wait_first
        try:
            while True:
                if self.cancelled.is_set():
                    reason = "cancelled"
                    break
                ticked = skip is False and (take or not self.paused())
                done = ticked and self._tick()
                self._signals.came_back()
                if done:
                    break
                take = False
                if self._signals.name is not None and not self._carry_on():
                    reason = self._signals.name
                    break
                if (ticked and self.gap is not None) or skip not in (True, False):
                    # a pace of its own (a recording's gap) or a first wait given in seconds:
                    # the grid starts again where that wait ends
                    wait = max(0.0, self.gap(self.last) if skip is False else float(skip))
                    anchor, k = self.clock.now() + wait, 0
                else:
                    k, wait = self._next(anchor, k)
                skip = False
                if self._over(origin, anchor + k * self.interval):
                    break
                with self._signals.waiting():
                    if self.clock.sleep(wait, self.cancelled):
                        reason = "cancelled"
                        break
        except _Signalled:
            if self._carry_on():
                return self._loop_again(origin)
            reason = self._signals.name or "SIGINT"
        except KeyboardInterrupt:  # before the handlers were in place, or off the main thread
            reason = self._signals.name = self._signals.name or "SIGINT"
        except OutputClosed:
            reason = "closed"
        except OSError as e:
            if not is_closed_pipe(e):
                raise
            reason = "closed"
        self.ending = Ending(reason, self.ticks)
        return self.ending

    def _loop_again(self, start: float) -> Ending:
        """A stop signal that `on_signal` answered: go on where the loop was."""
        self._signals.name = None
        span = None if self.seconds is None else max(0.0, self.seconds - (self.clock.now() - start))
        self.seconds, self.sample_first, self.wait_first = span, True, False
        return self._loop()

    def _tick(self) -> bool:
        """One tick, handed to every subscriber; True when a subscriber said it is done."""
        self.tick_started = time.monotonic()
        try:
            value = self.step()
        finally:
            self.tick_started = None
        self.ticks += 1
        self.last = value
        if self.cancelled.is_set():  # replaced or quitting while it ran: nobody reads it
            return False
        try:
            for fn in self.subscribers:
                fn(value)
        except Done:
            return True
        return False

    def _carry_on(self) -> bool:
        """Ask `on_signal` what the pending signal does; True: the run goes on."""
        name = self._signals.name
        if name is None or self.on_signal is None or not self.on_signal(name):
            return False
        self._signals.name = None
        return True

    def _next(self, anchor: float, k: int) -> tuple[int, float]:
        """The next tick on the grid and how long to wait for it: the next interval; after a
        tick that ran past it, the next grid point after now (the missed ones skipped, never
        burst). A sleep that overshoots delays one tick, never the ones after it."""
        now = self.clock.now()
        k += 1
        if anchor + k * self.interval < now:
            k = math.floor((now - anchor) / self.interval) + 1
        return k, max(0.0, anchor + k * self.interval - now)

    def _over(self, origin: float, next_at: float) -> bool:
        """The tick due at `next_at` would start after the span. Grid times, not the clock's
        reading: a late wake-up never costs the last tick."""
        if self.seconds is None or self.ticks < self.at_least:
            return False
        return next_at - origin > self.seconds + 1e-6 * self.interval


class _Signalled(BaseException):
    """Raised by the stop signals' handler while the loop waits between ticks. Not an
    Exception: no `except Exception` in a collector may take it."""


class StopSignals:
    """While entered on the main thread, SIGINT, SIGTERM and SIGHUP are answered by setting
    `name` (the first one's); one that lands inside `waiting()` ends the wait at once. One that
    lands while a tick is in flight lets the tick finish, unless the tick does not come back: a
    second stop signal, or `STUCK_GRACE_S` without the loop ending, ends the program at once with
    128 + the signal (a GPU that stopped answering holds an NVML call where no Python handler
    runs; the recording on disk stays readable to its last whole line). The old handlers are put
    back on exit. Off the main thread it catches nothing. A signal the program was started
    ignoring stays ignored (`nohup`, a script's background job: POSIX leaves it to the caller, as
    Python does for SIGINT)."""

    def __init__(self) -> None:
        self.name: str | None = None
        self._waiting = False
        self._old: dict[str, object] = {}
        self._back = threading.Event()  # the tick in flight came back (or the loop is over)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for name in STOP_SIGNALS:
                signum = getattr(signal, name, None)
                if signum is not None and signal.getsignal(signum) != signal.SIG_IGN:
                    self._old[name] = signal.signal(signum, self._stop)
        return self

    def __exit__(self, *exc: object) -> None:
        self._back.set()
        for name, handler in self._old.items():
            signal.signal(getattr(signal, name), signal.SIG_DFL if handler is None else handler)
        self._old.clear()

    def _stop(self, signum: int, frame: object) -> None:
        if self._waiting:  # end the wait now
            self.name = self.name or signal.Signals(signum).name
            raise _Signalled
        if self.name is not None:  # a second one while the tick in flight has not come back
            _end_now(signum, "a second stop signal")
        self.name = signal.Signals(signum).name
        self._back = back = threading.Event()
        threading.Thread(
            target=self._grace, args=(signum, back), name="gputop-stop-grace", daemon=True
        ).start()

    def came_back(self) -> None:
        """The tick in flight is over: a stop signal that landed during it no longer needs the
        grace period's end (the loop answers it, or `on_signal` kept the run going)."""
        self._back.set()

    @staticmethod
    def _grace(signum: int, back: threading.Event) -> None:
        if not back.wait(STUCK_GRACE_S):
            _end_now(signum, f"the sample in flight did not come back in {STUCK_GRACE_S:g} s")

    @contextlib.contextmanager
    def waiting(self):
        try:
            self._waiting = True
            yield
        finally:
            self._waiting = False


def _end_now(signum: int, why: str) -> None:
    """End the program at once, as the signal would have: a line on stderr (written straight
    to the file descriptor: safe from a handler or a thread), then exit 128 + the signal without
    running Python's clean-up, which a call held by the driver would wait on."""
    name = signal.Signals(signum).name
    os.write(2, f"gputop-diag: stopped by {name}: {why} (the driver is not answering?)\n".encode())
    os._exit(128 + signum)
