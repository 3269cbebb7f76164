"""A stacked memory bar: used by processes, reserved by the driver, free."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widget import Widget

from gputop_diag.widgets.diff_line import DiffLine
from gputop_diag.widgets.glyphs import stacked_bar

GLYPHS = {"used": "█", "reserved": "▒", "free": "░"}
PLAIN_GLYPHS = {"used": "#", "reserved": "+", "free": "."}


class _Bar(DiffLine):
    """The label and the bar: they change seldom (the selection, a cell of memory)."""

    COMPONENT_CLASSES = {"memory-bar--used", "memory-bar--reserved", "memory-bar--free"}
    DEFAULT_CSS = """
    _Bar > .memory-bar--used { color: $accent; }
    _Bar > .memory-bar--reserved { color: $warning; }
    _Bar > .memory-bar--free { color: $text-muted; }
    """


class _Figures(DiffLine):
    """The figures, then the flag: what moves each tick, written from their own first cell."""

    COMPONENT_CLASSES = {"memory-bar--flag"}
    DEFAULT_CSS = """
    _Figures > .memory-bar--flag { text-style: bold reverse; }
    """


class MemoryBar(Widget):
    """`GPU0  ████▒▒░░░░  58.9/79.6 GiB …  GROWING` — each part has its own glyph (readable
    without colour) and its own style. Two widgets: label and bar, then figures and flag, so
    that a moving figure is written from the figures' first cell (each widget costs some
    30 KB, and a pane has a bar per GPU)."""

    DEFAULT_CSS = """
    MemoryBar {
        height: 1;
        width: 1fr;
        layout: horizontal;
        & > DiffLine { width: auto; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._bar = _Bar(classes="memory-bar--bar")
        self._text = _Figures(classes="memory-bar--text")

    def compose(self) -> ComposeResult:
        yield from (self._bar, self._text)

    @property
    def plain(self) -> str:
        return self._bar.plain + self._text.plain

    def show(
        self,
        label: str,
        used: float,
        reserved: float,
        total: float,
        width: int,
        text: str,
        *,
        flag: str = "",
        plain: bool = False,
    ) -> None:
        """`used` excludes `reserved`; free is what is left of `total`."""
        glyphs = PLAIN_GLYPHS if plain else GLYPHS
        free = max(0.0, total - used - reserved)
        bar = stacked_bar(
            [(used, glyphs["used"]), (reserved, glyphs["reserved"]), (free, glyphs["free"])],
            total,
            width,
        )
        runs = [(label, "")]
        k = 0
        while k < len(bar):  # one run per part, so each part takes its part's style
            j = k
            while j < len(bar) and bar[j] == bar[k]:
                j += 1
            part = next((p for p, g in glyphs.items() if g == bar[k]), "")
            runs.append((bar[k:j], f"memory-bar--{part}" if part else ""))
            k = j
        self._bar.set_runs(runs)
        self._show_figures(f" {text}", "  " if flag else "", flag)

    def show_message(self, label: str, message: str, *, alarm: bool = False) -> None:
        """No bar: just the label and a message (a lost GPU, no figures)."""
        self._bar.set_runs(((label, ""),))
        self._show_figures("" if alarm else message, "", message if alarm else "")

    def _show_figures(self, text: str, gap: str, flag: str) -> None:
        self._text.set_runs(
            ((text, ""), (gap, ""), (f" {flag} ", "memory-bar--flag")) if flag else ((text, ""),)
        )
