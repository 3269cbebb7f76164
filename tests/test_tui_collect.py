"""The collector thread: sampling, pause, refresh, interval, prompt stop on quit and hang-up."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest
from test_tui_support import FedApp
from textual.worker import WorkerState

from gputop_diag import sim
from gputop_diag.sampler import Sampler
from gputop_diag.tui import GpuTopApp


async def wait_for(pilot, predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.05)
    return predicate()


def ticks(app) -> int:
    return 0 if app.latest is None else app.latest.ticks


def collectors(app):
    return [w for w in app.workers if w.group == "collect"]


async def test_collectors_run_in_a_thread_and_stop_promptly_on_quit(monkeypatch):
    on_main_thread = []
    collect = Sampler.collect  # what the Monitor's tick calls

    def recording_collect(self):
        on_main_thread.append(threading.current_thread() is threading.main_thread())
        return collect(self)

    monkeypatch.setattr(Sampler, "collect", recording_collect)
    app = GpuTopApp(sim.build("idle", realtime=True), interval=10.0)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.latest is not None)
        assert len(app.latest.snapshot.gpus) == 8
        assert on_main_thread == [False]
        [worker] = collectors(app)
        assert worker.state == WorkerState.RUNNING
        t0 = time.monotonic()
        await pilot.press("q")
    # The loop waits on the worker's cancel event, not a blind 10 s sleep.
    assert time.monotonic() - t0 < 2.0
    assert worker.is_cancelled and worker.is_finished


async def test_space_pauses_sampling_r_samples_once_space_resumes():
    app = GpuTopApp(sim.build("idle", realtime=True), interval=0.1)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_for(pilot, lambda: ticks(app) >= 2)
        await pilot.press("space")
        assert app.paused and "PAUSED" in app.query_one("#header").plain
        await pilot.pause(0.3)
        paused_at = ticks(app)
        await pilot.pause(0.5)
        assert ticks(app) == paused_at  # nothing sampled while paused
        await pilot.press("r")
        assert await wait_for(pilot, lambda: ticks(app) == paused_at + 1)
        await pilot.pause(0.4)
        assert ticks(app) == paused_at + 1 and app.paused  # one sample, still paused
        await pilot.press("space")
        assert await wait_for(pilot, lambda: ticks(app) >= paused_at + 4)
        assert len([w for w in collectors(app) if not w.is_finished]) == 1


async def test_r_samples_now_without_waiting_for_the_interval():
    app = GpuTopApp(sim.build("idle", realtime=True), interval=10.0)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_for(pilot, lambda: ticks(app) == 1)
        await pilot.press("r")
        assert await wait_for(pilot, lambda: ticks(app) == 2, timeout=3.0)


async def test_a_new_interval_reaches_the_sampler():
    app = GpuTopApp(sim.build("idle", realtime=True), interval=1.0)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_for(pilot, lambda: ticks(app) >= 1)
        await pilot.press("minus")
        assert app.interval == 0.5 and app.sampler.interval == 0.5
        n = ticks(app)
        assert await wait_for(pilot, lambda: ticks(app) >= n + 3, timeout=3.0)


def test_low_bandwidth_holds_the_interval_at_two_seconds_or_more():
    app = GpuTopApp(sim.build("idle"), interval=1.0, low_bandwidth=True, start_collectors=False)
    assert app.interval == 2.0 and app.animation_level == "none"


def test_no_animations_over_ssh(monkeypatch):
    monkeypatch.setenv("SSH_CONNECTION", "10.0.0.1 50000 10.0.0.2 22")
    app = GpuTopApp(sim.build("idle"), start_collectors=False)
    assert app.animation_level == "none"


async def test_low_bandwidth_uses_plain_glyphs_and_slower_history_repaints():
    app = FedApp(low_bandwidth=True, interval=2.0)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(20)
        await pilot.press("2")
        await pilot.pause()
        lines = app.query_one("#util-gpu0").plain + app.query_one("#mem-gpu0").plain
        assert not set(lines) & set("▁▂▃▄▅▆▇█▒░▶")
        await pilot.press("minus", "minus")
        assert app.interval == 2.0  # never below 2 s on a slow link
        before = app.query_one("#util-gpu0").plain
        app.feed(1)
        await pilot.pause()
        assert app.query_one("#util-gpu0").plain == before  # held for up to 10 s
        app.feed(12)
        await pilot.pause()
        assert app.query_one("#util-gpu0").plain != before


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
def test_sighup_ends_the_program_cleanly():
    """Run the real program under a pseudo-terminal and hang up on it."""
    import pty

    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="80", LINES="24")
    p = subprocess.Popen(
        [sys.executable, "-m", "gputop_diag", "--demo", "idle"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    try:
        deadline = time.time() + 20
        seen = b""
        while time.time() < deadline and b"IDLE" not in seen:
            try:
                if select.select([master], [], [], 0.5)[0]:
                    seen += os.read(master, 65536)
            except OSError:
                break
        assert b"IDLE" in seen  # a verdict was painted: the collector ran
        t0 = time.time()
        p.send_signal(signal.SIGHUP)
        assert p.wait(timeout=10) == 0
        assert time.time() - t0 < 5
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
