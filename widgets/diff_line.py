"""A one-line widget that repaints only when, and only as far as, its cells changed.

Over a slow SSH link the cost of a live view is the bytes written to the terminal. Textual
cuts each row of the screen wherever a widget starts or ends on it (any widget there, in front
or behind) and writes a dirty span from the cut before it to the span's end; a `DiffLine`
compares its new cells with the ones on screen and marks dirty only up to the last changed
cell, so an unchanged line costs nothing and a change near its start costs a few cells. Put
figures that change often in their own (narrow) DiffLine, or cut the rows under a long line
with a `CutGrid` behind it: that is what keeps them cheap.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from gputop_diag.widgets.glyphs import inside_ascii, to_ascii

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


class DiffCells:
    """The cells of one line of styled runs, and what a change of them repaints: what
    `DiffLine` is, for a widget that draws one line itself (`HistoryLine(split=False)`)."""

    _runs: tuple[Run, ...] = ()  # the cells are worked out from them when they change
    cuts: tuple[int, ...] = ()
    """Where widgets behind the line (a `CutGrid`) cut its row, in its own cells."""

    _given: tuple = ()  # the runs last given to `set_runs`, and whether ASCII only

    def _set_cells(self, runs: Sequence[Run]) -> None:
        self._runs = _clean(runs)
        self._given = ()

    @property
    def _cell_count(self) -> int:
        return sum(len(text) for text, _ in self._runs)

    @property
    def plain(self) -> str:
        """The line's text, as a test or a screen reader would read it."""
        return "".join(text for text, _ in self._runs)

    @property
    def ascii_only(self) -> bool:
        """ASCII only: the line sits inside a node with the `-ascii` class (`ASCII_CLASS`)."""
        return inside_ascii(self)

    def set_runs(self, runs: Sequence[Run]) -> None:
        ascii_only = self.ascii_only
        runs = tuple(runs)
        given = (ascii_only, runs)
        if given == self._given:  # the same runs as last time: nothing to clean or compare
            return
        self._given = given
        if ascii_only:
            runs = [(to_ascii(text), comp) for text, comp in runs]
        runs = _clean(runs)
        if runs == self._runs:
            return
        old, new = _cells_of(self._runs), _cells_of(runs)
        self._runs = runs
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
        if spans:
            self.refresh(*(Region(a, 0, b - a, 1) for a, b in self._apart(spans)))

    def _apart(self, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The changed spans as the regions to repaint: one, from the first change to the last
        (Textual writes each from the cut before it: without `cuts`, the widget's left edge),
        or, with `cuts`, one per span whose writing starts past the span before it."""
        if not self.cuts:
            return [(spans[0][0], spans[-1][1])]
        out: list[tuple[int, int]] = []
        for a, b in spans:
            start = max((c for c in self.cuts if c <= a), default=0)  # where it is written from
            if out and start < out[-1][1]:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
        return out

    @property
    def _sized_by_content(self) -> bool:
        width = self.styles.width
        return width is None or width.is_auto

    def set_text(self, text: str, component: str = "") -> None:
        self.set_runs(((text, component),))

    def _run_style(self, component: str, base: Style) -> Style:
        """A run's style: the line's, with its component's colour and text style on top."""
        return base + self.get_component_rich_style(component, partial=True)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y != 0:
            return Strip.blank(width, base)
        segments = []
        styles: dict[str, Style] = {}
        for text, comp in self._runs:
            if not text:
                continue
            if comp not in styles:
                styles[comp] = self._run_style(comp, base) if comp else base
            segments.append(Segment(text, styles[comp]))
        return Strip(segments).crop_extend(0, width, base)


class DiffLine(DiffCells, Widget):
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
        self._set_cells(runs)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return self._cell_count

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return 1
