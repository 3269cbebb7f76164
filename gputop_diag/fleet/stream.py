"""The fleet read and judged a batch of nodes at a time: memory bounded whatever its size.

1. One query counted on the server names the fleet's nodes: per exporter (`instance`) and host
   name, how many GPU series report at each step (`query.presence_query`: one small series per
   node, where reading the GPUs' own series would bring every GPU of every node). The node keys
   (the host name, or the exporter where two report one host name at once) come from it as
   they come from the GPU series themselves (`read.node_keys`).
2. node-exporter's figures (one series per host and figure) and the ranks (one instant query
   for every rank of every job on every node) are read once for the whole fleet.
3. The nodes, in natural order, are read `BATCH_NODES` at a time: the same range queries as
   for a whole fleet, restricted to the batch's exporters (`instance=~"..."`), the next batch
   asked for while this one is judged. Each node of the batch is built into its snapshots and
   judged exactly as `judge_fleet` judges it (`judge.judge_nodes`), and its snapshots are let
   go: a verdict keeps its GPU activity at each step for the job's correlated dips.
4. Once every batch is judged, the jobs are (`judge.judge_jobs`).

What a node's verdict rests on is its own raw series, as before: the accuracy of the fleet's
verdicts is the single node's. Peak memory is that of two batches' answers and one batch's
snapshots, plus a verdict per node.
"""

from __future__ import annotations

import gc
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from ..prometheus.client import Prometheus
from ..prometheus.dcgm_fields import JOB_LABEL
from .judge import FleetVerdict, NodeVerdict, judge_jobs, judge_nodes, natural_key
from .query import (
    Column,
    Grid,
    NoFleetData,
    QueryPool,
    fetch,
    find_step,
    host_of,
    node_exporter_jobs,
    presence,
    run_jobs,
)
from .ranks import fetch_ranks, parse_ranks
from .read import (
    REALTIME_MAX_STEP_S,
    FleetData,
    assemble_columns,
    node_keys,
    presence_spans,
    time_warnings,
)
from .triage import Triage, ask_first, first_pass, second_pass
from .workers import BatchContext, Workers, default_workers

# Ours: 64 nodes of 8 GPUs a batch: each range query answers 512 GPUs' series (about 0.4 MB of
# JSON at 25 steps), small enough that two batches in flight stay near 100 MB, large enough
# that the queries' own cost (one per field and batch) stays under a tenth of the read.
BATCH_NODES = 64

# after each batch: the nodes judged so far (no jobs yet), how many, and the nodes in all
Progress = Callable[[FleetVerdict, int, int], object]


@dataclass
class FleetPlan:
    """The fleet's nodes on one grid, and the batches of exporters they are read in."""

    grid: Grid
    step_s: float
    tick_s: float
    keys: dict[tuple[str, str], str]  # (host name, instance) -> node key
    batches: list[list[str]]  # the instances of each batch of nodes
    nodes: int
    queries: int = 0
    warnings: list[str] = field(default_factory=list)
    recorded: bool = False  # the nodes named by the recording rule (`query.NODES_RULE`)
    members: dict[str, set[str]] = field(default_factory=dict)  # node key -> its instances
    batch_nodes: int = BATCH_NODES
    raw_because: dict[str, int] = field(default_factory=dict)  # why nodes were read raw

    def batch(self, nodes) -> None:
        """Read only these nodes raw, `batch_nodes` at a time in natural order."""
        self.batches = self.batches_of(nodes)

    def batches_of(self, nodes, parts: int = 1) -> list[list[str]]:
        """These nodes' exporters, up to `batch_nodes` nodes a batch in natural order; with
        `parts` (the workers), as many batches as a whole number of rounds of them takes, of
        even sizes, so that no worker is left judging a last batch while the others wait."""
        order = sorted(nodes, key=natural_key)
        size = max(1, self.batch_nodes)
        count = -(-len(order) // size)
        if parts > 1 and count:
            even = -(-len(order) // (-(-count // parts) * parts))
            if 2 * even >= size:  # not a few nodes split into many queries
                size = even
        return [
            sorted({i for key in order[k : k + size] for i in self.members[key]})
            for k in range(0, len(order), size)
        ]


def plan_fleet(
    prom: Prometheus,
    *,
    window_s: float,
    step_s: float | None = None,
    match: str = "",
    at: float | None = None,
    batch_nodes: int = BATCH_NODES,
    on_grid: Callable[[Grid], None] | None = None,
) -> FleetPlan:
    """The nodes present in the window ending `at` (now), batched in natural order. Raises
    NoFleetData where none reports, PrometheusError where Prometheus cannot answer.
    `on_grid(grid)` is called once the grid is known, before the nodes are counted (to ask
    what needs only the grid meanwhile)."""
    end = time.time() if at is None else at
    step, detect = (step_s, 0) if step_s else find_step(prom, match, window_s, end)
    grid = Grid.for_window(end, window_s, step)
    if on_grid is not None:
        on_grid(grid)
    columns, recorded = presence(prom, grid, match)
    keys = node_keys(presence_spans(columns))
    if not keys:
        raise NoFleetData("no dcgm-exporter series in the window")
    by_node: dict[str, set[str]] = defaultdict(set)
    for (_, inst), key in keys.items():
        by_node[key].add(inst)
    tick_s = 1.0 if step <= REALTIME_MAX_STEP_S else step
    asked = 1 if match.strip() else (1 if recorded else 2)
    plan = FleetPlan(
        grid, step, tick_s, keys, [], len(by_node), asked + detect,
        time_warnings(step, tick_s, grid), recorded, dict(by_node), batch_nodes,
    )  # fmt: skip
    plan.batch(by_node)
    return plan


def read_batches(
    prom: Prometheus,
    plan: FleetPlan,
    node_exporter: dict[str, list[Column]],
    *,
    match: str = "",
    group_by: str = JOB_LABEL,
) -> Iterator[FleetData]:
    """Each batch's nodes with their snapshots, the next batch read while this one is used."""
    if not plan.batches:
        return

    def read(instances: list[str]) -> tuple[list[Column], int]:
        columns, _, queries = fetch(prom, plan.grid, match, instances, node_exporter=False)
        return columns, queries

    with ThreadPoolExecutor(1) as ahead:
        pending = ahead.submit(read, plan.batches[0])
        for k in range(len(plan.batches)):
            columns, queries = pending.result()
            if k + 1 < len(plan.batches):
                pending = ahead.submit(read, plan.batches[k + 1])
            plan.queries += queries
            if not columns:
                continue  # the batch's exporters stopped between the two reads
            data = assemble_columns(columns, node_exporter, plan.grid, group_by, keys=plan.keys)
            del columns
            yield data


def stream_fleet(
    prom: Prometheus,
    *,
    window_s: float,
    step_s: float | None = None,
    match: str = "",
    at: float | None = None,
    group_by: str = JOB_LABEL,
    batch_nodes: int = BATCH_NODES,
    on_batch: Progress | None = None,
    triage: bool = True,
    workers: int | None = None,
) -> FleetVerdict:
    """The fleet judged as `judge_fleet(read_fleet(...))` judges it, a batch of nodes at a
    time; `on_batch(the nodes judged so far, how many, the nodes in all)` after each batch
    (the Fleet pane shows them as they come). The verdicts keep no snapshots. `workers`:
    the processes that read and judge the raw batches (`fleet/workers.py`; default one per
    CPU, up to four; 1: all in this process)."""
    count = default_workers() if workers is None else max(1, workers)
    # the triage's first pass needs only the grid: asked while Prometheus counts the nodes
    ahead = QueryPool(1)
    first: list[Future] = []

    def ask(grid: Grid) -> None:
        first.append(ahead.submit(ask_first, prom, grid, match))

    try:
        plan = plan_fleet(
            prom, window_s=window_s, step_s=step_s, match=match, at=at,
            batch_nodes=batch_nodes, on_grid=ask if triage else None,
        )  # fmt: skip
        pool = None
        if count >= 2 and len(plan.batches) >= 2:
            # started now, the workers import the judge while the fleet-wide figures and the
            # triage are read (those past the raw batches the triage leaves are then stopped)
            pool = Workers(None, min(count, len(plan.batches)))
            pool.start()
        try:
            asked = first[0] if first else None
            return _stream(prom, plan, pool, match, group_by, on_batch, triage, asked)
        finally:
            if pool is not None:
                pool.close(kill=True)
    finally:
        ahead.close()


def _stream(
    prom: Prometheus,
    plan: FleetPlan,
    pool: Workers | None,
    match: str,
    group_by: str,
    on_batch: Progress | None,
    triage: bool,
    first_asked: Future | None = None,
) -> FleetVerdict:
    grid = plan.grid
    _, node_exporter, n = run_jobs(prom, grid, node_exporter_jobs(grid))
    plan.queries += n
    ranks = fetch_ranks(prom, match, grid.end)
    plan.queries += 1
    verdicts: list[NodeVerdict] = []

    def shown() -> None:
        if on_batch is not None and len(verdicts) < plan.nodes:
            seen = sorted(verdicts, key=lambda v: natural_key(v.node.key))
            on_batch(FleetVerdict(_fleet_data(plan, seen), seen), len(seen), plan.nodes)

    # Many small objects and no cycles among them: the cyclic collector would walk the
    # growing heap again and again for nothing (each batch's objects are freed by count).
    collecting = gc.isenabled()
    gc.disable()
    try:
        later: list[list[str]] = []  # batches known after the workers began

        def give(batches: list[list[str]]) -> None:  # the workers begin on these
            assert pool is not None
            pool.keep(len(batches))
            pool.context = BatchContext(prom, grid, match, plan.keys, node_exporter, group_by)
            pool.open()
            pool.add(batches)

        parts = len(pool.workers) if pool is not None else 1
        if triage:
            asked = first_asked.result() if first_asked is not None else None
            first = first_pass(prom, grid, match, plan.keys, asked)
            early_nodes = set(first.triage.raw)  # busy, or no busy time: raw whatever else
            early = plan.batches_of(early_nodes, parts)
            if pool is not None and len(early) >= 2:
                # the workers read and judge these while the rest of the triage is asked and
                # its clear nodes judged here
                give(early)
            sorted_out = second_pass(prom, grid, match, first, plan.members)
            plan.queries += sorted_out.queries
            plan.raw_because = dict(sorted_out.reasons())
            if pool is not None and pool.opened:
                rest = [k for k in sorted_out.raw if k not in early_nodes]
                later = plan.batches_of(rest, max(1, len(pool.workers)))
                plan.batches = early + later
            else:
                plan.batches = plan.batches_of(sorted_out.raw, parts)
        if pool is not None and not pool.opened:
            if len(plan.batches) >= 2:
                give(plan.batches)
            else:
                pool.close(kill=True)
                pool = None
        complete = False
        try:
            if triage:
                for data in _clear_batches(sorted_out, plan, node_exporter, group_by):
                    judged = judge_nodes(data, drop=True, steady=True)
                    verdicts += [replace(v, read="aggregate") for v in judged]
                    del data
                    shown()
            if pool is not None:
                pool.add(later)
                for judged, queries in pool.results():
                    plan.queries += queries
                    verdicts += judged
                    shown()
            else:
                for data in read_batches(prom, plan, node_exporter, match=match, group_by=group_by):
                    verdicts += judge_nodes(data, drop=True)
                    del data
                    shown()
            complete = True
        finally:
            if pool is not None:
                pool.close(kill=not complete)  # a cancel or an error waits for no batch
                if pool.failed:
                    plan.warnings.append(pool.failed)
    finally:
        if collecting:
            gc.enable()
    verdicts.sort(key=lambda v: natural_key(v.node.key))
    keys = plan.keys

    def key_of(labels: dict[str, str]) -> str | None:
        return keys.get((host_of(labels), labels.get("instance", "")))

    fleet = _fleet_data(plan, verdicts)
    fleet.ranks = parse_ranks(ranks, group_by, key_of)
    if not verdicts:
        raise NoFleetData("no dcgm-exporter series in the window")
    out = FleetVerdict(fleet, verdicts)
    out.jobs = judge_jobs(verdicts, fleet)
    return out


def _clear_batches(
    sorted_out: Triage, plan: FleetPlan, node_exporter: dict[str, list[Column]], group_by: str
) -> Iterator[FleetData]:
    """The clear nodes' constant columns assembled as a raw batch's are, a batch at a time."""
    order = sorted(sorted_out.clear, key=natural_key)
    size = max(1, plan.batch_nodes)
    for k in range(0, len(order), size):
        columns = [c for key in order[k : k + size] for c in sorted_out.clear.pop(key)]
        yield assemble_columns(columns, node_exporter, plan.grid, group_by, keys=plan.keys)


def _fleet_data(plan: FleetPlan, verdicts: list[NodeVerdict]) -> FleetData:
    grid = plan.grid
    return FleetData(
        grid.time(1),
        grid.end,
        plan.step_s,
        plan.tick_s,
        {v.node.key: v.node for v in verdicts},
        queries=plan.queries,
        warnings=list(plan.warnings),
        raw_because=dict(plan.raw_because),
    )
