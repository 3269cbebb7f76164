"""One node judged as its own panes judge it: the verdict a Monitor reaches fed the node's window.

Enter on a Fleet row opens the node's panes, which feed the node's snapshots one by one to a
replaying `Monitor(None, tick_s=...)` (`monitor/core.py`): each `feed` appends the snapshot to
the Monitor's history and classifies the last `WINDOW_S` (times the tick) with the verdict of
the tick before (`diagnose.classify.classify`: a new class replaces the verdict only once it has
won `HYSTERESIS_TICKS` ticks in a row). `judge_node` gives the fleet's row the verdict that
Monitor holds after the last snapshot of the same window: the same windows (the Monitor's
`WINDOW_S` and `HISTORY_S`, cut as its `History` cuts them), the same `classify`, the same
hysteresis.

It does not classify every tick to get there. A tick's verdict depends on the ticks before it
only through the previous verdict's class, its candidate (the class the previous window showed
on its own) and how many ticks in a row that candidate won. Where the state is known without
looking further back — the first tick; a window with too little data, which nothing holds
against; a class that won `HYSTERESIS_TICKS` windows in a row — the ticks before it cannot
matter. So the windows are judged on their own from the last one backwards until such a tick,
and the hysteresis is replayed forward from there: for a node whose class holds, three windows
(the last and the two before it). The one difference from the Monitor's diagnosis is the
candidate's streak, counted up to `HYSTERESIS_TICKS` (past that no verdict depends on it).
`tests/test_fleet_node_judge.py` checks the verdict against a Monitor fed the same snapshots.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import replace

from ..diagnose import thresholds as T
from ..diagnose.classify import classify, judge
from ..diagnose.history import HISTORY_S, WINDOW_S, History
from ..diagnose.types import Diagnosis
from ..model import Snapshot

INSUFFICIENT = "insufficient_data"  # the class nothing holds against (`classify`)
STREAK_CAP = T.HYSTERESIS_TICKS  # the candidate's streak is counted up to this

State = tuple[str, str, int]  # after a tick: (the verdict's class, the candidate, its streak)


def monitor_windows(snapshots: Sequence[Snapshot], tick_s: float) -> list[tuple[Snapshot, ...]]:
    """The window the Monitor classifies after each snapshot fed in order (`Monitor._add`)."""
    history = History(window_s=HISTORY_S * tick_s)
    out = []
    for snap in snapshots:
        history.append(snap)
        out.append(history.snapshots(WINDOW_S * tick_s))
    return out


class _Windows:
    """The Monitor's window after each tick, and each window's diagnosis on its own (its
    `candidate` is the class it shows), cut and judged once and only when asked."""

    def __init__(self, snapshots: Sequence[Snapshot], tick_s: float) -> None:
        self.snapshots = snapshots
        self.tick_s = tick_s
        self.times = [s.timestamp for s in snapshots]
        self._cut: list[tuple[Snapshot, ...]] | None = None
        if any(b < a for a, b in zip(self.times, self.times[1:], strict=False)):
            self._cut = monitor_windows(snapshots, tick_s)  # out of order: as the History does
        self._judged: dict[int, Diagnosis] = {}

    def __len__(self) -> int:
        return len(self.snapshots)

    def window(self, k: int) -> tuple[Snapshot, ...]:
        """What `History.snapshots(WINDOW_S * tick_s)` holds after tick `k`: with times in
        order, the snapshots up to `k` no older than the window (the History keeps more)."""
        if self._cut is not None:
            return self._cut[k]
        first = bisect_left(self.times, self.times[k] - WINDOW_S * self.tick_s, 0, k + 1)
        return tuple(self.snapshots[first : k + 1])

    def alone(self, k: int) -> Diagnosis:
        d = self._judged.get(k)
        if d is None:
            d = self._judged[k] = judge(self.window(k), tick_s=self.tick_s)
        return d

    def raw(self, k: int) -> str:
        return self.alone(k).candidate or INSUFFICIENT

    def streak(self, k: int) -> int:
        """How many windows in a row up to `k` showed `k`'s class, counted up to STREAK_CAP."""
        n = 1
        while n < STREAK_CAP and k - n >= 0 and self.raw(k - n) == self.raw(k):
            n += 1
        return n


def step(state: State, raw: str) -> State:
    """One tick of `classify`'s hysteresis: the verdict after a window showing `raw`."""
    primary, candidate, streak = state
    streak = min(streak + 1, STREAK_CAP) if candidate == raw else 1
    keep = primary != raw and INSUFFICIENT not in (primary, raw) and streak < T.HYSTERESIS_TICKS
    return (primary if keep else raw), raw, streak


def _known(w: _Windows, k: int) -> State | None:
    """The state after tick `k` where the ticks before it cannot change it, else None."""
    raw = w.raw(k)
    if k == 0 or raw == INSUFFICIENT:
        return raw, raw, w.streak(k)
    if w.streak(k) >= T.HYSTERESIS_TICKS:
        return raw, raw, STREAK_CAP
    return None


def _state_after(w: _Windows, k: int) -> State:
    """The state after tick `k`: back to a tick whose state is known, then forward."""
    start = k
    state = _known(w, start)
    while state is None:
        start -= 1
        state = _known(w, start)
    for j in range(start + 1, k + 1):
        state = step(state, w.raw(j))
    return state


def judge_node(snapshots: Sequence[Snapshot], tick_s: float = 1.0) -> Diagnosis:
    """The diagnosis a replaying `Monitor(None, tick_s=tick_s)` holds after being fed
    `snapshots` in order (the node's panes), its candidate's streak counted up to
    STREAK_CAP; with no snapshots, the diagnosis of an empty window."""
    if not snapshots:
        return judge((), tick_s=tick_s)
    w = _Windows(snapshots, tick_s)
    last = len(w) - 1
    known = _known(w, last)
    if known is not None:
        # classify() names the window's own class, unheld, whatever came before
        return replace(w.alone(last), candidate_streak=known[2])
    primary, candidate, streak = _state_after(w, last - 1)
    previous = replace(
        w.alone(last - 1), primary=primary, candidate=candidate, candidate_streak=streak
    )
    d = classify(w.window(last), previous, tick_s=tick_s)
    return replace(d, candidate_streak=min(d.candidate_streak, STREAK_CAP))


def judge_steady(snapshots: Sequence[Snapshot], tick_s: float = 1.0) -> Diagnosis:
    """`judge_node` for a window whose every tick shows one class that nothing holds against:
    the triage's idle nodes (`fleet/triage.py`: no GPU over the idle line at any sample, a
    sample at every step). Their last `HYSTERESIS_TICKS` windows all show it, so the state is
    known from the last window alone (`_known`), judged once instead of three times."""
    if len(snapshots) < T.HYSTERESIS_TICKS:
        return judge_node(snapshots, tick_s)
    w = _Windows(snapshots, tick_s)
    d = w.alone(len(w) - 1)
    return replace(d, candidate_streak=STREAK_CAP)
