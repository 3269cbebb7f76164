"""The ranks of a distributed job (ranks.py) in words and in JSON: `watch`'s summary, the
report, the Job pane's table."""

from __future__ import annotations

from typing import Any

from ..model.codec import jsonable
from .ranks import RankRow, RanksView

STACK_LINES_SHOWN = 12
# collect/probe.py asks a stalled rank's probe for its stack at 5 s of stall (STACK_AFTER_S)
NO_STACK_YET = "no stack yet: the probe is asked for it once a rank stalls 5 s"
HEADER = ("rank", "node", "pid", "GPU", "steps", "step p50", "p95", "input", "sync", "wait")
HEADER_REST = ("own", "lag", "state")


def ranks_lines(view: RanksView) -> list[str]:
    """The rank table, then the straggler (or why none is named), then the hang."""
    world = f" of world {view.world}" if view.world else ""
    out = [f"ranks ({len(view.rows)}{world}, measured in the job; medians over each rank's steps):"]
    table = [(*HEADER, *HEADER_REST)] + [_cells(r) for r in view.rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        out.append("  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    s = view.straggler
    out.append(f"  {view.verdict}")
    if s is not None:
        out.extend(f"    {line}" for line in s.evidence)
        out.append(f"    next: {s.next_step}")
    h = view.hang
    if h is not None:
        for rank, stack in h.stacks:
            out.append(f"    stack of rank {rank} (most recent call first):")
            out.extend(f"      {line}" for line in stack.splitlines()[:STACK_LINES_SHOWN])
        if not h.stacks and not h.gone:
            out.append(f"    {NO_STACK_YET}")
        out.append(f"    next: {h.next_step}")
    return out


def rank_state(r: RankRow) -> str:
    """A rank's state in words: "stepping", "waiting 31 s in all_reduce #123", "stalled 40 s"."""
    state = r.state
    if r.state in ("waiting", "stalled") and r.stalled_s is not None:
        state += f" {r.stalled_s:.0f} s"
        if r.collective:
            state += f" in {r.collective}"
    return state


def _cells(r: RankRow) -> tuple[str, ...]:
    share = r.wait_share
    wait = _ms(r.wait_s) + (f" ({share * 100:.0f} %)" if share is not None else "")
    state = rank_state(r)
    return (
        str(r.rank),
        r.node or "?",
        str(r.pid),
        "-" if r.gpu_index is None else str(r.gpu_index),
        str(r.steps),
        _ms(r.step_p50_s),
        _ms(r.step_p95_s),
        _ms(r.input_s),
        _ms(r.sync_s),
        wait,
        _ms(r.own_s),
        lag_text(r),
        state,
    )


def lag_text(r: RankRow) -> str:
    """Its own work beyond the fastest rank's: "+12.5 ms", "-" where not measured."""
    return "-" if r.lag_s is None else f"+{r.lag_s * 1000:.1f} ms"


def ms(seconds: float | None) -> str:
    """Seconds as the rank table reads them: "12.5 ms", "14.2 s", "n/a"."""
    return _ms(seconds)


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def ranks_json(view: RanksView | None) -> dict[str, Any] | None:
    """The `ranks` object of `watch --json` and the report's document."""
    if view is None:
        return None
    return {
        "world": view.world,
        "rows": [{**jsonable(r), "wait_share": r.wait_share} for r in view.rows],
        "verdict": view.verdict,
        "straggler": jsonable(view.straggler),
        "hang": jsonable(view.hang),
    }
