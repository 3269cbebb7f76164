"""A stacked memory bar: used by processes, reserved by the driver, free."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widget import Widget

from .diff_line import DiffLine
from .glyphs import stacked_bar

GLYPHS = {"used": "█", "reserved": "▒", "free": "░"}
PLAIN_GLYPHS = {"used": "#", "reserved": "+", "free": "."}


class _Bar(DiffLine):
    COMPONENT_CLASSES = {"memory-bar--used", "memory-bar--reserved", "memory-bar--free"}
    DEFAULT_CSS = """
    _Bar > .memory-bar--used { color: $accent; }
    _Bar > .memory-bar--reserved { color: $warning; }
    _Bar > .memory-bar--free { color: $text-muted; }
    """


class MemoryBar(Widget):
    """`GPU0  ████▒▒░░░░  58.9/79.6 GiB …  GROWING` — each part has its own glyph (readable
    without colour) and its own style; label, bar, figures and flag repaint separately."""

    DEFAULT_CSS = """
    MemoryBar {
        height: 1;
        width: 1fr;
        layout: horizontal;
        & > DiffLine { width: auto; }
        & > .memory-bar--flag { text-style: bold reverse; }
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._label = DiffLine(classes="memory-bar--label")
        self._bar = _Bar(classes="memory-bar--bar")
        self._text = DiffLine(classes="memory-bar--text")
        self._gap = DiffLine()
        self._flag = DiffLine(classes="memory-bar--flag")

    def compose(self) -> ComposeResult:
        yield from (self._label, self._bar, self._text, self._gap, self._flag)

    @property
    def plain(self) -> str:
        parts = (self._label, self._bar, self._text, self._gap, self._flag)
        return "".join(p.plain for p in parts)

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
        runs = []
        k = 0
        while k < len(bar):  # one run per part, so each part takes its part's style
            j = k
            while j < len(bar) and bar[j] == bar[k]:
                j += 1
            part = next((p for p, g in glyphs.items() if g == bar[k]), "")
            runs.append((bar[k:j], f"memory-bar--{part}" if part else ""))
            k = j
        self._label.set_text(label)
        self._bar.set_runs(runs)
        self._text.set_text(f" {text}")
        self._gap.set_text("  " if flag else "")
        self._flag.set_text(f" {flag} " if flag else "")

    def show_message(self, label: str, message: str, *, alarm: bool = False) -> None:
        """No bar: just the label and a message (a lost GPU, no figures)."""
        self._label.set_text(label)
        self._bar.set_runs(())
        self._text.set_text("" if alarm else message)
        self._gap.set_text("")
        self._flag.set_text(f" {message} " if alarm else "")
