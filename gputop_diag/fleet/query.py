"""What the fleet reader asks Prometheus: the range queries, and their answers as columns on
one time grid.

Every query runs on the grid `start - step, start, ..., end` (one step before the window, the
baseline that counters and "last value" series need), a few at a time in threads, and each
answer becomes one `Column` per series (a value or None per grid point) as soon as it arrives,
so the raw JSON of 60 queries over a 2,000-GPU fleet is never held at once.
"""

from __future__ import annotations

import json
import math
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from typing import TypeVar

from ..prometheus.client import Prometheus, PrometheusError, Series
from ..prometheus.dcgm_fields import BY_NAME, CLOCK_REASONS_ALIASES, HOST_LABELS, XID_FIELD

OWN = "gputop_diag_"
QUERY_THREADS = 4
T_ = TypeVar("T_")

USUAL_SCRAPE_S = (1, 2, 5, 10, 15, 20, 30, 60, 120, 300)
# The series that say a GPU reports at all (MIG mode has no GPU_UTIL; FB_USED is always there).
PRESENCE = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")
# The dcgm-exporter fields the classifier reads (the others are exported for dashboards and
# alert rules, and fetching them would only cost time): busy time, memory, power and clocks,
# temperature and clock reasons, PCIe and NVLink throughput, profiling, ECC and row remapping.
READ_FIELDS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_FB_TOTAL",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MAX_SM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_NVLINK_RX_BYTES",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
)  # and the clock reasons (either name) and DCGM_FI_DEV_XID_ERRORS
# Our own series the reader uses (the verdict and the alerts it recomputes itself).
OWN_SERIES = (
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


assert all(n in BY_NAME for n in READ_FIELDS)


def host_of(labels: dict[str, str]) -> str:
    """The node's host name in either spelling of its label ("" where it has none):
    dcgm-exporter renamed `Hostname` to `hostname` (https://github.com/NVIDIA/dcgm-exporter/
    pull/655), and a fleet holds both while its exporters are upgraded (the newer wins where a
    series has both)."""
    return labels.get("hostname") or labels.get("Hostname") or ""


def host_label_of(labels: dict[str, str]) -> str:
    """Which spelling of the node's label a series carries (`hostname` where neither)."""
    return "Hostname" if labels.get("Hostname") and not labels.get("hostname") else "hostname"


_REGEX_META = re.compile(r"([.^$*+?()\[\]{}|\\])")


def literal_regex(values) -> str:
    """A PromQL `=~` string that matches exactly these values (RE2 metacharacters escaped,
    then the string's own backslashes)."""
    alts = "|".join(_REGEX_META.sub(r"\\\1", v) for v in sorted(values))
    return '"' + alts.replace("\\", "\\\\").replace('"', '\\"') + '"'


# Prometheus' lookback (`--query.lookback-delta`, 5 minutes unless its operator changed it):
# how far before a step an instant selector finds a sample
LOOKBACK_S = 300.0
_VALUE = itemgetter(1)  # a range query's [time, "value"] pair: its value


def _finite(v: float) -> float | None:
    """A sample's value; None for NaN and the infinities (a missing sample: no figure of a
    GPU or a host is infinite, and none can be rounded or compared as one)."""
    return v if math.isfinite(v) else None


_VALUE_TEXTS = re.compile(r',"([^"]*)"\]')  # each value of a values array's text


class NoFleetData(Exception):
    """Prometheus answers, but no GPU series match."""


@dataclass(slots=True)
class Column:
    """One series on the grid: its labels and a value (or None) per grid point."""

    labels: dict[str, str]
    values: list[float | None]


@dataclass(frozen=True, slots=True)
class Grid:
    """The time points `start + k * step`, k = 0 .. n-1; point 0 is the baseline before the
    window."""

    start: float
    step: float
    n: int

    @classmethod
    def for_window(cls, end: float, window_s: float, step: float) -> Grid:
        points = int(round(window_s / step)) + 1  # the window's own points
        return cls(end - points * step, step, points + 1)

    @property
    def end(self) -> float:
        return self.start + (self.n - 1) * self.step

    def time(self, k: int) -> float:
        return self.start + k * self.step

    def from_raw(self, entry: dict) -> Column:
        """A range-query result entry (`{"metric": ..., "values": [[t, "v"], ...]}`)."""
        values = entry["values"]
        start, step, n = self.start, self.step, self.n
        if len(values) == n and abs(values[0][0] - start) < 1e-3 * step:
            # a series present at every point (most of them): no index arithmetic
            return Column(entry["metric"], [_finite(float(v)) for v in map(_VALUE, values)])
        col: list[float | None] = [None] * n
        for t, v in values:
            k = int((t - start) / step + 0.5)
            if 0 <= k < n:
                col[k] = _finite(float(v))
        return Column(entry["metric"], col)

    def from_text(self, labels: dict[str, str], text: str, floats: dict[str, float]) -> Column:
        """A series from `Prometheus.query_range_texts`: its values array's text. `floats`:
        the texts already read (a field's values repeat across GPUs and steps)."""
        texts = _VALUE_TEXTS.findall(text)
        start, step, n = self.start, self.step, self.n
        if len(texts) == n and abs(float(text[1 : text.index(",")]) - start) < 1e-3 * step:
            # present at every point (most series): the texts in order are the column
            values = list(map(floats.get, texts))
            if None in values:
                for k, v in enumerate(values):
                    if v is None:  # a text not read yet (or NaN, an infinity: None again)
                        t = texts[k]
                        got = floats[t] if t in floats else _finite(float(t))
                        values[k] = floats[t] = got
            return Column(labels, values)
        return self.from_raw({"metric": labels, "values": json.loads("[" + text + "]")})

    def from_series(self, s: Series) -> Column:
        col: list[float | None] = [None] * self.n
        for t, v in zip(s.times, s.values, strict=True):
            k = int((t - self.start) / self.step + 0.5)
            if 0 <= k < self.n:
                col[k] = v
        return Column(s.labels, col)


def selector(name: str | None, match: str) -> str:
    """`{__name__="name", <match>}` with the user's --match matchers (braces optional)."""
    inner = match.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1].strip()
    parts = [f'__name__="{name}"'] if name else []
    if inner:
        parts.append(inner)
    return "{" + ", ".join(parts) + "}"


# Ours: the scrape interval is also counted over the last two minutes and the last 30 s, so
# series younger than the window (exporters started a minute ago) do not read as sparse.
RECENT_STEP_SPANS_S = (120.0, 30.0)


def detect_step(prom: Prometheus, match: str, window_s: float, end: float) -> float:
    """The scrape interval (`find_step`)."""
    return find_step(prom, match, window_s, end)[0]


def find_step(prom: Prometheus, match: str, window_s: float, end: float) -> tuple[float, int]:
    """(The scrape interval, the queries asked for it): from how many samples the densest GPU
    series has in the window and in its last two minutes and 30 s (the finest), counted back
    from the newest sample where the exporters stopped before `end` (else the recent spans
    would hold none, and the window's whole span too few: a coarser step than the scrapes).

    Counted on each node's GPU 0 (`gpu="0"`, dcgm-exporter's GPU index label): an exporter's
    page holds every GPU of its node, so one scrape stamps them all alike and one GPU's series
    counts as many samples as the others'; each query then reads one series a node, not one a
    GPU (at 1,024 nodes of 8 GPUs, 80 -> 20 ms each). On every GPU where the match leaves no
    GPU 0 (`--match 'gpu="3"'`, an exporter told to skip GPU 0). Where only some nodes lack a
    GPU 0 and those are scraped faster than every node that has one, the step is the others'
    interval (docs/fleet.md)."""
    with query_pool() as pool:
        found = _find_step(pool, prom, match, window_s, end, one_gpu=True)
        if found[0]:
            return min(found[0]), found[1]
        steps, asked = _find_step(pool, prom, match, window_s, end, one_gpu=False)
    if not steps:
        raise NoFleetData(
            f"no dcgm-exporter series ({' or '.join(PRESENCE)}) "
            + (f"match {match!r} " if match.strip() else "")
            + f"in the {window_s:g} s before {time.strftime('%H:%M:%S', time.localtime(end))}"
        )
    return min(steps), asked + found[1]


def _find_step(
    pool: QueryPool, prom: Prometheus, match: str, window_s: float, end: float, one_gpu: bool
) -> tuple[list[float], int]:
    """`find_step`'s counts (on each node's GPU 0, or on every GPU): the steps they give, and
    the queries asked."""
    spans = step_spans(window_s)
    if one_gpu:
        inner = match.strip()
        if inner.startswith("{") and inner.endswith("}"):
            inner = inner[1:-1].strip()
        inner = inner.rstrip(", ")  # a trailing comma, which newer Prometheus versions accept
        match = f'{inner}, gpu="0"' if inner else 'gpu="0"'

    def densest(name: str, span: float, at: float) -> float:
        w = int(math.ceil(span))
        res = prom.query(f"max(count_over_time({selector(name, match)}[{w}s]))", at=at)
        return res[0][1] if res else 0.0

    def newest(name: str) -> tuple[float | None, int]:
        """(The newest sample's time, the queries asked): within the lookback at `end`, else
        anywhere in the window (a subquery a minute apart: each point sees the last sample of
        the 5 minutes before it); None where Prometheus cannot say (the counts at `end` are
        taken then)."""
        sel = selector(name, match)
        asked = 1
        try:
            res = prom.query(f"max(timestamp({sel}))", at=end)
            if not res:
                w = int(math.ceil(window_s))
                asked += 1
                res = prom.query(f"max(max_over_time(timestamp({sel})[{w}s:1m]))", at=end)
        except PrometheusError:
            return None, asked
        return (res[0][1] if res and math.isfinite(res[0][1]) else None), asked

    def steps_at(at: float) -> list[float]:
        # one query a field and span (count_over_time drops the name: two fields' labels
        # would collide), asked together
        counts = {
            span: [pool.submit(densest, name, span, at) for name in PRESENCE] for span in spans
        }
        out = []
        for span, futures in counts.items():
            n = max(f.result() for f in futures)
            if n:
                out.append(_step_of(span, n))
        return out

    last = [pool.submit(newest, name) for name in PRESENCE]
    steps = steps_at(end)
    asked = len(PRESENCE) * len(spans)
    answers = [f.result() for f in last]
    asked += sum(n for _, n in answers)
    times = [t for t, _ in answers if t is not None]
    if times and max(times) < end - min(spans):  # the last 30 s hold no sample
        steps = steps_at(max(times)) or steps
        asked += len(PRESENCE) * len(spans)
    return steps, asked


def step_spans(window_s: float) -> list[float]:
    return sorted({window_s, *(min(window_s, s) for s in RECENT_STEP_SPANS_S)})


def _step_of(span: float, n: float) -> float:
    # n samples one interval apart in a range that includes both ends: the interval lies in
    # (W/(n+1), W/(n-1)]; take the largest usual scrape interval in that range (fewer samples
    # than the span holds only ever make it coarser, and detect_step takes the finest span's),
    # else its middle
    lo = span / (n + 1)
    hi = span / (n - 1) if n > 1 else max(USUAL_SCRAPE_S)
    usual = [s for s in USUAL_SCRAPE_S if lo + 1e-6 < s <= hi + 1e-6]
    return float(usual[-1]) if usual else max(1.0, float(round((lo + hi) / 2)))


def node_exporter_queries(r: str) -> dict[str, str]:
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


def _queries(
    grid: Grid, match: str, instances=None, node_exporter: bool = True
) -> dict[str, tuple[str, str]]:
    """key -> (kind, PromQL): "series" answers name themselves (__name__), "last" ones are read
    for their newest sample only (an instant query: the column holds it at its last point),
    "node" answers are node-exporter figures by key. `instances`: only those exporters' series
    (a batch of nodes); `node_exporter`: with node-exporter's figures (read once for the whole
    fleet)."""
    inner = match.strip().strip("{}").strip()
    if instances is not None:
        inner = ", ".join(p for p in (inner, f"instance=~{literal_regex(instances)}") if p)
    jobs: dict[str, tuple[str, str]] = {}
    for name in READ_FIELDS:
        # a static figure (the power limit, the top clock) is read for its last value only
        # (`snapshots._static`): one sample a GPU, not one a step
        kind = "last" if BY_NAME[name].target.startswith("static.") else "series"
        jobs[name] = (kind, selector(name, inner))
    clock = "|".join(CLOCK_REASONS_ALIASES)
    jobs["clock_reasons"] = (
        "series",
        "{" + f'__name__=~"{clock}"' + (", " + inner if inner else "") + "}",
    )
    jobs[XID_FIELD.name] = ("series", selector(XID_FIELD.name, inner))
    for s in OWN_SERIES:
        jobs[OWN + s] = ("series", selector(OWN + s, inner))
    if node_exporter:
        jobs.update(node_exporter_jobs(grid))
    return jobs


def node_exporter_jobs(grid: Grid) -> dict[str, tuple[str, str]]:
    r = f"{int(max(3 * grid.step, 2))}s"
    jobs = {key: ("node", q) for key, q in node_exporter_queries(r).items()}
    jobs["uname"] = ("node", "node_uname_info")
    return jobs


def fetch(
    prom: Prometheus, grid: Grid, match: str, instances=None, node_exporter: bool = True
) -> tuple[list[Column], dict[str, list[Column]], int]:
    """(GPU and gputop_diag_* columns, node-exporter columns by key, queries made)."""
    return run_jobs(prom, grid, _queries(grid, match, instances, node_exporter))


def range_columns(prom: Prometheus, promql: str, grid: Grid) -> list[Column]:
    """A range query on the grid, a column per series; PrometheusError where its values are
    not [time, "value"] pairs."""
    series = prom.query_range_texts(promql, grid.start, grid.end, grid.step)
    floats: dict[str, float | None] = {}
    try:
        return [grid.from_text(labels, text, floats) for labels, text in series]
    except (ValueError, TypeError, IndexError, OverflowError):
        raise PrometheusError(
            f"Prometheus at {prom.url} answered {promql!r} with values that are not "
            '[time, "value"] pairs',
            "check the URL points at Prometheus' HTTP API (port 9090 by default)",
            "bad_answer",
        ) from None


class QueryPool:
    """Up to QUERY_THREADS queries under way at once, on daemon threads: where the asking
    thread leaves its block with an exception (a Ctrl-C, an error it does not collect) the
    queries not started are dropped, and those under way end on their own within --timeout
    while the program exits without waiting for them (`concurrent.futures`' pools join their
    threads at exit)."""

    def __init__(self, threads: int = QUERY_THREADS) -> None:
        self._todo: queue.SimpleQueue[tuple[Future, Callable, tuple] | None] = queue.SimpleQueue()
        self._count = threads
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[..., T_], *args) -> Future[T_]:
        if self._closed:
            raise RuntimeError("query pool closed")
        future: Future[T_] = Future()
        self._todo.put((future, fn, args))
        if len(self._threads) < self._count:
            t = threading.Thread(target=self._work, name="prometheus-query", daemon=True)
            self._threads.append(t)
            t.start()
        return future

    def _work(self) -> None:
        while (item := self._todo.get()) is not None:
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the asking thread
                future.set_exception(e)

    def close(self) -> None:
        """Drop what has not started; the threads end after the query they are in."""
        self._closed = True
        while True:
            try:
                item = self._todo.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self._threads:
            self._todo.put(None)


@contextmanager
def query_pool() -> Iterator[QueryPool]:
    """A QueryPool for queries asked together, closed when the block ends (its futures are
    all done there unless it ended with an error)."""
    pool = QueryPool()
    try:
        yield pool
    finally:
        pool.close()


def run_jobs(
    prom: Prometheus, grid: Grid, jobs: dict[str, tuple[str, str]]
) -> tuple[list[Column], dict[str, list[Column]], int]:
    """Each query on the grid, a few at a time; node-exporter's refused ones left empty."""

    def one(promql: str) -> list[Column]:
        return range_columns(prom, promql, grid)

    def last(name: str, sel: str) -> list[Column]:
        # the newest sample a range query on the grid would show: in (start - lookback, end]
        span = f"{int(math.ceil(grid.end - grid.start + LOOKBACK_S))}s"
        answer = prom.query(f"last_over_time({sel}[{span}])", at=grid.end)
        none = [None] * (grid.n - 1)
        return [Column(labels | {"__name__": name}, [*none, _finite(v)]) for labels, v in answer]

    columns: list[Column] = []
    node: dict[str, list[Column]] = {}
    errors: list[PrometheusError] = []
    with query_pool() as pool:
        futures = {
            key: (kind, pool.submit(last, key, q) if kind == "last" else pool.submit(one, q))
            for key, (kind, q) in jobs.items()
        }
        for key, (kind, fut) in futures.items():
            try:
                answer = fut.result()
            except PrometheusError as e:
                if kind != "node" or e.kind != "query":
                    errors.append(e)
                answer = []  # node-exporter's PromQL refused: treated as absent
            if kind == "node":
                node[key] = answer
            else:
                columns += answer
    if errors:
        raise errors[0]
    return columns, node, len(jobs)


def presence_query(match: str) -> str:
    """Per exporter and host name, how many GPU series report at each step: the nodes of the
    fleet, counted on the server (one small series per node, not one per GPU and field)."""
    names = "|".join(PRESENCE)
    inner = selector(None, match).strip("{}").strip()
    sel = "{" + f'__name__=~"{names}"' + (", " + inner if inner else "") + "}"
    return f"count by (instance, {', '.join(HOST_LABELS)}) ({sel})"


# The recording rule that keeps `presence_query("")` (gputop_diag/fleet/rules/
# gputop-diag.rules.yml): one series per node, where the query itself reads every GPU's.
NODES_RULE = "gputop_diag:node_gpu_series:count"


def presence(prom: Prometheus, grid: Grid, match: str) -> tuple[list[Column], bool]:
    """The presence columns (labels: the host name's labels and `instance`), and whether they
    came from the recording rule: where it is installed and recorded since the window's start
    (and no --match narrows the fleet: the rule keeps no other label), else counted now."""
    if not match.strip():
        try:
            cols = range_columns(prom, NODES_RULE, grid)
        except PrometheusError as e:
            if e.kind != "query":
                raise
            cols = []  # a Prometheus that refuses the name: counted now
        if any(c.values[0] is not None or c.values[1] is not None for c in cols):
            return cols, True
    return range_columns(prom, presence_query(match), grid), False
