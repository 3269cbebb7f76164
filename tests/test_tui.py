"""The live view driven as a user would: keys, panes, banners, resizing, at 80x24 and 200x50."""

from __future__ import annotations

import json

import pytest
from test_tui_support import FedApp, screen_lines, screen_text
from textual.widgets import ContentSwitcher, DataTable

from gputop_diag.tui import SnapshotReady
from gputop_diag.tui.header import HeaderBar
from gputop_diag.tui.panes.utilization import UtilizationPane
from gputop_diag.tui.side_panel import SidePanel
from gputop_diag.xid.catalog import describe

SIZES = [(80, 24), (200, 50)]
IDS = ["80x24", "200x50"]


def text_of(app, selector: str) -> str:
    w = app.query_one(selector)
    plain = getattr(w, "plain", None)
    return plain if isinstance(plain, str) else str(w.render())


def pane(app) -> str:
    return app.query_one("#panes", ContentSwitcher).current


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_a_snapshot_reaches_the_widgets(size):
    app = FedApp("compute-bound", cached=True)
    async with app.run_test(size=size) as pilot:
        app.feed(20)
        await pilot.pause()
        header = text_of(app, "#header")
        assert "gpu-node-07" in header and "570.124.06" in header and "12.8" in header
        assert "8 GPU" in header
        bar = text_of(app, "#mem-gpu0")
        assert "GPU0" in bar and "/79.6 GiB" in bar and "headroom" in bar
        assert "MiB/min" not in bar and "GROWING" not in bar  # steady memory: no trend
        assert app.query_one("#mem-procs", DataTable).row_count == 9  # 8 ranks, a co-tenant
        side = text_of(app, "#side-text")
        assert "COMPUTE" in side and "% confident" in side
        # evidence lines with numbers: three, two in the strip of a short terminal
        assert side.count("• ") == (2 if size == (80, 24) else 3)
        assert any(ch.isdigit() for ch in side.split("• ")[1])
        if size == (200, 50):
            assert "NEXT CHECKS" in side and "ALERTS" in side
        else:
            assert "next: " in side and "alerts: none" in side


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_number_keys_and_tab_switch_panes(size):
    app = FedApp(cached=True)
    async with app.run_test(size=size) as pilot:
        app.feed(5)
        await pilot.pause()
        for key, name in (("2", "utilization"), ("3", "mapping"), ("4", "xid"), ("5", "driver")):
            await pilot.press(key)
            assert pane(app) == name
        await pilot.press("6")  # no job watched: nothing visible happens
        assert pane(app) == "driver"
        await pilot.press("1")
        assert pane(app) == "memory"
        await pilot.press("tab")
        assert pane(app) == "utilization"
        await pilot.press("shift+tab", "shift+tab")
        assert pane(app) == "driver"  # wraps round, skipping the hidden Job pane
        await pilot.press("tab")
        assert pane(app) == "memory"
        await pilot.press("2")
        await pilot.pause()
        assert "GPU busy time" in text_of(app, "#util-caption")
        assert "GPU0" in text_of(app, "#util-gpu0")


async def test_the_job_pane_and_key_appear_once_a_job_is_set():
    app = FedApp(cached=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(2)
        await pilot.pause()
        footer_keys = {b.key for _, b, _, _ in app.screen.active_bindings.values()}
        assert "6" not in footer_keys
        app.job = "slurm job 4242"
        app.refresh_bindings()
        await pilot.press("6")
        await pilot.pause()
        assert pane(app) == "job" and "slurm job 4242" in text_of(app, "#job-text")
        await pilot.press("tab")
        assert pane(app) == "memory"


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_brackets_select_the_gpu_everywhere(size):
    app = FedApp(cached=True)
    async with app.run_test(size=size) as pilot:
        app.feed(3)
        await pilot.pause()
        assert app.selected_gpu == 0 and text_of(app, "#mem-gpu0").startswith("▶")
        await pilot.press("right_square_bracket")
        assert app.selected_gpu == 1
        assert text_of(app, "#mem-gpu1").startswith("▶")
        assert not text_of(app, "#mem-gpu0").startswith("▶")
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert app.selected_gpu == 7  # wraps round
        assert "GPU7" in text_of(app, "#header")
        await pilot.press("2")
        await pilot.pause()
        assert text_of(app, "#util-title").startswith("GPU 7 — NVIDIA H100")


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_plus_minus_change_the_interval_and_say_so(size):
    app = FedApp()
    async with app.run_test(size=size) as pilot:
        app.feed(2)
        await pilot.pause()
        await pilot.press("plus")
        assert app.interval == 2.0 and "2 s" in text_of(app, "#header")
        await pilot.press("plus", "plus", "plus")
        assert app.interval == 10.0  # the longest
        await pilot.press("minus", "minus", "minus", "minus", "minus")
        assert app.interval == 0.5 and "0.5 s" in text_of(app, "#header")


def toasts(app) -> str:
    return " ".join(str(t.render()) for t in app.screen.query("Toast")).replace("\n", "")


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_s_writes_the_sanitized_report_and_shows_its_path(tmp_path, size):
    app = FedApp(save_dir=str(tmp_path), cached=True)
    async with app.run_test(size=size, notifications=True) as pilot:
        await pilot.press("s")  # before any sample: says so, writes nothing
        await pilot.pause()
        assert not list(tmp_path.iterdir()) and "nothing sampled yet" in toasts(app)
        app.feed(5)
        await pilot.pause()
        await pilot.press("s")  # built in a worker thread
        js, md = await wait_for_files(pilot, tmp_path, "gputop-diag-report-*", 2)
        await pilot.pause()
        assert md.suffix == ".md" and js.suffix == ".json"
        text = md.read_text()
        assert text.startswith("# gputop-diag report") and "## Diagnosis" in text
        assert "gpu-node-07" not in text and "alice" not in text  # sanitized, always
        assert json.loads(js.read_text())["schema"] == "gputop-diag.report/1"
        assert json.loads(js.read_text())["window"]["samples"] == 5  # what the view holds
        assert str(md.resolve()) in toasts(app) and js.name in toasts(app)
        assert app.saver.last_saved == str(md)
        if size == (200, 50):
            assert f"saved {md.name}" in text_of(app, "#header")


async def test_the_report_falls_back_when_the_save_dir_cannot_be_written(tmp_path, monkeypatch):
    locked = tmp_path / "locked"  # a file where the directory should be: nobody writes there
    locked.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    app = FedApp(save_dir=str(locked), cached=True)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        app.feed(3)
        await pilot.pause()
        await pilot.press("s")
        state = tmp_path / "state" / "gputop-diag"
        found = await wait_for_files(pilot, state, "gputop-diag-report-*.md", 1)
        await pilot.pause()
        assert len(found) == 1
        said = toasts(app)
        assert str(found[0]) in said and "not to" in said and "locked" in said


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_capital_s_writes_the_snapshot_with_the_xid_history(tmp_path, size):
    app = FedApp("xid-79", save_dir=str(tmp_path), cached=True)
    async with app.run_test(size=size, notifications=True) as pilot:
        app.feed(100)  # GPU 3 falls off the bus at 90 s (Xid 79)
        app.feed(5)
        await pilot.pause()
        assert not app.latest.snapshot.xid_events  # the last tick saw none
        await pilot.press("S")
        await pilot.pause()
        files = list(tmp_path.glob("gputop-diag-snapshot-*-*.json"))
        assert len(files) == 1
        doc = json.loads(files[0].read_text())
        assert doc["schema"] == "gputop-diag.snapshot/1" and len(doc["gpus"]) == 8
        shown = app.latest.xid_events
        assert shown and [x["xid"] for x in doc["xid_events"]] == [x.xid for x in shown[::-1]]
        assert any(e["kind"] == "xid" and e["code"] == 79 for e in doc["xid_history"])
        assert app.saver.last_saved == str(files[0])
        assert str(files[0].resolve()) in toasts(app)
        if size == (200, 50):
            assert f"saved {files[0].name}" in text_of(app, "#header")


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_help_screen_lists_the_keys_and_q_quits(size):
    app = FedApp(cached=True)
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert app.screen.__class__.__name__ == "HelpScreen"
        help_text = text_of(app.screen, "#help-text")
        for words in ("space", "pause", "[", "select the previous GPU", "+", "s ", "quit"):
            assert words in help_text
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.__class__.__name__ != "HelpScreen"
        await pilot.press("q")
    assert app.return_code == 0


async def test_footer_shows_the_keys_at_80_columns():
    app = FedApp(cached=True)
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(2)
        await pilot.pause()
        footer = screen_lines(app)[-1]  # what the bottom row shows, cut to 80 columns
        for words in ("panes", "GPU", "pause", "report", "help", "quit"):
            assert words in footer


async def test_lost_gpu_mid_run_shows_the_banner_and_the_rest_goes_on():
    app = FedApp("xid-79", cached=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(30)
        await pilot.pause()
        assert not app.query_one("#banner").display
        app.feed(70)
        await pilot.pause()
        banner = app.query_one("#banner")
        assert banner.display and banner.has_class("-critical")
        assert "GPU 3" in text_of(app, "#banner") and "is lost" in text_of(app, "#banner")
        assert "next:" in text_of(app, "#banner")
        assert "LOST" in text_of(app, "#mem-gpu3")
        assert "/79.6" in text_of(app, "#mem-gpu2")  # the others still report
        side = text_of(app, "#side-text")
        assert "Xid 79" in side and "GPU 3 is lost" in side
        await pilot.press("4")
        await pilot.pause()
        app.monitor.xid_history(wait=10)  # the pane asked for the kernel log: let it be read
        await pilot.pause()
        table = app.query_one("#xid-table", DataTable)
        rows = [[str(c) for c in table.get_row_at(k)][2:6] for k in range(table.row_count)]
        # NVML's Xid 79, also in the journal with the driver's own "fallen off the bus" line:
        # one fall, one row
        assert rows == [["3", "79", "FALLEN_OFF_BUS", "journal,nvml"]]
        await pilot.press("down")
        await pilot.pause()
        detail = text_of(app, "#xid-detail")
        step = describe(79)[2]  # the catalog's next step for Xid 79
        assert "Xid 79 FALLEN_OFF_BUS on GPU 3" in detail and f"next: {step[:30]}" in detail


async def test_the_banner_is_wrapped_again_only_when_its_errors_or_width_change(monkeypatch):
    from gputop_diag.tui import CollectorFailed
    from gputop_diag.tui import banner as banner_module

    app = FedApp("xid-79", cached=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(100)  # GPU 3 falls off the bus after tick 30
        await pilot.pause()
        wrapped = []
        real = banner_module.hang_text
        monkeypatch.setattr(banner_module, "hang_text", lambda *a: wrapped.append(1) or real(*a))
        app.feed(3)  # the same GPU lost each tick: the banner as it was
        await pilot.pause()
        assert wrapped == [] and "is lost" in text_of(app, "#banner")
        await pilot.resize_terminal(100, 40)  # a new width: wrapped again, to it
        await pilot.pause()
        assert wrapped and "is lost" in text_of(app, "#banner")
        app.post_message(CollectorFailed("sampler", "sampling failed: OSError: boom", "retry"))
        await pilot.pause()
        assert "boom" in text_of(app, "#banner") and "is lost" in text_of(app, "#banner")
        app.feed(1)  # the failure cleared: the lost GPU alone again
        await pilot.pause()
        assert "boom" not in text_of(app, "#banner") and "is lost" in text_of(app, "#banner")


async def test_missing_driver_banner_and_the_app_keeps_running(tmp_path):
    app = FedApp("no-gpu", save_dir=str(tmp_path), cached=True)
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        await pilot.pause()
        assert "libnvidia-ml.so.1" in text_of(app, "#banner") and "next:" in text_of(app, "#banner")
        assert "INSUFFICIENT DATA" in text_of(app, "#side-text")
        await pilot.press("2")
        await pilot.pause()
        assert "CPU" in text_of(app, "#util-cpu")
        await pilot.press("right_square_bracket", "s")  # no GPU to select: no crash


async def test_a_failing_collector_shows_a_banner_and_the_view_keeps_its_figures():
    from gputop_diag.tui import CollectorFailed

    app = FedApp(cached=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.pause()
        app.post_message(CollectorFailed("sampler", "sampling failed: OSError: boom", "retry"))
        await pilot.pause()
        assert "boom" in text_of(app, "#banner") and "next: retry" in text_of(app, "#banner")
        assert "/79.6" in text_of(app, "#mem-gpu0")
        app.feed(1)  # the next good tick clears it
        await pilot.pause()
        assert not app.query_one("#banner").display


async def test_narrow_terminal_puts_a_strip_below_and_p_shows_all_of_it():
    app = FedApp(cached=True)
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(5)
        await pilot.pause()
        assert app.screen.has_class("-narrow")
        side = app.query_one(SidePanel)
        assert side.region.y > 3 and side.region.width >= 78  # below the pane, full width
        assert side.region.height <= 7 and side.strip
        await pilot.press("p")
        await pilot.pause()
        assert not app.query_one("#panes").display  # the panel covers the pane
        assert "NEXT CHECKS" in text_of(app, "#side-text")
        await pilot.press("2")  # a pane key brings the pane back
        await pilot.pause()
        assert app.query_one("#panes").display and pane(app) == "utilization"
        await pilot.resize_terminal(160, 40)
        await pilot.pause()
        assert not app.screen.has_class("-narrow") and side.region.x > 100  # docked right


async def test_wide_terminal_p_hides_and_shows_the_panel():
    app = FedApp(cached=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(2)
        await pilot.pause()
        side = app.query_one(SidePanel)
        assert side.display and side.region.x > 120 and side.region.width >= 60
        await pilot.press("p")
        await pilot.pause()
        assert not side.display
        await pilot.press("p")
        await pilot.pause()
        assert side.display


async def test_header_fits_80_columns_with_every_state_shown(tmp_path):
    app = FedApp(save_dir=str(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(2)
        await pilot.pause()
        await pilot.press("s", "space")
        await pilot.pause()
        header = app.query_one(HeaderBar).plain
        assert len(header) <= 80
        for words in ("gpu-node-07", "570.124.06", "12.8", "8 GPU", "1 s", "PAUSED"):
            assert words in header


def identifiers(snap) -> set[str]:
    """What identifies this machine and its people in a sampled snapshot, in the forms they
    are written in: the host name, GPU and MIG UUIDs, serials, PCI bus ids (NVML's, the
    kernel's and the short form), user names and home directories."""
    out = {snap.system.hostname, snap.system.hostname.split(".")[0]}
    for g in snap.gpus:
        st = g.static
        out |= {st.uuid, st.uuid.removeprefix("GPU-"), st.serial}
        bus = st.pci_bus_id.lower()  # 00000000:18:00.0
        out |= {bus, bus[4:], bus.split(":", 1)[1], bus[4:].rsplit(".", 1)[0]}
        out |= {m.uuid for m in g.mig_instances if m.uuid}
    for p in snap.processes:
        if p.user:
            out |= {p.user, f"/home/{p.user}"}
    return {x.lower() for x in out if x and len(x) > 2}


def everything_shown(app) -> str:
    """The screen as drawn, and the whole content of every widget on it (rows and lines
    scrolled out of sight included)."""
    parts = [screen_text(app)]
    for w in app.screen.walk_children():
        if isinstance(w, DataTable):
            parts += [str(c.label) for c in w.columns.values()]
            for key in w.rows:
                parts += [str(c) for c in w.get_row(key)]
        else:
            plain = getattr(w, "plain", None)
            parts.append(plain if isinstance(plain, str) else "")
    return "\n".join(parts)


async def wait_for_files(pilot, folder, pattern: str, n: int) -> list:
    for _ in range(200):
        found = sorted(folder.glob(pattern))
        if len(found) >= n:
            return found
        await pilot.pause(0.05)
    return sorted(folder.glob(pattern))


@pytest.mark.parametrize("scenario", ["xid-79", "mig"])
async def test_sanitize_hides_identifiers_on_every_pane_and_in_the_saved_files(tmp_path, scenario):
    app = FedApp(scenario, sanitize=True, save_dir=str(tmp_path), cached=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(30)
        await pilot.pause()
        secret = identifiers(app.monitor.window()[0][-1])  # as sampled
        environ = app.sim_sources.environ
        secret |= {environ["USER"].lower(), environ["HOME"].lower()}
        assert "gpu-node-07" in secret and app.latest.snapshot.gpus
        shown = []
        for key in ("1", "2", "3", "4", "5"):
            await pilot.press(key)
            await pilot.pause()
            shown.append(everything_shown(app))
        assert "host-" in text_of(app, "#header")  # the host's pseudonym, not its name
        await pilot.press("1")
        procs = app.query_one("#mem-procs", DataTable)
        users = {str(procs.get_cell(k, "user")) for k in procs.rows}
        assert users and all(u.startswith("user-") for u in users)
        assert users <= {p.user for p in app.latest.snapshot.processes}  # whole, not cut
        await pilot.press("s")
        reports = await wait_for_files(pilot, tmp_path, "gputop-diag-report-*", 2)
        await pilot.press("S")
        await pilot.pause()
        snapshots = list(tmp_path.glob("gputop-diag-snapshot-*.json"))
    assert [p.suffix for p in reports] == [".json", ".md"] and len(snapshots) == 1
    doc = json.loads(snapshots[0].read_text())
    assert doc["sanitized"] is True and "xid_history" in doc
    files = [p.read_text() for p in (*reports, *snapshots)]
    assert "## Diagnosis" in files[1]
    assert all(u in files[1] for u in users)  # one key for the session: the screen's names
    named = [*zip("12345", shown, strict=True)]
    named += zip(("report.json", "report.md", "S"), files, strict=True)
    for where, text in named:
        low = text.lower()
        leaked = sorted(x for x in secret if x in low)
        assert not leaked, f"{where}: {leaked}"


async def test_table_rows_are_updated_in_place_never_cleared(monkeypatch):
    cleared = []
    monkeypatch.setattr(DataTable, "clear", lambda self, *a, **k: cleared.append(self.id))
    app = FedApp("memory-leak", cached=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(5)
        await pilot.pause()
        table = app.query_one("#mem-procs", DataTable)
        keys = [k.value for k in table.rows]
        before = [str(c) for c in table.get_row(keys[0])]
        app.feed(60)
        await pilot.pause()
        assert [k.value for k in table.rows] == keys  # same rows, same order
        assert [str(c) for c in table.get_row(keys[0])] != before  # the leak moved figures
        assert cleared == []


async def test_only_the_visible_pane_renders(monkeypatch):
    calls = []
    original = UtilizationPane.show
    monkeypatch.setattr(
        UtilizationPane, "show", lambda self, u, v: (calls.append(1), original(self, u, v))
    )
    app = FedApp(cached=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(5)
        await pilot.pause()
        assert calls == []  # the Memory pane is showing
        await pilot.press("2")
        await pilot.pause()
        n = len(calls)
        app.feed(3)  # three ticks queued at once: drawn once, as the newest
        await pilot.pause()
        assert len(calls) == n + 1
        assert app.latest.snapshot.timestamp == app.monitor.history.latest.timestamp
        for _ in range(2):  # a tick at a time: a frame each
            app.feed(1)
            await pilot.pause()
        assert len(calls) == n + 3


async def test_a_bare_snapshot_message_is_enough():
    """One tick of the app's Monitor is all the screen needs: a diagnosis, the slow sources."""
    app = FedApp()
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(SnapshotReady(app.feeder.tick()))
        await pilot.pause()
        assert app.latest.diagnosis is not None
        snap = app.monitor.history.latest
        # the same tick, with the slow sources (Slurm, the kernel log) attached by the Monitor
        assert app.latest.snapshot.timestamp == snap.timestamp == app.sim_sources.clock.now()
        assert app.latest.snapshot.gpus == snap.gpus and app.latest.snapshot.slow_sources_at
        assert "/79.6" in text_of(app, "#mem-gpu0")


async def test_capacity_oom_kill_from_the_kernel_log_reaches_the_panel():
    app = FedApp("capacity", cached=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(60)
        await pilot.pause()
        side = text_of(app, "#side-text")
        assert "CAPACITY" in side and "OOM" in side


async def test_memory_leak_flags_a_growing_gpu():
    app = FedApp("memory-leak", cached=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(90)
        await pilot.pause()
        assert all("GROWING" in text_of(app, f"#mem-gpu{i}") for i in range(8))
        assert "MiB/min" in text_of(app, "#mem-gpu0")


async def test_steady_memory_is_not_flagged():
    app = FedApp("compute-bound", cached=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(60)
        await pilot.pause()
        assert not any("GROWING" in text_of(app, f"#mem-gpu{i}") for i in range(8))


async def test_bracketed_text_in_a_command_line_is_shown_as_text_not_markup():
    app = FedApp("compute-bound")
    proc = next(p for p in app.sim_sources.sim.procs.values() if p.role == "rank")
    proc.cmdline = ("python", "train.py", "[bold]x[/]", "--tag=[/oops]")
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(3)
        await pilot.pause()
        table = app.query_one("#mem-procs", DataTable)
        cells = [str(table.get_cell(k, "command")) for k in table.rows]
        assert any("[bold]x[/] --tag=[/oops]" in c for c in cells)


async def test_no_color_keeps_every_state_in_words(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = FedApp("xid-79", cached=True)
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.no_color
        app.feed(100)
        await pilot.pause()
        assert "!" in text_of(app, "#banner") and "LOST" in text_of(app, "#mem-gpu3")
        assert "!!" in text_of(app, "#side-text")  # a critical alert, marked in text
        svg = app.export_screenshot()
        assert "GPU 3 is lost" in svg.replace("&#160;", " ")


async def test_sanitize_covers_ticks_from_a_feed_without_the_sanitizer(tmp_path, capsys):
    """A feed of another kind (a recording made without --sanitize) is sanitized on its way
    to the screen: the replay's Feeder carries the session's sanitizer."""
    from gputop_diag.cli import main
    from gputop_diag.recording.store import Recording
    from gputop_diag.tui import GpuTopApp

    f = str(tmp_path / "raw.jsonl")
    assert main(["--demo", "compute-bound", "record", "-o", f, "--seconds", "2"]) == 0
    app = GpuTopApp(None, replay=Recording.open(f), sanitize=True, start_collectors=False)
    async with app.run_test(size=(120, 40)) as pilot:
        for snap in app.replay.snapshots():  # what the replay's player posts, tick by tick
            app.post_message(SnapshotReady(app.feeder.add(snap)))
        await pilot.pause()
        shown = everything_shown(app).lower()
        assert "host-" in shown
        leaked = sorted(x for x in identifiers(snap) if x in shown)
        assert not leaked
