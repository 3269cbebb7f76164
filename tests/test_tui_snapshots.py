"""Each pane's look, pinned: a fixed scenario, simulated time frozen, collectors off.

Accept a deliberate change with `pytest tests/test_tui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import pytest
from test_tui_support import FedApp

PANES = [("1", "memory"), ("2", "utilization"), ("3", "mapping"), ("4", "xid"), ("5", "driver")]


def fed(scenario: str, seconds: int, *keys: str):
    """An app fed `seconds` of `scenario`, then `keys` pressed, then one more tick."""
    app = FedApp(scenario)

    async def run_before(pilot):
        app.feed(seconds)
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        app.feed(1)
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
