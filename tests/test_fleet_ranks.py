"""The ranks of a multi-node job through Prometheus: each node's exporter publishes what the
probes inside its ranks measured (`gputop_diag_rank_*`), and `gputop-diag fleet` names the
straggler rank and its node, or the hang, from those figures (`fleet/ranks.py` over
`diagnose/ranks.py`); without rank series the class-inferred straggler stays, said as inferred.

The probe files are written by hand in the probe's format (`probe/schema.py`) for live
processes of this test (`sleep`), in two runtime directories: two nodes, each read by its own
`gputop-diag --demo comm-bound exporter --all-probes`, scraped by a real Prometheus.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gputop_diag import sim
from gputop_diag.fleet.judge import judge_fleet, to_fleet_json
from gputop_diag.fleet.ranks import judge_job_ranks, parse_ranks, rank_query
from gputop_diag.fleet.sanitize import FleetNames
from gputop_diag.monitor.core import Monitor
from gputop_diag.probe import schema as S
from gputop_diag.prometheus.export import SlurmJobs, TickMetrics, window_of
from gputop_diag.prometheus.ranks import GAUGE_NAMES, PROBE_FILE, ProbeFiles
from gputop_diag.sources import RealProcFS
from tests.test_exporter import PROMTOOL, promtool
from tests.test_fleet_prometheus import (
    GPUTOP_DIAG,
    PROMETHEUS,
    Procs,
    _logs,
    exporter_port,
    free_port,
    prom_query,
    run_cli,
)

STEP_S = 0.5
# rank -> (node, own work a step, wait in collectives a step): rank 3 works 150 ms longer and
# the others wait for it
STRAGGLING = {
    0: ("node-a", 0.30, 0.17),
    1: ("node-a", 0.30, 0.17),
    2: ("node-b", 0.30, 0.17),
    3: ("node-b", 0.45, 0.02),
}
BALANCED = {r: (node, 0.30, 0.10) for r, (node, _, _) in STRAGGLING.items()}


# -- probe files, by hand ---------------------------------------------------------------------
class Rank:
    """A live process (`sleep`) and the probe file its rank would write."""

    def __init__(self, runtime: Path, rank: int, node: str, own: float, wait: float) -> None:
        self.proc = subprocess.Popen(["sleep", "120"])
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        self.ticks = S.start_ticks_of(stat)
        folder = runtime / "gputop-diag"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = folder / S.file_name(self.proc.pid, self.ticks)
        self.rank, self.node, self.own, self.wait = rank, node, own, wait
        self.k = 0

    def hello(self, t: float) -> dict:
        return dict(
            kind="hello",
            t=t,
            schema=S.SCHEMA,
            pid=self.proc.pid,
            start_ticks=self.ticks,
            argv=["python", "train.py"],
            python="3.11.9",
            torch="2.7.1",
            cuda=True,
            rank=self.rank,
            world=len(STRAGGLING),
            local_rank=self.rank % 2,
            node=self.node,
            measures=dict(t_input=True, t_sync=True, t_comm=True, t_gpu=False, memory=False),
        )

    def step(self, t: float) -> dict:
        self.k += 1
        return dict(
            kind="step",
            t=t,
            step=self.k,
            wall_s=self.own + self.wait,
            t_input_s=0.01,
            t_sync_s=0.005,
            sync_count=1,
            t_comm_s=self.wait + 0.01,
            t_comm_exposed_s=self.wait,
            t_gpu_s=None,
            t_host_s=self.own - 0.015,
            measured=["t_input", "t_sync", "t_comm"],
            mem=None,
            coll_seq=2 * self.k,
        )

    def write(self, records: list[dict]) -> None:
        with open(self.path, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        os.chmod(self.path, 0o600)

    def start(self, now: float, steps: int = 40) -> None:
        """Its hello and the steps of the last `steps` half seconds."""
        self.write([self.hello(now - steps * STEP_S - 1)])
        self.write([self.step(now - (steps - i) * STEP_S) for i in range(steps)])

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def start_ranks(tmp: Path, spec: dict) -> dict[str, list[Rank]]:
    """Ranks per node, each node's files under its own runtime directory."""
    nodes: dict[str, list[Rank]] = {}
    now = time.time()
    for rank, (node, own, wait) in spec.items():
        r = Rank(tmp / node, rank, node, own, wait)
        r.start(now)
        nodes.setdefault(node, []).append(r)
    return nodes


class Stepping:
    """Appends a step to every rank's file each half second, as running ranks do."""

    def __init__(self, ranks: list[Rank]) -> None:
        self.ranks = ranks
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(STEP_S):
            for r in self.ranks:
                r.write([r.step(time.time())])

    def stop(self) -> None:
        self.done.set()
        self.thread.join(5)


# -- the exporter, in process -----------------------------------------------------------------
def rank_exposition(runtime: Path, **kw) -> str:
    sources = sim.build("comm-bound")
    monitor = Monitor(sources)
    files = ProbeFiles({"XDG_RUNTIME_DIR": str(runtime)}, RealProcFS())
    metrics = TickMetrics(window=window_of(monitor), probe_files=files, **kw)
    metrics.update(monitor.tick())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    return generate_latest(registry).decode()


def test_the_exporter_publishes_each_rank_once_with_low_cardinality(tmp_path):
    nodes = start_ranks(tmp_path, STRAGGLING)
    try:
        text = rank_exposition(tmp_path / "node-b", jobs=SlurmJobs(psutil=None, own_job="77"))
        got: dict[str, list] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                got.setdefault(s.name, []).append(s)
        info = got["gputop_diag_rank_info"]
        assert sorted(s.labels["rank"] for s in info) == ["2", "3"]
        assert {s.labels["node"] for s in info} == {"node-b"}
        assert {s.labels["hpc_job"] for s in info} == {"77"}
        assert {s.labels["world"] for s in info} == {"4"}
        assert {s.labels["pid"] for s in info} == {str(r.proc.pid) for r in nodes["node-b"]}
        for name in GAUGE_NAMES:
            assert len(got[name]) == 2, name  # one sample per rank, nothing per step
            assert set(got[name][0].labels) == {"hostname", "hpc_job", "rank", "run"}
        own = {s.labels["rank"]: s.value for s in got["gputop_diag_rank_own_seconds"]}
        assert own == pytest.approx({"2": 0.30, "3": 0.45})
        wait = {s.labels["rank"]: s.value for s in got["gputop_diag_rank_wait_ratio"]}
        assert wait["3"] == pytest.approx(0.02 / 0.47)
        assert {s.value for s in got["gputop_diag_rank_in_collective"]} == {0.0}
        assert all(s.value < 5 for s in got["gputop_diag_rank_stalled_seconds"])
    finally:
        for rs in nodes.values():
            for r in rs:
                r.stop()


def test_under_sanitize_the_rank_series_name_no_host(tmp_path):
    nodes = start_ranks(tmp_path, STRAGGLING)
    try:
        text = rank_exposition(tmp_path / "node-a", sanitize=True)
        assert "gputop_diag_rank_info" in text and "node-a" not in text
    finally:
        for rs in nodes.values():
            for r in rs:
                r.stop()


# -- the judgement, without Prometheus --------------------------------------------------------
def vector(spec: dict, *, stalled: dict | None = None, inside: set | None = None) -> list:
    """The rank series as Prometheus' instant query answers them (two exporters)."""
    out = []
    for rank, (node, own, wait) in spec.items():
        base = {"hpc_job": "77", "rank": str(rank), "instance": f"{node}:9401", "Hostname": node}
        info = {**base, "__name__": "gputop_diag_rank_info", "node": node, "pid": str(100 + rank)}
        out.append(({**info, "gpu": str(rank % 2), "world": "4", "local_rank": "0"}, 1.0))
        seq = 80 if rank == 3 and stalled else 82
        for name, value in (
            ("step_seconds", own + wait),
            ("own_seconds", own),
            ("wait_ratio", wait / (own + wait)),
            ("input_seconds", 0.01),
            ("sync_seconds", 0.005),
            ("collective_seq", seq),
            ("stalled_seconds", (stalled or {}).get(rank, 0.2)),
            ("in_collective", 1.0 if rank in (inside or ()) else 0.0),
            ("window_steps", 40),
        ):
            out.append(({**base, "__name__": "gputop_diag_rank_" + name}, value))
    return out


def test_the_straggler_rank_and_its_node_from_the_rank_series():
    jobs = parse_ranks(vector(STRAGGLING), "hpc_job", lambda labels: labels["instance"])
    (ranks,) = jobs.values()
    assert [r.rank for r in ranks] == [0, 1, 2, 3]
    view = judge_job_ranks(ranks, at=1000.0)
    assert view is not None and view.straggler is not None and view.hang is None
    assert (view.straggler.rank, view.straggler.node) == (3, "node-b")
    assert view.straggler.cause == "compute"
    assert "straggler: rank 3 on node-b" in view.verdict


def test_balanced_ranks_name_no_straggler():
    (ranks,) = parse_ranks(vector(BALANCED), "hpc_job").values()
    view = judge_job_ranks(ranks, at=1000.0)
    assert view is not None and view.straggler is None and view.hang is None
    assert view.verdict.startswith("no straggler")


def test_a_rank_that_never_entered_the_collective_the_others_wait_in_is_the_hang():
    stalled = {0: 40.0, 1: 40.0, 2: 40.0, 3: 41.0}
    spec = vector(BALANCED, stalled=stalled, inside={0, 1, 2})
    (ranks,) = parse_ranks(spec, "hpc_job").values()
    view = judge_job_ranks(ranks, at=1000.0)
    assert view is not None and view.hang is not None
    assert view.hang.missing == (3,) and view.hang.waiting == (0, 1, 2)


def test_ranks_without_a_job_label_are_one_job_by_their_shared_run():
    spec = vector(STRAGGLING)
    for labels, _ in spec:  # torchrun outside a batch system: no hpc_job, one run id
        labels["hpc_job"] = ""
        labels["run"] = "r-5f1c"
    other = vector(BALANCED)
    for labels, _ in other:  # another run on the same nodes
        labels["hpc_job"] = ""
        labels["run"] = "r-90aa"
    jobs = parse_ranks(spec + other, "hpc_job", lambda labels: labels["instance"])
    assert sorted(jobs) == ["run r-5f1c", "run r-90aa"]
    assert judge_job_ranks(jobs["run r-5f1c"], at=1000.0).straggler.rank == 3
    assert judge_job_ranks(jobs["run r-90aa"], at=1000.0).straggler is None


def test_a_killed_rank_is_named_from_its_gone_gauge():
    spec = vector(BALANCED, stalled={3: 30.0})
    spec.append(({**spec[-1][0], "__name__": "gputop_diag_rank_gone", "rank": "3"}, 1.0))
    (ranks,) = parse_ranks(spec, "hpc_job").values()
    view = judge_job_ranks(ranks, at=1000.0)
    assert view.hang is not None and view.hang.gone == (3,)
    assert "rank 3 ended without a goodbye" in view.verdict


def test_the_fleet_json_says_measured_or_inferred():
    from gputop_diag.fleet.read import FleetData

    data = FleetData(start=0.0, end=1000.0, step_s=1.0, tick_s=1.0, nodes={})
    data.ranks = parse_ranks(vector(STRAGGLING), "hpc_job", lambda labels: labels["instance"])
    doc = to_fleet_json(judge_fleet(data), prometheus=None, match=None, group_by="hpc_job")
    (finding,) = doc["jobs"][0]["findings"]
    assert finding["kind"] == "straggler" and finding["basis"] == "measured"
    assert (finding["rank"], finding["node"]) == (3, "node-b:9401")
    shown = FleetNames(b"k" * 32).verdict(judge_fleet(data))
    (f,) = shown.jobs[0].findings
    assert f.rank == 3 and f.basis == "measured" and "node-b" not in f.text
    data.ranks = parse_ranks(vector(BALANCED), "hpc_job")
    doc = to_fleet_json(judge_fleet(data), prometheus=None, match=None, group_by="hpc_job")
    (finding,) = doc["jobs"][0]["findings"]
    assert finding["kind"] == "ranks" and finding["text"].startswith("measured over 4 ranks: no")
    stalled = {0: 40.0, 1: 40.0, 2: 40.0, 3: 41.0}
    hung = vector(BALANCED, stalled=stalled, inside={0, 1, 2})
    data.ranks = parse_ranks(hung, "hpc_job", lambda labels: labels["instance"])
    doc = to_fleet_json(judge_fleet(data), prometheus=None, match=None, group_by="hpc_job")
    (finding,) = doc["jobs"][0]["findings"]
    assert (finding["kind"], finding["rank"], finding["node"]) == ("hang", 3, "node-b:9401")
    assert "pid 103" in finding["text"]


def test_one_query_reads_every_rank():
    assert rank_query("") == '{__name__=~"gputop_diag_rank_.+"}'
    assert rank_query('{cluster="a"}') == '{__name__=~"gputop_diag_rank_.+", cluster="a"}'


# -- two nodes, two exporters, a real Prometheus ----------------------------------------------
@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed")
def test_fleet_names_the_straggler_rank_and_its_node_across_two_exporters(tmp_path):
    procs = Procs(tmp_path)
    nodes = start_ranks(tmp_path, STRAGGLING)
    stepping = Stepping([r for rs in nodes.values() for r in rs])
    try:
        logs = {}
        for node in nodes:
            argv = [*GPUTOP_DIAG, "--demo", "comm-bound", "exporter", "--all-probes"]
            argv += ["--listen", "127.0.0.1:0", "--interval", "1"]
            env = {"SLURM_JOB_ID": "77", "XDG_RUNTIME_DIR": str(tmp_path / node)}
            logs[node] = procs.start(node, argv, env)
        deadline = time.monotonic() + 30
        ports = {node: exporter_port(log, deadline) for node, log in logs.items()}
        targets = [f"127.0.0.1:{p}" for p in ports.values()]
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": "gputop-diag", "static_configs": [{"targets": targets}]}
            ],
        }
        (tmp_path / "prometheus.yml").write_text(json.dumps(config))
        url = f"http://127.0.0.1:{free_port()}"
        procs.start(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address={url.removeprefix('http://')}",
            ],
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                ranks = prom_query(url, "count(gputop_diag_rank_own_seconds)")
                fb = prom_query(url, "min(count_over_time(DCGM_FI_DEV_FB_USED[20s]))")
                if ranks and fb and ranks[0]["value"][1] == "4" and float(fb[0]["value"][1]) >= 3:
                    break
            except OSError:
                pass
            time.sleep(0.3)
        else:
            pytest.fail("Prometheus did not gather the rank series: " + _logs(tmp_path))
        p = run_cli("fleet", "--prometheus", url, "--window", "5s", "--step", "1s", "--json")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        (job,) = [j for j in doc["jobs"] if j["job"] == "77"]
        (straggler,) = [f for f in job["findings"] if f["kind"] == "straggler"]
        assert straggler["basis"] == "measured" and straggler["rank"] == 3
        assert straggler["node"] == f"127.0.0.1:{ports['node-b']}"
        assert "rank 3 on node-b" in straggler["text"]
    finally:
        stepping.stop()
        procs.stop()
        for rs in nodes.values():
            for r in rs:
                r.stop()


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: prometheus)")
def test_promtool_accepts_the_rank_series(tmp_path):
    nodes = start_ranks(tmp_path, STRAGGLING)
    try:
        text = rank_exposition(
            tmp_path / "node-a", jobs=SlurmJobs(psutil=None, own_job="77"), lint_clean=True
        )  # what promtool's lint accepts: model_name, not dcgm-exporter's modelName
        assert "gputop_diag_rank_wait_ratio" in text
        p = promtool(text)
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        for rs in nodes.values():
            for r in rs:
                r.stop()


def test_the_exporter_reads_the_probe_file_names_the_probe_writes():
    name = S.file_name(4242, 987654)
    assert PROBE_FILE.match(name).group(1) == "4242"
    assert PROBE_FILE.match(name + ".1").group(1) == "4242"
    assert not PROBE_FILE.match(S.stack_file_name(4242, 987654))
