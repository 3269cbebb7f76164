"""The live view in watch mode: it opens on the Job pane; quitting while a started job runs asks
first (y stops it, d leaves it running, q again keeps the question); Ctrl-C stops the job as a
shell would (SIGINT, SIGTERM, SIGKILL) and quits with its exit status; a closed terminal leaves
it running with a line in its log; what stderr says afterwards is what happened."""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest
from test_tui_support import screen_text, tick
from textual.widgets import ContentSwitcher

from gputop_diag import sim
from gputop_diag.collect.job import JobWatch
from gputop_diag.commands.watch import after_lines, stop_note
from gputop_diag.tui import GpuTopApp
from gputop_diag.tui.job_quit import QuitJobScreen


class WatchApp(GpuTopApp):
    """The real app watching `watch` (its Monitor reads the job each tick), ticked by the
    test."""

    def __init__(self, watch: JobWatch, sources) -> None:
        super().__init__(sources, start_collectors=False, job_watch=watch)
        self.w = watch

    def feed(self, seconds: int = 1) -> None:
        for _ in range(seconds):
            tick(self)


def _pane(app) -> str:
    return app.query_one("#panes", ContentSwitcher).current


async def test_watch_mode_opens_on_the_job_pane():
    s = sim.build("input-starved")
    app = WatchApp(JobWatch.for_pid(s, 41200), s)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.pause()
        assert _pane(app) == "job"
        text = screen_text(app)
        assert "Job pid 41200 (pt_main_thread)" in text
        assert "pt_data_worker" in text and "Processes (4)" in text
        footer_keys = {b.key for _, b, _, _ in app.screen.active_bindings.values()}
        assert "6" in footer_keys
        await pilot.press("1")
        assert _pane(app) == "memory"
        await pilot.press("6")
        assert _pane(app) == "job"


async def _started(tmp_path):
    s = sim.build("idle")
    code = "import time; print('up', flush=True); time.sleep(30)"
    w = JobWatch.for_command(s, [sys.executable, "-c", code], log_path=str(tmp_path / "j.log"))
    return s, w


async def test_quit_asks_and_d_leaves_the_job_running(tmp_path):
    s, w = await _started(tmp_path)
    try:
        app = WatchApp(w, s)
        async with app.run_test(size=(80, 24)) as pilot:
            app.feed(2)
            await pilot.pause()
            await pilot.press("q")
            await pilot.pause()
            assert isinstance(app.screen, QuitJobScreen)
            assert "The job is still running" in screen_text(app)
            await pilot.press("n")  # stay
            await pilot.pause()
            assert not isinstance(app.screen, QuitJobScreen) and app.is_running
            await pilot.press("q")
            await pilot.pause()
            await pilot.press("q")  # again: the question stays (only d leaves the job)
            await pilot.pause()
            assert isinstance(app.screen, QuitJobScreen) and app.is_running
            assert "Its output goes on to" in screen_text(app)  # the log, named
            await pilot.press("d")
            await pilot.pause()
        assert w.detached and w.popen.poll() is None  # left running
        pid = w.popen.pid
        (said,) = after_lines(w, "LOG")
        assert said.startswith(f"left running (watching stopped): pid {pid}, output LOG"), said
        assert app.return_code == 0
    finally:
        w.stop(grace_s=2)


async def test_quit_y_stops_the_job_and_returns_its_code(tmp_path):
    s, w = await _started(tmp_path)
    try:
        app = WatchApp(w, s)
        async with app.run_test(size=(80, 24)) as pilot:
            app.feed(1)
            await pilot.pause()
            await pilot.press("q")
            await pilot.pause()
            await pilot.press("y")
            await pilot.pause()
        assert w.popen.poll() is not None and w.exit_signal == "SIGTERM"
        assert app.return_code == 143
        assert stop_note(w) == "SIGTERM sent to the job's process group"
        (said,) = after_lines(w, "LOG")  # true: it ended, it was not left running
        assert said == (
            f"SIGTERM sent to the job's process group; the job (pid {w.popen.pid}) ended: "
            "killed by SIGTERM, exit code 143, output LOG"
        )
    finally:
        w.stop(grace_s=2)


async def test_quit_after_the_job_ended_does_not_ask(tmp_path):
    s = sim.build("idle")
    w = JobWatch.for_command(s, [sys.executable, "-c", "pass"], log_path=str(tmp_path / "j.log"))
    w.popen.wait(10)
    app = WatchApp(w, s)
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(1)
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
    assert not app.is_running and w.exit_code == 0


async def test_quit_y_stops_a_job_that_ignores_sigterm_without_freezing_the_view(tmp_path):
    s = sim.build("idle")
    log = tmp_path / "j.log"
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(30)"
    )
    w = JobWatch.for_command(s, [sys.executable, "-c", code], log_path=str(log))
    w.stop_grace_s = 0.5
    try:
        for _ in range(250):  # its SIGTERM handler is in place
            if log.read_text().startswith("up"):
                break
            await asyncio.sleep(0.02)
        app = WatchApp(w, s)
        async with app.run_test(size=(80, 24)) as pilot:
            app.feed(1)
            await pilot.pause()
            await pilot.press("q")
            await pilot.pause()
            await pilot.press("y")
            await pilot.pause()
            # the view still draws while the job is being stopped, and says what happens
            assert "stopping the job (SIGTERM; SIGKILL in 0.5 s)" in screen_text(app)
            for _ in range(200):
                if not app.is_running:
                    break
                await pilot.pause(0.05)
        assert w.popen.poll() is not None and w.exit_signal == "SIGKILL" and w.killed
        assert app.return_code == 137
        assert "it was killed with SIGKILL" in stop_note(w)
    finally:
        w.stop(grace_s=1)


async def _ctrl_c(app, pilot) -> None:
    """Ctrl-C in the live view, as the terminal sends it."""
    await pilot.press("ctrl+c")
    await pilot.pause()


async def _until_quit(app, pilot, tries: int = 200) -> None:
    for _ in range(tries):
        if not app.is_running:
            return
        await pilot.pause(0.05)


@pytest.mark.slow
async def test_ctrl_c_stops_the_job_as_a_shell_would_and_quits_with_its_status(tmp_path):
    s, w = await _started(tmp_path)
    try:
        app = WatchApp(w, s)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            app.feed(1)
            await pilot.pause()
            await pilot.press("q")  # a question open: Ctrl-C answers it
            await pilot.pause()
            await _ctrl_c(app, pilot)
            assert not isinstance(app.screen, QuitJobScreen)
            await _until_quit(app, pilot)
        assert w.signals_sent == ["SIGINT"] and w.exit_signal == "SIGINT"
        assert app.return_code == 130  # a shell's 128 + 2
        (said,) = after_lines(w, None)
        assert said.startswith("Ctrl-C sent SIGINT to the job's process group; the job")
        assert said.endswith("ended: killed by SIGINT, exit code 130")
    finally:
        w.stop(grace_s=1)


@pytest.mark.slow
async def test_a_second_ctrl_c_escalates_to_sigterm(tmp_path):
    s = sim.build("idle")
    log = tmp_path / "j.log"
    code = (
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(30)"
    )
    w = JobWatch.for_command(s, [sys.executable, "-c", code], log_path=str(log))
    try:
        for _ in range(250):  # its SIGINT handler is in place
            if log.read_text().startswith("up"):
                break
            await asyncio.sleep(0.02)
        app = WatchApp(w, s)
        async with app.run_test(size=(100, 30), notifications=True) as pilot:
            app.feed(1)
            await pilot.pause()
            await _ctrl_c(app, pilot)
            await pilot.pause(0.3)
            assert app.is_running and w.alive()  # it ignores SIGINT: the view waits
            toasts = " ".join(str(t.render()) for t in app.screen.query("Toast"))
            assert "SIGINT sent to the job" in toasts and "again sends SIGTERM" in toasts
            await _ctrl_c(app, pilot)
            await _until_quit(app, pilot)
        assert w.signals_sent == ["SIGINT", "SIGTERM"] and app.return_code == 143
    finally:
        w.stop(grace_s=1)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
async def test_a_closed_terminal_leaves_the_job_running_and_says_so_in_its_log(tmp_path):
    s, w = await _started(tmp_path)
    try:
        app = WatchApp(w, s)
        async with app.run_test(size=(80, 24)) as pilot:
            app.feed(1)
            await pilot.pause()
            assert signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, None)  # the guard's
            signal.raise_signal(signal.SIGHUP)  # what the kernel sends when the terminal goes
            await _until_quit(app, pilot)
        assert w.detached and w.popen.poll() is None  # left running
        last = (tmp_path / "j.log").read_text().splitlines()[-1]
        assert "[gputop-diag " in last and "the terminal closed (SIGHUP)" in last
        assert f"the job (pid {w.popen.pid}) was left running" in last
        (said,) = after_lines(w, None)
        assert said.startswith(f"left running (watching stopped): pid {w.popen.pid}")
    finally:
        w.stop(grace_s=1)
