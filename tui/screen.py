"""The main screen: header, pane tabs, banner, a ContentSwitcher of panes, the bottleneck panel,
footer. It draws what the app hands down (an update, a `View`, the header's facts, the layout)
and keeps no state of the run."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual.app import ComposeResult
from textual.await_complete import AwaitComplete
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widget import AwaitMount
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
from gputop_diag.tui.panes.memory import MemoryPane
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
            # the panes but Memory are built when first shown (`switch`): each Textual widget
            # costs some 30 KiB, and most runs never show most panes
            with ContentSwitcher(initial="memory", id="panes"):
                yield MemoryPane(id="memory")
            yield SidePanel(id="side")
        yield KeyBar(id="footer")

    @property
    def current(self) -> str:
        """The pane shown."""
        return self.query_one("#panes", ContentSwitcher).current or "memory"

    def switch(
        self, pane: str, latest: Update | None = None, draw: Callable[[], None] | None = None
    ) -> None:
        """Show `pane` (built on its first show with the rows `latest` needs, and drawn by
        `draw` once mounted: its first frame has them), its table (or itself) focused."""
        switcher = self.query_one("#panes", ContentSwitcher)
        if not switcher.query_children(f"#{pane}"):
            new = built(pane)
            if latest is not None:
                new.prepare(latest)
            # no frame until it is composed and drawn (one would show it empty), held as
            # Textual's `ContentSwitcher.add_content` holds them
            AwaitComplete(self._drawn_when_mounted(switcher.mount(new), draw))
            # its table is composed once it is mounted
            self.call_after_refresh(self._focus, pane)
        switcher.current = pane
        self._focus(pane)

    async def _drawn_when_mounted(
        self, mounting: AwaitMount, draw: Callable[[], None] | None
    ) -> None:
        with self.app.batch_update():
            await mounting
            if draw is not None:
                draw()

    def _focus(self, pane: str) -> None:
        if self.current != pane:
            return
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
        shown = self.query_one(f"#{current}", Pane)
        if not sizing.pane_covered and shown.is_mounted:  # a pane just built draws once laid out
            shown.show(u, view)
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


def built(pane: str) -> Pane:
    """A new pane `pane` (one of `keys.PANES`); its module loads with it."""
    if pane == "mapping":
        from gputop_diag.tui.panes.mapping import MappingPane

        return MappingPane(id=pane)
    if pane == "xid":
        from gputop_diag.tui.panes.xid import XidPane

        return XidPane(id=pane)
    if pane == "driver":
        from gputop_diag.tui.panes.driver import DriverPane

        return DriverPane(id=pane)
    if pane == "job":
        from gputop_diag.tui.panes.job import JobPane

        return JobPane(id=pane)
    if pane == "utilization":
        from gputop_diag.tui.panes.utilization import UtilizationPane

        return UtilizationPane(id=pane)
    return MemoryPane(id=pane)
