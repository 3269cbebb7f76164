"""A fleet row names the class the node's own panes name for the same snapshots.

The node's panes (Enter on a Fleet row) feed the node's window one snapshot at a time to a
replaying Monitor, which classifies its last minute (in ticks) with hysteresis; the fleet's row
must be that verdict, not the class of the window judged as a whole."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_fleet_codec import fleet_of, scrape_series

import gputop_diag.fleet.node_judge as node_judge
from gputop_diag import sim
from gputop_diag.diagnose.classify import judge
from gputop_diag.fleet.judge import judge_fleet
from gputop_diag.fleet.node_judge import STREAK_CAP, judge_node
from gputop_diag.fleet.read import FleetData, NodeData
from gputop_diag.monitor.core import Monitor


def simulated(scenario: str, seconds: int) -> list:
    """`scenario` sampled once a second, as a node's exporter would have been."""
    monitor = Monitor(sim.build(scenario))
    snaps = []
    monitor.run_for(seconds, lambda t: snaps.append(t.snapshot))
    return snaps


def panel(snaps, tick_s: float = 1.0):
    """What the node's panes show: a replaying Monitor told the tick, fed the window in order
    (`tui/fleet_app.py` NodeApp), and its diagnosis after each snapshot."""
    monitor = Monitor(None, tick_s=tick_s)
    return [monitor.feed(s).diagnosis for s in snaps]


def capped(d):
    """The Monitor's diagnosis with its candidate's streak counted as judge_node counts it."""
    return replace(d, candidate_streak=min(d.candidate_streak, STREAK_CAP))


def one_node(snaps, step: float, tick_s: float) -> FleetData:
    nd = NodeData("gpu07", "gpu07", ("gpu07:9401",), snapshots=list(snaps),
                  last_seen=snaps[-1].timestamp, sources=("dcgm", "gputop_diag"))  # fmt: skip
    return FleetData(snaps[0].timestamp, snaps[-1].timestamp, step, tick_s, {"gpu07": nd})


def first_disagreement(snaps, tick_s: float) -> int:
    """The first window (snapshots[:k]) whose class as a whole is not what the panes hold."""
    for k, shown in enumerate(panel(snaps, tick_s), start=1):
        if judge(snaps[:k], tick_s=tick_s).primary != shown.primary:
            return k
    raise AssertionError("no window where the whole-window class and the panes' class differ")


@pytest.mark.parametrize("step", [1.0, 15.0])
def test_a_class_that_flips_at_the_windows_end_is_held_in_the_row_as_in_the_panes(step):
    """Compute-bound for a minute, then the input pipeline falls behind: the window ending
    just after the change shows another class on its own, while the panes hold compute until
    a new class has won three ticks in a row. The fleet's row says what the panes say."""
    if step == 1.0:
        snaps, tick_s = simulated("compute-then-input", 90), 1.0
    else:  # dcgm-exporter's usual scrape, read back through the exporter's series
        series, scraped, _ = scrape_series("compute-then-input", seconds=300, step=step)
        snaps = next(iter(fleet_of(series, scraped, step=step).nodes.values())).snapshots
        tick_s = step
    k = first_disagreement(snaps, tick_s)
    window = snaps[:k]
    shown = panel(window, tick_s)[-1]
    assert shown.primary == "compute" and shown.candidate != "compute"  # held
    assert judge(window, tick_s=tick_s).primary != "compute"  # what the row said before
    row = judge_fleet(one_node(window, step, tick_s)).nodes[0].diagnosis
    assert row.primary == shown.primary
    assert row == capped(shown)  # evidence, confidence, alerts: the same diagnosis


def test_every_tick_of_a_tour_is_judged_as_the_panes_judge_it():
    """The simulator's tour passes through idle, compute, input, sync with an Xid, comm and
    compute again: at every tick the node judged on its own window so far is the panes'
    verdict, held classes and insufficient data included."""
    snaps = simulated("tour", 240)
    shown = panel(snaps)
    held = 0
    for k in range(1, len(snaps) + 1):
        d = judge_node(snaps[:k])
        assert d == capped(shown[k - 1]), k
        held += d.primary != d.candidate
    assert held >= 8  # the tour changes class: the panes held the old one for a while


@pytest.mark.parametrize("scenario", ["comm-bound", "memory-leak"])
def test_every_scrape_at_15_s_is_judged_as_the_panes_judge_it(scenario):
    series, scraped, _ = scrape_series(scenario, seconds=450, step=15.0)
    snaps = next(iter(fleet_of(series, scraped, step=15.0).nodes.values())).snapshots
    shown = panel(snaps, 15.0)
    for k in range(1, len(snaps) + 1):
        assert judge_node(snaps[:k], 15.0) == capped(shown[k - 1]), k


def test_snapshots_out_of_order_are_cut_as_the_monitors_history_cuts_them():
    snaps = simulated("compute-then-input", 75)
    snaps[40], snaps[41] = snaps[41], snaps[40]
    snaps[70], snaps[72] = snaps[72], snaps[70]
    shown = panel(snaps)
    for k in (42, 60, 71, 73, len(snaps)):
        assert judge_node(snaps[:k]) == capped(shown[k - 1]), k


def test_no_snapshots_is_too_little_data():
    assert judge_node([]).primary == "insufficient_data"


def test_a_steady_node_classifies_three_windows_not_every_tick(monkeypatch):
    """The cost: the verdict after the last tick is known once three windows in a row show
    one class, so a node whose class holds is classified three times, whatever its length."""
    snaps = simulated("compute-bound", 60)
    calls = []
    real = node_judge.judge

    def counting(window, **kw):
        calls.append(len(window))
        return real(window, **kw)

    monkeypatch.setattr(node_judge, "judge", counting)
    d = judge_node(snaps)
    assert d.primary == "compute" and d.candidate_streak == STREAK_CAP
    assert len(calls) == 3
