"""One labelled history on a fixed scale, with the current value beside it."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.widget import Widget

from .diff_line import DiffLine
from .trace import Trace


class HistoryLine(Widget):
    """`label  ▁▂▅█▇…  98%  note` — the last `width` values on a fixed 0..`top` scale.

    The scale never follows the data: 30 % looks like 30 % whatever came before, so a flat line
    at the top means busy and a flat line at the bottom means idle. Label, trace, value and
    note are separate widgets, so a tick that moves only the value repaints only the value;
    the trace sweeps (see `Trace`) when given the newest sample's number.
    """

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
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.label = label
        self.label_width = label_width
        self.value_width = value_width
        self.top = top
        self._parts: dict[str, DiffLine | Trace] = {
            "label": DiffLine(classes="history-line--label"),
            "trace": Trace(classes="history-line--trace"),
            "value": DiffLine(classes="history-line--value"),
            "note": DiffLine(classes="history-line--note"),
        }

    def compose(self) -> ComposeResult:
        yield from self._parts.values()

    @property
    def plain(self) -> str:
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
        self._parts["label"].set_text(f"{self.label:<{w}.{w}} ")
        if values is not None:
            self._parts["trace"].show(
                values, width, newest if newest is not None else 0, sweep=newest is not None,
                plain=plain, top=self.top,
            )  # fmt: skip
        self._parts["value"].set_text(f" {value:>{self.value_width}}")
        self._parts["note"].set_text(f" {note}" if note else "")
