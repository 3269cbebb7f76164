"""A line of text in parts, each its own `DiffLine`: a figure that moves repaints itself only.

Textual writes a changed span from the left edge of the widget holding it, so in one long
`DiffLine` a figure at the end of the line costs the whole line. Split into parts, the words
stay put and a moving figure costs its own few cells.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.widget import Widget

from gputop_diag.widgets.diff_line import DiffLine


class PartsLine(Widget):
    """`show(["power ", "612", " / 700 W  temp ", "71 C"])`: one DiffLine per part."""

    DEFAULT_CSS = """
    PartsLine {
        height: 1;
        width: 1fr;
        layout: horizontal;
        & > DiffLine { width: auto; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._texts: tuple[str, ...] = ()
        self._parts: list[DiffLine] = []
        self._ready = False  # mounted: parts can be mounted in it

    @property
    def plain(self) -> str:
        return "".join(self._texts)

    def show(self, parts: Sequence[str]) -> None:
        self._texts = tuple(parts)
        if not self._ready:
            return  # drawn on mount
        if len(self._parts) != len(self._texts):  # a new shape: new parts (not per tick)
            self.remove_children()
            self._parts = [DiffLine() for _ in self._texts]
            if self._parts:
                self.mount(*self._parts)
        for part, text in zip(self._parts, self._texts, strict=True):
            part.set_text(text)

    def set_text(self, text: str) -> None:
        """The whole line as one part."""
        self.show((text,) if text else ())

    def on_mount(self) -> None:
        self._ready = True
        if self._texts:
            self.show(self._texts)
