"""The reusable widgets: fixed scales, stacked bars, and repainting only the cells that changed."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Region

from gputop_diag.widgets import (
    DiffLine,
    HistoryLine,
    MemoryBar,
    changed_spans,
    history,
    stacked_bar,
)


def test_history_uses_a_fixed_scale_whatever_the_data():
    # 50 % draws the same glyph next to 51 % as next to 100 %: no autoscale.
    assert history([50, 51], 2)[0] == history([50, 100], 2)[0] == "▄"
    assert history([100, 0], 2) == "█▁"  # zero is the lowest bar, not a gap
    assert history([None, 30], 2) == " ▂"  # no figure is a gap
    assert history([10], 4) == "   ▁"  # newest at the right
    assert history(range(200), 5) == history(range(195, 200), 5)  # the last `width` values
    assert history([250, -5], 2) == "█▁"  # clamped to the scale


def test_history_plain_glyphs_are_ascii():
    line = history([0, 25, 50, 75, 100, None], 6, plain=True)
    assert line.isascii() and line[-1] == " " and line[0] != line[-2]


def test_stacked_bar_splits_by_share_of_the_total():
    assert stacked_bar([(50, "#"), (25, "+"), (25, ".")], 100, 8) == "####++.."
    assert stacked_bar([(1, "#")], 0, 4) == "????"  # no total: unknown, not empty
    assert len(stacked_bar([(90, "#"), (90, "+")], 100, 10)) == 10  # never overflows


def test_changed_spans_merge_close_changes_and_skip_equal_cells():
    old = [(c, "") for c in "aaaaaaaaaaaaaaaaaaaa"]
    new = list(old)
    new[2] = ("b", "")
    new[4] = ("b", "")
    new[15] = ("b", "")
    assert changed_spans(old, new, 20) == [(2, 5), (15, 16)]
    assert changed_spans(old, old, 20) == []
    assert changed_spans(old[:5], old, 20) == [(5, 20)]  # the line grew
    styled = list(old)
    styled[0] = ("a", "bold")
    assert changed_spans(old, styled, 20) == [(0, 1)]  # a style change is a change


class LineApp(App):
    def compose(self) -> ComposeResult:
        yield HistoryLine("busy", label_width=6, id="h")
        yield MemoryBar(id="m")
        yield DiffLine(id="d")


async def test_only_the_cells_that_changed_are_repainted(monkeypatch):
    app = LineApp()
    async with app.run_test(size=(60, 5)) as pilot:
        line = app.query_one("#h", HistoryLine)
        line.show([99] * 30, "99%", 30)
        await pilot.pause()
        dirty = []
        refresh = DiffLine.refresh

        def spy(self, *regions, **kw):
            dirty.append((set(self.classes), regions))
            return refresh(self, *regions, **kw)

        monkeypatch.setattr(DiffLine, "refresh", spy)
        line.show([99] * 30, "98%", 30)  # the history did not move; one digit did
        assert dirty == [({"history-line--value"}, (Region(4, 0, 1, 1),))]
        dirty.clear()
        line.show([99] * 30, "98%", 30)
        assert dirty == []  # nothing changed, nothing repainted
        await pilot.pause()
        assert line.plain == "busy   " + "█" * 30 + "   98%"


async def test_memory_bar_draws_used_reserved_free_with_distinct_glyphs():
    app = LineApp()
    async with app.run_test(size=(60, 5)) as pilot:
        bar = app.query_one("#m", MemoryBar)
        bar.show("GPU0 ", 50, 10, 100, 10, "50/100", flag="GROWING")
        await pilot.pause()
        assert bar.plain.startswith("GPU0 █████▒░░░░ 50/100")
        assert bar.plain.endswith("GROWING ")
        bar.show("GPU0 ", 50, 10, 100, 10, "50/100", plain=True)
        assert bar.plain.startswith("GPU0 #####+.... 50/100")


async def test_diff_line_replaces_wide_and_control_characters():
    app = LineApp()
    async with app.run_test(size=(40, 5)) as pilot:
        d = app.query_one("#d", DiffLine)
        d.set_text("a\tb漢c")
        await pilot.pause()
        assert d.plain == "a?b?c"


class RowApp(App):
    """Parts of a row sized by their text, as the memory bars and history lines are."""

    CSS = """
    #row { layout: horizontal; height: 1; }
    #row > DiffLine { width: auto; }
    """

    def compose(self) -> ComposeResult:
        from textual.containers import Horizontal

        from gputop_diag.widgets import DiffText

        with Horizontal(id="row"):
            yield DiffLine(id="a")
            yield DiffLine(id="b")
        yield DiffText(id="t")


async def test_a_part_that_grows_after_the_first_frame_gets_room_for_its_text():
    app = RowApp()
    async with app.run_test(size=(60, 6)) as pilot:
        a, b = app.query_one("#a", DiffLine), app.query_one("#b", DiffLine)
        a.set_text("headr")
        b.set_text("|end")
        await pilot.pause()
        assert a.region.width == 5
        a.set_text("headroom 20.7 GiB")  # longer: the part must widen, b must move right
        await pilot.pause()
        assert a.region.width == 17 and b.region.x == 17
        a.set_text("LOST")  # shorter: no stale tail
        await pilot.pause()
        assert a.region.width == 4 and b.region.x == 4


async def test_text_changed_while_hidden_shows_once_visible_again():
    from gputop_diag.widgets import DiffText

    app = RowApp()
    async with app.run_test(size=(40, 8)) as pilot:
        t = app.query_one("#t", DiffText)
        t.update("No Xid event since the start")
        await pilot.pause()
        t.display = False
        await pilot.pause()
        t.update("Xid 79 FALLEN_OFF_BUS on GPU 3\nnext: drain the node")
        await pilot.pause()
        t.display = True
        await pilot.pause()
        shown = [
            "".join(seg.text for seg in t.render_line(y)).rstrip() for y in range(t.size.height)
        ]
        assert shown == ["Xid 79 FALLEN_OFF_BUS on GPU 3", "next: drain the node"]


async def test_a_trace_and_a_parts_line_drawn_before_they_are_mounted_show_once_mounted():
    from textual.containers import Vertical

    from gputop_diag.widgets import PartsLine, Trace

    class Empty(App):
        def compose(self) -> ComposeResult:
            yield Vertical(id="box")

    app = Empty()
    async with app.run_test(size=(40, 5)) as pilot:
        trace, parts = Trace(), PartsLine()
        trace.show([100, 0, 50], 8, newest=2)  # before mounting, and never again
        parts.show(["power ", "612", " W"])
        app.query_one("#box").mount(trace, parts)
        await pilot.pause()
        await pilot.pause()
        shown = ["".join(s.text for s in c.render_line(0)) for c in trace.children]
        assert "".join(shown).rstrip() == "█▁▄"
        assert [c.plain for c in parts.children] == ["power ", "612", " W"]


async def test_a_cell_table_repaints_the_cell_not_the_table(monkeypatch):
    from textual.widget import Widget

    from gputop_diag.widgets import CellTable

    class TableApp(App):
        def compose(self) -> ComposeResult:
            yield CellTable(id="t")

    app = TableApp()
    async with app.run_test(size=(60, 8)) as pilot:
        table = app.query_one(CellTable)
        table.add_column("PID", key="pid", width=6)
        table.add_column("CPU%", key="cpu", width=5)
        for pid in (1, 2, 3):
            table.add_row(str(pid), "10", key=str(pid))
        await pilot.pause()
        calls = []
        original = Widget.refresh

        def spy(self, *regions, **kw):
            if self is table:
                calls.append(regions)
            return original(self, *regions, **kw)

        monkeypatch.setattr(Widget, "refresh", spy)
        table.update_cell("2", "cpu", "95")
        assert calls and all(regions for regions in calls)  # a region each time, never all
        assert all(r.height == 1 for regions in calls for r in regions)
        assert str(table.get_cell("2", "cpu")) == "95"
