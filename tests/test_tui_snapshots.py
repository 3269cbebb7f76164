"""Each pane's look, pinned: a fixed scenario, simulated time frozen, collectors off; and
frames taken after the content changed (growth, a lost GPU, a hidden pane, a resize), where
the first frame alone hid the bugs.

Accept a deliberate change with `pytest tests/test_tui_snapshots.py --snapshot-update`, and
look at the SVGs before committing them.
"""

from __future__ import annotations

import pytest
from test_tui_support import FedApp

PANES = [("1", "memory"), ("2", "utilization"), ("3", "mapping"), ("4", "xid"), ("5", "driver")]


def fed(scenario: str, seconds: int, *keys: str, **kw):
    """An app fed `seconds` of `scenario`, then `keys` pressed, then one more tick."""
    app = FedApp(scenario, **kw, cached=True)

    async def run_before(pilot):
        app.feed(seconds)
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        if "4" in keys:  # the Xid pane asked for the kernel log before the run: let it finish
            app.monitor.xid_history(wait=10)
            await pilot.pause()
        app.feed(1)
        await pilot.pause()
        # a key that resized the pane (`p`) posts Pane.Resized, whose repaint posts again:
        # the picture is taken once that chain has run, however busy the machine is
        await pilot.pause()
        await pilot.pause()

    return app, run_before


@pytest.mark.parametrize(("key", "pane"), PANES, ids=[p for _, p in PANES])
def test_pane_compute_bound(snap_compare, key, pane):
    app, run_before = fed("compute-bound", 40, key)
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_xid_pane_after_gpu_lost(snap_compare):
    app, run_before = fed("xid-79", 100, "4")
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_memory_pane_80x24_input_starved(snap_compare):
    app, run_before = fed("input-starved", 40)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_utilization_pane_80x24_input_starved(snap_compare):
    app, run_before = fed("input-starved", 40, "2")
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_whole_panel_80x24_after_gpu_lost(snap_compare):
    app, run_before = fed("xid-79", 100, "p")
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_no_driver_banner_80x24(snap_compare):
    app, run_before = fed("no-gpu", 5)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


# -- frames after the content changed ---------------------------------------------------------


def test_memory_growth_80x24_after_a_minute(snap_compare):
    """The first frame had no trend; a minute later the rate and GROWING fit on every row."""
    app = FedApp("memory-leak", cached=True)

    async def run_before(pilot):
        app.feed(3)
        await pilot.pause()
        app.feed(60)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_gpu_lost_mid_run_memory_and_utilization_120x40(snap_compare):
    """GPU 3 reported for 90 s, then fell off the bus: its rows say LOST, the rest go on."""
    app = FedApp("xid-79", cached=True)

    async def run_before(pilot):
        await pilot.press("2")
        app.feed(60)
        await pilot.pause()
        app.feed(45)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_xid_events_that_arrived_while_hidden_120x40(snap_compare):
    """The Xid pane was shown empty, hidden while the event came, and shown again."""
    app = FedApp("xid-79", cached=True)

    async def run_before(pilot):
        app.feed(5)
        await pilot.press("4")
        await pilot.pause()
        await pilot.press("1")
        app.feed(95)
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_resized_wide_and_back_80x24(snap_compare):
    """Ticks at 80x24, 200x50 and 80x24 again: the widths follow, nothing keeps a stale cut."""
    app = FedApp("memory-leak", cached=True)

    async def run_before(pilot):
        app.feed(20)
        await pilot.pause()
        await pilot.resize_terminal(200, 50)
        app.feed(20)
        await pilot.pause()
        await pilot.resize_terminal(80, 24)
        app.feed(20)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_panel_hidden_and_shown_again_120x40(snap_compare):
    app, run_before = fed("memory-leak", 50, "p", "p")
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_wide_200x50_filtered_and_sorted(snap_compare):
    """The panel takes a third of a wide terminal; a filter shows in the tab strip."""
    app = FedApp("compute-bound", cached=True)

    async def run_before(pilot):
        app.feed(30)
        await pilot.pause()
        await pilot.press("right_square_bracket", "g", "P")
        await pilot.pause()
        app.feed(1)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(200, 50), run_before=run_before)


def test_low_bandwidth_utilization_80x24(snap_compare):
    app, run_before = fed("input-starved", 60, "2", low_bandwidth=True, interval=2.0)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_owner_column_and_namespace_pids_200x50_comm_bound(snap_compare):
    """The panel hidden: USER and OWNER side by side (`pod NS/NAME` whole), and each rank's
    pid in its pod's PID namespace beside the host's."""
    app, run_before = fed("comm-bound", 30, "p")
    assert snap_compare(app, terminal_size=(200, 50), run_before=run_before)
