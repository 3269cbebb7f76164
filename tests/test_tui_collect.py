"""The collector thread: sampling, pause, refresh, interval, prompt stop on quit and hang-up."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import pytest
from test_tui_support import LAUNCH, FedApp, PtyChild

from gputop_diag import sim
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.tui import GpuTopApp


async def wait_for(pilot, predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.05)
    return predicate()


def _loops_alive() -> int:
    return sum(t.name == "gputop-collector" and t.is_alive() for t in threading.enumerate())


def ticks(app) -> int:
    return 0 if app.latest is None else app.latest.ticks


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
        collector = app.sampling.collector
        assert collector.running and collector.thread.daemon
        t0 = time.monotonic()
        await pilot.press("q")
    # The loop waits on its cancel event, not a blind 10 s sleep.
    collector.thread.join(5)
    assert time.monotonic() - t0 < 2.0
    assert collector.cancelled.is_set() and not collector.running


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
        # r and space each replaced the loop: the replaced ones have ended
        assert await wait_for(pilot, lambda: _loops_alive() == 1)


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
        assert app.interval == 0.5 and app.monitor.interval == 0.5  # the one interval
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


# -- the real program under a terminal of its own (`PtyChild`) -----------------------------------
EXIT_BOUND_S = 5.0  # a clean exit takes well under a second; the last guard waits 8 s
# The program as started under the pty: a tick every quarter second paints the first verdict
# about a second after the first frame, not three or four (what the tests then do to the
# terminal does not depend on the pace; the collector is only busier while the program exits).
PROGRAM = ("-m", "gputop_diag", "--interval", "0.25")
HUNG_CHILD = """
import json, sys, threading
from gputop_diag import sim
from gputop_diag.sim import fake_nvml_base
from gputop_diag.monitor import view as feed
from gputop_diag.tui import app as tui_app

fake_nvml_base.HANG_CAP_S = 60.0  # the hung call would return after a minute
src = sim.build("idle", realtime=True)
tick = feed.Feeder.tick

def tick_then_hang(self):
    update = tick(self)
    if not src.sim.hangs:  # after the first tick, the GPU stops answering
        src.sim.hang("nvmlDeviceGetUtilizationRates")
    return update

feed.Feeder.tick = tick_then_hang
rc = tui_app.run_app(src, interval=0.2)
stuck = [t.name for t in threading.enumerate() if t.name == "gputop-collector" and t.is_alive()]
with open(sys.argv[1], "w") as f:
    json.dump({"rc": rc, "shutdown": src.sim.call_counts["nvmlShutdown"], "stuck": stuck}, f)
"""


# The same, with SIGHUP blocked in the child: the hang-up comes without a signal, as it does under
# a session leader that catches HUP (`bash -c 'trap … HUP; gputop-diag'`, `tmux kill-session`).
LAUNCH_NO_HUP = (
    "import signal; signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGHUP]); " + LAUNCH
)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
@pytest.mark.parametrize("gap_s", [0.0, 0.15, 0.3])
def test_sighup_then_sigcont_ends_the_program(gap_s):
    """SIGCONT after SIGHUP, at any moment of the exit: it used to start a second input thread
    (the interpreter then waited for it forever)."""
    child = PtyChild(*PROGRAM, "--demo", "idle")
    try:
        assert b"IDLE" in child.read_until(b"IDLE")  # a verdict was painted: the collector ran
        t0 = time.time()
        child.p.send_signal(signal.SIGHUP)
        time.sleep(gap_s)
        child.p.send_signal(signal.SIGCONT)
        rc = child.drain_until_exit(15)
        # 0: the app's own exit; 129 would be the last guard ending a process that hung
        assert rc == 0, rc
        assert time.time() - t0 < EXIT_BOUND_S
    finally:
        child.close()


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
def test_a_terminal_that_hangs_up_ends_the_program():
    """The terminal itself goes away: the kernel sends SIGHUP and SIGCONT, and every later
    write fails; nothing may wait for the dead terminal."""
    child = PtyChild(*PROGRAM, "--demo", "compute-bound")
    try:
        assert b"COMPUTE" in child.read_until(b"COMPUTE")
        t0 = time.time()
        child.hang_up()
        rc = child.drain_until_exit(15)
        assert rc == 0, rc
        assert time.time() - t0 < EXIT_BOUND_S
    finally:
        child.close()


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no signal masks here")
def test_a_terminal_that_goes_away_without_sighup_ends_the_program():
    """The terminal is hung up but no SIGHUP arrives (blocked here; caught by the session leader
    in real life): the input thread only reads end of input. The program must still leave, by
    the app's own exit (0), not the last guard (129) nor never."""
    child = PtyChild(*PROGRAM, "--demo", "compute-bound", launch=LAUNCH_NO_HUP)
    try:
        assert b"COMPUTE" in child.read_until(b"COMPUTE")
        t0 = time.time()
        child.hang_up()
        rc = child.drain_until_exit(15)
        assert rc == 0, rc
        assert time.time() - t0 < EXIT_BOUND_S
    finally:
        child.close()


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
def test_quit_does_not_wait_for_a_hung_nvml_call(tmp_path):
    """A GPU that stopped answering holds an NVML call (here for 60 s): q leaves after about a
    second, without nvmlShutdown, the hung call left behind in its daemon thread."""
    result = tmp_path / "result.json"
    child = PtyChild("-c", HUNG_CHILD, str(result))
    try:
        assert b"GPU0" in child.read_until(b"GPU0")  # the first tick reached the screen
        time.sleep(0.6)  # the second tick is now stuck in the driver
        t0 = time.time()
        os.write(child.master, b"q")
        rc = child.drain_until_exit(70)
        elapsed = time.time() - t0
        assert rc == 0, rc
        assert elapsed < EXIT_BOUND_S, elapsed
        done = json.loads(result.read_text())
        assert done["rc"] == 0
        assert done["stuck"] == ["gputop-collector"]  # the call really hung to the end
        assert done["shutdown"] == 0  # never nvmlShutdown under a call in flight
    finally:
        child.close()


async def test_messages_that_arrive_while_the_view_closes_are_dropped():
    """The collector thread can post a tick or a failure after the widgets are gone."""
    from gputop_diag.tui.messages import CollectorFailed

    app = FedApp()
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(2)
        await pilot.pause()
        for selector in ("#body", "#header", "#banner", "#tabs"):
            await app.query_one(selector).remove()
        app.feed(1)
        app.post_message(CollectorFailed("sampler", "sampling failed: a test", "r tries again"))
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert app.latest is not None and app.latest.ticks == 3
    assert not app.return_code  # no handler raised (Textual would end with 1)


def test_the_report_does_not_wait_for_a_hung_tick():
    """`s` reads the history between two ticks; a tick stuck in the driver makes it give up
    with a reason instead of waiting with it."""
    from gputop_diag.monitor.core import Monitor, TickStuck
    from gputop_diag.monitor.view import Feeder

    src = sim.build("compute-bound", gpu_count=2)
    feeder = Feeder(Monitor(src, slow_sources=False))
    feeder.tick()
    assert len(feeder.monitor.window()[0]) == 1
    release = src.sim.hang("nvmlDeviceGetUtilizationRates")
    worker = threading.Thread(target=feeder.tick, daemon=True)
    worker.start()
    try:
        with pytest.raises(TickStuck, match="waiting for the driver"):
            feeder.monitor.window(wait_s=0.3)
    finally:
        release.set()
        worker.join(10)
    assert len(feeder.monitor.window()[0]) == 2


async def test_a_tick_stuck_in_the_driver_is_said_on_the_banner(monkeypatch):
    from gputop_diag.tui import collector

    monkeypatch.setattr(collector, "STUCK_AFTER_S", 0.5)
    src = sim.build("idle", realtime=True)
    app = GpuTopApp(src, interval=0.2)
    release = None
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            assert await wait_for(pilot, lambda: ticks(app) >= 1)
            release = src.sim.hang("nvmlDeviceGetUtilizationRates")
            banner = app.query_one("#banner")
            assert await wait_for(pilot, lambda: "has not answered" in banner.plain, 10)
            assert banner.display and "q quits without waiting" in banner.plain
            n = ticks(app)
            release.set()
            assert await wait_for(pilot, lambda: ticks(app) > n)
            assert await wait_for(pilot, lambda: not banner.display)
    finally:
        if release is not None:
            release.set()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and a pty")
def test_a_suspended_view_whose_terminal_hangs_up_ends():
    """Ctrl-Z, then the SSH session drops: the SIGCONT of the hang-up must not start the view
    again on the dead terminal; the program exits."""

    def state() -> str:
        with open(f"/proc/{child.p.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    child = PtyChild(*PROGRAM, "--demo", "idle")
    try:
        assert b"IDLE" in child.read_until(b"IDLE")
        os.write(child.master, b"\x1a")  # Ctrl-Z
        deadline = time.time() + 10
        while time.time() < deadline and state() != "T":
            time.sleep(0.05)
        assert state() == "T"
        t0 = time.time()
        child.hang_up()
        assert child.drain_until_exit(15) == 0
        assert time.time() - t0 < EXIT_BOUND_S
    finally:
        child.close()


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
def test_quit_does_not_wait_for_a_terminal_that_does_not_read():
    """A stalled link: the terminal stops reading, the output fills it and Textual's writer
    thread blocks in write(). q must still leave (the last output is dropped)."""
    child = PtyChild(*PROGRAM, "--demo", "compute-bound")
    try:
        assert b"COMPUTE" in child.read_until(b"COMPUTE")
        for key in "2345123451234512345":  # each pane repaints whole; nobody reads any of it
            os.write(child.master, key.encode())
            time.sleep(0.1)
        time.sleep(1.0)
        t0 = time.time()
        os.write(child.master, b"q")
        deadline = t0 + 15
        while time.time() < deadline and child.p.poll() is None:
            time.sleep(0.05)
        assert child.p.poll() == 0
        assert time.time() - t0 < EXIT_BOUND_S
    finally:
        child.close()
