"""The habits users bring from htop and nvitop: quit keys, help keys, Esc, Ctrl-Z, sort and
filter keys, and the program's behaviour without a terminal."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest
from test_tui_support import FedApp, screen_lines, screen_text
from textual.widgets import DataTable, Input

from gputop_diag.tui.filter_screen import FilterScreen
from gputop_diag.tui.help import HelpScreen


@pytest.mark.parametrize("key", ["q", "f10", "ctrl+c"])
async def test_q_f10_and_ctrl_c_quit(key):
    app = FedApp()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.feed(2)
        await pilot.pause()
        await pilot.press(key)
        await pilot.pause()
        assert not app.screen.query("Toast")  # no "press Ctrl-Q to quit" hint: it quits
    assert app.return_code == 0


@pytest.mark.parametrize("key", ["question_mark", "h", "f1"])
async def test_h_f1_and_question_mark_open_help_and_esc_closes_it(key):
    app = FedApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(key)
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press(key)  # the same key again closes it, as does Esc
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press(key, "escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.parametrize("size", [(80, 24), (40, 12), (200, 50)], ids=["80x24", "40x12", "200x50"])
async def test_help_wraps_to_the_width_and_lists_every_habit(size):
    app = FedApp()
    async with app.run_test(size=size) as pilot:
        await pilot.press("h")
        await pilot.pause()
        lines = screen_lines(app)
        assert all(len(line.rstrip()) <= size[0] for line in lines)
        text = app.screen.query_one("#help-text").plain
        for words in ("F10", "ctrl+z" if False else "suspend", "filter", "sort", "Esc"):
            assert words in text
        if size == (200, 50):  # paragraphs are not cut at the source's line breaks
            assert any(len(line.strip()) > 100 for line in lines)


async def test_the_footer_does_not_promise_the_job_pane():
    app = FedApp()
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(2)
        await pilot.pause()
        text = screen_text(app)
        assert "Job" not in text and "6 " not in screen_lines(app)[1]
        await pilot.press("h")
        await pilot.pause()
        assert "Job pane" not in app.screen.query_one("#help-text").plain


async def test_filter_by_user_gpu_and_pid_from_the_prompt_and_esc_clears():
    app = FedApp("compute-bound")  # 8 ranks of alice, one notebook of bob on GPU 0
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.pause()
        table = app.query_one("#mem-procs", DataTable)
        assert table.row_count == 9
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, FilterScreen)
        app.screen.query_one(Input).value = "user:bob"
        await pilot.press("enter")
        await pilot.pause()
        assert table.row_count == 1
        row = [str(c) for c in table.get_row_at(0)]
        # bob's notebook runs in a container: the OWNER column names it, in USER's place at 120
        assert "ctr 1e52e506" in row and app.latest.snapshot.process(41440).user == "bob"
        assert "filter: user bob" in screen_lines(app)[1]  # the tab strip says it is filtered
        assert "GPU processes (1 of 9)" in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert table.row_count == 9 and "filter" not in screen_lines(app)[1]
        await pilot.press("f")
        await pilot.pause()
        app.screen.query_one(Input).value = "gpu:2,3 pid:41232"
        await pilot.press("enter")
        await pilot.pause()
        assert [str(table.get_cell_at((r, 1))) for r in range(table.row_count)] == ["41232"]
        rows = [line for line in screen_lines(app)[2:] if "GPU" in line[:8]]
        assert [r.split()[0].lstrip("▶") for r in rows[:2]] == ["GPU2", "GPU3"]  # --only
        await pilot.press("f")
        await pilot.pause()
        app.screen.query_one(Input).value = "gpu:x"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, FilterScreen)  # a bad filter is explained, not applied
        assert "gpu: takes numbers" in str(app.screen.query_one("#filter-hint").render())
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, FilterScreen)
        assert app.controls.filter.pids == {41232}  # Esc left the filter as it was


async def test_g_shows_only_the_selected_gpu_and_its_processes():
    app = FedApp("compute-bound")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.press("right_square_bracket", "right_square_bracket", "g")
        await pilot.pause()
        table = app.query_one("#mem-procs", DataTable)
        assert {str(table.get_cell_at((r, 0))) for r in range(table.row_count)} == {"2"}
        assert "filter: GPU 2" in screen_lines(app)[1]
        await pilot.press("g")
        await pilot.pause()
        assert table.row_count == 9


async def test_sort_keys_and_the_selected_gpu_first():
    app = FedApp("compute-bound")
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(5)
        await pilot.pause()
        table = app.query_one("#mem-procs", DataTable)

        def column(key: str) -> list[str]:
            return [str(table.get_row_at(r)[list(table.columns).index(key)]) for r in
                    range(table.row_count)]  # fmt: skip

        assert column("gpu")[:2] == ["0", "0"]  # GPU 0 is selected: its processes first
        assert "sorted by GPU MEM ▼" in screen_text(app)
        await pilot.press("P")  # htop: by CPU
        await pilot.pause()
        cpu = [float(c) for c in column("cpu")]
        gpu0 = [c for c, g in zip(cpu, column("gpu"), strict=True) if g == "0"]
        rest = [c for c, g in zip(cpu, column("gpu"), strict=True) if g != "0"]
        assert gpu0 == sorted(gpu0, reverse=True) and rest == sorted(rest, reverse=True)
        assert "sorted by CPU% ▼" in screen_text(app)
        await pilot.press("N")  # by pid, ascending
        await pilot.pause()
        pids = [int(p) for g, p in zip(column("gpu"), column("pid"), strict=True) if g != "0"]
        assert pids == sorted(pids)
        await pilot.press("O")  # reversed
        await pilot.pause()
        pids = [int(p) for g, p in zip(column("gpu"), column("pid"), strict=True) if g != "0"]
        assert pids == sorted(pids, reverse=True) and "sorted by PID ▼" in screen_text(app)
        await pilot.press("right_square_bracket")  # GPU 1 selected: its rank first
        await pilot.pause()
        assert column("gpu")[0] == "1"


async def test_the_command_shows_the_script_not_the_interpreters_path():
    app = FedApp("comm-bound")  # torchrun: ranks run /opt/conda/envs/train/bin/python3.11
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        await pilot.pause()
        table = app.query_one("#mem-procs", DataTable)
        commands = [str(table.get_cell(k, "command")) for k in table.rows]
        assert any(c.startswith("python3.11 -u train_ddp.py") for c in commands), commands
        assert not any("/opt/conda" in c for c in commands)
        assert "train_ddp.py" in screen_text(app)  # visible at 80 columns


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_low_bandwidth_draws_ascii_only(size):
    app = FedApp("xid-79", low_bandwidth=True, interval=2.0, cached=True)
    async with app.run_test(size=size) as pilot:
        app.feed(100)
        await pilot.pause()
        for key in ("1", "2", "3", "4", "5", "h"):
            await pilot.press(key)
            await pilot.pause()
            if key == "4" and size == (200, 50):  # the Xid event's triage, rule and all, on screen
                triage = app.query_one("#xid-triage").region
                assert triage.height > 1 and triage.bottom <= size[1], triage
            text = "\n".join(line for line in screen_lines(app))
            odd = {ch for ch in text if not ch.isascii()}
            assert not odd, (key, sorted(odd))
            if key == "h":
                await pilot.press("escape")


def _pty_run(*args: str, env: dict | None = None):
    import pty

    master, slave = pty.openpty()
    full = dict(os.environ, TERM="xterm-256color", COLUMNS="100", LINES="30", **(env or {}))
    p = subprocess.Popen(
        [sys.executable, "-m", "gputop_diag", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=full,
        start_new_session=True,
    )
    os.close(slave)
    return p, master


def _read_until(master: int, needle: bytes, timeout: float = 20) -> bytes:
    deadline = time.time() + timeout
    seen = b""
    while time.time() < deadline and needle not in seen:
        try:
            if select.select([master], [], [], 0.2)[0]:
                seen += os.read(master, 65536)
        except OSError:
            break
    return seen


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and a pty")
def test_ctrl_z_suspends_and_the_view_comes_back_whole():
    # a tick every quarter second: the first verdict about a second after the first frame, not
    # three or four (the suspend and the repaint after it do not depend on the pace)
    p, master = _pty_run("--interval", "0.25", "--demo", "idle")
    try:
        assert b"IDLE" in _read_until(master, b"IDLE")
        os.write(master, b"\x1a")  # Ctrl-Z
        deadline = time.time() + 10
        while time.time() < deadline and _state(p.pid) != "T":
            time.sleep(0.1)
        assert _state(p.pid) == "T"  # stopped, the terminal handed back
        p.send_signal(signal.SIGCONT)  # what `fg` does
        assert b"BOTTLENECK" in _read_until(master, b"BOTTLENECK")  # repainted whole
        os.write(master, b"\x03")  # Ctrl-C quits
        assert p.wait(timeout=10) == 0
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)


def test_without_a_terminal_it_prints_one_snapshot_and_exits(cli):
    r = cli("--demo", "compute-bound", timeout=60)  # stdout is a pipe here
    assert r.returncode == 0
    assert "\x1b[" not in r.stdout  # no escape codes in the file
    assert "gpu-node-07" in r.stdout and "H100" in r.stdout
    assert "not a terminal" in r.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a pty")
def test_filters_and_the_save_directory_from_the_command_line(tmp_path):
    p, master = _pty_run(
        "--demo", "compute-bound", "--only", "1,2", "--user", "alice", "--save-dir", str(tmp_path)
    )
    try:
        seen = _read_until(master, b"user alice")
        assert b"GPU 1,2" in seen and b"user alice" in seen  # the filter, named on screen
        os.write(master, b"S")
        # the first S loads the report's modules (compiled on first use after an install with
        # --no-compile, as the suite's): on a loaded 2-core machine that took over 10 s once
        deadline = time.time() + 30
        while time.time() < deadline and not list(tmp_path.glob("gputop-diag-snapshot-*")):
            _read_until(master, b"\x00", timeout=0.2)
        assert len(list(tmp_path.glob("gputop-diag-snapshot-*.json"))) == 1
        os.write(master, b"q")
        assert p.wait(timeout=10) == 0
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)


def test_bad_filters_on_the_command_line_are_usage_errors(cli):
    r = cli("--demo", "idle", "--only", "one", timeout=60)
    assert r.returncode == 2 and "--only: numbers separated by commas" in r.stderr


def test_without_a_terminal_sanitize_prints_the_sanitized_snapshot(cli):
    r = cli("--sanitize", "--demo", "compute-bound", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "H100" in r.stdout and "host-" in r.stdout  # the model stays, the host is a pseudonym
    for secret in ("gpu-node-07", "alice", "bob", "/home/", ":18:00"):
        assert secret not in r.stdout
