"""Read a fleet back from Prometheus: per node, the same frozen snapshots a Monitor builds.

dcgm-exporter's series (from NVIDIA's dcgm-exporter or ours), our own `gputop_diag_*` series
(host figures, GPU processes, their threads and helpers, Xid counts) and node-exporter's CPU,
iowait and pressure stall figures are read with range queries on one grid (step = the scrape
interval; `fleet/query.py`), and each step of each node becomes a `Snapshot` for the
classifier. What a node's exporters do not publish stays `None` in the snapshot, so the
classifier names it as missing evidence and lowers its confidence, as it does on one machine.

A node is its `Hostname` label; where two exporters report one host name at the same time
(several demo exporters on one machine) each Prometheus `instance` is a node of its own.

Time: the snapshots keep the scrapes' times. The classifier's windows are built for one sample
a second (a 15 s shape window of at least 5 samples); scraped more coarsely, the classifier is
told the tick (`tick_s` = the step) and each window keeps its sample count, spanning that many
scrapes. `FleetData.tick_s` says which.
"""

from __future__ import annotations

import gc
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from operator import mul

from ..diagnose import thresholds as T
from ..model import Snapshot
from ..prometheus.client import Prometheus, Series
from ..prometheus.dcgm_fields import (
    BY_NAME,
    JOB_LABEL,
    MIG_FIELDS,
    MIG_ID_LABEL,
    MIG_PROFILE_LABEL,
    XID_FIELD,
)
from .query import (
    OWN,
    PRESENCE,
    Column,
    Grid,
    NoFleetData,
    fetch,
    find_step,
    host_label_of,
    host_of,
)
from .ranks import RankFigures, fetch_ranks, parse_ranks
from .snapshots import GpuColumns, NodeColumns, each_value, node_snapshots

__all__ = ["FleetData", "NoFleetData", "NodeData", "assemble", "read_fleet"]

# The coarsest step at which the classifier's 1 s windows still hold MIN_SAMPLES samples.
REALTIME_MAX_STEP_S = T.RECENT_S / T.MIN_SAMPLES


@dataclass
class NodeData:
    """One node's window: its identity, what its exporters publish, its snapshots."""

    key: str
    hostname: str | None
    instances: tuple[str, ...]
    group: str | None = None  # the value of the --group-by label (the Slurm job)
    sources: tuple[str, ...] = ()  # "dcgm", "profiling", "nvlink", "gputop_diag", ...
    snapshots: list[Snapshot] = field(default_factory=list)
    last_seen: float | None = None  # the newest real sample time
    model: str | None = None
    host_label: str = "hostname"  # the spelling of its host name's label (`Hostname` before
    # dcgm-exporter's rename), for the matcher that reads this node alone


@dataclass
class FleetData:
    start: float
    end: float
    step_s: float
    tick_s: float  # the classifier's tick: 1 (windows in real seconds) or the step
    nodes: dict[str, NodeData]
    queries: int = 0
    warnings: list[str] = field(default_factory=list)
    # job (the --group-by label) -> its ranks at the window's end (`gputop_diag_rank_*`)
    ranks: dict[str, list[RankFigures]] = field(default_factory=dict)
    # the triage's reasons to read nodes' raw series, and how many nodes each sent
    # (`fleet/triage.py`); empty where every node was read raw without a triage
    raw_because: dict[str, int] = field(default_factory=dict)


def read_fleet(
    prom: Prometheus,
    *,
    window_s: float,
    step_s: float | None = None,
    match: str = "",
    at: float | None = None,
    group_by: str = JOB_LABEL,
) -> FleetData:
    end = time.time() if at is None else at
    step, detect = (step_s, 0) if step_s else find_step(prom, match, window_s, end)
    grid = Grid.for_window(end, window_s, step)
    # Millions of small objects (the JSON answers, then the snapshots) and no cycles among
    # them: the cyclic collector would walk the growing heap again and again for nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        columns, node_exporter, queries = fetch(prom, grid, match)
        ranks = fetch_ranks(prom, match, grid.end)
        data = assemble_columns(columns, node_exporter, grid, group_by, ranks)
    finally:
        if collecting:
            gc.enable()
    data.queries = queries + 1 + detect
    return data


def assemble(
    series: Iterable[Series],
    node_exporter: dict[str, list[Series]] | None = None,
    *,
    start: float,
    end: float,
    step: float,
    group_by: str = JOB_LABEL,
    ranks: Iterable[tuple[dict[str, str], float]] = (),
) -> FleetData:
    """Per-node snapshots of the window start .. end from range-query series (each naming
    itself in `__name__`) and node-exporter's figures by `query.node_exporter_queries`
    key (and "uname"); `ranks`: the rank series at `end`, as an instant query answers."""
    grid = Grid.for_window(end, end - start, step)
    columns = [grid.from_series(s) for s in series]
    node = {k: [grid.from_series(s) for s in v] for k, v in (node_exporter or {}).items()}
    return assemble_columns(columns, node, grid, group_by, list(ranks))


# -- nodes and GPUs --------------------------------------------------------------------------------
def _instance_host(instance: str) -> str:
    host = instance.rsplit(":", 1)[0] if instance.count(":") == 1 or "]" in instance else instance
    return host.strip("[]")


def presence_spans(cols) -> dict[tuple[str, str], tuple[int, int]]:
    """(host name, instance) -> the first and last grid points where its GPUs report."""
    spans: dict[tuple[str, str], tuple[int, int]] = {}
    for c in cols:
        ks = [k for k, v in enumerate(c.values) if v is not None]
        if not ks:
            continue
        key = (host_of(c.labels), c.labels.get("instance", ""))
        lo, hi = spans.get(key, (ks[0], ks[-1]))
        spans[key] = (min(lo, ks[0]), max(hi, ks[-1]))
    return spans


def _node_keys(gpu_cols: dict[str, list[Column]], grid: Grid) -> dict[tuple[str, str], str]:
    return node_keys(presence_spans(c for name in PRESENCE for c in gpu_cols.get(name, ())))


def node_keys(spans: dict[tuple[str, str], tuple[int, int]]) -> dict[tuple[str, str], str]:
    """(host name, instance) -> node key: the host name, or the instance where two exporters
    report one host name at the same time."""
    by_host: dict[str, list[tuple[str, tuple[int, int]]]] = defaultdict(list)
    for (host, inst), span in spans.items():
        by_host[host].append((inst, span))
    keys: dict[tuple[str, str], str] = {}
    for host, insts in by_host.items():
        overlap = any(
            a[1][0] <= b[1][1] and b[1][0] <= a[1][1]
            for i, a in enumerate(insts)
            for b in insts[i + 1 :]
        )
        for inst, _ in insts:
            keys[(host, inst)] = inst if (not host or overlap) else host
    return keys


def assemble_columns(
    columns: list[Column],
    node_exporter: dict[str, list[Column]],
    grid: Grid,
    group_by: str,
    ranks: list[tuple[dict[str, str], float]] | None = None,
    keys: dict[tuple[str, str], str] | None = None,
) -> FleetData:
    gpu_cols: dict[str, list[Column]] = defaultdict(list)
    own_cols: dict[str, list[Column]] = defaultdict(list)
    for c in columns:
        name = c.labels.get("__name__", "")
        (own_cols if name.startswith(OWN) else gpu_cols)[name].append(c)
    if keys is None:
        keys = _node_keys(gpu_cols, grid)
    if not keys:
        raise NoFleetData("no dcgm-exporter series in the window")

    def key_of(labels: dict[str, str]) -> str | None:
        return keys.get((host_of(labels), labels.get("instance", "")))

    gpus: dict[tuple[str, int], GpuColumns] = {}
    for name, lst in gpu_cols.items():
        f = BY_NAME.get(name)
        for c in lst:
            node = key_of(c.labels)
            gpu = c.labels.get("gpu", "")
            if node is None or not gpu.isdigit():
                continue  # another node's stale series
            g = gpus.get((node, int(gpu)))
            if g is None:
                g = gpus[(node, int(gpu))] = GpuColumns(c.labels)
            gi = c.labels.get(MIG_ID_LABEL)
            if gi is not None:  # a MIG instance's series: its memory is read, the rest left
                if name in MIG_FIELDS and gi.isdigit():
                    key = (int(gi), c.labels.get(MIG_PROFILE_LABEL, ""))
                    g.mig.setdefault(key, {})[name] = c.values
                continue
            if name == XID_FIELD.name:
                g.xids = _xid_changes(c.values)
            elif f is not None:
                vals = c.values
                if f.scale != 1.0:
                    vals = each_value(partial(mul, f.scale), vals)
                g.cols[f.target] = vals
    instances: dict[str, set[str]] = defaultdict(set)
    for (_, inst), k in keys.items():
        instances[k].add(inst)
    nodes: dict[str, NodeData] = {}
    for (node, _), g in gpus.items():
        if node not in nodes:
            nodes[node] = NodeData(
                node,
                host_of(g.labels) or None,
                tuple(sorted(instances[node])),
                host_label=host_label_of(g.labels),
            )
    own = _own_columns(own_cols, key_of)
    for (node, idx), g in gpus.items():
        counts = own[node].xid_counts.get(idx) if node in own else None
        if counts is not None:  # our exporter's exact counts replace the last-value gauge
            g.xids = counts
    hosts = _node_exporter(node_exporter, nodes)
    step = grid.step
    tick_s = 1.0 if step <= REALTIME_MAX_STEP_S else step
    data = FleetData(
        grid.time(1), grid.end, step, tick_s, nodes, warnings=time_warnings(step, tick_s, grid)
    )
    data.ranks = parse_ranks(ranks or [], group_by, key_of)
    per_node: dict[str, dict[int, GpuColumns]] = defaultdict(dict)
    for (nk, idx), g in gpus.items():
        per_node[nk][idx] = g
    for key, nd in nodes.items():
        _build_node(nd, per_node[key], own.get(key, NodeColumns()), hosts.get(key), grid, group_by)
    return data


def time_warnings(step: float, tick_s: float, grid: Grid) -> list[str]:
    out = []
    if tick_s != 1.0:
        out.append(
            f"one sample every {step:g} s: the classifier's windows keep their sample counts "
            f"(the shape of busy time over {T.RECENT_S:.0f} samples: {T.RECENT_S * step:.0f} s),"
            " and GPU dips shorter than a sample are averaged out of DCGM's profiling ratios, "
            "so dips are read in busy time"
        )
    # growth shows once a window spans GROWTH_MIN_SPAN_S ticks, and the verdict turns once
    # HYSTERESIS_TICKS windows in a row show it (`fleet/node_judge.py`)
    span = (grid.n - 2) * step
    need = T.GROWTH_MIN_SPAN_S * tick_s + (T.HYSTERESIS_TICKS - 1) * step
    if span < need:
        out.append(
            f"memory growth needs a span of {need:.0f} s: use --window {need:.0f}s or more to "
            "see a leak"
        )
    return out


def _xid_changes(col: list[float | None]) -> list[tuple[int, int, int]]:
    """DCGM_FI_DEV_XID_ERRORS holds the last Xid: a new nonzero value is a new event."""
    out = []
    prev = None
    for k, v in enumerate(col):
        if v is None:
            continue
        if prev is not None and v and v != prev and k > 0:
            out.append((k, int(v), 1))
        prev = v
    return out


def _counter_increases(col: list[float | None]) -> list[tuple[int, int]]:
    """(k, increase) for each step a counter grew. A reset counts from zero, and so does a
    series that first appears inside the window (the exporter adds a label set, such as a new
    Xid code, when its first event happens); a value at the baseline point (k = 0, before the
    window) is where it starts."""
    out = []
    prev = None
    for k, v in enumerate(col):
        if v is None:
            continue
        if k > 0:
            inc = v if prev is None or v < prev else v - prev
            if inc > 0:
                out.append((k, int(round(inc))))
        prev = v
    return out


def _own_columns(own: dict[str, list[Column]], key_of) -> dict[str, NodeColumns]:
    per: dict[str, NodeColumns] = defaultdict(NodeColumns)
    for name, cols in own.items():
        short = name.removeprefix(OWN)
        for c in cols:
            node = key_of(c.labels)
            if node is None:
                continue
            d, lab, vals = per[node], c.labels, c.values
            if short == "gpu_lost":
                d.lost[int(lab.get("gpu", "-1"))] = vals
            elif short == "xid_events_total":
                xid = int(lab.get("xid", "0"))
                lst = d.xid_counts.setdefault(int(lab.get("gpu", "-1")), [])
                lst += [(k, xid, inc) for k, inc in _counter_increases(vals)]
            elif short in ("host_cpu_percent", "host_iowait_percent", "host_cpus"):
                d.host[short] = vals
            elif short == "host_pressure_percent":
                d.pressure[(lab.get("resource", ""), lab.get("kind", ""))] = vals
            elif short == "process_gpu_memory_bytes":
                d.gpu_mem[(int(lab["gpu"]), int(lab["pid"]))] = vals
                gi = lab.get(MIG_ID_LABEL, "")
                if gi.isdigit():
                    d.gpu_instance[(int(lab["gpu"]), int(lab["pid"]))] = int(gi)
            elif short == "process_thread_cpu_percent":
                d.threads[(int(lab["pid"]), int(lab["tid"]), lab.get("name", ""))] = vals
            elif short == "process_child_cpu_percent":
                d.children[(int(lab["pid"]), int(lab["child"]), lab.get("name", ""))] = vals
    return per


def _node_exporter(series: dict[str, list[Column]], nodes: dict[str, NodeData]) -> dict:
    """node-exporter's columns per node, joined on its uname nodename or its address."""
    nodename = {
        c.labels.get("instance", ""): c.labels.get("nodename", "") for c in series.get("uname", ())
    }
    by_instance: dict[str, dict[str, list]] = defaultdict(dict)
    for key, cols in series.items():
        if key != "uname":
            for c in cols:
                by_instance[c.labels.get("instance", "")][key] = c.values
    out: dict[str, dict] = {}
    for key, nd in nodes.items():
        hosts = {_instance_host(i) for i in nd.instances}
        for inst, cols in by_instance.items():
            name = nodename.get(inst)
            if (nd.hostname and name == nd.hostname) or _instance_host(inst) in hosts:
                out[key] = cols
                break
    return out


def _build_node(
    nd: NodeData, gpus: dict[int, GpuColumns], d: NodeColumns, ne, grid: Grid, group_by
) -> None:
    built = node_snapshots(nd.hostname or nd.key, gpus, d, ne, grid)
    nd.snapshots, nd.sources, nd.last_seen = built.snapshots, built.sources, built.last_seen
    nd.model = next((s.name for s in built.statics.values() if s.name), None)
    groups = Counter(g.labels.get(group_by) for g in gpus.values() if g.labels.get(group_by))
    nd.group = groups.most_common(1)[0][0] if groups else None
