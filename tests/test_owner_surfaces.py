"""Whose GPU is this, on the headless surfaces: `snapshot` (text and JSON) and `watch`."""

from __future__ import annotations

import json

from gputop_diag import sim
from gputop_diag.commands.common import render_snapshot, sample_once


def _snapshot(scenario: str):
    return sample_once(sim.build(scenario), fast=True)


def test_the_snapshot_names_each_gpu_processs_job_pod_or_container():
    text = render_snapshot(_snapshot("compute-bound"))
    head, *rows = text[text.index("     PID") :].split("\n\n")[0].splitlines()
    assert "OWNER" in head.split()
    owners = {row.split()[0]: row for row in rows}
    assert "job 424242" in owners["41200"]  # the trainer in its Slurm job
    assert " ctr " in owners["41440"]  # the co-tenant's notebook in a container
    pod = render_snapshot(_snapshot("comm-bound"))
    assert "pod ml-research/llama-ddp-0" in pod


def test_without_owners_the_process_table_keeps_its_columns():
    text = render_snapshot(_snapshot("idle"))
    assert "OWNER" not in text


def test_the_snapshot_document_carries_the_owner(cli):
    r = cli("--demo", "comm-bound", "snapshot", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    owners = [p["owner"] for p in doc["processes"] if p.get("owner")]
    assert owners and all(o["kind"] == "pod" for o in owners)
    assert {o["pod_namespace"] for o in owners} == {"ml-research"}


def test_watch_says_whom_the_job_runs_for(cli):
    argv = ["--demo", "compute-bound", "watch", "--pid", "41200", "--no-tui", "--seconds", "20"]
    r = cli(*argv)
    assert r.returncode == 0, r.stderr
    assert "  runs for: job 424242" in r.stdout.splitlines()
    doc = json.loads(cli(*argv, "--json").stdout)
    assert [(o["kind"], o["slurm_job"], o["slurm_step"]) for o in doc["owners"]] == [
        ("slurm", "424242", "0")
    ]


def test_a_label_cuts_a_real_id_never_a_pseudonym():
    import secrets

    from gputop_diag.model import Owner

    cid = secrets.token_hex(32)
    assert Owner("container", container_id=cid).label == f"ctr {cid[:8]}"
    assert Owner("container", container_id="container-aixa").label == "ctr container-aixa"
    assert Owner("pod", pod_uid="uuid-q3rt").label == "pod uuid-q3rt"


def test_diagnose_says_when_it_cannot_see_the_hosts_pids(capsys):
    """Run in a container without the host's PID namespace, the verdict stands on NVML's
    figures and stderr says once why the processes have no names, with the fix."""
    import argparse

    from gputop_diag.commands import diagnose
    from gputop_diag.sim.container import in_container

    feed = in_container(sim.build("compute-bound"))
    args = argparse.Namespace(seconds=10.0, interval=1.0, json=False, sanitize=False)
    assert diagnose.run(args, feed) == 0
    err = capsys.readouterr().err
    assert err.count("--pid=host") == 1 and "hostPID: true" in err
