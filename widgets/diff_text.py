"""A block of text that repaints only the lines that changed, each only as far as it changed.

A `Static` repaints every line of itself on any update; for a panel whose figures move by a
digit now and then, that is most of the bytes a live view writes over SSH. `DiffText` wraps
its text itself, keeps the cells it painted, and on an update marks dirty only the changed
lines, up to their last changed cell. The text is a Rich `Text` or a plain string: never
markup, so `[...]` in a kernel message or a command line stays as it is.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from gputop_diag.widgets.glyphs import inside_ascii, to_ascii

Cell = tuple[str, Style | None]


class DiffText(Widget):
    """Multi-line text; `update` repaints only what changed. `wrap=False` clips each line
    with an ellipsis instead of wrapping it. Inside a node with the `-ascii` class
    (`ASCII_CLASS`) it draws ASCII only, the ellipsis as `~`."""

    DEFAULT_CSS = """
    DiffText {
        height: auto;
        width: 1fr;
    }
    """

    def __init__(
        self,
        text: Text | str = "",
        *,
        wrap: bool = True,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self._text = text if isinstance(text, Text) else Text(text)
        self._wrap = wrap
        self._lines: list[list[Cell]] = []
        self._laid_out_for: int | None = None

    @property
    def plain(self) -> str:
        return self._text.plain

    @property
    def wrap(self) -> bool:
        return self._wrap

    @wrap.setter
    def wrap(self, value: bool) -> None:
        if value != self._wrap:
            self._wrap = value
            self._relayout(force=True)

    def update(self, text: Text | str) -> None:
        text = text if isinstance(text, Text) else Text(text)
        if inside_ascii(self) and not text.plain.isascii():
            text = Text.assemble(
                *((to_ascii(seg.text), seg.style) for seg in text.render(self.app.console))
            )
        if text == self._text:
            return
        self._text = text
        self._relayout()

    def _cells(self, width: int) -> list[list[Cell]]:
        console = self.app.console
        if self._wrap:
            lines = self._text.wrap(console, max(1, width), overflow="fold")
        else:
            lines = self._text.split("\n", allow_blank=True)
            for line in lines:
                line.truncate(max(1, width), overflow="ellipsis")
        ascii_only = inside_ascii(self)
        out: list[list[Cell]] = []
        for line in lines:
            cells: list[Cell] = []
            for seg in line.render(console, end=""):
                for ch in seg.text:
                    if ch == "\n":
                        continue
                    if not ch.isprintable():
                        ch = "?"
                    elif ascii_only and not ch.isascii():
                        # the clipping ellipsis: "~", as a cut command line and bus id show it
                        # (a "." would read as the end of a sentence)
                        ch = "~" if ch == "…" else to_ascii(ch)[:1]
                    cells.append((ch, seg.style))
            out.append(cells)
        if out and not out[-1] and len(out) > 1:
            out.pop()  # a trailing newline is not a line of its own
        return out

    def _relayout(self, force: bool = False) -> None:
        width = self.size.width
        if not self.is_mounted or not width:
            # Not laid out (a hidden pane): forget the old lines, so the next layout wraps
            # the new text instead of showing what was there before.
            self._laid_out_for = None
            self.refresh(layout=True)
            return
        new = self._cells(width)
        old = self._lines
        self._lines = new
        self._laid_out_for = width
        if force or len(new) != len(old):
            self.refresh(layout=True)
            return
        for y, (a, b) in enumerate(zip(old, new, strict=True)):
            if a == b:
                continue
            last = max(
                (x for x in range(max(len(a), len(b))) if (a[x : x + 1] != b[x : x + 1])),
                default=0,
            )
            self.refresh(Region(0, y, last + 1, 1))

    def _lay_out(self, width: int) -> None:
        """Wrap the text for `width` unless it already is."""
        if self._laid_out_for != width and self.is_mounted and width:
            self._lines = self._cells(width)
            self._laid_out_for = width

    def on_resize(self) -> None:
        if self._laid_out_for != self.size.width:
            self._relayout(force=True)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return max((cell_len for cell_len in map(len, self._text.plain.split("\n"))), default=0)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._lay_out(width)
        return max(1, len(self._lines))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        self._lay_out(width)
        base = self.rich_style
        if y >= len(self._lines):
            return Strip.blank(width, base)
        segments: list[Segment] = []
        run: list[str] = []
        style: Style | None = None
        for ch, st in self._lines[y]:
            if st != style and run:
                segments.append(Segment("".join(run), base + style if style else base))
                run = []
            style = st
            run.append(ch)
        if run:
            segments.append(Segment("".join(run), base + style if style else base))
        return Strip(segments).crop_extend(0, width, base)
