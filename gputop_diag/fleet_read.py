"""Read a fleet back from Prometheus: per node, the same frozen snapshots a Monitor builds.

dcgm-exporter's series (from NVIDIA's dcgm-exporter or ours), our own `gputop_diag_*` series
(host figures, GPU processes, their threads and helpers, Xid counts) and node-exporter's CPU,
iowait and pressure stall figures are read with range queries on one grid (step = the scrape
interval; `fleet_query.py`), and each step of each node becomes a `Snapshot` for the
classifier. What a node's exporters do not publish stays `None` in the snapshot, so the
classifier names it as missing evidence and lowers its confidence, as it does on one machine.

A node is its `Hostname` label; where two exporters report one host name at the same time
(several demo exporters on one machine) each Prometheus `instance` is a node of its own.

Time: the classifier's windows are built for one sample a second (a 15 s shape window of at
least 5 samples). Scraped more coarsely, one tick of the classifier stands for one scrape
(`tick_s` = the step): the windows count scrapes, and memory is rescaled so that its growth per
minute stays true. `FleetData.tick_s` says which.
"""

from __future__ import annotations

import gc
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .dcgm_fields import (
    BY_NAME,
    JOB_LABEL,
    MODEL_LABEL,
    MODEL_LABEL_LINT_CLEAN,
    XID_FIELD,
    decode_clock_reasons,
)
from .diagnose import thresholds as T
from .fleet_query import OWN, PRESENCE, Column, Grid, NoFleetData, detect_step, fetch
from .model import (
    ChildInfo,
    GpmMetrics,
    GpuProcess,
    GpuState,
    GpuStatic,
    HostState,
    PressureStall,
    ProcessInfo,
    Snapshot,
    SystemInfo,
    ThreadInfo,
    XidEvent,
)
from .prom_client import Prometheus, Series

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


@dataclass
class FleetData:
    start: float
    end: float
    step_s: float
    tick_s: float  # seconds one classifier tick stands for: 1 (real time) or the step
    nodes: dict[str, NodeData]
    queries: int = 0
    warnings: list[str] = field(default_factory=list)


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
    step = step_s or detect_step(prom, match, window_s, end)
    grid = Grid.for_window(end, window_s, step)
    # Millions of small objects (the JSON answers, then the snapshots) and no cycles among
    # them: the cyclic collector would walk the growing heap again and again for nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        columns, node_exporter, queries = fetch(prom, grid, match)
        data = _assemble(columns, node_exporter, grid, group_by)
    finally:
        if collecting:
            gc.enable()
    data.queries = queries + (0 if step_s else len(PRESENCE))
    return data


def assemble(
    series: Iterable[Series],
    node_exporter: dict[str, list[Series]] | None = None,
    *,
    start: float,
    end: float,
    step: float,
    group_by: str = JOB_LABEL,
) -> FleetData:
    """Per-node snapshots of the window start .. end from range-query series (each naming
    itself in `__name__`) and node-exporter's figures by `fleet_query.node_exporter_queries`
    key (and "uname")."""
    grid = Grid.for_window(end, end - start, step)
    columns = [grid.from_series(s) for s in series]
    node = {k: [grid.from_series(s) for s in v] for k, v in (node_exporter or {}).items()}
    return _assemble(columns, node, grid, group_by)


# -- nodes and GPUs --------------------------------------------------------------------------------
def _instance_host(instance: str) -> str:
    host = instance.rsplit(":", 1)[0] if instance.count(":") == 1 or "]" in instance else instance
    return host.strip("[]")


def _node_keys(gpu_cols: dict[str, list[Column]], grid: Grid) -> dict[tuple[str, str], str]:
    """(Hostname, instance) -> node key: the host name, or the instance where two exporters
    report one host name at the same time."""
    spans: dict[tuple[str, str], tuple[int, int]] = {}
    for name in PRESENCE:
        for c in gpu_cols.get(name, ()):
            ks = [k for k, v in enumerate(c.values) if v is not None]
            if not ks:
                continue
            key = (c.labels.get("Hostname", ""), c.labels.get("instance", ""))
            lo, hi = spans.get(key, (grid.n, -1))
            spans[key] = (min(lo, ks[0]), max(hi, ks[-1]))
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


@dataclass
class _Gpu:
    labels: dict[str, str]
    cols: dict[str, list[float | None]] = field(default_factory=dict)
    xids: list[tuple[int, int, int]] = field(default_factory=list)  # (k, xid, count)


@dataclass
class _Own:
    """A node's gputop_diag_* columns."""

    lost: dict[int, list] = field(default_factory=dict)
    xid_counts: dict[int, list] = field(default_factory=dict)
    host: dict[str, list] = field(default_factory=dict)
    pressure: dict[tuple[str, str], list] = field(default_factory=dict)
    gpu_mem: dict[tuple[int, int], list] = field(default_factory=dict)
    threads: dict[tuple[int, int, str], list] = field(default_factory=dict)
    children: dict[tuple[int, int, str], list] = field(default_factory=dict)


def _assemble(
    columns: list[Column], node_exporter: dict[str, list[Column]], grid: Grid, group_by: str
) -> FleetData:
    gpu_cols: dict[str, list[Column]] = defaultdict(list)
    own_cols: dict[str, list[Column]] = defaultdict(list)
    for c in columns:
        name = c.labels.get("__name__", "")
        (own_cols if name.startswith(OWN) else gpu_cols)[name].append(c)
    keys = _node_keys(gpu_cols, grid)
    if not keys:
        raise NoFleetData("no dcgm-exporter series in the window")

    def key_of(labels: dict[str, str]) -> str | None:
        return keys.get((labels.get("Hostname", ""), labels.get("instance", "")))

    gpus: dict[tuple[str, int], _Gpu] = {}
    for name, lst in gpu_cols.items():
        f = BY_NAME.get(name)
        for c in lst:
            node = key_of(c.labels)
            gpu = c.labels.get("gpu", "")
            if node is None or not gpu.isdigit() or "GPU_I_ID" in c.labels:
                continue  # another node's stale series, or a MIG instance's (not read yet)
            g = gpus.setdefault((node, int(gpu)), _Gpu(c.labels))
            if name == XID_FIELD.name:
                g.xids = _xid_changes(c.values)
            elif f is not None:
                vals = c.values
                if f.scale != 1.0:
                    sc = f.scale
                    vals = [None if v is None else v * sc for v in vals]
                g.cols[f.target] = vals
    nodes: dict[str, NodeData] = {}
    for (node, _), g in gpus.items():
        if node not in nodes:
            inst = sorted({i for (h, i), k in keys.items() if k == node})
            nodes[node] = NodeData(node, g.labels.get("Hostname") or None, tuple(inst))
    own = _own_columns(own_cols, key_of)
    for (node, idx), g in gpus.items():
        counts = own[node].xid_counts.get(idx) if node in own else None
        if counts is not None:  # our exporter's exact counts replace the last-value gauge
            g.xids = counts
    hosts = _node_exporter(node_exporter, nodes)
    step = grid.step
    tick_s = 1.0 if step <= REALTIME_MAX_STEP_S else step
    data = FleetData(
        grid.time(1), grid.end, step, tick_s, nodes, warnings=_time_warnings(step, tick_s, grid)
    )
    for key, nd in nodes.items():
        mine = {idx: g for (nk, idx), g in gpus.items() if nk == key}
        _build_node(nd, mine, own.get(key, _Own()), hosts.get(key), grid, tick_s, group_by)
    return data


def _time_warnings(step: float, tick_s: float, grid: Grid) -> list[str]:
    out = []
    if tick_s != 1.0:
        out.append(
            f"one sample every {step:g} s: the classifier's windows count samples here (its "
            f"{T.RECENT_S:.0f}-sample shape window spans {T.RECENT_S * step:.0f} s), and GPU "
            "dips shorter than a sample are averaged out of DCGM's profiling ratios"
        )
    span = (grid.n - 2) * (step if tick_s == 1.0 else 1.0)  # in the classifier's seconds
    if span < T.GROWTH_MIN_SPAN_S:
        need = T.GROWTH_MIN_SPAN_S * (1.0 if tick_s == 1.0 else step)
        out.append(
            f"memory growth needs a span of {T.GROWTH_MIN_SPAN_S:.0f} "
            + ("seconds" if tick_s == 1.0 else "samples")
            + f": use --window {need:.0f}s or more to see a leak"
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


def _own_columns(own: dict[str, list[Column]], key_of) -> dict[str, _Own]:
    per: dict[str, _Own] = defaultdict(_Own)
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


# -- snapshots -------------------------------------------------------------------------------------
def _last(col: list[float | None] | None) -> float | None:
    if not col:
        return None
    return next((v for v in reversed(col) if v is not None), None)


def _int(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def _static(idx: int, g: _Gpu) -> GpuStatic:
    lab, c = g.labels, g.cols
    total = _last(c.get("fb_total"))
    return GpuStatic(
        index=idx,
        name=lab.get(MODEL_LABEL) or lab.get(MODEL_LABEL_LINT_CLEAN) or None,
        uuid=lab.get("UUID") or None,
        pci_bus_id=lab.get("pci_bus_id") or None,
        memory_total_bytes=None if total is None else int(total),
        power_limit_w=_last(c.get("static.power_limit_w")),
        max_sm_clock_mhz=_int(_last(c.get("static.max_sm_clock_mhz"))),
        max_mem_clock_mhz=_int(_last(c.get("static.max_mem_clock_mhz"))),
        gpm_supported=_last(c.get("gpm.sm_util_pct")) is not None,
        nvlink_supported=_last(c.get("nvlink_tx_kib_s")) is not None,
    )


_GPM_ATTRS = ("sm_util_pct", "sm_occupancy_pct", "dram_bw_util_pct", "tensor_util_pct",
              "fp16_util_pct", "fp32_util_pct", "fp64_util_pct")  # fmt: skip
_INT_ATTRS = (
    "sm_clock_mhz", "mem_clock_mhz", "pstate", "pcie_gen", "pcie_width", "pcie_tx_kbps",
    "pcie_rx_kbps", "ecc_corrected", "ecc_uncorrected", "retired_pages_sbe",
    "retired_pages_dbe", "remapped_rows_corr", "remapped_rows_unc",
    "bar1_used_bytes", "bar1_total_bytes",
)  # fmt: skip
_FLOAT_ATTRS = (
    "util_gpu_pct", "util_mem_pct", "enc_util_pct", "dec_util_pct", "power_w", "temperature_c",
    "memory_temperature_c", "nvlink_tx_kib_s", "nvlink_rx_kib_s",
)  # fmt: skip
_BOOL_ATTRS = ("retired_pages_pending", "remap_failure", "remap_pending")


def _memory_columns(c: dict, n: int, tick_s: float) -> tuple[list, list, list, list]:
    """(total, reserved, used incl. reserved, free) per point, in bytes: DCGM's total is used
    + free + reserved and its used leaves the reserve out. With one tick standing for `tick_s`
    seconds each point's change from the newest is divided by `tick_s`, so the classifier's
    MiB-per-minute growth stays the real one."""
    none = [None] * n
    used_c, free_c = c.get("fb_used", none), c.get("fb_free", none)
    res_c, total_c = c.get("fb_reserved", none), c.get("fb_total", none)
    total, reserved, used, free = [None] * n, [None] * n, [None] * n, [None] * n
    for k in range(n):
        u, fr, r, t = used_c[k], free_c[k], res_c[k], total_c[k]
        total[k] = t
        if u is None:
            continue
        if r is None and t is not None and fr is not None:
            r = max(0.0, t - u - fr)
        ua = u + (r or 0.0)
        if t is None and fr is not None:
            total[k] = ua + fr
        reserved[k], used[k], free[k] = r, ua, fr
    if tick_s != 1.0:
        anchor = _last(used)
        if anchor is not None:
            for k in range(n):
                if used[k] is not None:
                    used[k] = anchor - (anchor - used[k]) / tick_s
                    if total[k] is not None:
                        free[k] = max(0.0, total[k] - used[k])
    return total, reserved, used, free


def _gpu_states(idx: int, static: GpuStatic, c: dict, n: int, tick_s: float) -> list:
    """The GPU's state at each grid point (None where it did not report). Only the fields
    with a column are passed: the rest keep their default (None)."""
    names: list[str] = []
    cols: list[list] = []
    for a in _FLOAT_ATTRS:
        if a in c:
            names.append(a)
            cols.append(c[a])
    for a in _INT_ATTRS:
        if a in c:
            names.append(a)
            cols.append([None if v is None else int(round(v)) for v in c[a]])
    for a in _BOOL_ATTRS:
        if a in c:
            names.append(a)
            cols.append([None if v is None else bool(v) for v in c[a]])
    total, reserved, used, free = _memory_columns(c, n, tick_s)
    names += ["mem_total_bytes", "mem_reserved_bytes", "mem_used_bytes", "mem_free_bytes"]
    cols += [[None if v is None else int(round(v)) for v in col] for col in (total, reserved,
             used, free)]  # fmt: skip
    if "clock_reasons" in c:
        names.append("clock_event_reasons")
        cols.append([_reasons(v) for v in c["clock_reasons"]])
    gpm_names = [a for a in _GPM_ATTRS if "gpm." + a in c]
    if gpm_names:
        names.append("gpm")
        gpm_cols = [c["gpm." + a] for a in gpm_names]
        cols.append(
            [
                GpmMetrics(**dict(zip(gpm_names, row, strict=True)))
                if any(v is not None for v in row)
                else None
                for row in zip(*gpm_cols, strict=True)
            ]
        )
    util = c.get("util_gpu_pct", [None] * n)
    out: list[GpuState | None] = []
    for k, row in enumerate(zip(*cols, strict=True)):
        if used[k] is None and util[k] is None and total[k] is None:
            out.append(None)
        else:
            out.append(GpuState(index=idx, static=static, **dict(zip(names, row, strict=True))))
    return out


_REASONS: dict[float | None, tuple[str, ...]] = {}


def _reasons(mask: float | None) -> tuple[str, ...]:
    got = _REASONS.get(mask)
    if got is None:
        got = _REASONS[mask] = decode_clock_reasons(mask)
    return got


def _host_states(d: _Own, ne: dict | None, n: int) -> list[HostState | None]:
    """Our exporter's host figures where the node has them, else node-exporter's."""
    none = [None] * n
    if d.host:
        cpu, cpus = d.host.get("host_cpu_percent", none), d.host.get("host_cpus", none)
        iowait = d.host.get("host_iowait_percent", none)
        psi = [(res, col, d.pressure.get((res, "full"))) for (res, kind), col in
               d.pressure.items() if kind == "some"]  # fmt: skip
    elif ne:
        cpu, cpus, iowait = ne.get("cpu_pct", none), ne.get("cpus", none), ne.get(
            "iowait_pct", none)  # fmt: skip
        psi = [
            (res, ne[f"psi_{res}_some"], ne.get(f"psi_{res}_full"))
            for res in ("cpu", "io", "memory")
            if f"psi_{res}_some" in ne
        ]
    else:
        return none
    out: list[HostState | None] = []
    for k in range(n):
        if cpu[k] is None:
            out.append(None)
            continue
        pressure = {
            res: PressureStall(some[k], None if full is None else full[k])
            for res, some, full in psi
            if some[k] is not None
        }
        out.append(
            HostState(
                cpu_count=_int(cpus[k]) or 0,
                cpu_pct=cpu[k],
                iowait_pct=iowait[k],
                pressure=pressure,
            )  # fmt: skip
        )
    return out


def _process_states(d: _Own, n: int) -> list[tuple[tuple, tuple]]:
    """(GPU processes, process infos) per grid point."""
    gpu_procs: list[list[GpuProcess]] = [[] for _ in range(n)]
    for (gpu, pid), col in sorted(d.gpu_mem.items()):
        for k, v in enumerate(col):
            if v is not None:
                gpu_procs[k].append(
                    GpuProcess(pid=pid, gpu_index=gpu, kind="compute", used_memory_bytes=int(v))
                )
    threads: list[dict[int, list]] = [defaultdict(list) for _ in range(n)]
    for (pid, tid, name), col in d.threads.items():
        for k, v in enumerate(col):
            if v is not None:
                threads[k][pid].append(ThreadInfo(tid, name, v))
    children: list[dict[int, list]] = [defaultdict(list) for _ in range(n)]
    for (pid, child, name), col in d.children.items():
        for k, v in enumerate(col):
            if v is not None:
                children[k][pid].append(ChildInfo(child, name, v))
    out = []
    for k in range(n):
        pids = sorted({p.pid for p in gpu_procs[k]} | set(threads[k]) | set(children[k]))
        infos = tuple(
            ProcessInfo(
                pid=pid,
                busiest_threads=tuple(sorted(threads[k][pid], key=lambda t: -(t.cpu_pct or 0))),
                children=tuple(sorted(children[k][pid], key=lambda c: -(c.cpu_pct or 0))),
            )
            for pid in pids
        )
        out.append((tuple(gpu_procs[k]), infos))
    return out


def _build_node(nd: NodeData, gpus: dict[int, _Gpu], d: _Own, ne, grid: Grid, tick_s, group_by):
    n = grid.n
    statics = {idx: _static(idx, g) for idx, g in gpus.items()}
    per_gpu = {
        idx: _gpu_states(idx, statics[idx], g.cols, n, tick_s) for idx, g in sorted(gpus.items())
    }
    xids: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for idx, g in gpus.items():
        for k, xid, count in g.xids:
            xids[k] += [(xid, idx)] * count
    groups = Counter(g.labels.get(group_by) for g in gpus.values() if g.labels.get(group_by))
    nd.group = groups.most_common(1)[0][0] if groups else None
    nd.model = next((s.name for s in statics.values() if s.name), None)
    nd.sources = _sources(statics, d, ne)
    hosts = _host_states(d, ne, n)
    procs = _process_states(d, n)
    end = grid.end
    for k in range(1, n):  # point 0 is the baseline before the window
        states = []
        for idx, col in per_gpu.items():
            lost = d.lost.get(idx)
            if lost is not None and lost[k]:
                states.append(GpuState(index=idx, static=statics[idx], lost=True))
            elif col[k] is not None:
                states.append(col[k])
        if not states:
            continue
        real_t = grid.time(k)
        t = real_t if tick_s == 1.0 else end - (n - 1 - k) * 1.0
        nd.last_seen = real_t
        nd.snapshots.append(
            Snapshot(
                timestamp=t,
                system=SystemInfo(hostname=nd.hostname or nd.key, gpu_count=len(states)),
                gpus=tuple(states),
                host=hosts[k],
                gpu_processes=procs[k][0],
                processes=procs[k][1],
                xid_events=tuple(
                    XidEvent(timestamp=t, xid=x, gpu_index=i, source="nvml") for x, i in xids[k]
                ),
            )
        )


def _sources(statics: dict[int, GpuStatic], d: _Own, ne) -> tuple[str, ...]:
    sources = {"dcgm"}
    if any(s.gpm_supported for s in statics.values()):
        sources.add("profiling")
    if any(s.nvlink_supported for s in statics.values()):
        sources.add("nvlink")
    if d.host:
        sources.add("gputop_diag")
    elif ne:
        sources.add("node_exporter")
    if d.gpu_mem:
        sources.add("processes")
    if d.threads or d.children:
        sources.add("threads")
    return tuple(sorted(sources))
