"""The live view driven as a user would: keys, panes, banners, resizing."""

from __future__ import annotations

import json
import os
import signal

import pytest
from textual.widgets import ContentSwitcher, DataTable, Static

from gputop_diag.tui.app import GpuTopApp
from gputop_diag.tui.side_panel import SidePanel
from tui_helpers import FedApp

SIZES = [(80, 24), (200, 50)]


def text_of(app, selector: str) -> str:
    return str(app.query_one(selector, Static).render())


@pytest.mark.parametrize("size", SIZES)
async def test_a_snapshot_reaches_the_widgets(size):
    app = FedApp("compute-bound")
    async with app.run_test(size=size) as pilot:
        app.feed(20)
        await pilot.pause()
        assert "gpu-node-07" in text_of(app, "#header")
        assert "driver 570.124.06" in text_of(app, "#header")
        assert "GPU0" in text_of(app, "#mem-bars")
        table = app.query_one("#mem-procs", DataTable)
        assert table.row_count == 9  # 8 ranks and a co-tenant
        assert "COMPUTE" in text_of(app, "#side-text")


@pytest.mark.parametrize("size", SIZES)
async def test_number_keys_and_tab_switch_panes(size):
    app = FedApp()
    async with app.run_test(size=size) as pilot:
        app.feed(5)
        await pilot.pause()
        switcher = app.query_one("#panes", ContentSwitcher)
        for key, pane in (
            ("2", "utilization"),
            ("3", "mapping"),
            ("4", "xid"),
            ("5", "driver"),
            ("6", "job"),
            ("1", "memory"),
        ):
            await pilot.press(key)
            assert switcher.current == pane
        await pilot.press("tab")
        assert switcher.current == "utilization"
        await pilot.press("shift+tab")
        assert switcher.current == "memory"
        await pilot.press("2")
        await pilot.pause()
        assert "GPU busy time" in text_of(app, "#util-all")


async def test_gpu_selection_pause_interval_refresh():
    app = FedApp()
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.pause()
        await pilot.press("right_square_bracket")
        assert app.selected_gpu == 1
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert app.selected_gpu == 7
        await pilot.press("space")
        assert app.paused and "PAUSED" in text_of(app, "#header")
        await pilot.press("space")
        assert not app.paused
        await pilot.press("plus")
        assert app.interval == 2.0 and "every 2 s" in text_of(app, "#header")
        await pilot.press("minus", "minus")
        assert app.interval == 0.5
        app.paused = True
        await pilot.press("r")
        assert not app.paused  # refresh now resumes and wakes the collector


async def test_s_writes_a_snapshot_and_shows_its_path(tmp_path):
    app = FedApp(save_dir=str(tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(2)
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause()
        files = list(tmp_path.glob("gputop-diag-snapshot-*.json"))
        assert len(files) == 1
        assert json.loads(files[0].read_text())["schema"] == "gputop-diag.snapshot/1"
        assert str(files[0]) in text_of(app, "#header")


async def test_help_screen_and_quit():
    app = FedApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert app.screen.__class__.__name__ == "HelpScreen"
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.__class__.__name__ != "HelpScreen"
        await pilot.press("q")
    assert app.return_code == 0


async def test_lost_gpu_mid_run_shows_the_banner():
    app = FedApp("xid-79")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(30)
        await pilot.pause()
        assert not app.query_one("#banner").display
        app.feed(70)
        await pilot.pause()
        banner = app.query_one("#banner")
        assert banner.display
        assert "GPU 3 is lost" in text_of(app, "#banner")
        assert "next:" in text_of(app, "#banner")
        assert "LOST" in text_of(app, "#mem-bars")
        side = text_of(app, "#side-text")
        assert "Xid 79" in side and "GPU 3 is lost" in side
        await pilot.press("4")
        await pilot.pause()
        assert app.query_one("#xid-table", DataTable).row_count == 1
        assert "FALLEN_OFF_BUS" in text_of(app, "#xid-detail")


async def test_missing_driver_banner_and_the_app_keeps_running():
    app = FedApp("no-gpu")
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        await pilot.pause()
        assert "libnvidia-ml.so.1" in text_of(app, "#banner")
        assert "INSUFFICIENT DATA" in text_of(app, "#side-text")
        await pilot.press("2")
        await pilot.pause()
        assert "CPU" in text_of(app, "#util-host")


async def test_resize_down_to_40x12_does_not_crash():
    app = FedApp()
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(5)
        await pilot.pause()
        for size in ((80, 24), (40, 12), (99, 30), (200, 50)):
            await pilot.resize_terminal(*size)
            app.feed(1)
            await pilot.pause()
        assert "COMPUTE" in text_of(app, "#side-text")


async def test_narrow_terminal_moves_the_panel_below_and_p_toggles_it():
    app = FedApp()
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(5)
        await pilot.pause()
        assert app.screen.has_class("-narrow")
        side = app.query_one(SidePanel)
        assert side.region.y > 3 and side.region.width >= 70  # below the pane, full width
        await pilot.press("p")
        assert not side.display
        await pilot.resize_terminal(160, 40)
        await pilot.pause()
        assert not app.screen.has_class("-narrow")


async def test_sanitize_hides_identifiers_on_screen_and_in_the_saved_snapshot(tmp_path):
    app = FedApp(sanitize=True)
    async with app.run_test(size=(120, 30)) as pilot:
        app.feed(2)
        await pilot.pause()
        header = text_of(app, "#header")
        assert "host0" in header and "gpu-node-07" not in header
        await pilot.press("3")
        await pilot.pause()
        row = [str(c) for c in app.query_one("#map-table", DataTable).get_row("gpu0")]
        assert row[4] == "bus-0" and row[5] == "GPU-0"
        procs = app.query_one("#mem-procs", DataTable)
        users = {str(procs.get_row(k)[1]) for k in procs.rows}
        assert users <= {"user0", "user1"}
        app.save_dir = str(tmp_path)
        await pilot.press("s")
        await pilot.pause()
        saved = next(tmp_path.glob("*.json")).read_text()
        uuid = app.latest.snapshot.gpus[0].static.uuid
        for secret in ("gpu-node-07", uuid, "alice", "bob", "/home/", ":18:00.0"):
            assert secret not in saved


async def test_mapping_pane_shows_minor_numbers_and_device_nodes():
    app = FedApp()
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(2)
        await pilot.press("3")
        await pilot.pause()
        table = app.query_one("#map-table", DataTable)
        row = [str(c) for c in table.get_row("gpu0")]
        assert row[0] == "0" and row[2] == "2" and row[3] == "/dev/nvidia2"
        assert row[4].endswith(":18:00.0") and row[5].startswith("GPU-")


async def test_table_rows_are_updated_in_place_not_rebuilt():
    app = FedApp()
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(2)
        await pilot.pause()
        table = app.query_one("#mem-procs", DataTable)
        keys = [k.value for k in table.rows]
        app.feed(3)
        await pilot.pause()
        assert [k.value for k in table.rows] == keys


async def test_collectors_run_in_a_thread_and_stop_on_quit():
    from gputop_diag import sim

    app = GpuTopApp(sim.build("idle", realtime=True), interval=0.2)
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(30):
            await pilot.pause(0.1)
            if app.latest is not None:
                break
        assert app.latest is not None and len(app.latest.snapshot.gpus) == 8
        await pilot.press("q")
    assert app._stop.is_set()
    assert all(w.is_finished for w in app.workers)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
def test_sighup_ends_the_program_cleanly(tmp_path):
    """Run the real program under a pseudo-terminal and hang up on it."""
    import pty
    import subprocess
    import sys
    import time

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
        while time.time() < deadline and b"BOTTLENECK" not in seen:
            try:
                import select

                if select.select([master], [], [], 0.5)[0]:
                    seen += os.read(master, 65536)
            except OSError:
                break
        assert b"BOTTLENECK" in seen
        p.send_signal(signal.SIGHUP)
        assert p.wait(timeout=10) in (0, -signal.SIGHUP)
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)


async def test_low_bandwidth_uses_plain_glyphs_and_a_longer_interval():
    app = FedApp(low_bandwidth=True, interval=2.0)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(20)
        await pilot.press("2")
        await pilot.pause()
        text = text_of(app, "#util-all")
        assert not set(text) & set("▁▂▃▄▅▆▇█")
        await pilot.press("minus", "minus")
        assert app.interval == 2.0  # never below 2 s on a slow link
        assert app.animation_level == "none"


async def test_capacity_oom_kill_from_the_kernel_log_reaches_the_panel():
    app = FedApp("capacity")
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(60)
        await pilot.pause()
        side = text_of(app, "#side-text")
        assert "CAPACITY" in side and "OOM" in side


async def test_bracketed_text_in_a_command_line_is_shown_as_text_not_markup():
    app = FedApp("compute-bound")
    proc = next(p for p in app.sim_sources.sim.procs.values() if p.role == "rank")
    proc.cmdline = ("python", "train.py", "[bold]x[/]", "--tag=[/oops]")
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(3)
        await pilot.pause()
        table = app.query_one("#mem-procs", DataTable)
        cells = [str(table.get_row(k)[3]) for k in table.rows]
        assert any("[bold]x[/]" in c for c in cells)


async def test_xid_events_newest_first_and_detail_follows_the_cursor():
    app = FedApp("xid-app")
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(40)
        await pilot.press("4")
        await pilot.pause()
        app.feed(60)
        await pilot.pause()
        table = app.query_one("#xid-table", DataTable)
        times = [str(table.get_row(k)[0]) for k in table.rows]
        assert len(times) >= 3 and times == sorted(times, reverse=True)
        codes = [str(table.get_row(k)[2]) for k in table.rows]
        for row, code in enumerate(codes[:3]):
            table.move_cursor(row=row)
            await pilot.pause()
            assert text_of(app, "#xid-detail").startswith(f"Xid {code} ")
