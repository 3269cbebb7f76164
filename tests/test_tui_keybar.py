"""The key bar: the focused widget's keys and its ancestors', one line, whole keys only, and a
click presses the key."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from gputop_diag.tui.keybar import KeyBar


class Box(Static, can_focus=True):
    BINDINGS = [
        Binding("x", "app.mark('x')", "box key"),
        Binding("z", "app.mark('z')", "hidden", show=False),
    ]


class Other(Static, can_focus=True):
    BINDINGS = [Binding("o", "app.mark('o')", "other key")]


class Bar(App):
    BINDINGS = [Binding("q", "quit", "quit"), Binding("m", "mark('m')", "mark it")]

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[str] = []

    def compose(self) -> ComposeResult:
        yield Box("box", id="box")
        yield Other("other", id="other")
        yield KeyBar(id="footer")

    def action_mark(self, what: str) -> None:
        self.marks.append(what)


def bottom_line(app: App) -> str:
    """The bar's line as drawn."""
    return "".join(seg.text for seg in app.query_one(KeyBar).render_line(0))


async def test_the_bar_lists_the_apps_keys_then_the_focused_widgets():
    app = Bar()
    async with app.run_test(size=(80, 5)) as pilot:
        app.query_one("#box").focus()
        await pilot.pause()
        line = bottom_line(app)
        assert "x box key" in line and "q quit" in line and "m mark it" in line
        assert "hidden" not in line  # show=False
        assert line.index("quit") < line.index("box key")  # help and quit stay when narrow
        app.query_one("#other").focus()  # the focus moves: the bar follows
        await pilot.pause()
        line = bottom_line(app)
        assert "other key" in line and "box key" not in line


async def test_a_key_that_does_not_fit_whole_is_left_out():
    app = Bar()
    async with app.run_test(size=(26, 5)) as pilot:
        app.query_one("#box").focus()
        await pilot.pause()
        line = bottom_line(app).rstrip()
        assert app.query_one(KeyBar).keys_shown == ("q", "m", "x")
        assert line.endswith("mark it") and "box" not in line  # no half "box k"
        await pilot.resize_terminal(60, 5)
        await pilot.pause()
        assert "x box key" in bottom_line(app)


async def test_a_click_on_a_key_presses_it():
    app = Bar()
    async with app.run_test(size=(80, 5)) as pilot:
        app.query_one("#box").focus()
        await pilot.pause()
        line = bottom_line(app)
        await pilot.click(KeyBar, offset=(line.index("mark it"), 0))
        await pilot.click(KeyBar, offset=(line.index("box key") - 2, 0))  # on the "x"
        await pilot.pause()
        assert app.marks == ["m", "x"]
