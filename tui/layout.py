"""The main screen's layout for the terminal's size: wide (the bottleneck panel docked right) or
narrow (a strip below the pane), short and tiny terminals, and the panel key `p`."""

from __future__ import annotations

from textual.geometry import Size
from textual.screen import Screen

NARROW_BELOW = 100  # columns: the side panel becomes a strip below the pane
SHORT_BELOW = 30  # rows: legends give way to table rows, the strip loses a line
TINY_BELOW = 16  # rows: the strip keeps three lines (verdict, evidence, next)


class Layout:
    """The terminal's size and the panel's state; `apply` sets the screen's classes."""

    def __init__(self) -> None:
        self.size = Size(80, 24)
        self.panel_hidden = False  # wide layout: `p` hides the panel
        self.panel_full = False  # narrow layout: `p` shows all of it over the pane

    @property
    def narrow(self) -> bool:
        return self.size.width < NARROW_BELOW

    @property
    def short(self) -> bool:
        return self.size.height < SHORT_BELOW

    @property
    def tiny(self) -> bool:
        return self.size.height < TINY_BELOW

    @property
    def panel_shown(self) -> bool:
        return self.narrow or not self.panel_hidden

    @property
    def pane_covered(self) -> bool:
        """The whole panel over the pane (narrow, after `p`): the pane is not drawn."""
        return self.narrow and self.panel_full

    @property
    def strip(self) -> bool:
        """The panel as a strip below the pane (narrow)."""
        return self.narrow and not self.panel_full

    @property
    def panel_lines(self) -> int:
        """How many lines the strip keeps."""
        return 3 if self.tiny else 5 if self.short else 6

    def toggle_panel(self) -> None:
        if self.narrow:
            self.panel_full = not self.panel_full
        else:
            self.panel_hidden = not self.panel_hidden

    def pane_switched(self) -> bool:
        """A pane was chosen: the full panel gives way to it. True when that changed."""
        was, self.panel_full = self.panel_full, False
        return was

    def apply(self, screen: Screen) -> None:
        screen.set_class(self.narrow, "-narrow")
        screen.set_class(self.short, "-short")
        screen.set_class(self.tiny, "-tiny")
        screen.set_class(self.pane_covered, "-panel-full")
