"""The ranks of each multi-node job, read back from Prometheus and compared as on one machine.

`gputop-diag exporter` publishes what the probe inside each rank measured (`gputop_diag_rank_*`,
`prometheus/ranks.py`): the step's median, the share of it spent waiting in collectives, the
rank's own work, its collective sequence number, its stall. One instant query at the window's
end reads every rank of every job on every node; each rank becomes a `ProbeState` carrying those
medians, and `diagnose/ranks.py` judges a job's ranks exactly as `watch` judges the ranks of one
node: the straggler (the most own work and the least wait), or the hang (the ranks that never
entered the collective the others wait in).

An adapter, not a second judge: the figures the exporter publishes are the ones `judge_ranks`
reads (wait seconds = wait share x step).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..diagnose.ranks import RanksView, judge_ranks
from ..model import ProbeProgress, ProbeState, ProbeSteps
from ..prometheus.client import Prometheus, PrometheusError
from .query import host_of, selector

PREFIX = "gputop_diag_rank_"
INFO = PREFIX + "info"
# Ours: a rank that has taken no step for this many of its median steps (and 2 s) is read as
# stalled; `judge_ranks` decides whether that is a hang (HANG_FLOOR_S, HANG_STEPS).
STALLED_STEPS = 3.0
STALLED_MIN_S = 2.0


@dataclass
class RankFigures:
    """One rank as its exporter published it: labels, and the gauges by short name."""

    job: str
    rank: int
    instance: str
    hostname: str | None
    node: str | None = None  # the fleet's node key (where its exporter reports GPUs)
    host: str | None = None  # the node the rank says it runs on (its probe's)
    pid: int = 0
    gpu: int | None = None
    world: int | None = None
    local_rank: int | None = None
    figures: dict[str, float] = field(default_factory=dict)

    @property
    def where(self) -> str | None:
        """The rank's node, as named: its probe's host name, else the fleet's node."""
        return self.host or self.node or self.hostname or self.instance or None


def rank_query(match: str) -> str:
    """Every rank series of every job, in one query (the user's --match applies)."""
    inner = selector(None, match).strip("{}").strip()
    return "{" + f'__name__=~"{PREFIX}.+"' + (", " + inner if inner else "") + "}"


def fetch_ranks(prom: Prometheus, match: str, at: float) -> list[tuple[dict[str, str], float]]:
    """The rank series' newest values at `at` (Prometheus' lookback: a rank that stopped
    reporting drops out with its exporter's scrape); none where the query is refused (they
    add to the nodes' judgement, which goes on without them)."""
    try:
        return prom.query(rank_query(match), at=at)
    except PrometheusError as e:
        if e.kind != "query":
            raise
        return []


def parse_ranks(
    vector: Sequence[tuple[dict[str, str], float]],
    group_by: str,
    node_of: Callable[[dict[str, str]], str | None] = lambda labels: None,
) -> dict[str, list[RankFigures]]:
    """Job (the --group-by label's value) -> its ranks, by rank; `node_of` names a series'
    fleet node from its labels (host name, instance)."""
    by_key: dict[tuple[str, str, int], RankFigures] = {}
    for labels, value in vector:
        name, rank = labels.get("__name__", ""), labels.get("rank", "")
        if not name.startswith(PREFIX) or not rank.isdigit():
            continue
        # a job without a job label (torchrun outside a batch system) is its ranks' shared run
        job = labels.get(group_by, "") or (f"run {labels['run']}" if labels.get("run") else "")
        key = (job, labels.get("instance", ""), int(rank))
        r = by_key.get(key)
        if r is None:
            r = RankFigures(key[0], key[2], key[1], host_of(labels) or None)
            r.node = node_of(labels)
            by_key[key] = r
        if name == INFO:
            _take_info(r, labels)
        else:
            r.figures[name.removeprefix(PREFIX)] = value
    jobs: dict[str, list[RankFigures]] = defaultdict(list)
    for r in sorted(by_key.values(), key=lambda r: (r.job, r.rank)):
        jobs[r.job].append(r)
    return dict(jobs)


def _take_info(r: RankFigures, labels: dict[str, str]) -> None:
    def num(name: str) -> int | None:
        v = labels.get(name, "")
        return int(v) if v.isdigit() else None

    r.host = labels.get("node") or None
    r.pid = num("pid") or 0
    r.gpu, r.world, r.local_rank = num("gpu"), num("world"), num("local_rank")


def probe_state(r: RankFigures, at: float) -> ProbeState:
    """The rank as `judge_ranks` reads a probe: its medians as the steps, a progress record
    where it is in a collective or has taken no step for a while."""
    f = r.figures
    step = f.get("step_seconds")
    stalled = f.get("stalled_seconds", 0.0)
    seq = f.get("collective_seq")
    inside = bool(f.get("in_collective"))
    steps = None
    if step is not None:
        ratio = f.get("wait_ratio")
        steps = ProbeSteps(
            steps=int(f.get("window_steps", 0)),
            last_step=0,
            last_at=at - stalled,
            wall_s=step,
            wall_p50_s=step,
            own_p50_s=f.get("own_seconds"),
            wait_p50_s=None if ratio is None else ratio * step,
            input_p50_s=f.get("input_seconds"),
            sync_p50_s=f.get("sync_seconds"),
            coll_seq=None if seq is None else int(seq),
        )
    progress = None
    if inside or stalled >= max(STALLED_MIN_S, STALLED_STEPS * (step or 0.0)):
        entered = int(seq or 0)
        progress = ProbeProgress(
            at=at,
            step=0,
            stalled_s=stalled,
            entered=entered,
            done=entered - 1 if inside else entered,
            in_s=stalled if inside else None,
        )
    return ProbeState(
        pid=r.pid,
        start_ticks=0,
        rank=r.rank,
        world=r.world,
        local_rank=r.local_rank,
        node=r.where,
        steps=steps,
        updated_at=at,
        progress=None if f.get("gone") else progress,
        gone=bool(f.get("gone")),
    )


def judge_job_ranks(ranks: Sequence[RankFigures], at: float) -> RanksView | None:
    """The job's ranks judged as `watch` judges one node's; None under two ranks."""
    return judge_ranks([probe_state(r, at) for r in ranks], None, at=at)
