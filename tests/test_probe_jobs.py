"""The probe inside real training jobs: examples/train_tiny.py run as a subprocess on the CPU,
under `python -m gputop_diag.probe`, under `probe_environment` (what `watch --probe` does) and
under torchrun, with XDG_RUNTIME_DIR in a temporary directory. The records read back are the
file format of gputop_diag/probe/schema.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputop_diag.probe.launch import probe_environment
from gputop_diag.probe.schema import SCHEMA, parse_file_name, probe_dir

REPO = Path(__file__).resolve().parent.parent
TRAIN = "examples/train_tiny.py"
# AdamW on the MLP of train_tiny.py (16 -> 64 -> 64 -> 1, float32): weights and biases
PARAMS = (16 * 64 + 64) + (64 * 64 + 64) + (64 + 1)


def _line_of(text: str, path: str = TRAIN) -> int:
    for number, line in enumerate((REPO / path).read_text().splitlines(), 1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")


def _env(runtime: Path) -> dict[str, str]:
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    return env


def _run(argv: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _files(runtime: Path) -> dict[int, list[dict]]:
    """pid -> records of each probe file written under this runtime directory."""
    directory = Path(probe_dir({"XDG_RUNTIME_DIR": str(runtime)}))
    out = {}
    for path in sorted(directory.glob("probe-*.jsonl")):
        pid, _ = parse_file_name(path.name)
        out[pid] = [json.loads(line) for line in path.read_text().splitlines()]
    return out


def _kind(records: list[dict], kind: str) -> list[dict]:
    return [r for r in records if r["kind"] == kind]


def test_an_input_bound_job_spends_most_of_each_step_waiting_for_its_loader(tmp_path):
    argv = [sys.executable, "-m", "gputop_diag.probe", TRAIN, "--steps", "10"]
    argv += ["--workers", "2", "--slow-loader", "0.005", "--batch-size", "16", "--sync-every", "0"]
    result = _run(argv, _env(tmp_path))
    assert result.returncode == 0, result.stderr
    (records,) = _files(tmp_path).values()
    steps = _kind(records, "step")[1:]  # the first one holds the workers' start-up
    assert len(steps) >= 8
    assert all("t_input" in s["measured"] for s in steps)
    share = sum(s["t_input_s"] for s in steps) / sum(s["wall_s"] for s in steps)
    # 2 workers sleeping 16 x 5 ms per batch (a batch every 40 ms) against a step of about a
    # millisecond, a few under a loaded machine's contention (16 x 2 ms read 0.598 there)
    assert share > 0.6, steps
    assert records[-1]["kind"] == "bye"


def test_a_loop_that_reads_the_loss_every_step_syncs_once_a_step_at_that_line(tmp_path):
    argv = [sys.executable, "-m", "gputop_diag.probe", TRAIN, "--steps", "8", "--sync-every", "1"]
    result = _run(argv, _env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("step 8 loss ")
    (records,) = _files(tmp_path).values()
    hello = records[0]
    assert hello["kind"] == "hello" and hello["schema"] == SCHEMA
    assert hello["cuda"] is False and hello["torch"] is not None
    assert hello["argv"][0] == TRAIN and hello["measures"]["t_sync"] is True
    steps = _kind(records, "step")
    # the .item() after step n's optimizer step is in step n+1's record; AdamW's own reads of
    # its CPU step counters are not syncs
    assert [s["sync_count"] for s in steps] == [0] + [1] * 7
    assert all(s["t_gpu_s"] is None and s["mem"] is None for s in steps)
    (sites,) = _kind(records, "sync_sites")[-1:]
    line = _line_of("value = loss.item()")
    assert sites["sites"] == [
        {"site": f"{TRAIN}:{line}", "call": ".item", "count": 8, "seconds": pytest.approx(0, abs=1)}
    ]


def test_a_plain_loop_under_watch_probe_writes_one_file_with_exact_model_bytes(tmp_path):
    """probe_environment, as `watch --probe` uses it; the spawned DataLoader worker starts the
    probe too (from the boot sitecustomize), and writes nothing."""
    env = probe_environment(_env(tmp_path))
    argv = [sys.executable, TRAIN, "--steps", "6", "--workers", "1", "--sync-every", "0"]
    argv += ["--worker-start", "spawn"]
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0
    assert re.fullmatch(r"step 6 loss \S+\n", out)
    files = _files(tmp_path)
    assert list(files) == [process.pid]
    records = files[process.pid]
    steps = _kind(records, "step")
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
    assert all(s["sync_count"] == 0 and s["t_sync_s"] == 0 for s in steps)
    for s in steps:
        parts = s["t_input_s"] + s["t_sync_s"] + s["t_comm_exposed_s"] + s["t_host_s"]
        assert parts == pytest.approx(s["wall_s"], abs=1e-5)
    (model,) = _kind(records, "model")
    assert model["params_bytes"] == 4 * PARAMS
    assert model["grads_bytes"] == 4 * PARAMS
    # exp_avg and exp_avg_sq per parameter, and a float32 step counter for each of the 6 tensors
    assert model["optimizer_bytes"] == 2 * 4 * PARAMS + 6 * 4
    assert model["kv_cache_bytes"] is None
    assert [r["kind"] for r in records[-2:]] == ["sync_sites", "bye"]


def test_forked_dataloader_workers_write_no_file_even_when_they_measure(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "import torch\n"
        "import gputop_diag.probe as probe\n"
        "from torch.utils.data import DataLoader, Dataset\n"
        "class Data(Dataset):\n"
        "    def __len__(self):\n"
        "        return 8\n"
        "    def __getitem__(self, i):\n"
        "        torch.tensor(float(i)).item()  # a sync, measured in the worker\n"
        "        probe.step()  # and a step: still no file of its own\n"
        "        return torch.tensor([float(i)])\n"
        "loader = DataLoader(Data(), batch_size=2, num_workers=2, multiprocessing_context='fork')\n"
        "for batch in loader:\n"
        "    probe.step()\n"
        "print('ok')\n"
    )
    runtime = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "gputop_diag.probe", str(script)],
        cwd=tmp_path,
        env=_env(runtime),
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0 and out == "ok\n"
    files = _files(runtime)
    assert list(files) == [process.pid]
    assert len(_kind(files[process.pid], "step")) == 4


def test_an_unwritable_probe_directory_leaves_the_job_and_its_output_alone(tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    (runtime / "gputop-diag").write_text("a file where the probe's directory should be\n")
    args = [TRAIN, "--steps", "3", "--sync-every", "1"]
    jobs = [  # side by side: the same job, probed and not
        subprocess.Popen(
            argv, cwd=REPO, env=_env(runtime), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for argv in ([sys.executable, *args], [sys.executable, "-m", "gputop_diag.probe", *args])
    ]
    (plain_out, plain_err), (probed_out, probed_err) = (j.communicate(timeout=120) for j in jobs)
    assert [j.returncode for j in jobs] == [0, 0]
    assert probed_out == plain_out and len(plain_out.splitlines()) == 3
    assert probed_err == plain_err == b""
    assert (runtime / "gputop-diag").read_text().startswith("a file")


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not installed")
def test_two_ranks_under_torchrun_each_measure_their_all_reduce(tmp_path):
    env = probe_environment(_env(tmp_path))
    torchrun = shutil.which("torchrun")
    argv = [torchrun, "--standalone", "--nproc-per-node", "2", TRAIN, "--steps", "6"]
    result = _run(argv + ["--sync-every", "3"], env, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.findall(r"^step (\d+) loss", result.stdout, re.M) == ["3", "6"]
    files = _files(tmp_path)  # the two ranks; torchrun's own Python never steps
    assert len(files) == 2
    hellos = sorted((records[0]["rank"], records[0]["world"]) for records in files.values())
    assert hellos == [(0, 2), (1, 2)]
    for records in files.values():
        assert records[0]["measures"]["t_comm"] is True
        steps = _kind(records, "step")
        assert len(steps) == 6
        assert all("t_comm" in s["measured"] and s["t_comm_s"] > 0 for s in steps[1:])
        assert all(s["t_comm_exposed_s"] == s["t_comm_s"] for s in steps)  # no async_op
        assert records[-1]["kind"] == "bye"
