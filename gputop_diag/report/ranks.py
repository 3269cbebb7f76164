"""The report's Ranks section: a distributed job's ranks compared (`diagnose/ranks.py`, the
`RanksView` watch's summary and the Job pane show), from the probe states the window's last
snapshot carries. Sanitized as every surface sanitizes it (`Sanitizer.model`): the ranks stay,
nodes become host pseudonyms, pids `pid-…`, the paths in the stacks path pseudonyms.

The JSON is `ranks_render.ranks_json`'s object (watch's `ranks`); the Markdown is rendered from
it alone, so the two say the same."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..diagnose.job_view import rank_probes
from ..diagnose.ranks import judge_ranks
from ..diagnose.ranks_render import NO_STACK_YET, STACK_LINES_SHOWN, ranks_json
from ..model import Snapshot
from ..sanitize.sanitizer import Sanitizer

_HEADER = ["rank", "node", "pid", "GPU", "steps", "step p50", "p95", "input", "sync", "wait"]
_HEADER += ["own", "lag", "state"]


def ranks_section(snaps: Sequence[Snapshot], s: Sanitizer) -> dict[str, Any] | None:
    """The ranks of the watched job (of every probed process where no job is watched) at the
    window's end, sanitized; None with fewer than two ranks."""
    last = snaps[-1]
    if last.job is not None:
        probes = rank_probes(last.job, snaps, last)
    else:
        probes = last.probes or ()
    view = judge_ranks(probes, last)
    if view is None:
        return None
    return ranks_json(s.model(view))


def ranks_markdown(section: dict[str, Any], table, md) -> list[str]:
    """The section in Markdown: the rank table, the verdict with its evidence, the hang's
    stacks as code blocks (`table`, `md`: the report's own Markdown helpers)."""
    rows = section.get("rows") or []
    world = f" of world {section['world']}" if section.get("world") else ""
    out = [f"{len(rows)} ranks{world}, measured in the job; medians over each rank's steps.", ""]
    out += table(_HEADER, [_cells(r) for r in rows], "rlllrrrrrrrrl")
    out += ["", f"**{md(section.get('verdict') or '')}**"]
    straggler = section.get("straggler")
    if straggler:
        out += [f"- {md(e)}" for e in straggler.get("evidence") or ()]
        out.append(f"- next: {md(straggler.get('next_step') or '')}")
    hang = section.get("hang")
    if hang:
        out += _hang(hang, md)
    return out


def _hang(hang: dict[str, Any], md) -> list[str]:
    out = []
    for rank, stack in hang.get("stacks") or ():
        frames = (stack or "").splitlines()[:STACK_LINES_SHOWN]
        out += ["", f"Stack of rank {rank} (most recent call first):", "", "```"]
        out += [f.replace("```", "'''") for f in frames] + ["```"]
    if not hang.get("stacks") and not hang.get("gone"):
        out += ["", NO_STACK_YET[0].upper() + NO_STACK_YET[1:] + "."]
    return [*out, "", f"Next: {md(hang.get('next_step') or '')}"]


def _cells(r: dict[str, Any]) -> list[Any]:
    share = r.get("wait_share")
    wait = _ms(r.get("wait_s")) + (f" ({share * 100:.0f} %)" if share is not None else "")
    lag = r.get("lag_s")
    return [
        r.get("rank"),
        r.get("node") or "?",
        r.get("pid"),
        "-" if r.get("gpu_index") is None else r["gpu_index"],
        r.get("steps"),
        _ms(r.get("step_p50_s")),
        _ms(r.get("step_p95_s")),
        _ms(r.get("input_s")),
        _ms(r.get("sync_s")),
        wait,
        _ms(r.get("own_s")),
        "-" if lag is None else f"+{lag * 1000:.1f} ms",
        _state(r),
    ]


def _state(r: dict[str, Any]) -> str:
    state = r.get("state") or "?"
    if state in ("waiting", "stalled") and r.get("stalled_s") is not None:
        state += f" {r['stalled_s']:.0f} s"
        if r.get("collective"):
            state += f" in {r['collective']}"
    return state


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"
