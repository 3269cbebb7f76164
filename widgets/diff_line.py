"""A one-line widget that repaints only when, and only as far as, its cells changed.

Over a slow SSH link the cost of a live view is the bytes written to the terminal. Textual
writes a dirty span of a line from the left edge of the widget that holds it to the span's end;
a `DiffLine` compares its new cells with the ones on screen and marks dirty only up to the last
changed cell, so an unchanged line costs nothing and a change near its start costs a few cells.
Put figures that change often in their own (narrow) DiffLine: that is what keeps them cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.segment import Segment
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from .glyphs import inside_ascii, to_ascii

Run = tuple[str, str]
"""A piece of the line: its text and the component class that styles it ("" = plain)."""

MERGE_GAP = 4  # unchanged cells between two changed spans: below this, one span is cheaper


def changed_spans(
    old: Sequence[tuple[str, str]], new: Sequence[tuple[str, str]], width: int
) -> list[tuple[int, int]]:
    """The [start, end) cell ranges, within `width`, where `old` and `new` differ."""
    spans: list[tuple[int, int]] = []
    start = None
    last_diff = -MERGE_GAP - 1
    for x in range(width):
        a = old[x] if x < len(old) else None
        b = new[x] if x < len(new) else None
        if a == b:
            continue
        if start is not None and x - last_diff > MERGE_GAP:
            spans.append((start, last_diff + 1))
            start = None
        if start is None:
            start = x
        last_diff = x
    if start is not None:
        spans.append((start, last_diff + 1))
    return spans


def _clean(runs: Sequence[Run]) -> tuple[Run, ...]:
    """Runs whose every character takes one cell (what the diff counts); others become "?"."""
    out = []
    for text, comp in runs:
        if not all(ch.isprintable() and cell_len(ch) == 1 for ch in text):
            text = "".join(ch if ch.isprintable() and cell_len(ch) == 1 else "?" for ch in text)
        out.append((text, comp))
    return tuple(out)


def _cells_of(runs: Sequence[Run]) -> list[tuple[str, str]]:
    return [(ch, comp) for text, comp in runs for ch in text]


class DiffLine(Widget):
    """One line of styled runs; `set_runs` repaints only the cells that changed."""

    DEFAULT_CSS = """
    DiffLine {
        height: 1;
        width: 1fr;
    }
    """

    def __init__(
        self,
        runs: Sequence[Run] = (),
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._runs: tuple[Run, ...] = _clean(runs)
        self._cells: list[tuple[str, str]] = _cells_of(self._runs)

    @property
    def plain(self) -> str:
        """The line's text, as a test or a screen reader would read it."""
        return "".join(text for text, _ in self._runs)

    @property
    def ascii_only(self) -> bool:
        """ASCII only: the line sits inside a node with the `-ascii` class (`ASCII_CLASS`)."""
        return inside_ascii(self)

    def set_runs(self, runs: Sequence[Run]) -> None:
        if self.ascii_only:
            runs = [(to_ascii(text), comp) for text, comp in runs]
        runs = _clean(runs)
        if runs == self._runs:
            return
        old, new = self._cells, _cells_of(runs)
        self._runs, self._cells = runs, new
        width = self.size.width
        if not self.is_mounted or not width:
            self.refresh(layout=True)
            return
        if len(new) != len(old) and self._sized_by_content:
            # A longer or shorter text needs a new width (the `width: auto` parts of a row):
            # ask for a layout, or each part keeps the width of its first text.
            self.refresh(layout=True)
            return
        spans = changed_spans(old, new, width)
        if spans:  # one region: Textual writes from the widget's left edge anyway
            self.refresh(Region(spans[0][0], 0, spans[-1][1] - spans[0][0], 1))

    @property
    def _sized_by_content(self) -> bool:
        width = self.styles.width
        return width is None or width.is_auto

    def set_text(self, text: str, component: str = "") -> None:
        self.set_runs(((text, component),))

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return len(self._cells)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 1

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y != 0:
            return Strip.blank(width, base)
        segments = []
        styles: dict[str, object] = {}
        for text, comp in self._runs:
            if not text:
                continue
            if comp not in styles:
                styles[comp] = (
                    base + self.get_component_rich_style(comp, partial=True) if comp else base
                )
            segments.append(Segment(text, styles[comp]))
        return Strip(segments).crop_extend(0, width, base)
