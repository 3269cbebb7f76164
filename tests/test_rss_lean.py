"""The live view's memory: the Utilization pane is a few dozen widgets at any width (each
Textual widget costs some 30 KB), and drawing it with one widget per line keeps what a change
writes to the terminal small: the `CutGrid` behind the lines cuts every row at the trace's
chunks, so a cell that changes is written from at most CHUNK - 1 cells before it."""

from __future__ import annotations

import re

import pytest
from test_tui_support import FedApp
from textual._compositor import ChopsUpdate, Compositor

from gputop_diag.tui.panes.utilization import LABEL, UtilizationPane
from gputop_diag.widgets import CutGrid, HistoryLine
from gputop_diag.widgets.trace import CHUNK


def widgets_in(node) -> int:
    return sum(1 for _ in node.walk_children())


@pytest.mark.parametrize("size", [(120, 40), (200, 50)], ids=["120x40", "200x50"])
async def test_the_utilization_pane_is_a_few_dozen_widgets_at_any_width(size):
    app = FedApp("compute-bound")
    async with app.run_test(size=size) as pilot:
        app.feed(3)
        await pilot.press("2")
        app.feed(2)
        await pilot.pause()
        pane = app.query_one(UtilizationPane)
        # a widget per part and per 6-cell chunk of each trace was 263 at 120 columns, 416 at 200
        assert widgets_in(pane) <= 60, widgets_in(pane)
        assert len(pane.query("#util-gpus HistoryLine")) == 8


async def test_a_changed_cell_at_the_end_of_a_trace_is_written_from_the_cut_before_it(
    monkeypatch,
):
    writes: list[str] = []
    render_update = Compositor.render_update

    def spy(self, *args, **kwargs):
        update = render_update(self, *args, **kwargs)
        if isinstance(update, ChopsUpdate):
            writes.append(update.render_segments(app.console))
        return update

    app = FedApp("compute-bound")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.press("2")
        app.feed(2)
        await pilot.pause()
        await pilot.pause()
        grid = app.query_one(CutGrid)
        line = app.query_one("#util-gpu0", HistoryLine)
        assert grid.cuts and line.cuts == grid.cuts
        runs = list(line._runs)
        trace, comp = runs[1]
        x = len(trace) - 2  # a cell near the end of the trace, far from the line's start
        runs[1] = (trace[:x] + ("▁" if trace[x] != "▁" else "█") + trace[x + 1 :], comp)
        monkeypatch.setattr(Compositor, "render_update", spy)
        line.set_runs(runs)
        await pilot.pause()
        written = "".join(writes)
        moves = [int(col) - 1 for col in re.findall(r"\x1b\[\d+;(\d+)H", written)]
        line_x = line.region.x
        assert moves, repr(written)
        # written from the cut before the cell (0-based column), not from the line's start
        assert min(moves) >= line_x + LABEL + 1 + x - (CHUNK - 1), (moves, line_x, x)
        assert len(written.encode()) < 80, repr(written)
