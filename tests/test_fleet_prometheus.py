"""A real Prometheus on loopback scrapes five `gputop-diag exporter --demo SCENARIO` processes
(and node-exporter where it is installed); `gputop-diag fleet` reads them back.

- three exporters run one Slurm job (SLURM_JOB_ID=4242): two wait on their all-reduce
  (comm-bound), one computes under thermal slowdown: the straggler;
- one runs with --sanitize (no Hostname, UUID, bus id or job label: its instance names it);
- one is seen as a plain dcgm-exporter with profiling off: Prometheus drops its gputop_diag_*
  and DCGM_FI_PROF_* series at scrape time (metric_relabel_configs), and node-exporter gives
  its host figures.

Skipped only where the `prometheus` binary is missing (Debian: `apt-get install prometheus`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
GPUTOP_DIAG = [sys.executable, "-m", "gputop_diag"]  # the installed entry point
SCRAPE_S = 1
SAMPLES_NEEDED = 18  # the classifier's 15 s shape window, and a little more

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus binary is not installed (Debian: apt-get install prometheus)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*GPUTOP_DIAG, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Procs:
    """Every process the fixture starts, ended at teardown (TERM, then KILL)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str], env: dict | None = None) -> Path:
        log = self.tmp / f"{name}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        self.procs.append(p)
        return log

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


def exporter_port(log: Path, deadline: float) -> int:
    while time.monotonic() < deadline:
        text = log.read_text() if log.exists() else ""
        for line in text.splitlines():
            if "serving http://" in line:
                return int(line.split("serving http://")[1].split("/")[0].rsplit(":", 1)[1])
        time.sleep(0.1)
    raise AssertionError(f"exporter did not start: {log.read_text()}")


def prom_query(url: str, q: str) -> list:
    data = urllib.parse.urlencode({"query": q}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=5) as r:
        return json.loads(r.read())["data"]["result"]


NODES = {  # name -> (scenario, extra exporter args, environment)
    "comm-a": ("comm-bound", [], {"SLURM_JOB_ID": "4242"}),
    "comm-b": ("comm-bound", [], {"SLURM_JOB_ID": "4242"}),
    # --lint-clean: what promtool's lint accepts (model_name), read beside modelName
    "hot": ("thermal-throttle", ["--lint-clean"], {"SLURM_JOB_ID": "4242"}),
    "input": ("input-starved", ["--sanitize", "--lint-clean"], {}),
    "dcgm-only": ("compute-bound", [], {}),
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    procs = Procs(tmp)
    try:
        logs = {}
        for name, (scenario, extra, env) in NODES.items():
            argv = [*GPUTOP_DIAG, "--demo", scenario, "exporter"]
            argv += ["--listen", "127.0.0.1:0", "--interval", str(SCRAPE_S), *extra]
            logs[name] = procs.start(name, argv, env)
        deadline = time.monotonic() + 30
        ports = {name: exporter_port(log, deadline) for name, log in logs.items()}
        ne_port = None
        if NODE_EXPORTER is not None:
            ne_port = free_port()
            procs.start(
                "node-exporter",
                [
                    NODE_EXPORTER,
                    f"--web.listen-address=127.0.0.1:{ne_port}",
                    "--collector.disable-defaults",
                    "--collector.cpu",
                    "--collector.pressure",
                    "--collector.uname",
                ],
            )
        gpu_targets = [f"127.0.0.1:{ports[n]}" for n in NODES if n != "dcgm-only"]
        config = {
            "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s"},
            "scrape_configs": [
                {"job_name": "gputop-diag", "static_configs": [{"targets": gpu_targets}]},
                {
                    "job_name": "dcgm",
                    "static_configs": [{"targets": [f"127.0.0.1:{ports['dcgm-only']}"]}],
                    # what a dcgm-exporter with profiling off leaves in Prometheus
                    "metric_relabel_configs": [
                        {
                            "source_labels": ["__name__"],
                            "regex": "gputop_diag_.*|DCGM_FI_PROF_.*",
                            "action": "drop",
                        }
                    ],
                },
            ],
        }
        if ne_port is not None:
            config["scrape_configs"].append(
                {"job_name": "node", "static_configs": [{"targets": [f"127.0.0.1:{ne_port}"]}]}
            )
        (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        prom_port = free_port()
        url = f"http://127.0.0.1:{prom_port}"
        procs.start(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                res = prom_query(url, 'min(count_over_time(DCGM_FI_DEV_FB_USED{gpu="0"}[60s]))')
                targets = prom_query(url, 'count(DCGM_FI_DEV_FB_USED{gpu="0"})')
                if (
                    res
                    and targets
                    and float(targets[0]["value"][1]) == len(NODES)
                    and float(res[0]["value"][1]) >= SAMPLES_NEEDED
                ):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("Prometheus did not gather enough samples: " + _logs(tmp))
        yield {"url": url, "ports": ports, "ne": ne_port, "tmp": tmp}
    finally:
        procs.stop()


def _logs(tmp: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in tmp.glob("*.log"))


@pytest.fixture(scope="module")
def fleet_doc(fleet):
    r = run_cli("fleet", "--prometheus", fleet["url"], "--window", "20s", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    by_port = {}
    for n in doc["nodes"]:
        for inst in n["instances"]:
            by_port[int(inst.rsplit(":", 1)[1])] = n
    nodes = {name: by_port[port] for name, port in fleet["ports"].items()}
    return doc, nodes


def test_fleet_names_each_nodes_class_as_its_scenario_declares(fleet_doc):
    doc, nodes = fleet_doc
    assert doc["schema"] == "gputop-diag.fleet/1"
    assert doc["step_s"] == SCRAPE_S and doc["tick_s"] == 1.0
    assert len(doc["nodes"]) == len(NODES)
    assert nodes["comm-a"]["primary"] == "communication"
    assert nodes["comm-b"]["primary"] == "communication"
    assert nodes["hot"]["primary"] == "compute"
    assert "thermal" in {a["kind"] for a in nodes["hot"]["alerts"]}
    assert nodes["input"]["primary"] == "input_pipeline"
    assert nodes["dcgm-only"]["primary"] == "compute"
    for n in doc["nodes"]:
        assert n["samples"] >= SAMPLES_NEEDED - 3
        assert n["diagnosis"]["schema"] == "gputop-diag.diagnosis/1"
        assert n["gpus"] == 8


def test_demo_exporters_on_one_host_are_told_apart_by_instance(fleet_doc, fleet):
    doc, nodes = fleet_doc
    assert nodes["comm-a"]["hostname"] == "gpu-node-07" == nodes["hot"]["hostname"]
    assert nodes["comm-a"]["node"] == f"127.0.0.1:{fleet['ports']['comm-a']}"
    assert len({n["node"] for n in doc["nodes"]}) == len(NODES)


def test_missing_series_lower_confidence_and_are_named(fleet_doc, fleet):
    _, nodes = fleet_doc
    seen, full = nodes["dcgm-only"], nodes["hot"]
    assert seen["confidence"] < full["confidence"]
    assert any("GPM" in e for e in seen["evidence_missing"])
    missing = " ".join(seen["series_missing"])
    assert "DCGM_FI_PROF_" in missing and "process" in missing and "thread" in missing
    assert "profiling" not in seen["sources"]
    if fleet["ne"] is not None:
        assert "node_exporter" in seen["sources"]
        assert not any("host CPU" in m for m in seen["series_missing"])
    else:
        assert any("host CPU" in m for m in seen["series_missing"])
    assert full["series_missing"] == []


def test_the_thermal_node_is_named_the_straggler_of_its_job(fleet_doc, fleet):
    doc, nodes = fleet_doc
    (job,) = [j for j in doc["jobs"] if j["job"] == "4242"]
    assert sorted(job["nodes"]) == sorted(nodes[n]["node"] for n in ("comm-a", "comm-b", "hot"))
    assert job["classes"] == {"communication": 2, "compute": 1}
    stragglers = [f for f in job["findings"] if f["kind"] == "straggler"]
    assert [f["node"] for f in stragglers] == [nodes["hot"]["node"]]
    assert "thermal" in stragglers[0]["text"]
    # the sanitized and the dcgm-only exporters carry no job label
    assert nodes["input"]["group"] is None and nodes["dcgm-only"]["group"] is None


def test_sanitized_exporter_leaves_no_identifying_label_in_prometheus(fleet_doc, fleet):
    _, nodes = fleet_doc
    inst = f"127.0.0.1:{fleet['ports']['input']}"
    assert nodes["input"]["node"] == inst and nodes["input"]["hostname"] is None
    for label in ("hostname", "Hostname", "UUID", "pci_bus_id", "hpc_job"):
        assert prom_query(fleet["url"], f'count({{instance="{inst}", {label}!=""}})') == []
    assert prom_query(fleet["url"], f'count({{instance="{inst}"}})') != []


def test_text_table_and_match(fleet):
    port = fleet["ports"]["input"]
    r = run_cli("fleet", "--prometheus", fleet["url"], "--window", "20s")
    assert r.returncode == 0, r.stderr
    assert "input pipeline" in r.stdout and "communication" in r.stdout
    assert "holds the job back" in r.stdout
    r = run_cli(
        "fleet",
        "--prometheus",
        fleet["url"],
        "--window",
        "20s",
        "--json",
        "--match",
        f'{{instance="127.0.0.1:{port}"}}',
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [n["primary"] for n in doc["nodes"]] == ["input_pipeline"]


def test_no_matching_series_is_exit_3_with_the_next_step(fleet):
    r = run_cli(
        "fleet", "--prometheus", fleet["url"], "--window", "20s", "--match", 'Hostname="nope"'
    )
    assert r.returncode == 3
    assert "no dcgm-exporter series" in r.stderr and "next:" in r.stderr
    assert "Traceback" not in r.stderr


def test_group_by_another_label(fleet):
    r = run_cli(
        "fleet", "--prometheus", fleet["url"], "--window", "20s", "--json", "--group-by", "job"
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    groups = {j["job"]: len(j["nodes"]) for j in doc["jobs"]}
    assert groups == {"gputop-diag": 4, "dcgm": 1}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: prometheus)")
def test_promtool_accepts_a_live_scrape(fleet):
    for name in ("hot", "input"):
        with urllib.request.urlopen(
            f"http://127.0.0.1:{fleet['ports'][name]}/metrics", timeout=5
        ) as r:
            text = r.read()
        assert b"DCGM_FI_DEV_GPU_UTIL{" in text
        p = subprocess.run(
            [PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=30
        )
        assert p.returncode == 0, p.stdout + p.stderr


def test_a_fractional_timeout_is_accepted_and_a_bad_match_says_so(fleet):
    r = run_cli("fleet", "--prometheus", fleet["url"], "--window", "20s", "--timeout", "2.5")
    assert r.returncode == 0, r.stderr
    assert "Fleet: " in r.stdout
    r = run_cli("fleet", "--prometheus", fleet["url"], "--window", "20s", "--match", 'gpu="0')
    assert r.returncode == 4 and "refused the query" in r.stderr
    assert "next: check --match" in r.stderr and r.stderr.count("\n") == 1
