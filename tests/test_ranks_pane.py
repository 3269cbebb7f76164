"""The Job pane of a distributed job: the rank table (rank, node, step p50, wait share, own,
lag, state), the straggler's line, the hang with the missing rank's top frames; the measured
split labelled the mean of the ranks. Driven through the real app: four ranks' probe states fed
tick by tick as the collector would hand them, then changed (the straggler resolves, a rank
stalls), with resizes in between; and under --sanitize, no node, pid or path of the job on
screen. The judgement is `diagnose/job_view.py`'s (the pane only lays it out)."""

from __future__ import annotations

from test_sanitize_ranks import made_up_names, rank_probes, rank_snapshot
from test_tui_support import screen_lines, screen_text
from textual.widgets import ContentSwitcher

from gputop_diag import sim
from gputop_diag.diagnose.job_view import job_view
from gputop_diag.tui import GpuTopApp, SnapshotReady
from gputop_diag.tui.panes.base import View
from gputop_diag.tui.panes.job import render


class RanksApp(GpuTopApp):
    """The real app watching a job (the Job pane on), its ticks the test's snapshots."""

    def __init__(self, sanitize: bool = False) -> None:
        super().__init__(sim.build("compute-bound"), start_collectors=False, sanitize=sanitize)
        self.job = "torchrun train.py"
        self.at = 8000.0

    def feed(self, names, seconds: int = 1, **probes) -> None:
        """`seconds` ticks of the job, its ranks' probes as `rank_probes(**probes)` makes them."""
        for _ in range(seconds):
            self.at += 1.0
            snap = rank_snapshot(names, self.at, rank_probes(names, self.at, **probes))
            self.post_message(SnapshotReady(self.feeder.add(snap)))


def _pane_text(app) -> str:
    return app.query_one("#job-text").plain


async def test_the_pane_follows_the_ranks_and_every_size():
    names = made_up_names()
    app = RanksApp()
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(names, 3)  # rank 2 the straggler
        await pilot.pause()
        assert app.query_one("#panes", ContentSwitcher).current == "job"
        screen = screen_text(app)
        assert "Ranks (4 of world 4)" in screen
        assert "straggler: rank 2 on " + names.nodes[2] in screen
        for node in names.nodes:
            assert node in screen  # 200 columns: every rank's node in full
        assert "+30.0 ms" in screen and "stepping" in screen
        assert "mean of 4 ranks" in screen  # the merged split stays, labelled

        await pilot.resize_terminal(80, 24)
        app.feed(names, 1, straggler=None, stalled=1)  # resolved; rank 1 stalls
        await pilot.pause()
        _fits(app, 80, 24)
        await pilot.resize_terminal(40, 12)
        app.feed(names, 1, straggler=None, stalled=1)
        await pilot.pause()
        _fits(app, 40, 12)
        await pilot.resize_terminal(200, 50)
        app.feed(names, 1, straggler=None, stalled=1)
        await pilot.pause()
        text = _pane_text(app)
        assert "straggler" not in text
        assert "hang: rank 1 took no step for 40 s" in text
        assert "stack of rank 1 (most recent call first)" in text
        assert "line 88 in read_shard" in text  # the missing rank's top frame
        assert "stalled 40 s" in text and "waiting 40 s in all_reduce #123" in text


def _fits(app, width: int, height: int) -> None:
    lines = screen_lines(app)
    assert len(lines) == height
    assert all(len(line.rstrip()) <= width for line in lines)


def _window(names, n: int = 3, **probes):
    return [
        rank_snapshot(names, 100.0 + k, rank_probes(names, 100.0 + k, **probes)) for k in range(n)
    ]


def _listed(text: str, world: int) -> list[str]:
    table = text.split(f"Ranks ({world} of world {world})")[1].split("\n  hang:")[0]
    table = table.split("\n  straggler:")[0]
    return [ln.split()[0] for ln in table.splitlines()[2:] if ln.strip()[:1].isdigit()]


def test_a_short_terminal_lists_the_ranks_that_matter_first():
    """Eight ranks at 80x24: the straggler (or the rank a hang misses) is listed, then stalled
    and waiting ranks, then the lowest others; the rest counted; the stack's top frames."""
    names = made_up_names(8)
    w = _window(names, straggler=6)
    text = render(w[-1].job, w, None, View(short=True), 78).plain
    assert _listed(text, 8) == ["0", "1", "2", "6"] and "… 4 more ranks" in text
    w = _window(names, straggler=None, stalled=5)
    text = render(w[-1].job, w, None, View(short=True), 78).plain
    assert _listed(text, 8) == ["0", "1", "2", "5"]
    assert "line 88 in read_shard" in text and "line 230" not in text  # top frames only
    full = render(w[-1].job, w, None, View(), 198).plain
    assert _listed(full, 8) == [str(r) for r in range(8)] and "line 230" in full


def test_the_view_model_judges_the_ranks_and_one_rank_has_no_table():
    names = made_up_names()
    w = _window(names)
    v = job_view(w[-1].job, w, None)
    assert v.ranks is not None and v.ranks.straggler.rank == 2
    one = made_up_names(1)
    w1 = _window(one)
    v1 = job_view(w1[-1].job, w1, None)
    assert v1.ranks is None and "Ranks" not in render(w1[-1].job, w1, None, View(), 120).plain


async def test_under_sanitize_the_pane_shows_no_node_pid_or_path():
    names = made_up_names()
    app = RanksApp(sanitize=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(names, 2)
        app.feed(names, 2, stalled=3)
        await pilot.pause()
        text = _pane_text(app)
        screen = screen_text(app)
    why = f"(seed {names.seed})"
    low = screen.lower()  # the whole screen: no node or path (the side panel's diagnosis
    assert not [x for x in names.secrets() if x.lower() in low], why  # names pids, as ever)
    assert "Ranks (4 of world 4)" in text and "hang: rank 3 took no step" in text, why
    assert "line 88 in read_shard" in text and "host-" in text, why
    low = text.lower()
    assert not [x for x in names.secrets() if x.lower() in low], why
    assert not [p for p in names.pids if str(p) in text], why  # the pane: none


def test_a_job_whose_steps_stopped_says_so_not_its_old_rate():
    import dataclasses

    names = made_up_names()
    w = _window(names)
    moving = render(w[-1].job, w, None, View(), 120).plain
    assert "steps/s  (measured in the job, step" in moving and "no step for" not in moving
    last = w[-1]
    frozen = tuple(
        dataclasses.replace(p, steps=dataclasses.replace(p.steps, last_at=last.timestamp - 40))
        for p in last.probes
    )
    w[-1] = dataclasses.replace(last, probes=frozen)
    assert job_view(w[-1].job, w, None).measured_stalled_s == 40
    text = render(w[-1].job, w, None, View(), 120).plain
    assert "Steps no step for 40 s" in text and "steps/s up to step" in text
