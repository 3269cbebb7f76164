"""One labelled history on a fixed scale, with the current value beside it."""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from textual.app import ComposeResult
from textual.widget import Widget

from gputop_diag.widgets.diff_line import DiffCells, DiffLine
from gputop_diag.widgets.glyphs import history
from gputop_diag.widgets.trace import Trace, sweep_cells

PARTS = ("label", "trace", "value", "note")


class HistoryLine(DiffCells, Widget):
    """`label  ▁▂▅█▇…  98%  note` — the last `width` values on a fixed 0..`top` scale.

    The scale never follows the data: 30 % looks like 30 % whatever came before, so a flat line
    at the top means busy and a flat line at the bottom means idle. Label, trace, value and
    note are separate widgets, so a tick that moves only the value repaints only the value;
    the trace sweeps (see `Trace`) when given the newest sample's number.

    `split=False`: one widget that draws the whole line itself (a sixth of the memory of the
    parts and the trace's chunks, which a pane of many histories pays for every one of them),
    repainting only the cells that changed; a change is then written from the nearest place
    where a widget edge cuts the row, so such lines sit in front of a `CutGrid`.
    """

    COMPONENT_CLASSES = {f"history-line--{part}" for part in PARTS}
    DEFAULT_CSS = """
    HistoryLine {
        height: 1;
        width: 1fr;
        layout: horizontal;
        & > DiffLine, & > Trace { width: auto; }
        & > .history-line--label { color: $text-muted; }
        & > .history-line--trace { color: $accent; }
        & > .history-line--value { text-style: bold; }
        & > .history-line--note { color: $text-muted; width: 1fr; }
    }
    """

    def __init__(
        self,
        label: str = "",
        *,
        label_width: int = 9,
        value_width: int = 5,
        top: float = 100.0,
        split: bool = True,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.label = label
        self.label_width = label_width
        self.value_width = value_width
        self.top = top
        self._trace = ""  # split=False: the trace's cells on screen
        self._parts: dict[str, DiffLine | Trace] = (
            {
                "label": DiffLine(classes="history-line--label"),
                "trace": Trace(classes="history-line--trace"),
                "value": DiffLine(classes="history-line--value"),
                "note": DiffLine(classes="history-line--note"),
            }
            if split
            else {}
        )

    def compose(self) -> ComposeResult:
        yield from self._parts.values()

    @property
    def plain(self) -> str:
        if not self._parts:
            return super().plain
        return "".join(p.plain for p in self._parts.values())

    def show(
        self,
        values: Sequence[float | None] | None,
        value: str,
        width: int,
        *,
        plain: bool = False,
        note: str = "",
        label: str | None = None,
        newest: int | None = None,
    ) -> None:
        """Draw the last `width` of `values`; `value` is the current figure, `note` follows it.
        With `newest` (the number of the sample `values[-1]` is) the trace sweeps; with
        `values` None the trace stays as it is (only the figures move)."""
        if label is not None:
            self.label = label
        w = self.label_width
        texts = {
            "label": f"{self.label:<{w}.{w}} ",
            "value": f" {value:>{self.value_width}}",
            "note": f" {note}" if note else "",
        }
        if not self._parts:
            if values is not None:
                self._trace = (
                    sweep_cells(values, width, newest, plain, self.top)
                    if newest is not None
                    else history(values, width, plain, self.top)
                )
            texts["trace"] = self._trace
            self.set_runs([(texts[p], f"history-line--{p}") for p in PARTS])
            return
        for part in ("label", "value", "note"):
            self._parts[part].set_text(texts[part])
        if values is not None:
            self._parts["trace"].show(
                values, width, newest if newest is not None else 0, sweep=newest is not None,
                plain=plain, top=self.top,
            )  # fmt: skip

    def _run_style(self, component: str, base: Style) -> Style:
        # The style a part widget of that class would have (its colour blended as a child's).
        return self.get_component_rich_style(component)

    def render_line(self, y: int):
        if self._parts:  # a container of parts: its own blank background
            return Widget.render_line(self, y)
        return super().render_line(y)
