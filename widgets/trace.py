"""A history trace that costs a few cells a tick over SSH: it sweeps instead of scrolling.

A scrolling trace moves every cell one place left each tick, so any line that is not flat is
rewritten whole, every tick. A sweeping trace keeps each sample where it was drawn: sample `n`
goes to cell `n mod width`, overwriting the sample from `width` ticks earlier, and a `Ruler`
under the traces marks the newest cell. A flat line costs nothing, a busy one a cell.

Textual writes a changed span of a line from the left edge of the widget holding it, so the
trace is a row of narrow chunks (`CHUNK` cells each): a change costs at most one chunk.
Scrolling (newest at the right) is still there for those who prefer it (`sweep=False`).
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.widget import Widget

from gputop_diag.widgets.diff_line import DiffLine
from gputop_diag.widgets.glyphs import history, level

CHUNK = 6  # cells per chunk: a change repaints at most this many


def sweep_cells(
    values: Sequence[float | None],
    width: int,
    newest: int,
    plain: bool = False,
    top: float = 100.0,
) -> str:
    """The last `width` of `values` (oldest first, `values[-1]` is sample number `newest`),
    each in cell `sample mod width`; cells no sample reached yet are blank."""
    cells = [" "] * width
    if width <= 0:
        return ""
    vals = list(values)[-width:]
    first = newest - len(vals) + 1
    for k, v in enumerate(vals):
        n = first + k
        if n < 0:
            continue
        cells[n % width] = level(v, plain, top)
    return "".join(cells)


def ruler_cells(width: int, newest: int, sweep: bool = True, plain: bool = False) -> str:
    """The ruler under sweeping traces: a marker under the newest cell (sample `newest`), or
    under the right end when they scroll."""
    cells = [" "] * max(0, width)
    if width > 0 and newest >= 0:
        cells[newest % width if sweep else width - 1] = "^" if plain else "▲"
    return "".join(cells)


def chunks(text: str, size: int = CHUNK) -> list[str]:
    return [text[k : k + size] for k in range(0, len(text), size)]


class Trace(Widget):
    """A row of `CHUNK`-cell parts; `show_cells` repaints only the parts that changed."""

    DEFAULT_CSS = """
    Trace {
        height: 1;
        width: auto;
        layout: horizontal;
        & > DiffLine { width: auto; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._parts: list[DiffLine] = []
        self._text = ""
        self._ready = False  # mounted: parts can be mounted in it

    @property
    def plain(self) -> str:
        return self._text

    def show_cells(self, text: str) -> None:
        """Show `text` (one character a cell)."""
        self._text = text
        if not self._ready:
            return  # drawn on mount
        pieces = chunks(text)
        if len(pieces) != len(self._parts):  # a new width: new parts (never per tick)
            self.remove_children()
            self._parts = [DiffLine() for _ in pieces]
            if self._parts:
                self.mount(*self._parts)
        for part, piece in zip(self._parts, pieces, strict=True):
            part.set_text(piece)

    def on_mount(self) -> None:
        self._ready = True
        if self._text:
            self.show_cells(self._text)

    def show(
        self,
        values: Sequence[float | None],
        width: int,
        newest: int,
        *,
        sweep: bool = True,
        plain: bool = False,
        top: float = 100.0,
    ) -> None:
        """Draw `values` (oldest first; `values[-1]` is sample number `newest`)."""
        if sweep:
            self.show_cells(sweep_cells(values, width, newest, plain, top))
        else:
            self.show_cells(history(values, width, plain, top))


class Ruler(Trace):
    """Marks the newest cell of the traces above it (sweeping), or their right end."""

    def mark(self, width: int, newest: int, *, sweep: bool = True, plain: bool = False) -> None:
        self.show_cells(ruler_cells(width, newest, sweep, plain))
