"""The main screen: header, pane tabs, banner, a ContentSwitcher of panes, the bottleneck panel,
footer. It draws what the app hands down (an update, a `View`, the header's facts, the layout)
and keeps no state of the run."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import ContentSwitcher, DataTable

from gputop_diag.model import CollectorError
from gputop_diag.monitor.view import Update
from gputop_diag.tui.banner import Banner
from gputop_diag.tui.header import HeaderBar, HeaderFacts
from gputop_diag.tui.keybar import KeyBar
from gputop_diag.tui.keys import PANES, SHORT_TITLES, TITLES
from gputop_diag.tui.layout import Layout
from gputop_diag.tui.messages import CollectorFailed
from gputop_diag.tui.panes.base import Pane, View
from gputop_diag.tui.panes.driver import DriverPane
from gputop_diag.tui.panes.job import JobPane
from gputop_diag.tui.panes.mapping import MappingPane
from gputop_diag.tui.panes.memory import MemoryPane
from gputop_diag.tui.panes.utilization import UtilizationPane
from gputop_diag.tui.panes.xid import XidPane
from gputop_diag.tui.side_panel import SidePanel
from gputop_diag.tui.tabs import TabStrip


class MainScreen(Screen):
    """The app's default screen. Its parts are composed by the app (`App.compose` fills the
    default screen, before the app's `on_mount`)."""

    def parts(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield TabStrip(id="tabs")
        yield Banner(id="banner")
        with Horizontal(id="body"):
            with ContentSwitcher(initial="memory", id="panes"):
                yield MemoryPane(id="memory")
                yield UtilizationPane(id="utilization")
                yield MappingPane(id="mapping")
                yield XidPane(id="xid")
                yield DriverPane(id="driver")
                yield JobPane(id="job")
            yield SidePanel(id="side")
        yield KeyBar(id="footer")

    @property
    def current(self) -> str:
        """The pane shown."""
        return self.query_one("#panes", ContentSwitcher).current or "memory"

    def switch(self, pane: str) -> None:
        """Show `pane`, its table (or itself) focused."""
        self.query_one("#panes", ContentSwitcher).current = pane
        table = self.query_one(f"#{pane}").query(DataTable)
        (table.first() if table else self.query_one(f"#{pane}")).focus(scroll_visible=False)

    def apply(self, sizing: Layout) -> None:
        sizing.apply(self)
        self.query_one(SidePanel).display = sizing.panel_shown

    def show_tabs(self, order: Sequence[str], filter_text: str) -> None:
        titles = [(PANES.index(p) + 1, TITLES[PANES.index(p)], SHORT_TITLES[PANES.index(p)])
                  for p in order]  # fmt: skip
        self.query_one(TabStrip).show(titles, PANES.index(self.current) + 1, filter_text)

    def show_header(self, facts: HeaderFacts) -> None:
        self.query_one(HeaderBar).show(facts)

    def show_banner(
        self, errors: Sequence[CollectorError], failure: CollectorFailed | None
    ) -> None:
        said = None if failure is None else (failure.message, failure.next_step)
        self.query_one(Banner).show(errors, said)

    def show(self, u: Update, view: View, sizing: Layout, interval: float) -> None:
        """The visible pane (unless the whole panel covers it) and the bottleneck panel."""
        # the panes are the switcher's children: a query of the whole screen for them walked
        # every widget of every pane each tick (half of the tick's drawing on the Memory pane)
        switcher = self.query_one("#panes", ContentSwitcher)
        current = switcher.current or "memory"
        if not sizing.pane_covered:
            self.query_one(f"#{current}", Pane).show(u, view)
        for pane in switcher.children:
            if isinstance(pane, Pane) and pane.id != current:
                pane.prepare(u)
        self.query_one(SidePanel).show(
            u.diagnosis,
            strip=sizing.strip,
            now=u.snapshot.timestamp,
            interval=interval,
            lines=sizing.panel_lines,
            plain=view.plain,
        )
