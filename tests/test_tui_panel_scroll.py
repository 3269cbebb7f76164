"""Every line of the bottleneck panel can be reached by keys: under 100 columns `p` shows the
whole panel over the pane and gives it the keys (arrows, PgDn, End scroll it); `p` again gives
them back to the pane."""

from __future__ import annotations

import pytest
from test_tui_support import FedApp, screen_text, settled
from textual.widgets import DataTable

from gputop_diag.tui.side_panel import SidePanel


@pytest.mark.parametrize("scenario", ["thermal-throttle", "xid-79"])
async def test_the_whole_panel_scrolls_to_its_last_line_at_80x24(scenario):
    app = FedApp(scenario, cached=True)
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(100 if scenario == "xid-79" else 30)
        await pilot.pause()
        await pilot.press("p")
        panel = app.query_one(SidePanel)
        await settled(pilot, lambda: panel.has_focus)
        assert panel.has_focus
        assert panel.max_scroll_y > 0  # more than a screen: the case that was out of reach
        assert "WHY NOT" not in screen_text(app)
        await pilot.press("end")
        await settled(pilot, lambda: "WHY NOT" in screen_text(app))
        assert "WHY NOT" in screen_text(app) and panel.scroll_y == panel.max_scroll_y
        await pilot.press("home")
        await settled(pilot, lambda: panel.scroll_y == 0)
        assert "BOTTLENECK" in screen_text(app)
        await pilot.press("p")  # back to the pane: its table has the keys again
        await pilot.pause()
        assert isinstance(app.focused, DataTable) and not panel.has_focus
