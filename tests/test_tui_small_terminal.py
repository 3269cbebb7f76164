"""At 80x24, as the view changes after its first frame (ticks, a resize to 40x12 in between):
a saved file's path stays on one line of its toast, a toast shows nothing of the screen beside
it, the replay's footer keeps `? help` and `q quit`, a process's details say that Esc closes
them, and a sort never scrolls the first row out of sight.

The screen is read as the terminal shows it (`screen_lines`).
"""

from __future__ import annotations

import os

from test_tui_support import FedApp, screen_lines, screen_text, settled

from gputop_diag.tui.process_screens import ProcessDetailScreen
from gputop_diag.tui.process_table import ProcessTable


async def to_40x12_and_back(app, pilot) -> None:
    """A resize to 40x12 and back to 80x24, a tick at each size."""
    for size in ((40, 12), (80, 24)):
        await pilot.resize_terminal(*size)
        app.feed(1)
        await pilot.pause()


async def test_a_saved_files_toast_keeps_its_path_on_one_line(tmp_path, monkeypatch):
    home = tmp_path / "home-of-a-person-whose-login-name-is-rather-long"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)  # the state directory under $HOME
    app = FedApp()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.feed(3)
        await pilot.pause()
        await to_40x12_and_back(app, pilot)
        await pilot.press("S")
        state = home / ".local" / "state" / "gputop-diag"
        assert await settled(pilot, lambda: list(state.glob("gputop-diag-snapshot-*.json")))
        saved = next(state.glob("gputop-diag-snapshot-*.json"))
        assert len(str(saved)) > 78  # the absolute path fits no line of 80 columns
        shown = "~" + str(saved)[len(str(home)) :]
        assert await settled(pilot, lambda: "written to" in screen_text(app))
        assert any(shown in line for line in screen_lines(app)), screen_text(app)
        assert os.path.expanduser(shown) == str(saved)  # what a shell reads back


async def test_a_signals_toast_is_whole_with_nothing_of_the_screen_beside_it():
    app = FedApp("compute-bound")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.feed(3)
        await pilot.pause()
        await to_40x12_and_back(app, pilot)
        table = app.query_one(ProcessTable)
        pid = table.selected_key.split(":")[1]
        await pilot.press("T", "y")
        said = f"sent SIGTERM to pid {pid}"
        assert await settled(pilot, lambda: said in screen_text(app))
        line = next(line for line in screen_lines(app) if said in line)
        # the side panel's strip ends its lines in "…": none may show at the toast's end
        assert line.rstrip().endswith(said), line


async def test_the_replay_footer_keeps_help_and_quit(tmp_path):
    from gputop_diag.cli import main
    from gputop_diag.recording.store import Recording
    from gputop_diag.tui import GpuTopApp, SnapshotReady

    f = str(tmp_path / "run.jsonl")
    assert main(["--demo", "compute-bound", "record", "-o", f, "--seconds", "2"]) == 0
    app = GpuTopApp(None, replay=Recording.open(f), start_collectors=False)
    async with app.run_test(size=(80, 24)) as pilot:
        for snap in app.replay.snapshots():
            app.post_message(SnapshotReady(app.feeder.add(snap)))
        await pilot.pause()
        for size in ((80, 24), (40, 12), (80, 24)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            footer = screen_lines(app)[-1]
            assert "? help" in footer and "q quit" in footer, (size, footer)
        assert "> faster" in footer and "< slower" in footer  # the replay's own keys too


async def test_a_processs_details_say_that_esc_closes_them():
    app = FedApp("compute-bound")
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ProcessDetailScreen)
        for size in ((80, 24), (40, 12), (80, 24)):
            await pilot.resize_terminal(*size)
            app.feed(1)
            await pilot.pause()
            assert "Esc close" in screen_lines(app)[-1], size
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ProcessDetailScreen)


def first_row_shown(app, table: ProcessTable) -> bool:
    """The table's first row is on the screen (its pid, below the header)."""
    pid = table.coordinate_to_cell_key((0, 0)).row_key.value.split(":")[1]
    return table.scroll_y == 0 and any(pid in line for line in screen_lines(app)[10:])


async def test_a_sort_keeps_the_first_row_in_sight():
    app = FedApp("compute-bound")  # nine processes; six rows fit at 80x24
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        table = app.query_one(ProcessTable)
        await settled(pilot, lambda: table.row_count == 9)
        await pilot.press("right_square_bracket")  # GPU 1 selected: its process comes first
        app.feed(1)
        await pilot.pause()
        assert ", GPU 1 first" in screen_text(app)
        assert table.cursor_row == 0 and first_row_shown(app, table)
        await to_40x12_and_back(app, pilot)
        for key in ("N", "O", "M"):
            await pilot.press(key)
            app.feed(1)
            await pilot.pause()
            assert table.cursor_row == 0 and first_row_shown(app, table), key
        # a process chosen: the cursor follows it, the first row stays in sight as it can
        await pilot.press("down", "down")
        await pilot.pause()
        chosen = table.selected_key
        await pilot.press("O")
        app.feed(1)
        await pilot.pause()
        assert table.selected_key == chosen and table.cursor_row < table.rows_in_view
        assert first_row_shown(app, table)
