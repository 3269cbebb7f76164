"""Each pane's look, pinned: a fixed scenario, simulated time frozen, collectors off."""

from __future__ import annotations

import pytest

from tui_helpers import FedApp

PANES = [("1", "memory"), ("2", "utilization"), ("3", "mapping"), ("4", "xid"), ("5", "driver")]


def _fed(scenario: str, seconds: int):
    app = FedApp(scenario)

    async def run_before(pilot):
        app.feed(seconds)
        await pilot.pause()

    return app, run_before


@pytest.mark.parametrize(("key", "pane"), PANES, ids=[p for _, p in PANES])
def test_pane_compute_bound(snap_compare, key, pane):
    app, feed = _fed("compute-bound", 40)

    async def run_before(pilot):
        await feed(pilot)
        await pilot.press(key)
        await pilot.pause()
        app.feed(1)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_xid_pane_after_gpu_lost(snap_compare):
    app, feed = _fed("xid-79", 100)

    async def run_before(pilot):
        await feed(pilot)
        await pilot.press("4")
        await pilot.pause()
        app.feed(1)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_memory_pane_80x24_input_starved(snap_compare):
    app, feed = _fed("input-starved", 40)
    assert snap_compare(app, terminal_size=(80, 24), run_before=feed)
