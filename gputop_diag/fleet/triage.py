"""Triage: the nodes whose verdict the server's aggregates already decide, judged without their
raw series.

A handful of instant queries at the window's end, evaluated by Prometheus over the window for
every node at once (`*_over_time` over the window's range, then `max`/`min`/`count by` the
node's labels), say per node: its GPUs' highest busy time and SM activity, whether every GPU
reported at every step and lately, how far its memory moved and how full it got, and whether
any series that raises an alert whatever the GPUs do (an Xid, a lost GPU, an uncorrectable ECC
error, a row remap) or a GPU process is there at all.

A node is *clear* only where the raw judgement could say nothing else: it is **idle** (every
GPU's busy time and SM activity at or under `IDLE_UTIL_PCT` at every sample, so no window of
the classifier sees an active GPU: `diagnose/features.py`, `is_active`), every GPU reported at
every step up to the end (no gaps, not stale, no MIG instances), no GPU process or thread
series (the figures that would need them), memory steady (moved under half the least growth
the leak rule names) and under `CAPACITY_WARN_PCT` full, and none of the alert series above.
Those are the alerts an idle node can raise: throttling, power and host alerts are counted
over busy samples only (`diagnose/alerts.py`). Everything else is read raw.

A clear node is judged by the same code as a raw one: its per-GPU means over the window (busy
time, SM activity) and its memory's extremes become constant columns on the fleet's grid,
assembled into snapshots (`read.assemble_columns`) and judged (`judge.judge_nodes`), so its
class, confidence and wording are the raw path's; its figures are the window's means. Its
verdict says `read = "aggregate"`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..diagnose import thresholds as T
from ..prometheus.client import Prometheus, PrometheusError
from ..prometheus.dcgm_fields import HOST_LABELS, MIG_ID_LABEL, XID_FIELD
from .query import OWN, Column, Grid, host_of, literal_regex, query_pool

UTIL = "DCGM_FI_DEV_GPU_UTIL"
SM = "DCGM_FI_PROF_SM_ACTIVE"  # a ratio, 0-1
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_TOTAL = "DCGM_FI_DEV_FB_TOTAL"
NVLINK = "DCGM_FI_PROF_NVLINK_TX_BYTES"
# Series that raise an alert on an idle node, or say the node has a fault, whatever value the
# raw judgement would read off them: any nonzero sample sends the node to the raw read.
ALARMS = (
    XID_FIELD.name,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    OWN + "gpu_lost",
    OWN + "xid_events_total",
)
# GPU processes and their threads: where a node has any, it is read raw.
PROCESS_SERIES = tuple(
    OWN + s
    for s in ("process_gpu_memory_bytes", "process_thread_cpu_percent", "process_child_cpu_percent")
)
HOST_SERIES = ("host_cpu_percent", "host_iowait_percent", "host_cpus")
# Ours: memory that moved less than half the least growth the leak rule names over the window
# cannot be a leak, whatever line is fitted through it.
STEADY_MIB = T.GROWTH_MIN_MIB_NEAR_FULL / 2

NODE = "instance, " + ", ".join(HOST_LABELS)
GPU = NODE + ", gpu"


@dataclass
class Triage:
    """The nodes judged from aggregates (their columns), and why each other node is read raw."""

    clear: dict[str, list[Column]] = field(default_factory=dict)  # node key -> its columns
    raw: dict[str, str] = field(default_factory=dict)  # node key -> why it needs its raw series
    queries: int = 0

    def reasons(self) -> Counter:
        return Counter(self.raw.values())


def _inner(match: str, *extra: str) -> str:
    inner = match.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1].strip()
    return ", ".join(p for p in (inner, *extra) if p)


def _sel(name: str, match: str, *extra: str) -> str:
    return "{" + _inner(match, f'__name__="{name}"', *extra) + "}"


def idle_queries(grid: Grid, match: str) -> dict[str, str]:
    """The first pass, over the whole fleet: each node's highest busy time and SM activity
    over the window (one small series per node). Only the nodes at or under the idle line
    are asked about further."""
    r = _range(grid)
    return {
        "node.util_max": f"max by ({NODE}) (max_over_time({_sel(UTIL, match)}[{r}]))",
        "node.sm_max": f"max by ({NODE}) (max_over_time({_sel(SM, match)}[{r}]))",
    }


def triage_queries(grid: Grid, match: str) -> dict[str, str]:
    """The second pass, over the idle nodes' exporters (`match` narrows to them): key ->
    instant PromQL at the window's end, per GPU ("gpu.*") or per node ("node.*", "host.*")."""
    r = _range(grid)
    full = f'{MIG_ID_LABEL}=""'
    # each alarm series tagged with its name, so series of one GPU do not collide
    alarms = " or ".join(
        f'label_replace(max by ({NODE}) (max_over_time({_sel(a, match)}[{r}])), "alarm", "{a}", '
        '"", "")'
        for a in ALARMS
    )
    procs = "{" + _inner(match, f'__name__=~"{"|".join(PROCESS_SERIES)}"') + "}"
    # the GPU's labels (its model, UUID, bus id, job) come with its busy time; its other
    # figures keep only what names the GPU, the least JSON to decode
    return {
        "gpu.util": f"avg_over_time({_sel(UTIL, match)}[{r}])",
        "gpu.sm": f"max by ({GPU}) (avg_over_time({_sel(SM, match)}[{r}]))",
        "gpu.fb_used": f"max by ({GPU}) (max_over_time({_sel(FB_USED, match, full)}[{r}]))",
        "gpu.fb_free": f"min by ({GPU}) (min_over_time({_sel(FB_FREE, match, full)}[{r}]))",
        "gpu.fb_total": f"max by ({GPU}) (max_over_time({_sel(FB_TOTAL, match, full)}[{r}]))",
        "gpu.nvlink": f"max by ({GPU}) (avg_over_time({_sel(NVLINK, match)}[{r}]))",
        "node.points": f"min by ({NODE}) (count_over_time({_sel(UTIL, match)}[{r}]))",
        "node.age": f"max by ({NODE}) (time() - timestamp({_sel(UTIL, match)}))",
        "node.fb_moved": (
            f"max by ({NODE}) (max_over_time({_sel(FB_USED, match, full)}[{r}]) - "
            f"min_over_time({_sel(FB_USED, match, full)}[{r}]))"
        ),
        "node.fb_series": f"count by ({NODE}) ({_sel(FB_USED, match)})",
        "node.alarm": f"max by ({NODE}) ({alarms})",
        # the process series' label sets differ (pid and gpu, tid, child): none collide
        "node.procs": f"count by ({NODE}) (count_over_time({procs}[{r}]))",
        **{
            f"host.{s}": f"avg_over_time({_sel(OWN + s, match)}[{r}])" for s in HOST_SERIES
        },  # fmt: skip
    }


def _range(grid: Grid) -> str:
    return f"{int(round((grid.n - 1) * grid.step))}s"


def _ask(prom: Prometheus, at: float, queries: dict[str, str]) -> dict[str, list]:
    with query_pool() as pool:
        futures = {k: pool.submit(prom.query, q, at) for k, q in queries.items()}
        answers: dict[str, list[tuple[dict[str, str], float]]] = {}
        for k, fut in futures.items():
            try:
                # NaN or infinite: no figure (the raw read leaves such samples out too)
                answers[k] = [(lab, v) for lab, v in fut.result() if math.isfinite(v)]
            except PrometheusError as e:
                if e.kind != "query":
                    raise
                answers[k] = []  # refused: the figure is absent, and its nodes read raw
    return answers


@dataclass
class FirstPass:
    """The triage's first pass: the nodes it already sends to the raw read (busy, or without
    busy time) in `triage.raw`, and the idle ones the second pass asks about."""

    triage: Triage
    idle: set[str]
    per_node: dict[str, dict[str, float]]
    key_of: Callable[[dict[str, str]], str | None]


def ask_first(prom: Prometheus, grid: Grid, match: str) -> dict[str, list]:
    """The first pass' answers: they need only the grid, not the fleet's nodes (asked while
    the nodes are counted: `stream.stream_fleet`)."""
    return _ask(prom, grid.end, idle_queries(grid, match))


def first_pass(
    prom: Prometheus,
    grid: Grid,
    match: str,
    keys: dict[tuple[str, str], str],
    asked: dict[str, list] | None = None,
) -> FirstPass:
    """Each node's highest busy time and SM activity: the busy nodes (read raw whatever the
    rest says) are known from this alone. `asked`: `ask_first`'s answers, where asked
    already."""

    def key_of(labels: dict[str, str]) -> str | None:
        return keys.get((host_of(labels), labels.get("instance", "")))

    out = Triage()
    first = ask_first(prom, grid, match) if asked is None else asked
    out.queries += len(first)
    per_node = _per_node(first, key_of)
    idle = set()
    for node in sorted(set(keys.values())):
        n = per_node.get(node, {})
        if "util_max" not in n:
            out.raw[node] = "no busy-time series"
        elif n["util_max"] > T.IDLE_UTIL_PCT or 100 * n.get("sm_max", 0.0) > T.IDLE_UTIL_PCT:
            out.raw[node] = "busy"
        else:
            idle.add(node)
    return FirstPass(out, idle, per_node, key_of)


def second_pass(
    prom: Prometheus, grid: Grid, match: str, first: FirstPass, members: dict[str, set[str]]
) -> Triage:
    """The idle nodes of the first pass asked the rest: each one clear or raw (and why)."""
    out, idle, per_node, key_of = first.triage, first.idle, first.per_node, first.key_of
    if not idle:
        return out
    narrow = match
    if len(idle) < len(per_node) / 2:  # else the long selector costs more than it spares
        exporters = literal_regex({i for node in idle for i in members[node]})
        narrow = _inner(match, f"instance=~{exporters}")
    answers = _ask(prom, grid.end, triage_queries(grid, narrow))
    out.queries += len(answers)
    for node, figures in _per_node(answers, key_of).items():
        per_node.setdefault(node, {}).update(figures)
    gpus: dict[str, dict[tuple[str, str], dict]] = defaultdict(dict)
    for k, answer in answers.items():
        if k.startswith("gpu."):
            for labels, v in answer:
                node = key_of(labels)
                if node is not None:
                    gpu = (labels.get("instance", ""), labels.get("gpu", ""))
                    gpus[node].setdefault(gpu, {})[k[4:]] = (labels, v)
    for node in sorted(idle):
        why = _needs_raw(per_node.get(node, {}), gpus.get(node, {}), grid)
        if why:
            out.raw[node] = why
        else:
            out.clear[node] = _columns(gpus[node], grid)
    for node, cols in _host_columns(answers, key_of, grid).items():
        if node in out.clear:
            out.clear[node] += cols
    return out


def _per_node(answers: dict[str, list], key_of: Callable) -> dict[str, dict[str, float]]:
    per_node: dict[str, dict[str, float]] = defaultdict(dict)
    for k, answer in answers.items():
        if k.startswith("node."):
            name = k[5:]
            worse = min if name == "points" else max  # two exporters of one node: the worst
            for labels, v in answer:
                node = key_of(labels)
                if node is not None:
                    old = per_node[node].get(name)
                    per_node[node][name] = v if old is None else worse(old, v)
    return per_node


def _needs_raw(n: dict[str, float], gpus: dict, grid: Grid) -> str:
    """Why this node's verdict needs its raw series ("" where the aggregates decide it)."""
    points = grid.n - 1
    if not gpus:
        return "no busy-time series"
    if points < T.MIN_SAMPLES or n.get("points", 0.0) < points:
        return "gaps"
    if n.get("age", float("inf")) > grid.step:
        return "stale"
    if n.get("alarm", 0.0) > 0:
        return "alert series"
    if n.get("procs", 0.0) > 0:
        return "GPU processes"
    if n.get("fb_moved", float("inf")) >= STEADY_MIB:
        return "memory moved"
    with_util = [g for g in gpus.values() if "util" in g]
    if len(with_util) != len(gpus) or n.get("fb_series") != len(gpus):
        return "GPUs without busy time, or MIG"
    for g in gpus.values():
        used = g.get("fb_used", ({}, None))[1]
        total = g.get("fb_total", ({}, None))[1]
        free = g.get("fb_free", ({}, None))[1]
        cap = max(total or 0.0, used + free if used is not None and free is not None else 0.0)
        if used is None or not cap or 100 * used / cap >= T.CAPACITY_WARN_PCT:
            return "memory"
    return ""


def _columns(gpus: dict, grid: Grid) -> list[Column]:
    """The node's GPUs as the raw read's columns, constant over the window (each GPU's mean,
    its memory's highest use and least free)."""
    names = {"util": UTIL, "sm": SM, "fb_used": FB_USED, "fb_free": FB_FREE,
             "fb_total": FB_TOTAL, "nvlink": NVLINK}  # fmt: skip
    out = []
    for figures in gpus.values():
        labels = figures["util"][0]
        for k, (_, v) in figures.items():
            out.append(Column({**labels, "__name__": names[k]}, [v] * grid.n))
    return out


def _host_columns(answers: dict, key_of: Callable, grid: Grid) -> dict[str, list[Column]]:
    out: dict[str, list[Column]] = defaultdict(list)
    for s in HOST_SERIES:
        for labels, v in answers.get(f"host.{s}", ()):
            node = key_of(labels)
            if node is not None:
                out[node].append(Column({**labels, "__name__": OWN + s}, [v] * grid.n))
    return out
