"""Blank columns behind a pane's lines, so that a change in a long line is written from a few
cells before it rather than from the line's start.

Textual cuts each row of the screen wherever a widget starts or ends on it, in front or
behind, and writes a dirty span of the row from the cut before it (`_compositor.py`: the
chops of `ChopsUpdate`). A pane drawn as one widget per line (the cheap way to draw many lines:
each widget costs some 30 KB) would then write a moving figure from the line's first column.
A `CutGrid` in a lower layer of the pane, one narrow column widget per few cells and as tall as
the pane, puts those cuts back under every line at once: tens of widgets for the whole pane
instead of one per part of every line. It is never seen: the lines in front cover it, and
where none does it draws the pane's own blank background.

The pane declares the layers (`layers: cuts default;`); the grid sits in `cuts`.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget


class _Column(Widget):
    """Blank, and every one of its lines the same `Strip`: Textual would otherwise keep a strip
    per line (with its caches, some 1.2 KB each) for lines no one sees."""

    DEFAULT_CSS = """
    _Column {
        height: 100%;
    }
    """

    _blank: tuple[int, Style, Strip] | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        style = self.rich_style
        if self._blank is None or self._blank[:2] != (crop.width, style):
            self._blank = (crop.width, style, Strip.blank(crop.width, style))
        return [self._blank[2]] * crop.height


class CutGrid(Widget):
    """`set_cuts([10, 16, 22, ...])`: columns that end at those x (from the pane's left)."""

    DEFAULT_CSS = """
    CutGrid {
        layer: cuts;
        layout: horizontal;
        width: 100%;
        height: 100%;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._cuts: tuple[int, ...] = ()
        self._rows: int | None = None
        self._ready = False  # mounted: columns can be mounted in it

    @property
    def cuts(self) -> tuple[int, ...]:
        return self._cuts

    def set_cuts(self, cuts: Sequence[int], rows: int | None = None) -> None:
        """Columns ending at each of `cuts` (> 0); the last one reaches the right edge. New
        columns only when the cuts change (a resize, not a tick). `rows`: as tall as the lines
        in front take, not the empty rows below them (each widget behind a cut row keeps a strip
        per cut: some 1.2 KB each, for nothing there); None: the whole pane."""
        if rows != self._rows:
            self._rows = rows
            self.styles.height = "100%" if rows is None else rows
        cuts = tuple(sorted({x for x in cuts if x > 0}))
        if cuts == self._cuts:
            return
        self._cuts = cuts
        if self._ready:
            self._build()

    def _build(self) -> None:
        widths = [b - a for a, b in zip((0, *self._cuts), self._cuts, strict=False)]
        columns = list(self.children)
        if len(columns) != len(widths) + 1:
            self.remove_children()
            columns = [_Column() for _ in range(len(widths) + 1)]
            for column, w in zip(columns, widths, strict=False):
                column.styles.width = w
            columns[-1].styles.width = "1fr"
            self.mount(*columns)
            return
        for column, w in zip(columns, widths, strict=False):
            if column.styles.width is None or column.styles.width.value != w:
                column.styles.width = w

    def on_mount(self) -> None:
        self._ready = True
        if self._cuts:
            self._build()
