"""The Memory pane's process table as htop and nvitop users use it: a cursor that reaches every
row at 80x24, Left/Right scrolling the command lines, `…` where a command is cut, the selected
row in reverse video, cells drawn again at a new width, and the cursor kept on its process."""

from __future__ import annotations

from collections import Counter

import pytest
from test_tui_support import FedApp, press_held, screen_lines, screen_text, settled, type_text

from gputop_diag.sim.scenarios import SCENARIOS
from gputop_diag.tui.process_table import ProcessTable, clip


def _table(app) -> ProcessTable:
    return app.query_one("#mem-procs", ProcessTable)


def _pid_at_cursor(table: ProcessTable) -> str:
    return str(table.get_row_at(table.cursor_row)[list(table.columns).index("pid")])


def _table_lines(app, table: ProcessTable) -> list[str]:
    """The table's lines a person sees: inside the pane's visible part, not below it."""
    region = table.region.intersection(app.query_one("#memory").region)
    return [line[region.x : region.right] for line in screen_lines(app)[region.y : region.bottom]]


def test_clip_marks_both_cuts():
    assert clip("python train.py", 0, 40) == "python train.py"
    assert clip("python train.py --lr 3", 0, 10) == "python tr…"
    assert clip("python train.py --lr 3", 7, 10) == "…rain.py -…"[:9] + "…"
    assert clip("python train.py", 7, 40) == "…rain.py"
    assert clip("abc", 0, 0) == ""


async def _feed_and_settle(app, pilot, scenario: str) -> ProcessTable:
    # the tour's jobs start at 20 s; xid-79's banner (a lost GPU) takes five rows at 90 s
    app.feed({"tour": 25, "xid-79": 100}.get(scenario, 4))
    table = _table(app)
    await settled(
        pilot,
        lambda: (
            app.latest is not None and table.row_count == len(app.latest.snapshot.gpu_processes)
        ),
    )
    return table


# The scenarios whose tables differ in shape (the other demo scenarios draw the same eight
# ranks of one user, one a GPU, as input-starved does: the same rows for the keys to walk).
# test_every_shape_of_table_is_walked below keeps this list honest.
TABLE_SHAPES = {
    "idle": "GPUs and no process: an empty table",
    "no-gpu": "no GPU at all",
    "launch-bound": "two rows, all on screen",
    "mig": "three processes on MIG instances of one GPU",
    "gpu-missing-from-nvml": "seven GPUs, seven rows",
    "xid-79": "seven rows under the lost GPU's banner, which takes five screen rows",
    "input-starved": "eight ranks of one user: more rows than fit at 80x24",
    "compute-bound": "nine rows of two users",
    "capacity": "nine rows, a second user's process, the kernel's OOM kill",
    "tour": "a job that starts at 20 s",
}


def _table_shape(scenario: str) -> tuple:
    """(GPUs, rows, rows a GPU, rows on MIG instances, users) of a scenario's table four
    ticks in."""
    from gputop_diag import sim
    from gputop_diag.monitor.sampler import Sampler

    sources = sim.build(scenario)
    sampler = Sampler(sources, interval=1.0)
    for _ in range(3):
        sampler.sample()
        sources.clock.sleep(1.0)
    snap = sampler.sample()
    sampler.close()
    rows = snap.gpu_processes
    per_gpu = sorted(Counter(p.gpu_index for p in rows).values())
    mig = sum(p.gpu_instance_id is not None for p in rows)
    users = len({p.user for p in snap.processes})
    return len(snap.gpus), len(rows), tuple(per_gpu), mig, users


def test_every_shape_of_table_is_walked():
    """Every demo scenario's table has the shape of one walked below (a scenario with a new
    shape of table must be added to TABLE_SHAPES)."""
    walked = {_table_shape(s) for s in TABLE_SHAPES}
    for scenario in sorted(set(SCENARIOS) - set(TABLE_SHAPES)):
        assert _table_shape(scenario) in walked, scenario


@pytest.mark.parametrize("scenario", sorted(TABLE_SHAPES))
async def test_every_process_row_is_reached_by_keys_at_80x24(scenario):
    """Every shape of table: Down from the first row visits every process once, End puts the last on
    screen, Home the first, PgUp moves up. (Each row's being on screen as Down passes it is
    checked on the scenarios whose rows do not all fit, below: a pause per key.)"""
    app = FedApp(scenario, cached=True)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _feed_and_settle(app, pilot, scenario)
        n = table.row_count
        assert app.focused is table  # the pane's keys are the table's from the first frame
        await pilot.press("home")
        seen = set()
        for _ in range(n):
            seen.add(_pid_at_cursor(table))
            table.action_cursor_down()  # what Down does (its binding: the tests below)
        assert len(seen) == n and table.cursor_row == max(0, n - 1), scenario
        await pilot.press("home")
        assert table.cursor_row == 0
        await pilot.press("end")
        await pilot.pause()
        assert table.cursor_row == n - 1 if n else table.row_count == 0
        if n:
            assert any(_pid_at_cursor(table) in line for line in _table_lines(app, table))
            await pilot.press("pageup")
            assert table.cursor_row < n - 1 or n == 1


@pytest.mark.parametrize("scenario", ["input-starved", "xid-79", "comm-bound"])
async def test_down_keeps_each_row_on_screen_where_not_all_fit(scenario):
    app = FedApp(scenario, cached=True)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _feed_and_settle(app, pilot, scenario)
        n = table.row_count
        seen = set()
        await pilot.press("home")
        for _ in range(n):
            await pilot.pause()
            pid = _pid_at_cursor(table)
            seen.add(pid)
            # the selected row is on screen: the table scrolled to it
            assert any(pid in line for line in _table_lines(app, table)), (scenario, pid)
            await pilot.press("down")
        assert len(seen) == n > 5  # more rows than fit at 80x24: the point of the test


async def test_eight_ranks_where_five_fit_page_down_and_end_reach_the_last():
    app = FedApp("input-starved")  # 8 ranks; at 80x24 the table shows 5 or 6 of them
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        shown = [line for line in _table_lines(app, table) if "alice" in line]
        assert len(shown) < 8  # not all fit: the point of the test
        assert "41312" not in screen_text(app)
        await pilot.press("pagedown", "pagedown")
        await pilot.pause()
        assert table.cursor_row == 7 and "41312" in screen_text(app)
        await pilot.press("home")
        await pilot.pause()
        assert table.cursor_row == 0 and "41200" in screen_text(app)


async def test_left_right_scroll_the_command_column_and_a_cut_command_ends_in_an_ellipsis():
    app = FedApp("input-starved")
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        commands = [str(table.get_cell(k, "command")) for k in table.rows]
        width = table.columns["command"].width
        assert all(len(c) <= width for c in commands)
        assert all(c.startswith("python train_vit.py") and c.endswith("…") for c in commands)
        other = [line for line in _table_lines(app, table) if "alice" in line]
        await pilot.press("right")
        await pilot.pause()
        scrolled = [str(table.get_cell(k, "command")) for k in table.rows]
        assert all(c.startswith("…") and "--data" in c for c in scrolled), scrolled
        # only the command moved: the figures' columns stay where they were
        now = [line for line in _table_lines(app, table) if "alice" in line]
        assert [line[:40] for line in now] == [line[:40] for line in other]
        await press_held(pilot, "right", 30)  # the end of the longest command, and no further
        ends = [str(table.get_cell(k, "command")) for k in table.rows]
        assert all(not c.endswith("…") for c in ends), ends
        await pilot.press("left")
        await pilot.pause()
        assert table.command_offset == table.command_room - 8 or table.command_offset == 0
        await press_held(pilot, "left", 30)
        assert [str(table.get_cell(k, "command")) for k in table.rows] == commands


async def test_a_resize_draws_every_command_cell_again_at_the_new_width():
    """200x50 -> 120x40 -> 80x24 once left every COMMAND cell as `python` until widened."""
    app = FedApp("input-starved")
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        for size in ((120, 40), (80, 24), (200, 50), (80, 24)):
            await pilot.resize_terminal(*size)
            await pilot.pause(0.2)
            await settled(pilot, lambda: table.size.width > 0)
            rows = [line for line in _table_lines(app, table) if "alice" in line]
            assert rows
            for line in rows:
                command = line.split("alice", 1)[1]
                assert "train_vit.py" in command, (size, line)
            assert all(len(line.rstrip()) <= size[0] for line in screen_lines(app))


async def test_the_cursor_stays_on_its_process_and_moves_to_a_neighbour_when_it_ends():
    app = FedApp("input-starved")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        await pilot.press("down", "down", "down")
        await pilot.pause()
        pid = _pid_at_cursor(table)
        await pilot.press("N")  # sorted by pid: the rows move, the cursor follows its process
        await pilot.pause()
        assert _pid_at_cursor(table) == pid
        await pilot.press("O")  # reversed
        await pilot.pause()
        assert _pid_at_cursor(table) == pid
        row = table.cursor_row
        app.sim_sources.sim.vanish_process(int(pid))
        app.feed(1)
        await settled(pilot, lambda: table.row_count == 7)
        assert table.row_count == 7 and pid not in screen_text(app)
        assert table.cursor_row == min(row, 6)  # its neighbour, not the top of the table
        assert _pid_at_cursor(table) != pid


async def test_the_selected_row_is_drawn_in_reverse_video_without_colour(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = FedApp("input-starved")
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        await pilot.press("down")
        await pilot.pause()
        y = table.cursor_row + 1 - int(table.scroll_y)  # below the header
        cursor_line = table.render_line(y)
        other_line = table.render_line(y + 1)
        assert any(seg.style and seg.style.reverse for seg in cursor_line if seg.text.strip())
        assert not any(seg.style and seg.style.reverse for seg in other_line if seg.text.strip())


# -- TIME, %MEM, and each GPU's temperature, power and fan ----------------------------------


def test_elapsed_text_follows_htops_layout():
    from gputop_diag.tui.procs import elapsed_text

    assert elapsed_text(None) == "n/a"
    assert elapsed_text(65) == "1:05"
    assert elapsed_text(3599) == "59:59"
    assert elapsed_text(5 * 3600 + 3 * 60 + 10) == "5h03:10"
    assert elapsed_text(3 * 86400 + 4 * 3600 + 59) == "3d04h"


async def test_time_and_mem_columns_show_what_the_process_holds():
    app = FedApp("input-starved")
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        snap = app.latest.snapshot
        info = snap.process(41200)
        row = table.get_row("0:41200")
        cols = list(table.columns)
        started = snap.timestamp - info.start_time
        assert str(row[cols.index("time")]) == f"{int(started) // 60}:{int(started) % 60:02d}"
        mem = 100.0 * info.rss_bytes / snap.host.mem_total_bytes
        assert str(row[cols.index("mem_pct")]) == f"{mem:.1f}"
        assert "TIME" in screen_text(app) and "%MEM" in screen_text(app)
        before = str(row[cols.index("time")])
        app.feed(2)
        await settled(pilot, lambda: str(table.get_row("0:41200")[cols.index("time")]) != before)
        assert str(table.get_row("0:41200")[cols.index("time")]) != before  # it keeps counting


@pytest.mark.parametrize(
    "size, hide_panel, shown",
    [((200, 50), False, True), ((120, 40), True, True), ((120, 40), False, True),
     ((100, 30), True, False), ((80, 24), False, False)],
)  # fmt: skip
async def test_temperature_power_and_fan_from_120_columns_where_they_fit(size, hide_panel, shown):
    app = FedApp("input-starved")
    async with app.run_test(size=size) as pilot:
        app.feed(3)
        await pilot.pause()
        if hide_panel:
            await pilot.press("p")
            app.feed(1)
            await pilot.pause(0.2)
        gpu_lines = [line for line in screen_lines(app) if "GPU" in line[:8] and "G" in line]
        assert gpu_lines
        # SXM boards have no fans: NVML says not supported, the line says `-`
        assert all(("°C" in line and "fan -" in line and "/700W" in line) == shown
                   for line in gpu_lines[:8])  # fmt: skip
        if shown:  # beside the figures (the short ones beside the panel), never instead of them
            assert all(("GiB" if hide_panel or size[0] > 120 else "% free ") in line
                       for line in gpu_lines[:8])  # fmt: skip
        assert all(len(line.rstrip()) <= size[0] for line in screen_lines(app))


async def test_fan_speed_is_read_where_the_board_has_fans():
    app = FedApp("input-starved")
    machine = app.sim_sources.sim
    machine.gpus[1].model = {**machine.gpus[1].model, "fans": True}
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(3)
        await pilot.pause()
        gpus = app.latest.snapshot.gpus
        assert gpus[0].fan_speed_pct is None  # NVMLError_NotSupported: no fans
        assert isinstance(gpus[1].fan_speed_pct, int) and 30 <= gpus[1].fan_speed_pct <= 100
        line = next(line for line in screen_lines(app) if "GPU1" in line)
        assert f"fan {gpus[1].fan_speed_pct}%" in line


def test_the_fake_nvml_answers_fan_speed_as_the_real_module_does():
    import pynvml

    from gputop_diag import sim

    nvml = sim.build("idle").nvml
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetFanSpeed(h)


def test_new_fields_round_trip_through_the_codec():
    from dataclasses import replace

    from gputop_diag import sim
    from gputop_diag.model import Snapshot
    from gputop_diag.model.codec import from_jsonable, jsonable
    from gputop_diag.monitor.core import Monitor

    snap = Monitor(sim.build("comm-bound")).tick().snapshot
    info = snap.processes[0]
    assert info.ppid and info.parent_name == "torchrun" and info.uid == 1001
    assert info.parent_user == "alice"
    snap = replace(snap, gpus=(replace(snap.gpus[0], fan_speed_pct=41), *snap.gpus[1:]))
    assert from_jsonable(Snapshot, jsonable(snap)) == snap


# -- Enter: the process's details -------------------------------------------------------------


async def test_enter_opens_the_details_and_they_say_when_the_process_ends():
    from gputop_diag.tui.process_screens import ProcessDetailScreen

    app = FedApp("comm-bound")
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(4)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        pid = _pid_at_cursor(table)
        await pilot.press("enter")
        await settled(pilot, lambda: isinstance(app.screen, ProcessDetailScreen))
        text = app.screen.text
        assert f"PROCESS {pid}" in text and "/opt/conda/envs/train/bin/python3.11" in text
        assert "CUDA_VISIBLE_DEVICES=" in text and "threads" in text
        assert "CHILDREN" in text and "GPU MEMORY" in text and "now 56" in text
        owner = text[text.index("OWNER") : text.index("COMMAND")]  # the whole owner, by fact
        assert "ml-research" in owner and "llama-ddp-0" in owner and "burstable" in owner
        assert "containerd" in owner
        lines = screen_lines(app)
        assert all(len(line.rstrip()) <= 80 for line in lines)
        # the long command wraps with a hanging indent: continued lines sit deeper
        start = next(k for k, line in enumerate(lines) if "COMMAND" in line)
        assert lines[start + 1].startswith("   python3.11") or "python" in lines[start + 1]
        app.sim_sources.sim.vanish_process(int(pid))
        app.feed(1)
        await settled(pilot, lambda: "ENDED" in app.screen.text)
        assert "ENDED" in app.screen.text and "the process has ended" in app.screen.text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ProcessDetailScreen)


async def test_details_of_another_users_process_say_why_the_environment_is_missing():
    app = FedApp("compute-bound")  # bob's notebook on GPU 0: another user's process
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 9)
        table.move_cursor(row=table.get_row_index("0:41440"))
        await pilot.press("enter")
        await pilot.pause(0.2)
        text = app.screen.text
        assert "PROCESS 41440" in text and "permission denied" in text


async def test_details_under_sanitize_show_pseudonyms_only():
    app = FedApp("comm-bound", sanitize=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await settled(pilot, lambda: _table(app).row_count == 8)
        await pilot.press("enter")
        await pilot.pause(0.2)
        text = app.screen.text
        assert "PROCESS" in text and "CUDA_VISIBLE_DEVICES" in text
        for raw in ("alice", "/opt/conda", "gpu-node-07"):
            assert raw not in text, raw


# -- T, K, I: signals -------------------------------------------------------------------------


async def test_a_signal_is_sent_after_y_only_and_the_process_leaves_the_table():
    from gputop_diag.tui.process_screens import SignalScreen

    app = FedApp("input-starved")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        await pilot.press("down")
        await pilot.pause()
        pid = _pid_at_cursor(table)
        await pilot.press("T")
        await settled(pilot, lambda: isinstance(app.screen, SignalScreen))
        assert f"Send SIGTERM to pid {pid} (python train_vit.py" in app.screen.text
        await pilot.press("n")  # anything but y cancels
        await pilot.pause()
        assert not isinstance(app.screen, SignalScreen)
        assert app.sim_sources.sim.alive(int(pid)) is not None
        await pilot.press("I")
        await pilot.pause()
        assert "SIGINT" in app.screen.text
        await pilot.press("escape")
        await pilot.pause()
        assert app.sim_sources.sim.alive(int(pid)) is not None
        await pilot.press("K")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert app.sim_sources.sim.alive(int(pid)) is None
        assert any("sent SIGKILL" in str(n.message) for n in app._notifications)
        app.feed(1)
        await settled(pilot, lambda: table.row_count == 7)
        assert pid not in [str(table.get_row_at(r)[1]) for r in range(table.row_count)]
        assert table.cursor_row == 1  # on its neighbour


async def test_another_users_process_is_not_signalled_and_the_confirmation_says_why():
    app = FedApp("compute-bound")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 9)
        table.move_cursor(row=table.get_row_index("0:41440"))
        await pilot.press("K")
        await pilot.pause()
        assert "cannot be sent to pid 41440" in app.screen.text
        assert "belongs to bob" in app.screen.text and "nothing was sent" in app.screen.text
        await pilot.press("y")  # y does not send either
        await pilot.pause()
        assert app.sim_sources.sim.alive(41440) is not None


def test_the_real_signal_seam_says_what_happened():
    import os
    import signal
    import subprocess

    from gputop_diag.sources import Sources

    real = Sources.real()
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert real.may_signal(child.pid) is None  # our own
        sent, said = real.send_signal(child.pid, signal.SIGTERM)
        assert sent and said == f"sent SIGTERM to pid {child.pid}"
        child.wait(5)
    finally:
        child.kill()
    gone = child.pid
    sent, said = real.send_signal(gone, signal.SIGTERM)
    assert not sent and "had already ended" in said
    if os.geteuid() != 0:
        assert "only its owner or root" in (real.may_signal(1) or "")


async def test_a_replay_sends_no_signal_and_says_so(tmp_path):
    from gputop_diag.cli import main
    from gputop_diag.recording.store import Recording
    from gputop_diag.tui import GpuTopApp, SnapshotReady

    f = str(tmp_path / "run.jsonl")
    assert main(["--demo", "input-starved", "record", "-o", f, "--seconds", "2"]) == 0
    app = GpuTopApp(None, replay=Recording.open(f), start_collectors=False)
    async with app.run_test(size=(80, 24)) as pilot:
        for snap in app.replay.snapshots():
            app.post_message(SnapshotReady(app.feeder.add(snap)))
        await settled(pilot, lambda: _table(app).row_count == 8)
        await pilot.press("T")
        await pilot.pause()
        assert "a replay shows recorded data" in app.screen.text
        await pilot.press("escape", "enter")
        await pilot.pause(0.2)
        assert "not recorded: a replay shows recorded data" in app.screen.text


# -- t: the tree view -------------------------------------------------------------------------


async def test_t_shows_the_gpu_processes_under_their_launcher():
    app = FedApp("comm-bound")  # torchrun starts eight ranks
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        await pilot.press("t")
        await settled(pilot, lambda: table.row_count == 9)
        commands = [str(table.get_row_at(r)[-1]) for r in range(table.row_count)]
        assert commands[0].startswith("torchrun")
        # at 120 columns the ranks' pod takes the USER column's place (OWNER); the launcher,
        # whose owner is not read, names its own user there, read from its pid
        owners = [str(table.get_row_at(r)[2]) for r in range(table.row_count)]
        assert list(table.columns)[2].value == "owner"
        assert owners[0] == "alice" and owners[1] == "llama-ddp-0"  # the pod's name
        rank = int(str(table.get_row_at(1)[1]))
        assert app.latest.snapshot.process(rank).user == "alice"
        assert all(c.startswith("├─ ") for c in commands[1:-1]) and commands[-1].startswith("└─ ")
        assert "GPU processes (8)" in screen_text(app) and "tree" in screen_text(app)
        await pilot.press("end", "enter")  # the keys work in the tree too
        await pilot.pause(0.2)
        assert "PROCESS" in app.screen.text
        await pilot.press("escape", "t")
        await settled(pilot, lambda: table.row_count == 8)
        assert not str(table.get_row_at(0)[-1]).startswith(("torchrun", "├"))


async def test_help_and_the_footer_keys_name_the_process_tables_keys():
    app = FedApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("h")
        await pilot.pause()
        text = app.screen.query_one("#help-text").plain
        for words in ("Home/End", "Left/Right", "Enter", "SIGTERM", "SIGKILL", "SIGINT", "tree"):
            assert words in text, words


async def test_the_trees_launcher_row_opens_its_details_and_can_be_signalled():
    app = FedApp("comm-bound")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        await pilot.press("t")
        await settled(pilot, lambda: table.row_count == 9)
        await pilot.press("home", "enter")
        await pilot.pause(0.2)
        launcher = int(str(table.get_row_at(0)[1]))
        text = app.screen.text
        assert f"PROCESS {launcher}  torchrun  user alice" in text and "uses no GPU" in text
        assert "GPU PROCESSES UNDER IT (8)" in text and "ENDED" not in text
        await pilot.press("escape", "T")
        await pilot.pause()
        assert f"Send SIGTERM to pid {launcher} (torchrun)" in app.screen.text
        await pilot.press("y")
        await pilot.pause()
        assert app.sim_sources.sim.alive(launcher) is None


async def test_low_bandwidth_tree_details_and_confirmation_are_ascii():
    app = FedApp("comm-bound", low_bandwidth=True, interval=2.0)
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 8)
        for keys in (("t",), ("right",), ("down", "enter"), ("escape", "K")):
            await pilot.press(*keys)
            await pilot.pause(0.2)
            odd = {ch for ch in screen_text(app) if not ch.isascii()}
            assert not odd, (keys, sorted(odd))
        assert "SIGKILL" in app.screen.text


async def test_a_click_on_time_or_mem_sorts_by_it():
    from gputop_diag.tui.panes.memory import MemoryPane

    app = FedApp("compute-bound")
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(3)
        table = _table(app)
        await settled(pilot, lambda: table.row_count == 9)
        for column, label in (("time", "TIME ▼"), ("mem_pct", "%MEM ▼")):
            app.post_message(MemoryPane.SortBy(column))  # what a click on its header posts
            await settled(pilot, lambda label=label: f"sorted by {label}" in screen_text(app))
            snap = app.latest.snapshot
            key = {
                "time": lambda p, snap=snap: snap.timestamp - p.start_time,
                "mem_pct": lambda p: p.rss_bytes,
            }[column]
            pids = [int(str(table.get_row_at(r)[1])) for r in range(table.row_count)]
            rest = [p for p in pids if snap.process(p) is not None]
            gpu0 = [p for p in rest if any(g.pid == p and g.gpu_index == 0
                                           for g in snap.gpu_processes)]  # fmt: skip
            others = [p for p in rest if p not in gpu0]
            for group in (gpu0, others):
                values = [key(snap.process(p)) for p in group]
                assert values == sorted(values, reverse=True), (column, group)


async def test_help_key_lines_wrap_under_their_description():
    app = FedApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("h")
        await pilot.pause(0.3)
        lines = app.screen.query_one("#help-text").plain.splitlines()
        enter = next(k for k, line in enumerate(lines) if line.lstrip().startswith("Enter "))
        start = lines[enter].index("the selected process")
        follow = lines[enter + 1]
        assert follow[:start].strip() == "" and follow[start:].strip()  # a hanging indent


# -- OWNER: the Slurm job, pod or container of each process ----------------------------------


def _column(table: ProcessTable, key: str) -> list[str]:
    k = list(table.columns).index(key)
    return [str(table.get_row_at(r)[k]).strip() for r in range(table.row_count)]


def _header(app, table: ProcessTable) -> str:
    return _table_lines(app, table)[0]


async def _type_filter(pilot, typed: str) -> None:
    await pilot.press("f")
    await pilot.pause()
    await type_text(pilot, typed)
    await pilot.press("enter")
    await pilot.pause()


@pytest.mark.parametrize(
    "scenario, owners",
    [("comm-bound", {"llama-ddp-0"}), ("compute-bound", {"job 424242", "ctr 1e52e506"})],
)
async def test_owner_takes_the_user_columns_place_at_80x24(scenario, owners):
    """At 80 columns OWNER replaces USER (no room for both beside a readable command): a pod,
    a job and a container each by its label, the pod by its name where `pod NS/NAME` does not
    fit (a StatefulSet's pods differ by the name's end)."""
    app = FedApp(scenario, cached=True)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _feed_and_settle(app, pilot, scenario)
        assert "owner" in table.columns and "user" not in table.columns
        assert "OWNER" in _header(app, table) and "USER" not in _header(app, table)
        assert set(_column(table, "owner")) == owners
        shown = screen_text(app)
        assert all(o in shown for o in owners)
        assert "(7)" not in shown  # the pid in the container's namespace: Enter's, not here
        assert all(len(line.rstrip()) <= 80 for line in screen_lines(app))
        # the command stays readable: the script's name in every rank's row
        assert all(".py" in c for c, o in zip(_column(table, "command"), _column(table, "owner"),
                                             strict=True) if o != "ctr 1e52e506")  # fmt: skip


async def test_a_machine_without_owners_keeps_its_user_column():
    app = FedApp("input-starved")
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _feed_and_settle(app, pilot, "input-starved")
        assert not any(p.owner and p.owner.label for p in app.latest.snapshot.processes)
        assert "user" in table.columns and "owner" not in table.columns
        assert set(_column(table, "user")) == {"alice"}


async def test_owner_beside_user_and_the_namespaces_pid_where_the_pane_is_wide():
    """200x50: beside the panel (128 columns) OWNER is in USER's place; with the panel hidden
    both, the whole `pod NS/NAME`, and the in-container pid beside the host's."""
    app = FedApp("comm-bound")
    async with app.run_test(size=(200, 50)) as pilot:
        table = await _feed_and_settle(app, pilot, "comm-bound")
        assert "user" not in table.columns and set(_column(table, "owner")) == {"llama-ddp-0"}
        await pilot.press("p")
        app.feed(1)
        await settled(pilot, lambda: "user" in table.columns)
        assert list(table.columns)[:4] == ["gpu", "pid", "user", "owner"]
        assert set(_column(table, "owner")) == {"pod ml-research/llama-ddp-0"}
        assert set(_column(table, "user")) == {"alice"}
        snap = app.latest.snapshot
        pids = _column(table, "pid")
        for cell in pids:
            host, ns = cell.split()
            assert ns == f"({snap.process(int(host)).owner.ns_pid})"
        assert "41216 (2)" in screen_text(app)
        # the keys still find each row by its host pid: sort by pid, the cursor follows
        await pilot.press("down", "down")
        await pilot.pause()
        before = _column(table, "pid")[table.cursor_row]
        await pilot.press("N", "O")
        await pilot.pause()
        hosts = [int(c.split()[0]) for c in _column(table, "pid")]
        assert hosts[1:] == sorted(hosts[1:], reverse=True)  # GPU 0's process first
        assert _column(table, "pid")[table.cursor_row] == before
        assert all(len(line.rstrip()) <= 200 for line in screen_lines(app))


async def test_compute_bound_at_200_columns_without_the_panel_names_users_and_owners():
    app = FedApp("compute-bound")
    async with app.run_test(size=(200, 50)) as pilot:
        await _feed_and_settle(app, pilot, "compute-bound")
        await pilot.press("p")
        app.feed(1)
        table = _table(app)
        await settled(pilot, lambda: "user" in table.columns)
        rows = dict(zip(_column(table, "user"), _column(table, "owner"), strict=False))
        assert rows == {"alice": "job 424242", "bob": "ctr 1e52e506"}
        bob = next(r for r in range(table.row_count) if _column(table, "user")[r] == "bob")
        assert _column(table, "pid")[bob] == "41440 (7)"
        alice = _column(table, "pid")[1 - bob if bob < 2 else 0]
        assert alice.isdigit()  # a process in the host's namespace: its pid alone


async def test_job_pod_and_ctr_filters_select_their_rows_and_a_bad_term_says_why():
    from gputop_diag.tui.filter_screen import FilterScreen

    app = FedApp("compute-bound")
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _feed_and_settle(app, pilot, "compute-bound")
        for typed, owners, n in (
            ("job:424242", {"job 424242"}, 8),
            ("ctr:1e52e506", {"ctr 1e52e506"}, 1),
            ("job:424242.0 gpu:3", {"job 424242"}, 1),
            ("pod:llama-ddp-0", set(), 0),
        ):
            await _type_filter(pilot, typed)
            await settled(pilot, lambda n=n: table.row_count == n)
            assert table.row_count == n, typed
            assert set(_column(table, "owner")) == owners, typed
            await pilot.press("escape")
            await settled(pilot, lambda: table.row_count == 9)
        await _type_filter(pilot, "job:424242")
        await settled(pilot, lambda: "filter: job 424242" in screen_text(app))
        await _type_filter(pilot, "job:alice")
        assert isinstance(app.screen, FilterScreen)  # kept open, saying why
        hint = str(app.screen.query_one("#filter-hint").render())
        assert "job: takes job ids (424242, 424242.0): 'alice'" in hint
        await pilot.press("escape")
        await pilot.pause()
        assert table.row_count == 8  # the filter as it was


async def test_pod_filter_on_comm_bound():
    app = FedApp("comm-bound")
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _feed_and_settle(app, pilot, "comm-bound")
        for typed, n in (("pod:ml-research/llama-ddp-0", 8), ("pod:87e7667e", 8),
                         ("pod:ml-research/other", 0)):  # fmt: skip
            await _type_filter(pilot, typed)
            await settled(pilot, lambda n=n: table.row_count == n)
            assert table.row_count == n, typed
            await pilot.press("escape")
            await settled(pilot, lambda: table.row_count == 8)


async def test_o_reaches_owner_and_the_rows_follow_it():
    app = FedApp("compute-bound")
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _feed_and_settle(app, pilot, "compute-bound")
        for _ in range(len(table.columns)):
            if app.controls.sort.column == "owner":
                break
            await pilot.press("o")
        assert app.controls.sort.column == "owner"
        await settled(pilot, lambda: "sorted by OWNER ▲" in screen_text(app))
        await settled(pilot, lambda: _column(table, "pid")[0] == "41440")
        # GPU 0 first: bob's container (`ctr …` before `job …`), then alice's rank
        assert _column(table, "pid")[:2] == ["41440", "41200"]
        await pilot.press("O")
        await settled(pilot, lambda: _column(table, "pid")[0] == "41200")
        assert _column(table, "pid")[:2] == ["41200", "41440"]
        assert "sorted by OWNER ▼" in screen_text(app)
