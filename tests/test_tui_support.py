"""Build the live view with its collector thread off and tick it ourselves, deterministically:
each tick goes through the app's own Monitor and Feeder and reaches the app as the same
`SnapshotReady` message the collector thread posts.

Not a test module of its own: the TUI tests import `FedApp` from here.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

from textual import events
from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key

from gputop_diag import sim
from gputop_diag.model import Snapshot
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.sources import Sources
from gputop_diag.tui import GpuTopApp, SnapshotReady

# Set (to anything) to check each sample handed out by `cached=True` against the app's own
# collectors' sample of the same tick: the two must be equal (`dataclasses` equality).
VERIFY_CACHED = "GPUTOP_TEST_VERIFY_CACHED"


def tick(app: GpuTopApp) -> None:
    """One tick as the collector thread takes it: the app's Monitor samples (through its
    Feeder), the update is posted; then a simulated second passes."""
    app.post_message(SnapshotReady(app.feeder.tick()))
    app.sources.clock.sleep(1.0)


class Samples:
    """The samples the real collectors (a `Sampler`) take of one scenario's simulated machine,
    a simulated second apart, as the app's own Sampler takes them under `FedApp.feed`: taken
    once per worker, as far as the longest run asked, and handed to every app that asks again.
    The simulator is deterministic for a scenario (`test_sim_scenarios.py`), so the app's own
    collectors would sample the same (checked under $GPUTOP_TEST_VERIFY_CACHED)."""

    _made: dict[tuple, Samples] = {}

    def __init__(self, scenario: str) -> None:
        self.sources = sim.build(scenario)
        self.sampler = Sampler(self.sources)
        self.taken: list[Snapshot] = []

    @classmethod
    def of(cls, scenario: str) -> Samples:
        # the simulated driver and faults come from the environment (`sim.build`)
        key = (scenario, os.environ.get(sim.DRIVER_ENV), os.environ.get(sim.FAULTS_ENV))
        if key not in cls._made:
            cls._made[key] = cls(scenario)
        return cls._made[key]

    def at(self, n: int, now: float) -> Snapshot:
        """The machine's `n`-th sample (0: the first), which must be taken at `now`."""
        while len(self.taken) <= n:
            self.taken.append(self.sampler.collect())
            self.sources.clock.sleep(1.0)
        snap = self.taken[n]
        if snap.timestamp != now:  # a tick of another pace: the samples are not this run's
            raise AssertionError(
                f"cached samples: tick {n} comes at {now}, the cached one at {snap.timestamp}; "
                "this test needs the collectors' own ticks (FedApp(cached=False))"
            )
        return snap


class CachedSampler(Sampler):
    """The app's Sampler, whose ticks after the first are the cached `Samples` of its scenario:
    the first tick is its own (it opens NVML for the health checks and every other reader, as
    in a run), and checked equal to the cached one; the rest of the tick (the slow sources, the
    health checks, the probes, the Xid triage, the classifier) is the Monitor's, as always."""

    def __init__(self, sources: Sources, samples: Samples) -> None:
        super().__init__(sources)
        self.samples = samples
        self.verify = bool(os.environ.get(VERIFY_CACHED))
        self.count = 0

    def collect(self) -> Snapshot:
        n, self.count = self.count, self.count + 1
        cached = self.samples.at(n, self.sources.clock.now())
        if n == 0 or self.verify:
            own = super().collect()
            assert own == cached, f"tick {n}: the cached sample is not the collectors' own"
        return cached


class FedApp(GpuTopApp):
    """The real app, its collector thread replaced by ticks we take ourselves. `cached`: its
    Sampler hands out the scenario's cached samples (`CachedSampler`), for tests that only
    watch the machine: none that acts on it (a signal, a kill, a process that vanishes, a hung
    call) or changes the simulator mid-run, nor one that ticks at another pace (`+`, `r`)."""

    def __init__(self, scenario: str = "compute-bound", *, cached: bool = False, **kw) -> None:
        self.sim_sources = sim.build(scenario)
        super().__init__(self.sim_sources, start_collectors=False, **kw)
        if cached:  # the Monitor makes its Sampler on first use: this one instead
            self.monitor._sampler = CachedSampler(self.sim_sources, Samples.of(scenario))

    def feed(self, seconds: int = 1) -> None:
        """Tick once a simulated second, `seconds` times."""
        for _ in range(seconds):
            tick(self)


def screen_lines(app) -> list[str]:
    """The screen as the terminal shows it, one string per row (what a person reads: a widget
    whose region is too narrow for its text shows the cut text here, not in its `plain`)."""
    import io

    from rich.console import Console

    console = Console(
        width=app.size.width,
        height=app.size.height,
        file=io.StringIO(),
        record=True,
        color_system=None,
        legacy_windows=False,
    )
    # The compositor's full frame: the same strips Textual writes to the terminal.
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text(styles=False).splitlines()


def screen_text(app) -> str:
    return "\n".join(screen_lines(app))


async def settled(pilot, check, tries: int = 40) -> bool:
    """Pause until `check()` holds (a frame painted after messages queued behind a busy
    machine), at most `tries` pauses of 50 ms; the caller asserts what it needs."""
    for _ in range(tries):
        if check():
            return True
        await pilot.pause(0.05)
    return check()


async def press_held(pilot, key: str, times: int) -> None:
    """`key` pressed `times` times in a row, as a held key repeats it: the same key events
    `pilot.press` sends, queued on the app one after another, then waited on. (`pilot.press`
    waits for the machine to go idle after every key, drawing a frame each time: ~50 ms a key,
    where only the state after the last key is asserted.)"""
    app = pilot.app
    for _ in range(times):
        event = events.Key(key, None)
        event.set_sender(app)
        app.post_message(event)
    # the first pause returns once the app has taken every key (a key its bindings do not
    # take goes on to the focused widget); the second once that widget has taken them too
    await pilot.pause()
    await pilot.pause()


def key_event(key: str) -> events.Key:
    """The key event `pilot.press(key)` sends (Textual's own conversion: `/` is `slash`, a
    space `space`, each with its character)."""
    import unicodedata

    if len(key) == 1 and not key.isalnum():
        key = _character_to_key(key)
    try:
        char = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(key, key)))
    except KeyError:
        char = key if len(key) == 1 else None
    return events.Key(key, char)


async def type_text(pilot, text: str) -> None:
    """`text` typed into the focused widget: the key events `pilot.press` sends for each of its
    characters, queued on the app in order, then waited on, as a fast typist or a paste delivers
    them. (`pilot.press` waits for the machine to go idle after every key: ~40 ms a key, where
    only the whole text is asserted.)"""
    app = pilot.app
    for ch in text:
        event = key_event(ch)
        event.set_sender(app)
        app.post_message(event)
    # as in `press_held`: the app takes every key, then the focused widget does
    await pilot.pause()
    await pilot.pause()


# -- the real program under a terminal of its own ------------------------------------------------
# The child is the session leader with the pty as its controlling terminal, as a login shell's
# job is: closing the master side hangs the terminal up and the kernel itself sends SIGHUP and
# SIGCONT (what happens when an SSH session drops or `tmux kill-session` runs).
LAUNCH = (
    "import os, sys; os.setsid(); fd = os.open(sys.argv[1], os.O_RDWR); "
    "[os.dup2(fd, k) for k in (0, 1, 2)]; os.close(fd); os.execv(sys.executable, "
    "[sys.executable, *sys.argv[2:]])"
)


class PtyChild:
    """`python *args` on a pseudo-terminal of its own, 80x24. `env`: variables set for it on top
    of ours (a value of None: left out), after the defaults (an xterm, no colour)."""

    def __init__(
        self, *args: str, launch: str = LAUNCH, env: dict[str, str | None] | None = None
    ) -> None:
        import pty

        self.master, slave = pty.openpty()
        path = os.ttyname(slave)
        os.close(slave)
        env = {
            **os.environ,
            "TERM": "xterm-256color",
            "COLUMNS": "80",
            "LINES": "24",
            "NO_COLOR": "1",
            **(env or {}),
        }
        env = {k: v for k, v in env.items() if v is not None}
        self.p = subprocess.Popen(
            [sys.executable, "-c", launch, path, *args], env=env, stdin=subprocess.DEVNULL
        )

    def read_until(self, needle: bytes, timeout: float = 30.0) -> bytes:
        deadline, seen = time.time() + timeout, b""
        while time.time() < deadline and needle not in seen:
            try:
                if select.select([self.master], [], [], 0.2)[0]:
                    seen += os.read(self.master, 65536)
            except OSError:  # EIO: the child has not opened its terminal yet, or has ended
                if self.p.poll() is not None:
                    break
                time.sleep(0.05)
        return seen

    def drain_until_exit(self, timeout: float, into: bytearray | None = None) -> int | None:
        """Keep reading the terminal (so output never blocks) until the child exits; what it
        writes goes `into` the buffer given."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            rc = self.p.poll()
            if rc is not None:
                return rc
            try:
                if self.master >= 0 and select.select([self.master], [], [], 0.05)[0]:
                    data = os.read(self.master, 65536)
                    if into is not None:
                        into += data
            except OSError:
                time.sleep(0.05)
        return self.p.poll()

    def hang_up(self) -> None:
        os.close(self.master)
        self.master = -1

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        if self.master >= 0:
            os.close(self.master)
