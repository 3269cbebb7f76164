"""The fleet's triage against its raw read, over one real Prometheus TSDB.

dcgm-exporter series for a dozen nodes are written as OpenMetrics, imported with `promtool tsdb
create-blocks-from openmetrics` and served by a Prometheus on loopback. The fleet is judged
twice over the same data: every node from its raw series (`triage=False`), and through the
triage (`fleet/triage.py`): the classes, confidences, evidence and alerts must be the same on
every node. Besides plainly idle and plainly busy nodes, most nodes sit just across the line
of one of the triage's conditions (busy time or SM activity just over the idle threshold on a
few samples, memory just over the warning share or growing just enough, an Xid, a GPU process,
a gap, a node that stopped reporting): each one a triage too eager to clear would judge
differently from the raw read.

Skipped where the `prometheus` or `promtool` binary is missing.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from gputop_diag.diagnose import thresholds as T
from gputop_diag.fleet.judge import render_fleet_text, to_fleet_json
from gputop_diag.fleet.query import PRESENCE, find_step, step_spans
from gputop_diag.fleet.stream import stream_fleet
from gputop_diag.model.formats import count
from gputop_diag.prometheus.client import Prometheus, PrometheusError

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="prometheus and promtool are not installed (Debian: apt-get install prometheus)",
)

STEP = 15
POINTS = 41  # 10 minutes at 15 s
WINDOW = 360.0
GPUS = 4
FB_MIB = 81_000.0
IDLE = T.IDLE_UTIL_PCT


def _idle(gpu: int, k: int) -> dict:
    return {
        "DCGM_FI_DEV_GPU_UTIL": 0.0,
        "DCGM_FI_PROF_SM_ACTIVE": 0.0,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.0,
        "DCGM_FI_DEV_FB_USED": 600.0,
        "DCGM_FI_DEV_FB_FREE": FB_MIB - 600.0,
    }


def _with(**over):
    """An idle node but for `over`: field -> f(gpu, k) giving the value (None: no sample)."""

    def node(gpu: int, k: int) -> dict:
        out = _idle(gpu, k)
        for name, f in over.items():
            out[name] = f(gpu, k)
        return out

    return node


def _busy(gpu: int, k: int) -> dict:
    return {
        "DCGM_FI_DEV_GPU_UTIL": 97.0,
        "DCGM_FI_PROF_SM_ACTIVE": 0.93,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.7,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.3,
        "DCGM_FI_DEV_FB_USED": 50_000.0,
        "DCGM_FI_DEV_FB_FREE": FB_MIB - 50_000.0,
    }


LAST = POINTS - 1
NODES = {  # node -> (its series, its job, whether the triage may clear it)
    "idle-a": (_idle, "7001", True),
    "idle-b": (_idle, "7001", True),
    # exactly at the idle threshold: still idle, on every sample
    "edge": (_with(DCGM_FI_DEV_GPU_UTIL=lambda g, k: IDLE), None, True),
    "busy-a": (_busy, "7002", False),
    "busy-b": (_busy, "7002", False),
    # just over the idle threshold on the last few samples of one GPU
    "spike": (
        _with(DCGM_FI_DEV_GPU_UTIL=lambda g, k: 40.0 if g == 3 and k > LAST - 4 else 0.0),
        None,
        False,
    ),
    "sm-spike": (
        _with(DCGM_FI_PROF_SM_ACTIVE=lambda g, k: 0.11 if g == 1 and k > LAST - 5 else 0.0),
        None,
        False,
    ),
    # memory just past the warning share on one GPU
    "full": (
        _with(
            DCGM_FI_DEV_FB_USED=lambda g, k: FB_MIB * 0.91 if g == 0 else 600.0,
            DCGM_FI_DEV_FB_FREE=lambda g, k: FB_MIB * 0.09 if g == 0 else FB_MIB - 600.0,
        ),
        None,
        False,
    ),
    # memory growing 40 MiB a sample on one idle GPU: a leak
    "leak": (
        _with(DCGM_FI_DEV_FB_USED=lambda g, k: 600.0 + (40.0 * k if g == 2 else 0.0)),
        None,
        False,
    ),
    "xid": (
        _with(DCGM_FI_DEV_XID_ERRORS=lambda g, k: 79.0 if g == 0 and k > LAST - 3 else 0.0),
        None,
        False,
    ),  # fmt: skip
    "gap": (_with(DCGM_FI_DEV_GPU_UTIL=lambda g, k: None if 20 < k < 30 else 0.0), None, False),
    # stopped reporting six minutes before the window's end
    "stale": (
        lambda g, k: None if k > LAST - 24 else _idle(g, k),
        None,
        False,
    ),
}
PROCESS_NODE = "holder"  # idle GPUs whose memory a process holds (gputop_diag_process_*)


def _openmetrics(start: float) -> str:
    series: dict[str, list[str]] = {}
    all_nodes = {**NODES, PROCESS_NODE: (_idle, None, False)}
    for i, (node, (f, job, _)) in enumerate(all_nodes.items()):
        inst = f"10.2.0.{i + 1}:9400"
        for gpu in range(GPUS):
            for k in range(POINTS):
                fields = f(gpu, k)
                if fields is None:
                    continue
                for name, v in fields.items():
                    if v is None:
                        continue
                    labels = (
                        f'gpu="{gpu}",UUID="GPU-{i:04d}-{gpu}",modelName="NVIDIA H100 80GB HBM3",'
                        f'Hostname="{node}",instance="{inst}",job="dcgm"'
                        + (f',hpc_job="{job}"' if job else "")
                    )
                    series.setdefault(name, []).append(
                        f"{name}{{{labels}}} {v!r} {start + k * STEP:.0f}"
                    )
        if node == PROCESS_NODE:
            name = "gputop_diag_process_gpu_memory_bytes"
            labels = f'gpu="0",pid="4321",hostname="{node}",instance="{inst}",job="dcgm"'
            series[name] = [
                f"{name}{{{labels}}} {500 * 2**20} {start + k * STEP:.0f}" for k in range(POINTS)
            ]
    out = []
    for name, lines in series.items():
        # each series' samples in time order, series after series
        lines.sort(key=lambda s: (s.rsplit(" ", 2)[0], float(s.rsplit(" ", 1)[1])))
        out += [f"# TYPE {name} gauge", *lines]
    return "\n".join([*out, "# EOF", ""])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def triage_prometheus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("triage")
    end = (time.time() // STEP) * STEP - 120
    start = end - LAST * STEP
    om = tmp / "fleet.om"
    om.write_text(_openmetrics(start))
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(om), str(tmp / "tsdb")],
        check=True,
        capture_output=True,
    )
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    port = _free_port()
    log = open(tmp / "prometheus.log", "w")  # noqa: SIM115 - closed at teardown
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=30d",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("Prometheus did not start: " + (tmp / "prometheus.log").read_text())
        prom = Prometheus(url, timeout=30)
        yield prom, end
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _judged(prom, end, triage: bool) -> dict:
    fv = stream_fleet(prom, window_s=WINDOW, at=end, triage=triage, batch_nodes=4)
    return to_fleet_json(fv, prometheus=None, match=None, group_by="hpc_job")


def _verdict(n: dict) -> tuple:
    return (
        n["primary"],
        n["confidence"],
        n["secondary"],
        n["evidence"],
        [a["text"] for a in n["alerts"]],
        n["faults"],
        n["evidence_missing"],
        n["series_missing"],
        n["gpus"],
        n["samples"],
        n["stale_s"],
        n["group"],
    )


def test_the_triage_judges_every_node_as_the_raw_read_does(triage_prometheus):
    prom, end = triage_prometheus
    raw = _judged(prom, end, triage=False)
    tri = _judged(prom, end, triage=True)
    by_raw = {n["node"]: n for n in raw["nodes"]}
    by_tri = {n["node"]: n for n in tri["nodes"]}
    assert set(by_raw) == set(by_tri) == {*NODES, PROCESS_NODE}
    for node in by_raw:
        assert _verdict(by_tri[node]) == _verdict(by_raw[node]), node
        assert by_raw[node]["read"] == "raw"
    assert tri["jobs"] == raw["jobs"]
    # the clear nodes' figures hold over the window: their whole diagnosis is the raw one
    for node, (_, _, clear) in NODES.items():
        if clear:
            assert by_tri[node]["diagnosis"] == by_raw[node]["diagnosis"], node
    # what the data was built to show: the raw read names it
    assert by_raw["idle-a"]["primary"] == by_raw["edge"]["primary"] == "idle"
    assert by_raw["busy-a"]["primary"] not in ("idle", "insufficient_data")
    assert by_raw["spike"]["primary"] != "idle"
    assert by_raw["sm-spike"]["primary"] != "idle"
    assert "memory_full" in {a["kind"] for a in by_raw["full"]["alerts"]}
    assert "memory_growth" in {a["kind"] for a in by_raw["leak"]["alerts"]}
    assert "xid" in {a["kind"] for a in by_raw["xid"]["alerts"]}
    assert by_raw["stale"]["stale_s"]
    assert "process" in by_raw[PROCESS_NODE]["evidence"][0]


def test_the_triage_clears_only_the_nodes_the_aggregates_decide(triage_prometheus):
    prom, end = triage_prometheus
    tri = _judged(prom, end, triage=True)
    aggregate = {n["node"] for n in tri["nodes"] if n["read"] == "aggregate"}
    assert aggregate == {node for node, (_, _, clear) in NODES.items() if clear}
    reads = tri["reads"]
    assert reads["aggregate"] == len(aggregate)
    assert reads["raw"] == len(NODES) + 1 - len(aggregate)
    assert sum(reads["raw_because"].values()) == reads["raw"]
    assert reads["raw_because"]["busy"] == 4  # busy-a, busy-b, spike, sm-spike
    doc = json.dumps(tri)
    assert '"read": "aggregate"' in doc
    fv = stream_fleet(prom, window_s=WINDOW, at=end)
    text = render_fleet_text(fv)
    raw = len(NODES) + 1 - len(aggregate)
    assert f"aggregates (idle throughout): {count(len(aggregate), 'node')}; read raw: {raw}" in text


@pytest.mark.parametrize(("stopped_s", "window_s"), [(0, WINDOW), (100, WINDOW), (200, WINDOW),
                                                     (400, 900.0)])  # fmt: skip
def test_the_scrape_interval_is_counted_back_from_the_newest_sample(
    triage_prometheus, stopped_s, window_s
):
    """Exporters that stopped before the window's end (the live Fleet pane reading a fleet
    whose scrapes ended minutes ago, beyond Prometheus' 5-minute lookback too) still read as
    scraped every 15 s, not as sparser."""
    prom, end = triage_prometheus
    step, asked = find_step(prom, "", window_s, end + stopped_s)
    assert step == STEP
    spans = len(step_spans(window_s)) * len(PRESENCE)
    beyond = len(PRESENCE) if stopped_s > 300 else 0  # the newest sample, found in the window
    assert asked == spans + len(PRESENCE) + beyond + (spans if stopped_s else 0)


class _NoTimestamps:
    """The fixture's Prometheus refusing `timestamp()` (a proxy that allows a list of
    functions, an older server)."""

    def __init__(self, prom) -> None:
        self.prom = prom

    def query(self, promql: str, at: float | None = None):
        if "timestamp(" in promql:
            raise PrometheusError("refused", "next", "query")
        return self.prom.query(promql, at)


class _Asked:
    """The fixture's Prometheus, keeping the PromQL it was asked."""

    def __init__(self, prom) -> None:
        self.prom, self.asked = prom, []

    def query(self, promql: str, at: float | None = None):
        self.asked.append(promql)
        return self.prom.query(promql, at)


@pytest.mark.parametrize(
    ("match", "narrow"),
    [
        ("", True),
        ('{job="dcgm"}', True),
        ('job="dcgm", ', True),
        ('gpu="3"', False),
        ('gpu=~"1|2"', False),
    ],  # fmt: skip
)
def test_the_scrape_interval_is_counted_on_each_nodes_gpu_0_where_the_match_keeps_one(
    triage_prometheus, match, narrow
):
    """Every GPU of a node is scraped at once, so one GPU's series a node counts the samples:
    GPU 0's. A match that leaves no GPU 0 is counted on every GPU it keeps."""
    prom, end = triage_prometheus
    asking = _Asked(prom)
    step, asked = find_step(asking, match, WINDOW, end)
    assert step == STEP
    once = len(step_spans(WINDOW)) * len(PRESENCE) + len(PRESENCE)
    assert asked == len(asking.asked) == (once if narrow else 2 * once + len(PRESENCE))
    on_gpu0 = [q for q in asking.asked if 'gpu="0"' in q]
    assert len(on_gpu0) == (once if narrow else once + len(PRESENCE))  # + the subqueries
    if not narrow:  # then asked again on the match alone
        assert all(match in q for q in asking.asked)
        assert sum('gpu="0"' not in q for q in asking.asked) == once


def test_a_refused_newest_sample_query_leaves_the_counts_at_the_end(triage_prometheus):
    prom, end = triage_prometheus
    assert find_step(_NoTimestamps(prom), "", WINDOW, end)[0] == STEP
