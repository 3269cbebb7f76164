"""What the screen shows in the moment after a change: pane 2's GPU rows on its first frame, the
histories at the width the pane has after a resize, a toast that keeps a path whole, and
continuation lines of the banner and the Driver pane under their text."""

from __future__ import annotations

import pytest
from rich.text import Text
from test_tui_support import FedApp, screen_lines, settled
from textual.app import App

from gputop_diag.tui.panes import base
from gputop_diag.tui.panes.base import hang_text
from gputop_diag.tui.panes.utilization import UtilizationPane
from gputop_diag.widgets import DiffLine, HistoryLine

PATH = "/home/alice/.local/state/gputop-diag/report-20260115-100203.md"


@pytest.mark.slow
async def test_pane_2_draws_its_gpu_rows_on_its_first_frame(monkeypatch):
    """The rows were mounted when the pane was first shown, and drawn a tick later. Now the
    pane is built on its first show (each widget costs some 30 KiB), its rows composed with
    it: the first frame that shows the pane has them, their figures drawn."""
    frames: list[list[str]] = []
    display = App._display

    def spy(self, screen, renderable):
        if renderable is not None and not self._batch_count:  # a frame written
            frames.append(screen_lines(self))
        return display(self, screen, renderable)

    app = FedApp("compute-bound")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.pause()
        assert not app.query(UtilizationPane)  # not built while never shown
        monkeypatch.setattr(App, "_display", spy)
        await pilot.press("2")
        await pilot.pause()
        # every frame since the key shows the pane (none shows it empty, before it is drawn)
        assert frames and all(any("GPU busy time" in line for line in f) for f in frames), frames
        rows = [line for line in frames[0] if "GPU7" in line]
        assert rows and "%" in rows[0], frames[0]


@pytest.mark.slow
async def test_a_history_drawn_at_a_passing_width_is_drawn_again(monkeypatch):
    """A pane drawn while the terminal was being resized, at a width its layout then changed:
    drawn again after the next refresh, not a tick later."""
    app = FedApp("compute-bound")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.press("2")
        await pilot.pause()
        caption = app.query_one("#util-caption", DiffLine)
        right = caption.plain
        pane = app.query_one(UtilizationPane)
        real = base.pane_width
        calls = iter([30])
        monkeypatch.setattr(
            "gputop_diag.tui.panes.utilization.pane_width", lambda w: next(calls, None) or real(w)
        )
        pane.show(app.latest, app.view())  # one draw at a width that passed
        assert "last 8 s" in caption.plain
        await settled(pilot, lambda: caption.plain == right)
        assert caption.plain == right  # no tick was taken in between
        assert len(app.query_one("#util-gpu0", HistoryLine).plain) > 30


@pytest.mark.slow
async def test_a_toast_keeps_a_path_on_one_line():
    app = FedApp("compute-bound")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.feed(2)
        await pilot.pause()
        app.notify(f"report written to {PATH} and snapshot.json", timeout=10)
        await settled(pilot, lambda: any("report written" in x for x in screen_lines(app)))
        assert any(PATH in line for line in screen_lines(app))


def test_continuation_lines_hang_under_their_text():
    t = Text()
    t.append("! driver chain broken at the CUDA runtime: pid 7 (python) runtime 13.0\n")
    t.append("  next: a driver >= 580.65.06, or a framework build for CUDA <= 12.4\n")
    t.append("kernel module       550.54.15 (open)  /proc/driver/nvidia/version, read\n")
    t.append("plain prose that goes on and on past the width of the pane", style="dim")
    lines = hang_text(t, 40).plain.splitlines()
    assert all(len(line) <= 40 for line in lines)
    assert lines[1].startswith("  ") and not lines[1].startswith("   ")  # under `driver`
    nxt = lines.index(next(x for x in lines if x.startswith("  next: ")))
    assert lines[nxt + 1].startswith(" " * 8) and lines[nxt + 1][8] != " "  # under `a driver`
    module = lines.index(next(x for x in lines if x.startswith("kernel module")))
    assert lines[module + 1].startswith(" " * 20)  # under the value column
    assert lines[-1][0] != " "  # prose starts at the margin
    assert hang_text(t, 40).spans  # styles kept


@pytest.mark.slow
async def test_the_banner_and_the_driver_pane_hang_their_continuations():
    app = FedApp("driver-mismatch")
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(15)
        await pilot.press("5")
        await pilot.pause()
        text = app.query_one("#driver-text").plain.splitlines()
        bang = next(k for k, line in enumerate(text) if line.startswith("! CUDA runtime"))
        assert text[bang + 1].startswith("  ") and text[bang + 1][2] != " "
        assert all(len(line) <= 78 for line in text)
    app = FedApp("no-gpu")
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        await pilot.pause()
        banner = app.query_one("#banner").plain.splitlines()
        assert banner[1].startswith("  next: ") and banner[2].startswith(" " * 8)


def test_a_held_figure_whose_span_moved_is_repainted():
    """`no kernels in the last 4 s` is not held beside `figures 10 s old`."""
    from gputop_diag.diagnose.types import Evidence
    from gputop_diag.tui.side_panel import material

    def ev(text: str) -> Evidence:
        return Evidence("util_gpu_p95", 2.0, 10.0, text, "%")

    assert material(
        ev("no GPU ran kernels in the last 4 s"), ev("no GPU ran kernels in the last 14 s")
    )
    assert not material(ev("median, 15 s"), ev("median, 14 s"))  # a tick's jitter
    assert not material(ev("idle over 30 s"), ev("idle over 30 s"))
