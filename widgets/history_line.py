"""One labelled history on a fixed scale, with the current value beside it."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.widget import Widget

from .diff_line import DiffLine
from .glyphs import history


class HistoryLine(Widget):
    """`label  ▁▂▅█▇…  98%  note` — the last `width` values on a fixed 0..`top` scale.

    The scale never follows the data: 30 % looks like 30 % whatever came before, so a flat line
    at the top means busy and a flat line at the bottom means idle. Label, trace, value and
    note are separate cells, so a tick that moves only the value repaints only the value.
    """

    DEFAULT_CSS = """
    HistoryLine {
        height: 1;
        width: 1fr;
        layout: horizontal;
        & > DiffLine { width: auto; }
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
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.label = label
        self.label_width = label_width
        self.value_width = value_width
        self.top = top
        self._parts = {
            part: DiffLine(classes=f"history-line--{part}")
            for part in ("label", "trace", "value", "note")
        }

    def compose(self) -> ComposeResult:
        yield from self._parts.values()

    @property
    def plain(self) -> str:
        return "".join(p.plain for p in self._parts.values())

    def show(
        self,
        values: Sequence[float | None],
        value: str,
        width: int,
        *,
        plain: bool = False,
        note: str = "",
        label: str | None = None,
    ) -> None:
        """Draw the last `width` of `values`; `value` is the current figure, `note` follows it."""
        if label is not None:
            self.label = label
        w = self.label_width
        self._parts["label"].set_text(f"{self.label:<{w}.{w}} ")
        self._parts["trace"].set_text(history(values, width, plain, self.top))
        self._parts["value"].set_text(f" {value:>{self.value_width}}")
        self._parts["note"].set_text(f" {note}" if note else "")
