"""The Xid pane with the app's own Monitor: the kernel log before the run, the triage under the
table, plain kernel text, and --sanitize."""

from __future__ import annotations

import re

import pytest
from test_tui_support import FedApp

from gputop_diag.cli import main
from gputop_diag.recording.store import Recording
from gputop_diag.tui import GpuTopApp, SnapshotReady

MonitoredApp = FedApp  # the app's own Monitor ticked by the test, as its collector thread does


def text_of(app, selector: str) -> str:
    """The text, its lines (wrapped with hanging indents to the pane) joined again."""
    return re.sub(r"\n *", " ", app.query_one(selector).plain)


def with_history(app: MonitoredApp) -> None:
    """Lines the kernel logged hours before the run: a memory error, then a failed remap,
    with kernel text that looks like markup."""
    src = app.sim_sources
    gpu1 = src.sim.gpus[1]
    start = src.clock.now()
    for dt, text in (
        (
            -7200.0,
            f"NVRM: Xid (PCI:{gpu1.xid_pci}): 48, pid=4242, name=secret_proj, "
            "DBE [bold]at[/bold] partition 6",
        ),
        (
            -7199.0,
            f"NVRM: Xid (PCI:{gpu1.xid_pci}): 64, pid='<unknown>', name=<unknown>, "
            "Row remapping failed",
        ),
    ):
        src.sim.kernel_lines.append((start + dt, text))
    src.sim.kernel_lines.sort(key=lambda x: x[0])


async def test_the_pane_shows_the_log_before_the_run_and_the_triage():
    app = MonitoredApp("compute-bound")
    with_history(app)
    async with app.run_test(size=(140, 50)) as pilot:
        await pilot.press("4")
        app.feed(2)  # the first show starts the background read
        await pilot.pause()
        app.feeder.monitor.xid_history(wait=10)
        app.feed(1)
        await pilot.pause()
        table = app.query_one("#xid-table")
        rows = [[str(c) for c in table.get_row_at(k)] for k in range(table.row_count)]
        assert [r[2:5] for r in rows] == [["1", "64", "ROW_REMAP_FAILURE"], ["1", "48", "ECC_DBE"]]
        triage = text_of(app, "#xid-triage")
        assert "Kernel log read (journal), 2 driver events" in triage
        assert "Xid 48 ECC_DBE → Xid 64 ROW_REMAP_FAILURE on GPU 1" in triage
        assert triage.index("ask:") < triage.index("Then:")
        await pilot.press("down")
        await pilot.pause()
        detail = text_of(app, "#xid-detail")
        assert "Xid 48 ECC_DBE on GPU 1 (critical)" in detail
        assert "next: Did the driver retire or remap the page" in detail
        assert "DBE [bold]at[/bold] partition 6" in detail  # plain text, not markup
        assert "secret_proj" in detail


async def test_sanitize_hides_kernel_text_and_process_names():
    app = MonitoredApp("compute-bound", sanitize=True)
    with_history(app)
    async with app.run_test(size=(140, 50)) as pilot:
        await pilot.press("4")
        app.feed(1)
        app.feeder.monitor.xid_history(wait=10)
        app.feed(1)
        await pilot.pause()
        await pilot.press("down")
        await pilot.pause()
        shown = text_of(app, "#xid-detail") + text_of(app, "#xid-triage")
        assert "Xid 48 ECC_DBE" in shown and "(hidden under --sanitize)" in shown
        for secret in ("secret_proj", "partition 6", app.sim_sources.sim.gpus[1].uuid):
            assert secret not in shown


async def test_a_replay_says_the_log_before_it_is_not_read(tmp_path, capsys):
    f = str(tmp_path / "xid.jsonl")
    assert main(["--demo", "xid-79", "record", "-o", f, "--seconds", "99"]) == 0
    app = GpuTopApp(None, replay=Recording.open(f), start_collectors=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        for snap in app.replay.snapshots():  # what the replay's player posts, tick by tick
            app.post_message(SnapshotReady(app.feeder.add(snap)))
        await pilot.pause()
        assert "a recording holds the Xid events it recorded" in text_of(app, "#xid-triage")
        assert "Xid 79 FALLEN_OFF_BUS on GPU 3" in text_of(app, "#xid-triage")


async def test_the_log_before_the_run_shows_once_read_without_another_tick():
    """Showing the pane asks the Monitor for the kernel log before the run; when the read
    ends the pane shows it at once (a paused view does not wait for the next tick)."""
    import asyncio

    app = MonitoredApp("compute-bound")
    with_history(app)
    async with app.run_test(size=(140, 50)) as pilot:
        app.feed(2)
        await pilot.press("space", "4")  # paused: no tick will come
        for _ in range(200):
            await pilot.pause()
            if "Kernel log read" in text_of(app, "#xid-triage"):
                break
            await asyncio.sleep(0.05)
        assert app.latest.ticks == 2
        assert "Kernel log read (journal), 2 driver events" in text_of(app, "#xid-triage")
        assert app.query_one("#xid-table").row_count == 2


@pytest.mark.slow
async def test_one_fall_off_gives_its_action_once():
    """The selected event's step is not given again by the route and the chain below it."""
    app = MonitoredApp("xid-79")
    async with app.run_test(size=(120, 60)) as pilot:
        app.feed(100)
        await pilot.press("4")
        await pilot.pause()
        shown = text_of(app, "#xid-detail") + " " + text_of(app, "#xid-triage")
        assert shown.count("drain the node and reboot") == 1, shown
        assert "Xid 79 FALLEN_OFF_BUS on GPU 3 (critical): its question and step as above" in shown
