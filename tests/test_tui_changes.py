"""What changes after the first frame must reach the screen: longer and shorter figures, a row
turning LOST, data arriving while a pane is hidden, a resize in between.

These read the screen as the terminal shows it (`screen_lines`), not a widget's text: the bugs
they guard against left the right text in the widget and a cut or stale one on screen.
"""

from __future__ import annotations

import re

import pytest
from test_tui_support import FedApp, screen_lines, screen_text, settled

from gputop_diag import sim
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.tui import SnapshotReady

SIZES = [(80, 24), (120, 40), (200, 50)]
IDS = ["80x24", "120x40", "200x50"]


def row_of(app, needle: str) -> str:
    """The first row below the header and the tabs holding `needle`."""
    return next((line for line in screen_lines(app)[2:] if needle in line), "")


@pytest.mark.parametrize("size", [(40, 12), *SIZES], ids=["40x12", *IDS])
async def test_memory_growth_appears_whole_after_the_first_frame(size):
    app = FedApp("memory-leak", cached=True)
    async with app.run_test(size=size) as pilot:
        app.feed(3)
        await pilot.pause()
        first = row_of(app, "GPU0")
        assert "GROWING" not in first and "/min" not in first
        app.feed(57)
        await pilot.pause()
        row = row_of(app, "GPU0")
        assert "GROWING" in row  # whole, not "GROWI"
        if size[0] >= 80:
            assert "G/min" in row or "MiB/min" in row  # the rate beside it, not "MiB/mi"
        assert len(row.rstrip()) <= size[0]


async def test_a_job_starting_is_not_growth():
    """Memory jumping when a job starts (ramp-up) is no leak: no flag while it settles."""
    app = FedApp("tour", cached=True)  # idle first, then a job starts and fills the GPUs
    async with app.run_test(size=(200, 50)) as pilot:
        for _ in range(8):
            app.feed(10)
            await pilot.pause()
            gpu_rows = [line for line in screen_lines(app)[2:] if "GPU" in line[:8]]
            assert gpu_rows and not any("GROWING" in line for line in gpu_rows)


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_a_gpu_lost_mid_run_shows_lost_on_its_row(size):
    app = FedApp("xid-79", cached=True)
    async with app.run_test(size=size) as pilot:
        app.feed(30)
        await settled(pilot, lambda: "/79.6" in row_of(app, "GPU3"))
        assert "58.9/79.6" in row_of(app, "GPU3") or "/79.6" in row_of(app, "GPU3")
        app.feed(70)
        await settled(pilot, lambda: "LOST" in row_of(app, "GPU3 "))
        row = row_of(app, "GPU3 ")
        assert "LOST" in row, row  # not a blank row
        assert "/79.6" in row_of(app, "GPU2")
        await pilot.press("2")
        await pilot.pause()
        assert "LOST" in row_of(app, "GPU3")
        await pilot.press("3")
        await pilot.pause()
        assert row_of(app, "3 LOST").lstrip().startswith("3 LOST")  # NVML index 3's row


async def test_p_twice_keeps_every_word_whole():
    app = FedApp("memory-leak", cached=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(40)
        await pilot.pause()
        for _ in range(2):
            await pilot.press("p")
            await pilot.pause()
            app.feed(1)
            await pilot.pause()
            assert "headroom" in row_of(app, "GPU0") or "free" in row_of(app, "GPU0")
            assert "headr " not in row_of(app, "GPU0")


async def test_xid_events_arriving_while_the_pane_is_hidden_show_when_it_is_shown():
    app = FedApp("xid-79", cached=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(5)
        await pilot.press("4")
        await pilot.pause()
        assert "No Xid or driver error" in screen_text(app)
        await pilot.press("1")
        app.feed(95)  # GPU 3 falls off the bus at 90 s, while the Memory pane shows
        await pilot.pause()
        await pilot.press("4")
        await pilot.pause()
        text = screen_text(app)
        assert "No Xid or driver error" not in text
        assert "Xid 79 FALLEN_OFF_BUS on GPU 3" in text


@pytest.mark.parametrize("key", ["1", "2", "3", "4", "5"])
async def test_every_pane_follows_a_resize_in_between(key):
    app = FedApp("xid-79", cached=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(20)
        await pilot.press(key)
        await pilot.pause()
        for size in ((80, 24), (40, 12), (120, 40), (200, 50), (80, 24)):
            await pilot.resize_terminal(*size)
            app.feed(20)
            await pilot.pause()
            lines = screen_lines(app)
            assert len(lines) == size[1]
            assert all(len(line.rstrip()) <= size[0] for line in lines)
        text = screen_text(app)
        if key in "12":
            assert "LOST" in text  # GPU 3 fell off while the terminal was resized
        assert "gputop-diag" in lines[0] or "gpu-node-07" in lines[0]


async def test_driver_facts_that_change_while_the_pane_is_hidden_show_when_shown():
    app = FedApp("compute-bound")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.press("5")
        await pilot.pause()
        assert "570.124.06" in screen_text(app)
        await pilot.press("1")
        other = sim.build("driver-mismatch")
        # a tick of another machine, through the app's Monitor (as a replay feeds one)
        app.post_message(SnapshotReady(app.feeder.add(Sampler(other, interval=1.0).sample())))
        await pilot.pause()
        await pilot.press("5")
        await pilot.pause()
        text = screen_text(app)
        assert "550.54.15" in text and "570.124.06" not in text


async def test_utilization_figures_follow_a_drop_at_once():
    """Busy time falling from ~100 % to a sawtooth shows on the next tick, trace and figure."""
    app = FedApp("compute-then-input", cached=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        app.feed(50)
        await pilot.pause()

        def figure() -> int:
            return int(row_of(app, "GPU0").split("%")[0].split()[-1])

        assert figure() >= 90
        drops = 0
        for _ in range(40):
            app.feed(1)
            await pilot.pause()
            busy = app.latest.snapshot.gpu(0).util_gpu_pct
            # a held figure is never two steps (10 points) from the truth: a drop shows at once
            assert abs(figure() - busy) < 10
            drops += busy < 50
        assert drops  # the sawtooth did drop while we watched


async def test_the_panel_figures_are_never_dated_while_ticks_come_every_second():
    """A steady verdict sampled every second repaints its held figures within 5 s: the panel
    never says "(figures N s old)" on the tick path; a new verdict shows fresh figures."""
    app = FedApp("compute-then-input", cached=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(40)
        await pilot.pause()
        seen = []
        for _ in range(20):  # longer than a repaint period, a steady verdict
            app.feed(1)
            await pilot.pause()
            text = screen_text(app)
            assert "EVIDENCE" in text
            seen.append(text.split("EVIDENCE")[1].split("\n")[0])
        assert not any(re.search(r"figures \d+ s old", line) for line in seen), seen
        app.feed(40)  # the input pipeline falls behind: a new verdict, new figures
        await pilot.pause()
        text = screen_text(app)
        assert "INPUT PIPELINE" in text
        assert "figures" not in text.split("EVIDENCE")[1].split("\n")[0]  # fresh


async def test_no_verdict_yet_says_how_long_until_one():
    app = FedApp("compute-bound", cached=True)
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(2)
        await pilot.pause()
        text = screen_text(app)
        assert "INSUFFICIENT DATA" in text and "~3 s to one" in text
        assert "% confident" not in text.split("INSUFFICIENT DATA")[1].split("\n")[0]
        app.feed(5)
        await pilot.pause()
        assert "% confident" in screen_text(app)


async def test_the_tab_strip_names_the_pane_shown():
    app = FedApp("compute-bound", cached=True)
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(2)
        await pilot.pause()
        assert "[1 Memory]" in screen_lines(app)[1]
        await pilot.press("2")
        await pilot.pause()
        assert "[2 Utilization]" in screen_lines(app)[1]
        await pilot.resize_terminal(50, 20)
        await pilot.pause()
        assert "[2 Util]" in screen_lines(app)[1]  # short titles when the long ones don't fit
        await pilot.press("tab")
        await pilot.pause()
        assert "[3 Map]" in screen_lines(app)[1]
