"""The live view's memory: the Utilization pane is a few dozen widgets at any width (each
Textual widget costs some 30 KB), and drawing it with one widget per line keeps what a change
writes to the terminal small: the `CutGrid` behind the lines cuts every row at the trace's
chunks, so a cell that changes is written from at most CHUNK - 1 cells before it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import rich.markup
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


def test_the_history_holds_once_what_repeats_from_tick_to_tick():
    """A tick's parts equal to the last tick's are the last tick's objects (600 ticks held 600
    copies of a process's threads, the driver chain, the health findings), its values exact."""
    from gputop_diag import sim
    from gputop_diag.monitor.core import Monitor

    m = Monitor(sim.build("compute-bound"), interval=1.0)
    ticks = [m.tick().snapshot for _ in range(3)]
    held = m.history.snapshots()
    assert list(held) == ticks and all(a is b for a, b in zip(held, ticks, strict=True))
    prev, last = held[-2], held[-1]
    assert last.system is prev.system and last.driver_chain is prev.driver_chain
    assert last.gpus[0].static is prev.gpus[0].static


def test_sharing_keeps_every_value_exact():
    from gputop_diag.model import GpuState, GpuStatic
    from gputop_diag.monitor.share import shared

    static = GpuStatic(0, name="H100")

    def state(util, power, s=static):
        return GpuState(0, s, util_gpu_pct=util, power_w=power)

    old = state(0.0, 300.0)
    out = shared(state(-0.0, 310.0, GpuStatic(0, name="H100")), old)
    assert out is not old and out.static is static  # the equal part shared, the rest its own
    assert str(out.util_gpu_pct) == "-0.0" and out.power_w == 310.0  # -0.0 == 0.0, kept apart
    assert out == state(-0.0, 310.0)
    assert shared(state(0.0, 300.0, GpuStatic(0, name="H100")), old) is old
    assert shared((1, True), (1, 1))[1] is True  # a bool is not the int it equals
    nan = float("nan")
    assert shared((nan, 2.0), (float("nan"), 2.0))[0] is nan
    assert shared((state(1.0, 1.0), old), (old,))[1] is old  # an item added: the rest shared


# What the live view's first frames never need, so not loaded with it: the panes not shown (built
# on their first show), the ranks' judge (two probed ranks), the planner's model reader and FLOPs
# (a model config found, a probed model), a job's watch (`watch`), rich's emoji table (a markup
# column label of a hidden pane's table), `ssl` (asyncio's TLS, with OpenSSL: about 4 MiB), the
# help and process screens (their keys), the JSON codec (a diagnosis as JSON), the machine's
# names (--sanitize seeds the sanitizer with them).
NOT_AT_START = (
    "gputop_diag.collect.identity",
    "gputop_diag.tui.panes.utilization",
    "gputop_diag.tui.help",
    "gputop_diag.tui.process_screens",
    "gputop_diag.model.codec",
    "gputop_diag.tui.panes.mapping",
    "gputop_diag.tui.panes.xid",
    "gputop_diag.tui.panes.driver",
    "gputop_diag.tui.panes.job",
    "gputop_diag.diagnose.job_view",
    "gputop_diag.diagnose.ranks",
    "gputop_diag.planner.advice",
    "gputop_diag.planner.configs",
    "gputop_diag.planner.flops",
    "gputop_diag.planner.shape",
    "gputop_diag.planner.workload",
    "gputop_diag.collect.job",
    "gputop_diag.job.steps",
    "rich._emoji_codes",
    "ssl",
    "_ssl",
)


def test_the_live_view_loads_no_module_its_first_frames_do_not_need():
    """Each module costs its code objects and its classes (a frozen dataclass some 20 KiB) for
    the whole run; a fresh interpreter reads `sys.modules` after the live view's import."""
    code = (
        "import json, sys\nimport gputop_diag.tui.app\nloaded = sorted(sys.modules)\n"
        "import ssl\nprint(json.dumps([loaded, ssl.OPENSSL_VERSION]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, openssl = json.loads(r.stdout)
    loaded = set(loaded)
    assert openssl  # asyncio left `ssl` out; a later `import ssl` loads it as usual
    assert {"gputop_diag.tui.panes.memory", "asyncio", "textual.app"} <= loaded
    assert "gputop_diag.planner.precision" in loaded  # the classifier's compute capabilities
    assert sorted(loaded.intersection(NOT_AT_START)) == []


async def test_a_pane_is_built_on_its_first_show_its_table_focused(monkeypatch):
    """Only the Memory pane is built at the start; another is built when first shown, drawn at
    once, its table taking the keys."""
    from textual.widgets import DataTable

    from gputop_diag.tui.process_table import ProcessTable
    from gputop_diag.tui.screen import MainScreen

    emoji = []
    monkeypatch.setattr(rich.markup, "_emoji_replace", lambda *a, **k: emoji.append(a) or a[0])
    app = FedApp("compute-bound")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.pause()
        panes = app.query_one("#panes")
        assert [p.id for p in panes.children] == ["memory"]
        # its process table's column labels are no markup: rich's emoji table stays unloaded
        assert app.query_one(ProcessTable).columns and emoji == []
        await pilot.press("4")
        await pilot.pause()
        await pilot.pause()
        assert [p.id for p in panes.children] == ["memory", "xid"]
        table = app.query_one("#xid-table", DataTable)
        assert app.focused is table
        assert app.query_one("#xid-triage").plain.strip()  # drawn without waiting for a tick
        await pilot.press("1")
        await pilot.press("4")  # shown again: the same pane, not a second one
        await pilot.pause()
        assert len(panes.children) == 2 and app.focused is table
        assert isinstance(app.screen, MainScreen) and app.screen.current == "xid"
