"""`--sanitize` on the headless commands (never silently ignored, before or after the command)
and the sanitized snapshot document."""

from __future__ import annotations

import argparse
import contextlib
import io
import json

import pytest
from test_report_leaks import contains_word

from gputop_diag import sim
from gputop_diag.cli import _add_common
from gputop_diag.commands import diagnose, snapshot
from gputop_diag.model.codec import snapshot_to_json
from gputop_diag.monitor.core import Monitor
from gputop_diag.sanitize.snapshot import redact_snapshot_json, sanitized_snapshot_json

SECRETS = ("gpu-node-07", "alice", "bob", "/home/", "train.py", "llama-7b")


def parse(module, *argv: str, top_sanitize: bool = False) -> argparse.Namespace:
    """The subcommand's options as cli.py builds them; `top_sanitize`: `--sanitize` given
    before the command (the top-level option sets the same attribute)."""
    p = argparse.ArgumentParser()
    p.set_defaults(interval=1.0, sanitize=top_sanitize)
    _add_common(p, top=False)
    module.add_arguments(p)
    return p.parse_args(list(argv))


def run(module, scenario: str, *argv: str, top_sanitize: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = module.run(parse(module, *argv, top_sanitize=top_sanitize), sim.build(scenario))
    return rc, out.getvalue(), err.getvalue()


def identifiers(scenario: str) -> set[str]:
    m = Monitor(sim.build(scenario))
    m.run_for(2)
    snap = m.last.snapshot
    out = set(SECRETS)
    for g in snap.gpus:
        out |= {g.static.uuid, g.static.serial, g.static.pci_bus_id}
        out |= {m.uuid for m in g.mig_instances}
    return {x for x in out if x}


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_snapshot_sanitize_hides_every_identifier(before, as_json):
    argv = ["--json"] if as_json else []
    if not before:
        argv.append("--sanitize")
    rc, out, err = run(snapshot, "compute-bound", *argv, top_sanitize=before)
    assert rc == 0 and err == ""
    leaked = sorted(x for x in identifiers("compute-bound") if contains_word(out, x))
    assert not leaked
    assert "host-" in out and "user-" in out
    if as_json:
        doc = json.loads(out)
        assert doc["sanitized"] is True and doc["redactions"]["hostname"]["replaced"] == 1
        assert all(g["static"]["device_node"] is None for g in doc["gpus"])
        assert doc["gpus"][0]["static"]["name"] == "NVIDIA H100 80GB HBM3"


def test_without_sanitize_nothing_changes():
    rc, out, _ = run(snapshot, "compute-bound", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["system"]["hostname"] == "gpu-node-07" and "sanitized" not in doc


@pytest.mark.parametrize("scenario", ["scheduler-wait", "mig", "xid-app"])
def test_diagnose_sanitize_hides_job_ids_and_names(scenario):
    rc, raw, _ = run(diagnose, scenario, "--seconds", "40", "--json")
    rc2, out, err = run(diagnose, scenario, "--seconds", "40", "--json", "--sanitize")
    assert rc == rc2 == 0 and err == ""
    # ("python train.py" is the diagnosis's own example of a profiler run, not the job's)
    secrets = (identifiers(scenario) - {"train.py"}) | {"48213", "llm-pretrain"}
    assert not [x for x in secrets if contains_word(out, x)]
    a, b = json.loads(raw), json.loads(out)
    assert a["primary"] == b["primary"] and a["confidence"] == b["confidence"]
    if scenario == "scheduler-wait":
        assert "48213" in raw and b["scope"]["job"].startswith("job-")
        assert b["scope"]["job"] in b["evidence"][0]["text"]  # one pseudonym in every field
    else:  # a verdict that names no one reads the same
        assert a["evidence"] == b["evidence"] and a["checks"] == b["checks"]


def test_diagnose_sanitize_text_with_no_driver():
    rc, out, _ = run(diagnose, "no-gpu", "--seconds", "3", top_sanitize=True)
    assert rc == 3 and "gpu-node-07" not in out and "host-" in out


def test_the_old_entry_point_sanitizes_partial_documents():
    """`redact_snapshot_json` (the live view's `s` save) takes any part of a snapshot document."""
    doc = {
        "system": {"hostname": "gpu-node-07"},
        "gpus": [],
        "processes": [{"user": "alice", "cmdline": ["/home/alice/venv/bin/python", "x.py"]}],
        "errors": [{"message": "at 0000:3b:00.0 on gpu-node-07 for alice", "next_step": ""}],
    }
    out = redact_snapshot_json(doc)
    text = json.dumps(out)
    assert out["sanitized"] is True and out["processes"][0]["cmdline"][0] == "python"
    for secret in ("gpu-node-07", "alice", "3b:00", "/home/", "x.py"):
        assert secret not in text


def test_one_sanitizer_keeps_its_pseudonyms_across_documents():
    m = Monitor(sim.build("capacity"))
    m.run_for(3)
    from gputop_diag.sanitize.sanitizer import Sanitizer

    s = Sanitizer()
    a = sanitized_snapshot_json(m.history.snapshots()[0], s)
    b = sanitized_snapshot_json(m.last.snapshot, s)
    assert a["system"]["hostname"] == b["system"]["hostname"]
    assert [g["static"]["uuid"] for g in a["gpus"]] == [g["static"]["uuid"] for g in b["gpus"]]
    assert snapshot_to_json(m.last.snapshot)["system"]["hostname"] == "gpu-node-07"
