"""Read a fleet back from Prometheus: per node, the same frozen snapshots a Monitor builds.

dcgm-exporter's series (from NVIDIA's dcgm-exporter or ours), our own `gputop_diag_*` series
(host figures, GPU processes, their threads and helpers, Xid counts) and node-exporter's CPU,
iowait and pressure stall figures are read with range queries on one grid (step = the scrape
interval), and each step of each node becomes a `Snapshot` for the classifier. What a node's
exporters do not publish stays `None` in the snapshot, so the classifier names it as missing
evidence and lowers its confidence, as it does on one machine.

A node is its `Hostname` label; where two exporters report one host name at the same time
(several demo exporters on one machine) each Prometheus `instance` is a node of its own.

Time: the classifier's windows are built for one sample a second (a 15 s shape window of at
least 5 samples). Scraped more coarsely, one tick of the classifier stands for one scrape
(`tick_s` = the step): the windows count scrapes, and memory is rescaled so that its growth per
minute stays true. `FleetData.tick_s` says which.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .dcgm_fields import (
    BY_NAME,
    CLOCK_REASONS_ALIASES,
    FIELDS,
    JOB_LABEL,
    MODEL_LABEL,
    MODEL_LABEL_LINT_CLEAN,
    XID_FIELD,
    decode_clock_reasons,
)
from .diagnose import thresholds as T
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
from .prom_client import Prometheus, PrometheusError, Series

OWN = "gputop_diag_"
# The coarsest step at which the classifier's 1 s windows still hold MIN_SAMPLES samples.
REALTIME_MAX_STEP_S = T.RECENT_S / T.MIN_SAMPLES
QUERY_THREADS = 4
# The series that say a GPU reports at all (MIG mode has no GPU_UTIL; FB_USED is always there).
PRESENCE = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")


class NoFleetData(Exception):
    """Prometheus answers, but no GPU series match."""


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


def selector(name: str | None, match: str) -> str:
    """`name{match}` with the user's --match matchers (braces optional)."""
    inner = match.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1].strip()
    parts = [f'__name__="{name}"'] if name else []
    if inner:
        parts.append(inner)
    return "{" + ", ".join(parts) + "}"


def detect_step(prom: Prometheus, match: str, window_s: float, end: float) -> float:
    """The scrape interval, from how many samples the densest GPU series has in the window."""
    w = int(math.ceil(window_s))
    n = 0.0
    for name in PRESENCE:  # one at a time: count_over_time drops the name, the labels collide
        res = prom.query(f"max(count_over_time({selector(name, match)}[{w}s]))", at=end)
        n = max(n, res[0][1] if res else 0.0)
    if not n:
        raise NoFleetData(
            f"no dcgm-exporter series ({' or '.join(PRESENCE)}) "
            + (f"match {match!r} " if match.strip() else "")
            + f"in the {window_s:g} s before {time.strftime('%H:%M:%S', time.localtime(end))}"
        )
    # n samples lie in (end - window, end]: one every window / n seconds
    return max(1.0, float(round(window_s / n)))


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
    start = end - window_s
    n = int(round(window_s / step)) + 1
    start = end - (n - 1) * step
    reader = _Reader(prom, start, end, step, match)
    series, node_exporter = reader.fetch()
    data = assemble(series, node_exporter, start=start, end=end, step=step, group_by=group_by)
    data.queries = reader.queries
    return data


# -- fetching --------------------------------------------------------------------------------------
_OWN_SERIES = (
    "gpu_lost",
    "xid_events_total",
    "host_cpu_percent",
    "host_iowait_percent",
    "host_cpus",
    "host_pressure_percent",
    "process_gpu_memory_bytes",
    "process_thread_cpu_percent",
    "process_child_cpu_percent",
)


def _node_exporter_queries(r: str) -> dict[str, str]:
    """node-exporter's figures per instance, as the host collector computes them."""
    ncpu = 'count by (instance) (node_cpu_seconds_total{mode="idle"})'
    idle = f'sum by (instance) (irate(node_cpu_seconds_total{{mode=~"idle|iowait"}}[{r}]))'
    iowait = f'sum by (instance) (irate(node_cpu_seconds_total{{mode="iowait"}}[{r}]))'
    out = {
        "cpus": ncpu,
        "cpu_pct": f"100 * (1 - {idle} / {ncpu})",
        "iowait_pct": f"100 * {iowait} / {ncpu}",
    }
    for res, some, full in (
        ("cpu", "node_pressure_cpu_waiting_seconds_total", None),
        ("io", "node_pressure_io_waiting_seconds_total", "node_pressure_io_stalled_seconds_total"),
        (
            "memory",
            "node_pressure_memory_waiting_seconds_total",
            "node_pressure_memory_stalled_seconds_total",
        ),
    ):
        out[f"psi_{res}_some"] = f"100 * irate({some}[{r}])"
        if full:
            out[f"psi_{res}_full"] = f"100 * irate({full}[{r}])"
    return out


class _Reader:
    def __init__(self, prom: Prometheus, start: float, end: float, step: float, match: str):
        self.prom, self.start, self.end, self.step = prom, start, end, step
        self.match = match
        self.queries = 0

    def _range(self, promql: str, start: float | None = None) -> list[Series]:
        self.queries += 1
        return self.prom.query_range(promql, self.start if start is None else start, self.end,
                                     self.step)  # fmt: skip

    def fetch(self):
        names = [f.name for f in FIELDS if f.name != CLOCK_REASONS_ALIASES[0]]
        jobs: dict[str, tuple] = {n: ("gpu", selector(n, self.match), None) for n in names}
        clock = "|".join(CLOCK_REASONS_ALIASES)
        inner = self.match.strip().strip("{}").strip()
        jobs["clock_reasons"] = (
            "gpu",
            "{" + f'__name__=~"{clock}"' + (", " + inner if inner else "") + "}",
            None,
        )
        # counters and "last value" series need the sample before the window as a baseline
        before = self.start - self.step
        jobs[XID_FIELD.name] = ("gpu", selector(XID_FIELD.name, self.match), before)
        for s in _OWN_SERIES:
            jobs[OWN + s] = ("own", selector(OWN + s, self.match),
                             before if s == "xid_events_total" else None)  # fmt: skip
        r = f"{int(max(3 * self.step, 2))}s"
        for key, q in _node_exporter_queries(r).items():
            jobs["node:" + key] = ("node", q, None)
        jobs["node:uname"] = ("uname", "node_uname_info", None)
        series: list[Series] = []
        node_exporter: dict[str, list[Series]] = {}
        with ThreadPoolExecutor(QUERY_THREADS) as pool:
            futures = {
                key: (kind, pool.submit(self._range, q, st)) for key, (kind, q, st) in jobs.items()
            }
            errors: list[PrometheusError] = []
            for key, (kind, fut) in futures.items():
                try:
                    answer = fut.result()
                except PrometheusError as e:
                    if kind not in ("node", "uname") or e.kind != "query":
                        errors.append(e)
                    answer = []  # node-exporter's PromQL refused: treated as absent
                if kind in ("node", "uname"):
                    node_exporter[key.removeprefix("node:")] = answer
                else:
                    series += answer
            if errors:
                raise errors[0]
        return series, node_exporter


# -- assembling ------------------------------------------------------------------------------------
def _instance_host(instance: str) -> str:
    host = instance.rsplit(":", 1)[0] if instance.count(":") == 1 or "]" in instance else instance
    return host.strip("[]")


def _node_keys(gpu_series: dict[str, list[Series]]) -> dict[tuple[str, str], str]:
    """(Hostname, instance) -> node key: the host name, or the instance where two exporters
    report one host name at the same time."""
    spans: dict[tuple[str, str], tuple[float, float]] = {}
    for name in PRESENCE:
        for s in gpu_series.get(name, ()):
            if not s.times:
                continue
            k = (s.labels.get("Hostname", ""), s.labels.get("instance", ""))
            lo, hi = spans.get(k, (math.inf, -math.inf))
            spans[k] = (min(lo, s.times[0]), max(hi, s.times[-1]))
    by_host: dict[str, list[tuple[str, tuple[float, float]]]] = defaultdict(list)
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


class _Grid:
    def __init__(self, start: float, step: float, n: int):
        self.start, self.step, self.n = start, step, n

    def index(self, t: float) -> int | None:
        k = int(round((t - self.start) / self.step))
        return k if 0 <= k < self.n else None

    def column(self, s: Series, scale: float = 1.0) -> list[float | None]:
        col: list[float | None] = [None] * self.n
        for t, v in zip(s.times, s.values, strict=True):
            k = self.index(t)
            if k is not None:
                col[k] = v * scale
        return col


@dataclass
class _Gpu:
    labels: dict[str, str]
    cols: dict[str, list[float | None]] = field(default_factory=dict)
    xids: list[tuple[int, int, int]] = field(default_factory=list)  # (k, xid, count)


def assemble(
    series: Iterable[Series],
    node_exporter: dict[str, list[Series]],
    *,
    start: float,
    end: float,
    step: float,
    group_by: str = JOB_LABEL,
) -> FleetData:
    """Per-node snapshots from range-query answers on the grid start, start + step, ..., end:
    `series` are the GPU and gputop_diag_* series (each names itself in `__name__`),
    `node_exporter` node-exporter's figures by `_node_exporter_queries` key (and "uname")."""
    n = int(round((end - start) / step)) + 1
    grid = _Grid(start, step, n)
    gpu_series: dict[str, list[Series]] = defaultdict(list)
    own: dict[str, list[Series]] = defaultdict(list)
    for s in series:
        name = s.labels.get("__name__", "")
        (own if name.startswith(OWN) else gpu_series)[name].append(s)
    keys = _node_keys(gpu_series)
    if not keys:
        raise NoFleetData("no dcgm-exporter series in the window")

    def key_of(labels: dict[str, str]) -> str | None:
        return keys.get((labels.get("Hostname", ""), labels.get("instance", "")))

    gpus: dict[tuple[str, int], _Gpu] = {}
    for name, lst in gpu_series.items():
        f = BY_NAME.get(name)
        for s in lst:
            node = key_of(s.labels)
            gpu = s.labels.get("gpu", "")
            if node is None or not gpu.isdigit() or "GPU_I_ID" in s.labels:
                continue  # another node's stale series, or a MIG instance's (not read yet)
            g = gpus.setdefault((node, int(gpu)), _Gpu(s.labels))
            if name == XID_FIELD.name:
                g.xids += _xid_changes(grid, s)
            elif f is not None:
                g.cols[f.target] = grid.column(s, f.scale)
    nodes: dict[str, NodeData] = {}
    for (node, _), g in gpus.items():
        nd = nodes.get(node)
        if nd is None:
            inst = sorted({i for (h, i), k in keys.items() if k == node})
            nodes[node] = nd = NodeData(node, g.labels.get("Hostname") or None, tuple(inst))
    own_by_node = _own_series(own, key_of, grid)
    for (node, idx), g in gpus.items():
        xc = own_by_node[node]["xid_counts"].get(idx)
        if xc is not None:  # our exporter's exact counts replace the last-value gauge
            g.xids = xc
    node_hosts = _node_exporter(node_exporter, nodes, grid)
    tick_s = 1.0 if step <= REALTIME_MAX_STEP_S else step
    data = FleetData(start, end, step, tick_s, nodes, warnings=_time_warnings(step, tick_s, n))
    for key, nd in nodes.items():
        mine = {idx: g for (nk, idx), g in gpus.items() if nk == key}
        _build_node(nd, mine, own_by_node[key], node_hosts.get(key), grid, tick_s, end, group_by)
    return data


def _time_warnings(step: float, tick_s: float, n: int) -> list[str]:
    out = []
    if tick_s != 1.0:
        out.append(
            f"one sample every {step:g} s: the classifier's windows count samples here (its "
            f"{T.RECENT_S:.0f}-sample shape window spans {T.RECENT_S * step:.0f} s), and GPU "
            "dips shorter than a sample are averaged out of DCGM's profiling ratios"
        )
    span = (n - 1) * (step if tick_s == 1.0 else 1.0)  # in the classifier's seconds
    if span < T.GROWTH_MIN_SPAN_S:
        need = T.GROWTH_MIN_SPAN_S * (1.0 if tick_s == 1.0 else step)
        out.append(
            f"memory growth needs a span of {T.GROWTH_MIN_SPAN_S:.0f} "
            + ("seconds" if tick_s == 1.0 else "samples")
            + f": use --window {need:.0f}s or more to see a leak"
        )
    return out


def _xid_changes(grid: _Grid, s: Series) -> list[tuple[int, int, int]]:
    """DCGM_FI_DEV_XID_ERRORS holds the last Xid: a new nonzero value is a new event."""
    out = []
    prev = None
    for t, v in zip(s.times, s.values, strict=True):
        k = grid.index(t)
        if prev is not None and v and v != prev and k is not None:
            out.append((k, int(v), 1))
        prev = v
    return out


def _counter_increases(grid: _Grid, s: Series) -> list[tuple[int, int]]:
    """(k, increase) for each step a counter grew. A reset counts from zero, and so does a
    series that first appears inside the window (the exporter adds a label set, such as a new
    Xid code, when its first event happens); one present at the window's start is the
    baseline."""
    out = []
    prev = None
    for t, v in zip(s.times, s.values, strict=True):
        k = grid.index(t)
        if k is not None and (prev is not None or k > 0):
            inc = v if prev is None or v < prev else v - prev
            if inc > 0:
                out.append((k, int(round(inc))))
        prev = v
    return out


def _own_series(own, key_of, grid: _Grid) -> dict[str, dict]:
    per: dict[str, dict] = defaultdict(
        lambda: {
            "lost": {},
            "xid_counts": {},
            "host": {},
            "pressure": {},
            "gpu_mem": {},
            "threads": {},
            "children": {},
        }
    )
    for name, series in own.items():
        short = name.removeprefix(OWN)
        for s in series:
            node = key_of(s.labels)
            if node is None:
                continue
            d = per[node]
            lab = s.labels
            if short == "gpu_lost":
                d["lost"][int(lab.get("gpu", "-1"))] = grid.column(s)
            elif short == "xid_events_total":
                gpu = int(lab.get("gpu", "-1"))
                xid = int(lab.get("xid", "0"))
                lst = d["xid_counts"].setdefault(gpu, [])
                lst += [(k, xid, inc) for k, inc in _counter_increases(grid, s)]
            elif short in ("host_cpu_percent", "host_iowait_percent", "host_cpus"):
                d["host"][short] = grid.column(s)
            elif short == "host_pressure_percent":
                d["pressure"][(lab.get("resource", ""), lab.get("kind", ""))] = grid.column(s)
            elif short == "process_gpu_memory_bytes":
                d["gpu_mem"][(int(lab["gpu"]), int(lab["pid"]))] = grid.column(s)
            elif short == "process_thread_cpu_percent":
                key = (int(lab["pid"]), int(lab["tid"]), lab.get("name", ""))
                d["threads"][key] = grid.column(s)
            elif short == "process_child_cpu_percent":
                key = (int(lab["pid"]), int(lab["child"]), lab.get("name", ""))
                d["children"][key] = grid.column(s)
    return per


def _node_exporter(series: dict[str, list[Series]], nodes: dict[str, NodeData], grid: _Grid):
    """node-exporter's columns per node, joined on its uname nodename or its address."""
    nodename = {
        s.labels.get("instance", ""): s.labels.get("nodename", "") for s in series.get("uname", ())
    }
    by_instance: dict[str, dict[str, list]] = defaultdict(dict)
    for key, lst in series.items():
        if key == "uname":
            continue
        for s in lst:
            by_instance[s.labels.get("instance", "")][key] = grid.column(s)
    out: dict[str, dict] = {}
    for key, nd in nodes.items():
        hosts = {_instance_host(i) for i in nd.instances}
        for inst, cols in by_instance.items():
            name = nodename.get(inst)
            if (nd.hostname and name == nd.hostname) or _instance_host(inst) in hosts:
                out[key] = cols
                break
    return out


def _last(col: list[float | None] | None) -> float | None:
    if not col:
        return None
    return next((v for v in reversed(col) if v is not None), None)


def _at(cols: dict[str, list[float | None]], name: str, k: int) -> float | None:
    col = cols.get(name)
    return None if col is None else col[k]


def _int(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def _static(idx: int, g: _Gpu) -> GpuStatic:
    lab, c = g.labels, g.cols
    gpm = any(v is not None for v in c.get("gpm.sm_util_pct", ()))
    nvlink = any(v is not None for v in c.get("nvlink_tx_kib_s", ()))
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
        gpm_supported=gpm,
        nvlink_supported=nvlink,
    )


_GPM_ATTRS = tuple(f.target.removeprefix("gpm.") for f in FIELDS if f.target.startswith("gpm."))
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


def _memory(c: dict, k: int) -> tuple[int | None, int | None, int | None, int | None]:
    """(total, reserved, used incl. reserved, free) in bytes: DCGM's total is used + free +
    reserved, and its used leaves the reserve out."""
    used, free = _at(c, "fb_used", k), _at(c, "fb_free", k)
    reserved, total = _at(c, "fb_reserved", k), _at(c, "fb_total", k)
    if used is None:
        return (None if total is None else int(total), None, None, None)
    if reserved is None and total is not None and free is not None:
        reserved = max(0.0, total - used - free)
    used_all = used + (reserved or 0.0)
    if total is None and free is not None:
        total = used_all + free
    return (
        None if total is None else int(total),
        None if reserved is None else int(reserved),
        int(used_all),
        None if free is None else int(free),
    )


def _gpu_state(idx: int, static: GpuStatic, c: dict, k: int) -> GpuState | None:
    if all(col[k] is None for col in c.values()):
        return None
    kw: dict = {}
    for a in _FLOAT_ATTRS:
        kw[a] = _at(c, a, k)
    for a in _INT_ATTRS:
        kw[a] = _int(_at(c, a, k))
    for a in _BOOL_ATTRS:
        v = _at(c, a, k)
        kw[a] = None if v is None else bool(v)
    total, reserved, used, free = _memory(c, k)
    gpm_vals = {a: _at(c, "gpm." + a, k) for a in _GPM_ATTRS}
    gpm = GpmMetrics(**gpm_vals) if any(v is not None for v in gpm_vals.values()) else None
    return GpuState(
        index=idx,
        static=static,
        mem_total_bytes=total,
        mem_reserved_bytes=reserved,
        mem_used_bytes=used,
        mem_free_bytes=free,
        clock_event_reasons=decode_clock_reasons(_at(c, "clock_reasons", k)),
        gpm=gpm,
        **kw,
    )


def _rescale_memory(states: list[GpuState | None], tick_s: float) -> list[GpuState | None]:
    """One tick stands for `tick_s` seconds: divide each step's memory change by it, anchored
    at the newest value, so the classifier's MiB-per-minute growth stays the real one."""
    import dataclasses

    anchor = next((g for g in reversed(states) if g is not None and g.mem_used_bytes), None)
    if anchor is None or tick_s == 1.0:
        return states
    out = []
    for g in states:
        if g is None or g.mem_used_bytes is None:
            out.append(g)
            continue
        used = int(anchor.mem_used_bytes - (anchor.mem_used_bytes - g.mem_used_bytes) / tick_s)
        free = None if g.mem_total_bytes is None else max(0, g.mem_total_bytes - used)
        out.append(dataclasses.replace(g, mem_used_bytes=used, mem_free_bytes=free))
    return out


def _host_state(own_host: dict, pressure: dict, ne: dict | None, k: int) -> HostState | None:
    """Our exporter's host figures, else node-exporter's."""
    cpu = _at(own_host, "host_cpu_percent", k)
    if cpu is not None:
        psi = {}
        for (res, kind), col in pressure.items():
            if kind == "some" and col[k] is not None:
                full = pressure.get((res, "full"))
                psi[res] = PressureStall(col[k], None if full is None else full[k])
        return HostState(
            cpu_count=_int(_at(own_host, "host_cpus", k)) or 0,
            cpu_pct=cpu,
            iowait_pct=_at(own_host, "host_iowait_percent", k),
            pressure=psi,
        )
    if ne is None or _at(ne, "cpu_pct", k) is None:
        return None
    psi = {}
    for res in ("cpu", "io", "memory"):
        some = _at(ne, f"psi_{res}_some", k)
        if some is not None:
            psi[res] = PressureStall(some, _at(ne, f"psi_{res}_full", k))
    return HostState(
        cpu_count=_int(_at(ne, "cpus", k)) or 0,
        cpu_pct=_at(ne, "cpu_pct", k),
        iowait_pct=_at(ne, "iowait_pct", k),
        pressure=psi,
    )


def _processes(d: dict, k: int) -> tuple[tuple[GpuProcess, ...], tuple[ProcessInfo, ...]]:
    gpu_procs = tuple(
        GpuProcess(pid=pid, gpu_index=gpu, kind="compute", used_memory_bytes=int(col[k]))
        for (gpu, pid), col in sorted(d["gpu_mem"].items())
        if col[k] is not None
    )
    threads: dict[int, list[ThreadInfo]] = defaultdict(list)
    for (pid, tid, name), col in d["threads"].items():
        if col[k] is not None:
            threads[pid].append(ThreadInfo(tid, name, col[k]))
    children: dict[int, list[ChildInfo]] = defaultdict(list)
    for (pid, child, name), col in d["children"].items():
        if col[k] is not None:
            children[pid].append(ChildInfo(child, name, col[k]))
    pids = sorted({p.pid for p in gpu_procs} | set(threads) | set(children))
    infos = tuple(
        ProcessInfo(
            pid=pid,
            busiest_threads=tuple(sorted(threads[pid], key=lambda t: -(t.cpu_pct or 0))),
            children=tuple(sorted(children[pid], key=lambda c: -(c.cpu_pct or 0))),
        )
        for pid in pids
    )
    return gpu_procs, infos


def _build_node(nd: NodeData, gpus: dict[int, _Gpu], d: dict, ne, grid, tick_s, end, group_by):
    statics = {idx: _static(idx, g) for idx, g in gpus.items()}
    per_gpu = {
        idx: _rescale_memory(
            [_gpu_state(idx, statics[idx], g.cols, k) for k in range(grid.n)], tick_s
        )
        for idx, g in sorted(gpus.items())
    }
    lost = d["lost"]
    xids: dict[int, list[XidEvent]] = defaultdict(list)
    for idx, g in gpus.items():
        for k, xid, count in g.xids:
            xids[k] += [XidEvent(timestamp=0.0, xid=xid, gpu_index=idx)] * count
    groups = Counter(g.labels.get(group_by) for g in gpus.values() if g.labels.get(group_by))
    nd.group = groups.most_common(1)[0][0] if groups else None
    nd.model = next((s.name for s in statics.values() if s.name), None)
    sources = {"dcgm"}
    if any(s.gpm_supported for s in statics.values()):
        sources.add("profiling")
    if any(s.nvlink_supported for s in statics.values()):
        sources.add("nvlink")
    if d["host"]:
        sources.add("gputop_diag")
    elif ne:
        sources.add("node_exporter")
    if d["gpu_mem"]:
        sources.add("processes")
    if d["threads"] or d["children"]:
        sources.add("threads")
    nd.sources = tuple(sorted(sources))
    for k in range(grid.n):
        states = []
        for idx, col in per_gpu.items():
            if lost.get(idx) is not None and lost[idx][k]:
                states.append(GpuState(index=idx, static=statics[idx], lost=True))
            elif col[k] is not None:
                states.append(col[k])
        if not states:
            continue
        real_t = grid.start + k * grid.step
        t = real_t if tick_s == 1.0 else end - (grid.n - 1 - k) * 1.0
        nd.last_seen = real_t
        gpu_procs, infos = _processes(d, k)
        ev = tuple(
            XidEvent(timestamp=t, xid=x.xid, gpu_index=x.gpu_index, source="nvml")
            for x in xids.get(k, ())
        )
        nd.snapshots.append(
            Snapshot(
                timestamp=t,
                system=SystemInfo(hostname=nd.hostname or nd.key, gpu_count=len(states)),
                gpus=tuple(states),
                host=_host_state(d["host"], d["pressure"], ne, k),
                gpu_processes=gpu_procs,
                processes=infos,
                xid_events=ev,
            )
        )
