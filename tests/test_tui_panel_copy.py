"""What a user copies from the bottleneck panel pastes as it was meant: a command is never broken
inside a word, and where it goes on over lines each line but its last ends with ` \\`; the
panel's lines are wrapped once, to the width they are drawn at (no lone word left by a second
wrap when the scrollbar appears)."""

from __future__ import annotations

import pytest
from test_tui_support import FedApp, screen_lines, settled

from gputop_diag.diagnose.checks import CHECKS, MISSING_CHECKS, SERVING_CHECKS
from gputop_diag.diagnose.lead import GROWTH_STEP
from gputop_diag.diagnose.types import Diagnosis, Evidence
from gputop_diag.tui.side_panel import SidePanel, render_full, wrap_words
from gputop_diag.widgets import DiffText

# The narrowest full panel: 44 columns less border, padding and gutter, less `1. `.
NARROWEST_ROOM = 37
FILLED = {"main_pid": 41200, "job": "48213", "cmd": "python serve.py --model mistral-7b"}


def catalog() -> list[str]:
    out = [c.format(**FILLED) for cs in (*CHECKS.values(), *SERVING_CHECKS.values()) for c in cs]
    return [*out, *MISSING_CHECKS.values(), GROWTH_STEP]


def test_no_word_of_a_next_step_is_wider_than_the_narrowest_panel():
    """With room left for a ` \\` after it."""
    long = {w for text in catalog() for w in text.split() if len(w) > NARROWEST_ROOM - 2}
    assert not long


def _unwrapped(lines: list[str]) -> str:
    """The lines as a shell reads them pasted: ` \\` and the newline after it join lines."""
    return " ".join(line.removesuffix(" \\") for line in lines)


@pytest.mark.parametrize("room", [37, 44, 60, 76])
def test_a_next_step_wraps_between_words_with_a_continuation_inside_a_command(room):
    for text in catalog():
        lines = wrap_words(text, room, room, copyable=True)
        assert all(len(line) <= room for line in lines), lines
        assert _unwrapped(lines).split() == text.split(), lines  # no word broken or lost
        for line, nxt in zip(lines, lines[1:], strict=False):
            # a line that ends inside a command says so
            if line.split()[-1] in ("nvidia-smi", "py-spy", "nsys", "ncu", "--pid", "-o"):
                assert line.endswith(" \\"), (line, nxt)


def test_the_issue_cases_stay_whole():
    sync = CHECKS["synchronization"][0]
    lines = wrap_words(sync, NARROWEST_ROOM, NARROWEST_ROOM, copyable=True)
    assert any("torch.cuda.set_sync_debug_mode(1)" in line for line in lines)
    sinfo = CHECKS["scheduler"][1]
    lines = wrap_words(sinfo, NARROWEST_ROOM, NARROWEST_ROOM, copyable=True)
    assert any("'%n %G %t';" in line for line in lines)  # a quoted phrase is one word
    assert any(line.endswith("-o \\") or "-o '%n" in line for line in lines)
    pyspy = "See where the main thread of the job waits: py-spy dump --pid 41200"
    lines = wrap_words(pyspy, 30, 30, copyable=True)
    assert lines[-1] == "py-spy dump --pid 41200" or lines[-2].endswith(" \\"), lines
    assert "job's helper processes" in " ".join(
        wrap_words("28 of the job's helper processes at 72 % CPU", 20, 20, copyable=True)
    )  # an apostrophe is not a quote


def test_the_full_panel_draws_each_step_once_per_line():
    d = Diagnosis(
        "synchronization",
        0.85,
        evidence=(Evidence("util", 60.0, 50.0, "GPUs idle 40 % of the time", "%"),),
        checks=tuple(c.format(**FILLED) for c in CHECKS["synchronization"]),
    )
    text = render_full(d, width=40).plain
    assert "set_sync_debug_mode(1)" in text
    assert "mode('warn" not in text


@pytest.mark.slow
@pytest.mark.parametrize(("size", "presses"), [((120, 40), ()), ((80, 24), ("p",))])
async def test_the_panel_is_wrapped_to_the_width_it_is_drawn_at(size, presses):
    """The issue's lone ` gaps` line: the text wrapped for a width the scrollbar then took a
    column of, wrapped again by Textual."""
    app = FedApp("input-starved")
    async with app.run_test(size=size) as pilot:
        app.feed(20)
        await pilot.pause()
        for key in presses:
            await pilot.press(key)
        panel = app.query_one(SidePanel)
        text = panel.query_one("#side-text", DiffText)
        await settled(pilot, lambda: panel.max_scroll_y > 0 and text.size.width > 0)
        assert panel.max_scroll_y > 0  # the case: a scrollbar is shown
        await pilot.pause()
        lines = text.plain.splitlines()
        assert max(len(line) for line in lines) <= text.size.width
        shown = "\n".join(screen_lines(app))
        for line in lines[:12]:  # the lines on screen are the lines wrapped
            if line.strip():
                assert line.rstrip() in shown, line
