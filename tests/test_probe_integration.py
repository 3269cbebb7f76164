"""The probe's figures where a user sees them: the Job pane (the measured split as a stacked bar,
the sync call sites, each process's memory) once steps arrive, in ASCII too and under
--sanitize; and `gputop-diag watch --probe -- CMD` end to end, with the real probe inside the
real examples/train_tiny.py (torch on the CPU here; on a GPU machine the sync class too)."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
from test_tui_support import screen_text, tick

from gputop_diag import sim
from gputop_diag.collect.job import JobWatch
from gputop_diag.tui import GpuTopApp

REPO = Path(__file__).resolve().parent.parent
TRAIN = str(REPO / "examples" / "train_tiny.py")


class WatchApp(GpuTopApp):
    """The real app watching `watch`, its collector thread replaced by ticks we take."""

    def __init__(self, watch: JobWatch, sources, **kw) -> None:
        super().__init__(sources, start_collectors=False, job_watch=watch, **kw)

    def feed(self, seconds: int = 1) -> None:
        for _ in range(seconds):
            tick(self)


def starting_job(monkeypatch):
    """sync-measured whose job starts 5 s in: its ranks take their first step ~25 s in."""
    spec = dict(sim.scenarios.SCENARIOS["sync-measured"], jobs_from=5)
    monkeypatch.setitem(sim.scenarios.SCENARIOS, "probe-starts", spec)
    s = sim.build("probe-starts")
    s.clock.sleep(6)  # the rank exists from 4.5 s
    return s


def pane(app) -> str:
    """The Job pane's text, unwrapped (the screen wraps it to the pane's width)."""
    return app.query_one("#job-text").plain


def _steps_in(text: str) -> int:
    return int(re.search(r"(\d+) steps, 1 process", text).group(1))


async def test_the_job_pane_draws_the_measured_split_once_steps_arrive(monkeypatch):
    s = starting_job(monkeypatch)
    app = WatchApp(JobWatch.for_pid(s, 41200), s)
    async with app.run_test(size=(100, 45)) as pilot:
        app.feed(2)
        await pilot.pause()
        first = screen_text(app)
        assert "Step split (measured in the job): the probe has seen no step yet" in pane(app)
        assert "▓" not in first and "░" not in first
        app.feed(25)
        await pilot.pause()
        text = screen_text(app)
        assert re.search(r"Step split \(measured in the job\): 80\d ms a step", pane(app))
        assert "▓" * 15 in text and "░" * 20 in text  # sync, then the host's own time
        assert re.search(r"▓ sync 30\d ms 38 %", text) and "░ host" in text
        # the probe never measures GPU busy time (schema.py): the pane says it is NVML's
        assert "62 %, measured" not in text
        assert "GPU busy ≈" in pane(app) or "GPU busy: not measured" in pane(app), pane(app)
        assert "llm/train.py:88 .item" in text  # cut from the left to fit
        assert "Memory per process" in text
        lines = [line.split("│")[0] for line in text.splitlines()]
        k = next(k for k, line in enumerate(lines) if line.strip().startswith("41200    0"))
        # 100 columns leave the pane two rows a process: allocated, reserved, NVML; the rest
        assert lines[k].split()[2:] == ["42.1", "45.2", "45.7"]
        assert lines[k + 1].split() == ["2.4", "2.4", "14.5", "24.4"]
        assert "simulated" in text  # the simulator's note
        steps = _steps_in(pane(app))
        app.feed(8)
        await pilot.pause()
        assert _steps_in(pane(app)) > steps  # a later frame shows later figures


async def test_the_measured_split_in_ascii_and_under_sanitize(monkeypatch):
    s = starting_job(monkeypatch)
    app = WatchApp(JobWatch.for_pid(s, 41200), s, low_bandwidth=True, sanitize=True)
    async with app.run_test(size=(80, 40)) as pilot:
        app.feed(30)
        await pilot.pause()
        text = screen_text(app)
        assert "=" * 12 in text and re.search(r"= sync 30\d ms", text) and ". host" in text
        assert "▓" not in text and "░" not in text
        assert "alice" not in text and "/llm/" not in text  # the call sites are paths
        assert re.search(r"~user-\w+/path-\w+:88 \.item", text)
        assert "41200" not in pane(app)  # the pane hides pids under --sanitize


# -- `gputop-diag watch --probe -- CMD`, end to end ---------------------------------------------


def _watch(cli, tmp_path, *args, timeout=90):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {"XDG_RUNTIME_DIR": str(runtime), "PYTHONPATH": ""}
    return cli(
        "watch",
        "--probe",
        "--interval",
        "0.5",
        "--output",
        str(tmp_path / "job.log"),
        *args,
        env=env,
        timeout=timeout,
    )


@pytest.mark.xdist_group("torch")  # imports torch here: the worker that has it
def test_watch_probe_of_a_slow_loader_names_the_input_pipeline_measured(cli, tmp_path):
    pytest.importorskip("torch")
    r = _watch(
        cli, tmp_path, "--json", "--seconds", "15", "--", sys.executable, TRAIN,
        "--seconds", "3", "--slow-loader",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    split = doc["measured"]["step_split"]
    assert split["estimate"] is False and split["steps"] >= 20
    assert {"t_input", "t_sync", "t_host"} <= set(split["measured"])
    assert split["shares"]["t_input"] > 0.8  # the workers sleep in __getitem__
    (proc,) = doc["measured"]["processes"]
    assert proc["pid"] == doc["job"]["root_pids"][0] and proc["torch"]
    d = doc["diagnosis"]
    assert d["primary"] == "input_pipeline"
    assert d["evidence"][0]["metric"] == "measured_t_input_share"
    assert d["evidence"][0]["text"].startswith("measured in the job: waiting for the next batch")
    # the probe's file was ours, private, and is not left behind by a reader forever
    folder = tmp_path / "run" / "gputop-diag"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"


@pytest.mark.xdist_group("torch")  # imports torch here: the worker that has it
def test_watch_probe_with_a_sync_every_step_finds_the_call_site(cli, tmp_path):
    torch = pytest.importorskip("torch")
    r = _watch(
        cli, tmp_path, "--seconds", "15", "--", sys.executable, TRAIN,
        "--seconds", "1", "--sync-every", "1",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "step split (measured in the job, 1 process" in text
    site = re.search(r"syncs 1\.0 a step at: (\S+):(\d+) \.item \(100 %\)", text)
    assert site, text
    assert site.group(1).endswith("examples/train_tiny.py")
    line = Path(TRAIN).read_text().splitlines()[int(site.group(2)) - 1]
    assert ".item()" in line
    if torch.cuda.is_available():  # .item() waits for the GPU only where there is one
        assert "Bottleneck: SYNCHRONIZATION" in text
        assert "measured in the job: blocked in host-device syncs" in text


def test_watch_probe_needs_a_command(cli, tmp_path):
    r = cli("watch", "--probe", "--pid", str(os.getpid()), "--no-tui")
    assert r.returncode == 2
    assert "--probe starts a command with the probe" in r.stderr


def test_a_job_started_with_the_probe_some_other_way_is_read_by_pid(cli, tmp_path):
    pytest.importorskip("torch")
    import subprocess

    from gputop_diag.probe.launch import probe_environment

    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = probe_environment({**os.environ, "XDG_RUNTIME_DIR": str(runtime)})
    job = subprocess.Popen(
        [sys.executable, TRAIN, "--seconds", "20", "--slow-loader"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # the job has imported torch and stepped (slow on a loaded machine) before it is watched
        folder, deadline = runtime / "gputop-diag", time.monotonic() + 90

        def stepped() -> bool:
            files = [f for f in folder.glob("*") if f.is_file()] if folder.is_dir() else []
            return any('"kind":"step"' in f.read_text(errors="replace") for f in files)

        while time.monotonic() < deadline and not stepped():
            time.sleep(0.2)
        r = cli(
            "watch", "--pid", str(job.pid), "--seconds", "6", "--interval", "0.5", "--json",
            env={"XDG_RUNTIME_DIR": str(runtime)},
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["measured"]["step_split"]["shares"]["t_input"] > 0.8
        assert doc["diagnosis"]["primary"] == "input_pipeline"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(10)


@pytest.mark.skipif(os.getuid() != 0, reason="giving a directory to another user needs root")
def test_watch_probe_refuses_a_probe_directory_of_another_user(cli, tmp_path):
    runtime = tmp_path / "run"
    (runtime / "gputop-diag").mkdir(parents=True)
    os.chown(runtime / "gputop-diag", 65534, 65534)
    r = cli(
        "watch", "--probe", "--seconds", "2", "--output", str(tmp_path / "j.log"), "--", "true",
        env={"XDG_RUNTIME_DIR": str(runtime)},
    )  # fmt: skip
    assert r.returncode == 1
    assert "--probe: cannot prepare the probe's directory" in r.stderr
    assert "belongs to another user" in r.stderr
    assert not (tmp_path / "j.log").exists()  # nothing was started


def test_watch_summary_of_a_simulated_probed_job_text_json_and_sanitized(cli):
    args = ("--demo", "sync-measured", "watch", "--pid", "41200", "--seconds", "10")
    text = cli(*args).stdout
    assert re.search(
        r"step split \(measured in the job, 1 process, \d+ steps\): input 3\.\d ms \(0 %\) \+ "
        r"sync 3\d\d ms \(3\d %\) \+ comm 8\.\d ms \(1 %\) \+ "
        r"transfer 0\.\d+ ms \(0 %, sampled\) \+ host 4\d\d ms \(6\d %\) = 80\d ms$",
        text,
        re.M,
    ), text
    assert "GPU busy" not in text.split("step split")[1].splitlines()[0]  # not measured
    assert "syncs 3.0 a step at: /home/alice/llm/train.py:88 .item (62 %)" in text
    assert "memory (measured) pid 41200 rank 0: allocated 42.1 GiB, reserved 45.2 GiB" in text
    assert "Bottleneck: SYNCHRONIZATION" in text
    assert "step split (an estimate, from outside)" not in text
    doc = json.loads(cli(*args, "--json").stdout)
    m = doc["measured"]
    assert m["step_split"]["estimate"] is False and m["step_split"]["processes"] == [41200]
    assert m["memory"][0]["activations_bytes"] == pytest.approx(26.2e9, rel=0.01)
    assert m["processes"][0]["notes"] == [
        "simulated: written by the gputop-diag --demo simulator, no probe ran"
    ]
    hidden = cli(*args, "--sanitize").stdout
    assert "alice" not in hidden and "llm" not in hidden and "train.py" not in hidden
    assert re.search(r"syncs 3\.0 a step at: ~user-\w+/path-\w+:88 \.item", hidden)
