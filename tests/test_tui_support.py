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
from gputop_diag.tui import GpuTopApp, SnapshotReady


def tick(app: GpuTopApp) -> None:
    """One tick as the collector thread takes it: the app's Monitor samples (through its
    Feeder), the update is posted; then a simulated second passes."""
    app.post_message(SnapshotReady(app.feeder.tick()))
    app.sources.clock.sleep(1.0)


class FedApp(GpuTopApp):
    """The real app, its collector thread replaced by ticks we take ourselves."""

    def __init__(self, scenario: str = "compute-bound", **kw) -> None:
        self.sim_sources = sim.build(scenario)
        super().__init__(self.sim_sources, start_collectors=False, **kw)

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
