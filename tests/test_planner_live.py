"""The planner beside a running job: the capacity class's checks in training or inference words,
the plan of the job's model against what it holds (NVML, and the probe where one runs), the
config a job's command line names, the report's plan and the Memory pane's lines."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from test_tui_support import FedApp

from gputop_diag import sim
from gputop_diag.collect.model_config import ConfigFinder, read_config_file
from gputop_diag.diagnose.checks import checks_for
from gputop_diag.diagnose.features import Features, extract
from gputop_diag.model import (
    GpuProcess,
    GpuState,
    GpuStatic,
    ProbeMemory,
    ProbeState,
    ProcessInfo,
    Snapshot,
    SystemInfo,
)
from gputop_diag.monitor.core import Monitor
from gputop_diag.planner.live import job_plan, plan_lines
from gputop_diag.report.build import ReportSource, make_report
from gputop_diag.sources import Sources

CONFIGS = Path(__file__).parent / "data" / "configs"
LLAMA = CONFIGS / "llama-3-8b.json"
GIB = 2**30


@pytest.fixture(scope="module")
def capacity_window():
    """The capacity scenario: 8 ranks of `python train.py --batch-size 6` fill 8 H100s."""
    sources = sim.build("capacity")
    m = Monitor(sources)
    m.run_for(20)
    return list(m.history.snapshots()), m.last.diagnosis, sources


def one_process(cmdline: tuple[str, ...], used: int = 70 * GIB) -> Snapshot:
    gpu = GpuState(
        index=0,
        static=GpuStatic(0, name="NVIDIA H100 80GB HBM3"),
        mem_total_bytes=80 * GIB,
        mem_reserved_bytes=GIB // 2,
        mem_used_bytes=used + GIB // 2,
    )
    return Snapshot(
        timestamp=0.0,
        system=SystemInfo("h"),
        gpus=(gpu,),
        gpu_processes=(GpuProcess(pid=7, gpu_index=0, kind="compute", used_memory_bytes=used),),
        processes=(ProcessInfo(pid=7, cmdline=cmdline),),
    )


# -- the capacity class's checks ------------------------------------------------------------


def test_the_capacity_scenario_s_checks_come_from_the_planner_in_training_words(
    capacity_window,
):
    snaps, diagnosis, _ = capacity_window
    assert diagnosis.primary == "capacity"
    f = extract(snaps)
    checks = checks_for("capacity", f, diagnosis.scope_job, snaps[-1])
    first = checks[0]
    assert first.startswith("Where does the memory go? Training keeps 16 bytes per parameter")
    assert "on this GPU's 79.6 GiB that is at most 5.3 B parameters" in first
    assert "batch 6: --batch-size" in first  # what the command line said, and where
    assert "batch 6 → 3 halves them" in checks[1]
    assert "--mode train --batch 6 --gpu 'NVIDIA H100 80GB HBM3'" in checks[2]
    text = "\n".join(checks)
    assert "inference" not in text.lower() and "KV cache" not in text
    assert "2 GiB per sequence" not in text  # the old fixed example is gone


def test_an_inference_server_gets_the_kv_cache_words():
    snap = one_process(("vllm", "serve", "--max-model-len", "8192", "--kv-cache-dtype", "fp8"))
    f = Features(top_pid=7, mem_used_pct_gpu=0)
    checks = checks_for("capacity", f, None, snap)
    assert checks[0].startswith("Inference holds the weights")
    # the fp8 cache the command line asks for
    assert "2·L·H·T·d_head·b·1 bytes (L layers, H KV heads" in checks[0]
    assert "--mode infer --seq 8192" in checks[2]
    assert "Training" not in "\n".join(checks)


def test_without_the_job_s_command_line_both_are_said():
    checks = checks_for("capacity", Features())
    assert checks[0].startswith("If this is training:")
    assert checks[1].startswith("If it serves or generates:")


def test_with_a_plan_the_checks_are_its_figures_and_levers(capacity_window):
    snaps, _, _ = capacity_window
    read = read_config_file(str(LLAMA)).read
    jp = job_plan(snaps[-1], read)
    checks = checks_for("capacity", extract(snaps), None, snaps[-1], plan=jp.doc)
    assert checks[0].startswith("Where the memory goes (training, llama 8.03 B parameters")
    assert "What would make it fit: all of the above" in checks[1] and ": fits" in checks[1]


# -- the plan beside the job ----------------------------------------------------------------


def test_the_plan_beside_what_the_job_holds(capacity_window):
    snaps, _, _ = capacity_window
    snap = snaps[-1]
    read = read_config_file(str(LLAMA)).read
    jp = job_plan(snap, read, gpu_index=0)
    nvml = jp.rows[0]
    held = max(p.used_memory_bytes for p in snap.gpu_processes if p.gpu_index == 0)
    assert (nvml.label, nvml.measured) == ("process (NVML)", held)
    assert nvml.predicted == jp.doc["total_bytes"] and nvml.difference == held - nvml.predicted
    w = jp.doc["workload"]
    assert (w["mode"], w["batch"], w["world"]) == ("train", 6, 8)  # 8 ranks, one command line
    assert "AdamW" in jp.assumed and "2048 tokens per sequence" in jp.assumed
    lines = plan_lines(jp, 100)
    assert lines[0].startswith("plan  llama 8.03 B, training bf16 AdamW, batch 6 × 2048")
    assert lines[1].startswith(f"job   pid {jp.measured.pid} on GPU 0 holds")
    assert all(len(x) <= 100 for x in lines)


def test_the_probe_s_figures_beside_the_plan():
    snap = one_process(("python", "train.py", "--bf16"))
    read = read_config_file(str(LLAMA)).read
    probe = ProbeState(
        pid=7,
        start_ticks=1,
        memory=ProbeMemory(allocated_bytes=60 * GIB, reserved_bytes=66 * GIB, peak_bytes=64 * GIB),
        params_bytes=read_params(read) * 4,  # HF Trainer's --bf16 autocasts fp32 weights
        grads_bytes=read_params(read) * 4,
        optimizer_bytes=read_params(read) * 8,
    )
    jp = job_plan(replace(snap, probes=(probe,)), read)
    rows = {r.label: r for r in jp.rows}
    assert set(rows) == {"process (NVML)", "allocator peak", "weights", "gradients",
                         "optimizer state"}  # fmt: skip
    assert jp.doc["workload"]["precision"] == "amp"  # --bf16: autocast over fp32 weights
    for label in ("weights", "gradients", "optimizer state"):
        assert rows[label].difference == 0, label
    assert rows["allocator peak"].measured == 64 * GIB
    assert "probe " in "\n".join(plan_lines(jp, 200))


def read_params(read) -> int:
    from gputop_diag.planner.shape import parameter_count

    return parameter_count(read.shape)


# -- finding a job's config -----------------------------------------------------------------


@pytest.fixture
def sleeper(tmp_path):
    procs = []

    def start(*args: str, cwd: Path = tmp_path) -> int:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", *args], cwd=cwd)
        procs.append(p)
        return p.pid

    yield start
    for p in procs:
        p.kill()
        p.wait()


def test_a_model_directory_on_the_job_s_command_line(tmp_path, sleeper):
    (tmp_path / "llama3").mkdir()
    (tmp_path / "llama3" / "config.json").write_text(LLAMA.read_text())
    argv = ("python", "train.py", "--model_name_or_path", "./llama3")
    pid = sleeper(*argv[2:])
    found = ConfigFinder(Sources.real()).find(pid, argv)
    assert found is not None and found.found_in == "./llama3"
    assert found.path == str(tmp_path / "llama3" / "config.json")
    assert found.read.shape.family == "llama"


def test_a_hub_id_already_in_the_local_cache(tmp_path, sleeper):
    repo = tmp_path / "hub" / "models--meta-llama--Meta-Llama-3-8B"
    commit = "a" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text(LLAMA.read_text())
    sources = replace(Sources.real(), environ={"HF_HUB_CACHE": str(tmp_path / "hub")})
    argv = ("vllm", "serve", "--model", "meta-llama/Meta-Llama-3-8B")
    pid = sleeper(*argv[2:])
    found = ConfigFinder(sources).find(pid, argv)
    assert found is not None and found.path.endswith(f"{commit}/config.json")
    # not in the cache: nothing (never a download)
    assert ConfigFinder(sources).find(pid, ("vllm", "serve", "--model", "org/other")) is None


def test_a_training_config_that_is_not_a_model_s_is_passed_over(tmp_path, sleeper):
    (tmp_path / "ds_config.json").write_text('{"zero_optimization": {"stage": 2}}')
    argv = ("python", "train.py", "--config", "ds_config.json")
    pid = sleeper(*argv[2:])
    assert ConfigFinder(Sources.real()).find(pid, argv) is None


# -- the report and the live view -----------------------------------------------------------


def test_the_report_carries_the_plan_and_no_path(capacity_window):
    snaps, diagnosis, sources = capacity_window
    config = read_config_file(str(LLAMA))
    r = make_report(
        snaps,
        diagnosis,
        source=ReportSource("simulator", "capacity"),
        environ=sources.environ,
        sources=sources,
        model_config=config,
    )
    assert r.left_out == []
    plan = r.doc["memory"]["plan"]
    assert plan["available"] and plan["model"]["parameters"] == 8030261248
    assert plan["compared"][0]["figure"] == "process (NVML)"
    assert "**Memory plan**" in r.markdown and "| process (NVML) |" in r.markdown
    assert str(CONFIGS) not in r.markdown and "llama-3-8b.json" not in r.markdown
    plain = make_report(
        snaps, diagnosis, source=ReportSource("simulator", "capacity"), sources=sources
    )
    assert "plan" not in plain.doc["memory"]  # no config given, none named by the job


async def test_the_memory_pane_shows_the_plan_beside_the_job():
    app = FedApp("capacity", model_config=read_config_file(str(LLAMA)))
    async with app.run_test(size=(160, 40)) as pilot:
        app.feed(5)
        await pilot.pause()
        box = app.query_one("#mem-plan")
        assert box.display
        text = box.plain
        assert "plan  llama 8.03 B, training bf16 AdamW, batch 6" in text
        assert "on GPU 0 holds" in text and "than planned" in text
        assert "assumed: " in text
        legend = app.query_one("#mem-legend")
        assert "drv-rsv" in legend.plain and "torch.cuda.memory_reserved" in str(legend.tooltip)


async def test_no_plan_without_a_config():
    app = FedApp("capacity")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await pilot.pause()
        assert not app.query_one("#mem-plan").display


def test_an_unreadable_model_config_is_a_usage_error(capsys, tmp_path):
    from gputop_diag.tui.app import run_app

    rc = run_app(None, model_config=str(tmp_path / "missing.json"))
    assert rc == 2 and "no such file" in capsys.readouterr().err
    assert os.path.exists(tmp_path)


def test_the_live_plan_checks_the_dtype_against_nvml_s_compute_capability(capacity_window):
    """The compute capability NVML reports (nvmlDeviceGetCudaComputeCapability, read once by
    the collector) reaches the plan: a bf16 job on a V100 gets the warning, on an H100 none."""
    read = read_config_file(str(LLAMA)).read
    snap = one_process(("python", "train.py", "--bf16"))
    g = snap.gpus[0]
    v100 = replace(
        g, static=replace(g.static, name="Tesla V100-SXM2-32GB", compute_capability=(7, 0))
    )
    jp = job_plan(replace(snap, gpus=(v100,)), read)
    assert jp.doc["gpu"]["compute_capability"] == (7, 0)
    (check,) = jp.doc["precision_checks"]
    assert check["subject"] == "bf16 compute" and "fp16 with a loss scaler" in check["instead"]
    snaps, _, _ = capacity_window
    jp = job_plan(snaps[-1], read)
    assert jp.doc["gpu"]["compute_capability"] == (9, 0) and jp.doc["precision_checks"] == []
