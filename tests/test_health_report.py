"""Health in what leaves the machine: the recorded form's exact JSON codec (every demo scenario),
and the report's Health section through the one sanitizer, with identifiers planted in a job's
environment and in the path and server of the mount its workers hang on."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.collect.health import read_health
from gputop_diag.commands.common import sample_once
from gputop_diag.health import judge
from gputop_diag.model.health import (
    Finding,
    HealthEvidence,
    HealthFacts,
    HealthReport,
    health_from_json,
    health_to_json,
    recorded,
)
from gputop_diag.monitor.core import Monitor
from gputop_diag.monitor.core import run as run_monitor
from gputop_diag.report.build import ReportSource, make_report
from gputop_diag.sim.plant import PLANT_ENV, Plant, PlantedProcess

HEALTH_SCENARIOS = (
    "launch-blocking",
    "nccl-p2p-disabled",
    "pcie-downtrained",
    "fabric-manager-down",
    "dataloader-d-state",
    "gpu-missing-from-nvml",
    "acs-enabled",
    "ib-port-down",
)


def health_of(src) -> HealthReport:
    return judge(read_health(src, sample_once(src, fast=True)))


# -- the codec ----------------------------------------------------------------------------------
def test_every_demo_scenario_report_round_trips_exactly():
    names = [s.name for s in sim.list_scenarios()]
    assert set(HEALTH_SCENARIOS) <= set(names)
    for name in names:
        report = health_of(sim.build(name))
        doc = json.loads(json.dumps(health_to_json(report)))  # through JSON text
        back = health_from_json(doc)
        assert back == recorded(report), name
        assert back.findings == report.findings and back.worst == report.worst
        assert back.facts.timestamp == report.facts.timestamp
        assert health_to_json(back) == doc  # and again, the same text


def test_the_recorded_form_carries_no_raw_facts():
    report = health_of(sim.build("dataloader-d-state"))
    assert report.facts.processes.stuck and report.facts.pci.gpus
    doc = health_to_json(report)
    assert set(doc) == {"read_at", "read_s", "findings"}
    assert "rsize=" not in json.dumps(doc)  # the mount table is not carried, only findings
    assert recorded(report).facts == HealthFacts(
        report.facts.timestamp, "", read_s=report.facts.read_s
    )


@pytest.mark.parametrize(
    "bad,where",
    [
        ([], "expected an object"),
        ({"findings": []}, "read_at"),
        ({"read_at": 1.0, "findings": [{"id": "x"}]}, "findings[0].severity"),
        (
            {
                "read_at": 1.0,
                "findings": [
                    {"id": "x", "severity": "dire", "check": "", "title": "", "next_step": ""}
                ],
            },
            "findings[0].severity",
        ),
        (
            {
                "read_at": 1.0,
                "findings": [
                    {
                        "id": "x",
                        "severity": "ok",
                        "check": "",
                        "title": "",
                        "next_step": "",
                        "gpus": ["0"],
                    }
                ],
            },
            "findings[0].gpus",
        ),
    ],
)
def test_a_malformed_recorded_health_is_refused_with_where(bad, where):
    with pytest.raises(ValueError, match=re.escape(where)):
        health_from_json(bad)


def test_the_codec_keeps_every_field():
    f = Finding(
        "pcie.aer",
        "warning",
        "t",
        (HealthEvidence("e", "/sys/x"),),
        "next",
        ("input_pipeline", "communication"),
        "pcie_aer",
        (1, 3),
        (41, 42),
        "driver",
    )
    r = HealthReport((f,), HealthFacts(12.5, "", read_s=None))
    assert health_from_json(health_to_json(r)) == r


# -- the report's Health section ----------------------------------------------------------------
def report_of(src, scenario: str, seconds: float = 5.0):
    monitor = run_monitor(src, interval=1.0, seconds=seconds)
    snaps = monitor.history.snapshots()
    return make_report(
        snaps,
        monitor.last.diagnosis,
        source=ReportSource("simulator", scenario),
        environ=src.environ,
        sources=src,
        health=health_of(src),
    )


def test_the_health_section_lists_the_findings_that_are_not_ok():
    r = report_of(sim.build("dataloader-d-state"), "dataloader-d-state")
    assert r.left_out == []
    h = r.doc["health"]
    assert h["read"] and h["worst"] == "critical"
    assert all(x["severity"] != "ok" for x in h["findings"])
    [stuck] = [x for x in h["findings"] if x["id"] == "procs.d_state"]
    assert stuck["bears_on"] == ["input_pipeline"] and stuck["next_step"]
    assert all(e["text"] and e["read_from"] for e in stuck["evidence"])
    assert "## Node and job health" in r.markdown and "stuck in uninterruptible" in r.markdown


def test_a_report_without_a_health_read_says_so():
    src = sim.build("compute-bound")
    monitor = Monitor(src, slow_sources=False)  # no slow source: no health read either
    for _ in range(3):
        monitor.tick()
        src.clock.sleep(1.0)
    r = make_report(
        monitor.history.snapshots(),
        monitor.last.diagnosis,
        source=ReportSource("simulator", "compute-bound"),
    )
    assert r.doc["health"] == {"read": False} and "were not read" in r.markdown


def test_planted_environment_value_mount_path_and_server_do_not_survive():
    src = sim.build("dataloader-d-state")
    secret_value, project, server = "zukobame-run-7", "quovexal", "fsquibbet-03"
    jobs = src.sim.health.jobs  # copies: the scenario's own tables stay as they are
    mount = (f"/mnt/{project}/shards", "nfs4", f"{server}:/export/{project}")
    jobs.cfg = {**jobs.cfg, "d_state": {**jobs.cfg["d_state"], "mount": mount}}
    for p in src.sim.procs.values():
        if p.role == "rank":
            p.environ = {**p.environ, "NCCL_P2P_DISABLE": secret_value}
    raw = health_of(src)
    raw_text = json.dumps(health_to_json(raw))
    assert secret_value in raw_text and project in raw_text and server in raw_text  # planted
    r = report_of(src, "dataloader-d-state")
    assert r.left_out == []
    ids = {x["id"] for x in r.doc["health"]["findings"]}
    assert {"procs.d_state", "env.nccl_p2p_disable"} <= ids  # the section is there, sanitized
    out = r.markdown + json.dumps(r.doc)
    for planted in (secret_value, project, server, "zukobame"):
        assert planted not in out.lower(), planted
    assert "NCCL_P2P_DISABLE=env-" in r.markdown  # the variable said, its value a pseudonym


def test_a_flag_value_is_kept():
    r = report_of(sim.build("launch-blocking"), "launch-blocking")
    [f] = [x for x in r.doc["health"]["findings"] if x["id"] == "env.cuda_launch_blocking"]
    assert any("CUDA_LAUNCH_BLOCKING=1 in pid" in e["text"] for e in f["evidence"])


# -- the command ----------------------------------------------------------------------------------
def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_demo_fabric_manager_down_report():
    rc, out, err = run_cli(["--demo", "fabric-manager-down", "report", "--seconds", "5"])
    assert rc == 0, err
    health = out[out.index("## Node and job health") :]
    assert "fabric manager" in health and "802" in health
    assert "sudo systemctl restart nvidia-fabricmanager" in health
    chain = out[out.index("## Driver chain") : out.index("## Node and job health")]
    assert "fabric manager broken" in chain and "CUDA error 802" in chain
    rc, out, err = run_cli(["--demo", "fabric-manager-down", "report", "--seconds", "5", "--json"])
    doc = json.loads(out)
    assert doc["health"]["worst"] == "critical" and doc["driver_chain"]["status"] == "broken"
    assert doc["driver_chain"]["problems"][0]["code"] == "fabric_manager"


def test_a_planted_environment_value_does_not_survive_the_command(monkeypatch, tmp_path):
    src = sim.build("nccl-p2p-disabled")
    pids = sorted(src.sim.procs)
    rank = next(k for k, pid in enumerate(pids) if src.sim.procs[pid].role == "rank")
    secret = "vobuzekit-prod-eu"
    plant = Plant(processes=[PlantedProcess(rank, environ={"NCCL_P2P_DISABLE": secret})])
    path = tmp_path / "plant.json"
    path.write_text(json.dumps(plant.to_json()), encoding="utf-8")
    monkeypatch.setenv(PLANT_ENV, str(path))
    rc, raw, _ = run_cli(["--demo", "nccl-p2p-disabled", "health", "--json"])
    assert rc == 0 and secret in raw  # planted where the health read finds it
    for fmt in ("md", "json"):
        rc, out, err = run_cli(
            ["--demo", "nccl-p2p-disabled", "report", "--seconds", "5", "--format", fmt]
        )
        assert rc == 0, err
        assert "NCCL_P2P_DISABLE" in out and "vobuzekit" not in out.lower()
        assert "could not be sanitized" not in out + err
