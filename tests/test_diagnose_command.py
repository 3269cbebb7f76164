"""`gputop-diag diagnose` as a user runs it: a subprocess, text and JSON, exit codes, the docs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gputop_diag import sim
from gputop_diag.diagnose.classify import classify
from gputop_diag.diagnose.render import to_json
from gputop_diag.monitor.sampler import Sampler

DOCS = Path(__file__).resolve().parents[1] / "docs" / "diagnosis.md"


def test_json_of_an_input_starved_job(cli):
    r = cli("diagnose", "--demo", "input-starved", "--seconds", "30", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "gputop-diag.diagnosis/1"
    assert doc["primary"] == "input_pipeline"
    assert doc["window_s"] == 30.0 and doc["scope"]["gpus"] == list(range(8))
    assert any(e["metric"] == "dataloader_worker_cpu" for e in doc["evidence"])
    assert {r["class"] for r in doc["ruled_out"]} == {
        "capacity",
        "bandwidth",
        "compute",
        "synchronization",
        "communication",
        "scheduler",
    }


def test_text_names_the_class_the_evidence_and_a_concrete_check(cli):
    r = cli("diagnose", "--demo", "sync-stall", "--seconds", "20")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("Bottleneck: SYNCHRONIZATION")
    assert "pt_main_thread" in out and "Why not:" in out
    assert re.search(r"py-spy dump --pid \d+", out)


def test_scheduler_wait_from_the_slurm_queue(cli):
    r = cli("diagnose", "--demo", "scheduler-wait", "--seconds", "10", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["primary"] == "scheduler" and doc["scope"]["job"] == "48213"


def test_no_driver_exits_3_with_the_diagnosis_the_host_part_and_the_next_step(cli):
    r = cli("diagnose", "--demo", "no-gpu", "--seconds", "5")
    assert r.returncode == 3
    assert "Bottleneck: INSUFFICIENT DATA" in r.stdout
    assert "host: CPU" in r.stdout and "next:" in r.stdout
    r = cli("diagnose", "--demo", "no-gpu", "--seconds", "5", "--json")
    assert r.returncode == 3
    assert json.loads(r.stdout)["primary"] == "insufficient_data"
    line = r.stderr.strip()
    assert "\n" not in line and "next:" in line


def test_bad_options_are_usage_errors(cli):
    r = cli("diagnose", "--demo", "idle", "--seconds", "-1")
    assert r.returncode == 2 and "--seconds" in r.stderr


def test_every_json_field_is_documented():
    sources = sim.build("thermal-throttle")
    sampler = Sampler(sources, interval=1.0)
    d = None
    for k in range(20):
        if k:
            sources.clock.sleep(1.0)
        sampler.sample()
        d = classify(sampler.history.snapshots(60), d)
    doc = to_json(d)
    text = DOCS.read_text(encoding="utf-8")
    names = set(doc) | {f"scope.{k}" for k in doc["scope"]}
    names |= {f"candidate.{k}" for k in doc["candidate"]}
    names |= set(doc["evidence"][0]) | set(doc["ruled_out"][0]) | set(doc["alerts"][0])
    undocumented = sorted(n for n in names if f"| `{n}` |" not in text)
    assert not undocumented, f"docs/diagnosis.md lacks {undocumented}"
    assert "gputop-diag.diagnosis/1" in text
