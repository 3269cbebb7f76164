"""`watch --slurm` against a real single-node Slurm (`.ci/slurm-up`: munge, slurmctld, slurmd,
this host with 2 CPUs): a job that fills the node, one that must wait for it.

Skips only when Slurm's programs are not installed. When they are but no controller answers and
we are root, `.ci/slurm-up` starts one; a Slurm that is some cluster's (not `.ci/slurm-up`'s
ClusterName) is left alone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ("sbatch", "scontrol", "squeue", "sinfo", "scancel", "slurmctld", "slurmd", "munged")
CLUSTER = "gputop-ci"  # .ci/slurm-up's ClusterName
PREFIX = "gputop-test-"


def _run(*argv: str, timeout: float = 15, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


def _cluster_name() -> str | None:
    r = _run("scontrol", "show", "config")
    if r.returncode != 0:
        return None
    for line in r.stdout.splitlines():
        if line.split("=")[0].strip() == "ClusterName":
            return line.split("=", 1)[1].strip()
    return None


def _node_idle() -> bool:
    r = _run("sinfo", "-h", "-o", "%T")
    return r.returncode == 0 and "idle" in r.stdout.split()


@pytest.fixture(scope="module")
def slurm():
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        pytest.skip(
            f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurmctld "
            "slurmd slurm-client munge, then .ci/slurm-up"
        )
    name = _cluster_name()
    if name is None:
        if os.geteuid() != 0:
            pytest.fail("no Slurm controller answers: run .ci/slurm-up as root first")
        r = _run(str(ROOT / ".ci" / "slurm-up"), timeout=120)
        assert r.returncode == 0, f".ci/slurm-up failed:\n{r.stdout}\n{r.stderr}"
        name = _cluster_name()
    if name != CLUSTER:
        pytest.skip(
            f"this machine's Slurm is cluster {name!r}, not the test Slurm of .ci/slurm-up: "
            "the tests do not submit jobs to it"
        )
    _cancel_ours()
    for _ in range(60):  # the node frees up once our leftovers are gone
        if _node_idle():
            break
        time.sleep(0.25)
    yield
    _cancel_ours()


def _cancel_ours() -> None:
    r = _run("squeue", "-h", "-o", "%i|%j")
    ids = [x.split("|")[0] for x in r.stdout.split() if x.split("|")[-1].startswith(PREFIX)]
    if ids:
        _run("scancel", *ids)


def _sbatch(name: str, script: str, out: str = "/dev/null") -> str:
    r = _run(
        "sbatch", "--parsable", "-c", "2", "-J", PREFIX + name, "-o", out, "--wrap", script,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


def _state(job: str) -> tuple[str, str]:
    r = _run("squeue", "-h", "-j", job, "-o", "%T|%r")
    state, _, reason = r.stdout.strip().partition("|")
    return state, reason


def _until(check, seconds: float = 20.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError("Slurm did not get there in time")


def _watch(cli, *args, env=None):
    r = cli("watch", "--interval", "0.5", *args, env=env)
    return r


def test_pending_job_is_the_scheduler_and_the_running_job_has_processes(slurm, cli, tmp_path):
    out = tmp_path / "fill.out"
    steps = "; ".join(f"echo 'step {k} loss 1.0 time 0.5s'" for k in range(1, 7))
    fill = _sbatch("fill", f"{steps}; sleep 120", str(out))
    wait = _sbatch("wait", "true")
    try:
        _until(lambda: _state(fill)[0] == "RUNNING" and _state(wait) == ("PENDING", "Resources"))
        # the waiting job: PENDING for Resources, its queue time, and the scheduler class
        r = _watch(cli, "--slurm", wait, "--seconds", "1", "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        s = doc["job"]["slurm"]
        assert s["state"] == "PENDING" and s["reason"] == "Resources"
        assert s["job_id"] == wait and s["wait_s"] is not None and 0 <= s["wait_s"] < 120
        assert s["submit_time"] is not None and s["partition"] == "debug"
        assert "PENDING (reason Resources), in the queue for" in doc["state"]
        assert doc["diagnosis"]["primary"] == "scheduler"
        assert any("reason Resources" in e["text"] for e in doc["diagnosis"]["evidence"])
        text = _watch(cli, "--slurm", wait, "--seconds", "0.5").stdout
        assert "state: PENDING (reason Resources), in the queue for" in text
        assert "Bottleneck: SCHEDULER" in text
        # the running job: its processes on this node (scontrol listpids)
        r = _watch(cli, "--slurm", fill, "--seconds", "1", "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        job = doc["job"]
        assert job["slurm"]["state"] == "RUNNING"
        assert job["slurm"]["nodes"] == socket.gethostname().split(".")[0]
        names = {p["name"] for p in job["processes"]}
        assert "sleep" in names, job
        sleeper = next(p for p in job["processes"] if p["name"] == "sleep")
        assert sleeper["depth"] >= 1  # under the batch script
        assert "RUNNING on" in doc["state"] and "waited" in doc["state"]
        # its output: the job's StdOut file, its step lines read
        assert job["log_path"] == str(out) and job["steps"]["source"] == "step-loss"
        assert doc["steps"]["median_s"] == 0.5
        # a command started inside the allocation (SLURM_JOB_ID set) is linked to its job
        r = _watch(
            cli, "--json", "--output", str(tmp_path / "in-job.log"), "--", "sleep", "0.3",
            env={"SLURM_JOB_ID": fill},
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["job"]["slurm"]["job_id"] == fill
        assert doc["job"]["slurm"]["state"] == "RUNNING"
        assert doc["state"] == "exited with code 0"
    finally:
        _run("scancel", fill, wait)


def test_a_requeued_job_says_so(slurm, cli):
    job = _sbatch("requeue", "sleep 120")
    try:
        _until(lambda: _state(job)[0] == "RUNNING")
        r = _run("scontrol", "requeue", job)
        assert r.returncode == 0, r.stderr
        _until(lambda: _state(job)[0] == "PENDING")
        r = _watch(cli, "--slurm", job, "--seconds", "0.5", "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["job"]["slurm"]["restarts"] == 1
        assert "requeued 1 time (Restarts=1)" in doc["state"]
    finally:
        _run("scancel", job)


def test_unknown_job_is_explained(slurm, cli):
    r = _watch(cli, "--slurm", "987654321")
    assert r.returncode == 2
    assert "Slurm does not know job 987654321" in r.stderr and "Traceback" not in r.stderr


def test_controller_down_is_explained(slurm, cli, tmp_path):
    # the same Slurm with the controller's port moved to one nothing listens on
    conf = _run("scontrol", "show", "config").stdout
    conf_file = next(
        line.split("=", 1)[1].strip()
        for line in conf.splitlines()
        if line.split("=")[0].strip() == "SLURM_CONF"
    )
    text = Path(conf_file).read_text()
    text = "\n".join(x for x in text.splitlines() if not x.startswith("SlurmctldPort"))
    (tmp_path / "slurm.conf").write_text(text + "\nSlurmctldPort=9\nMessageTimeout=1\n")
    r = _watch(cli, "--slurm", "1", env={"SLURM_CONF": str(tmp_path / "slurm.conf")})
    assert r.returncode == 1
    assert "the Slurm controller does not answer" in r.stderr
    assert "scontrol ping" in r.stderr and "Traceback" not in r.stderr


def test_commands_missing_is_explained(cli):
    # no Slurm on the PATH at all (runs with or without Slurm installed)
    r = _watch(cli, "--slurm", "17", env={"PATH": "/nonexistent"})
    assert r.returncode == 1
    assert "not installed on this machine" in r.stderr and "Traceback" not in r.stderr


def test_a_failed_jobs_exit_code_is_ours(slurm, cli):
    job = _sbatch("failed", "echo starting; exit 3")
    _until(lambda: _run("scontrol", "show", "job", job).stdout.find("JobState=FAILED") >= 0)
    r = _watch(cli, "--slurm", job)
    assert r.returncode == 3, r.stderr  # the job's exit code, as for a started command
    assert "state: FAILED; exited with code 3" in r.stdout
    assert "the job exited with code 3" in r.stdout  # the alert


def _slurm_up(env=None) -> subprocess.CompletedProcess:
    if os.geteuid() != 0:
        pytest.skip(".ci/slurm-up runs as root")
    return _run(str(ROOT / ".ci" / "slurm-up"), timeout=90, env=env)


def test_slurm_up_takes_a_busy_node_as_up(slurm):
    job = _sbatch("busy", "sleep 30")
    try:
        _until(lambda: _state(job)[0] == "RUNNING")
        r = _slurm_up()
        assert r.returncode == 0, r.stderr
        assert "already runs here" in r.stdout and "allocated" in r.stdout
    finally:
        _run("scancel", job)


def test_slurm_up_leaves_a_sites_own_config_alone(slurm, tmp_path):
    # a slurm.conf that .ci/slurm-up did not write, whose controller does not answer
    site = "ClusterName=site\nSlurmctldHost=elsewhere\nSlurmctldPort=9\nMessageTimeout=1\n"
    conf = tmp_path / "slurm.conf"
    conf.write_text(site)
    env = {**os.environ, "SLURM_CONF": str(conf), "SLURM_UP_CONF_DIR": str(tmp_path)}
    r = _slurm_up(env)
    assert conf.read_text() == site  # not rewritten
    assert r.returncode == 1 and "not written by .ci/slurm-up" in r.stderr
