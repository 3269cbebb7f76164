"""The Job pane's text: state, steps headline and history, the split labelled an estimate, GPUs
visible vs used, GPU memory over time, the tree, the output with failure lines marked."""

from __future__ import annotations

from gputop_diag import sim
from gputop_diag.collect.job import JobWatch
from gputop_diag.model import (
    GpuProcess,
    GpuState,
    GpuStatic,
    JobProcess,
    JobState,
    OutputEvent,
    SchedulerEvidence,
    Snapshot,
    StepStats,
    SystemInfo,
    ThreadInfo,
)
from gputop_diag.monitor.core import Monitor
from gputop_diag.tui.panes.base import View
from gputop_diag.tui.panes.job import render, state_line

GIB = 2**30
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def _window(n=10):
    procs = (
        JobProcess(100, 1, 0, "python", None, 99.0, 4 * GIB, 12,
                   (ThreadInfo(101, "pt_main_thread", 97.0),), "0,1,2,3"),
        JobProcess(110, 100, 1, "pt_data_worker", None, 45.0, GIB, 3,
                   (ThreadInfo(110, "pt_data_worker", 44.0),)),
    )  # fmt: skip
    job = JobState(
        target="command",
        label="python train.py",
        root_pids=(100,),
        processes=procs,
        log_path="/tmp/run.log",
        output_tail=("step 9 loss 1.0", OOM),
        output_lines=40,
        output_events=(OutputEvent("cuda_oom", OOM, 40),),
        steps=StepStats("tqdm", 90, 100, (0.5,) * 18 + (0.8,) * 2),
        visible_gpus="0,1,2,3",
    )
    out = []
    for k in range(n):
        out.append(
            Snapshot(
                timestamp=1000.0 + k,
                system=SystemInfo("h"),
                gpus=(
                    GpuState(index=0, static=GpuStatic(0), util_gpu_pct=40.0),
                    GpuState(index=1, static=GpuStatic(1), util_gpu_pct=0.0),
                ),
                gpu_processes=(GpuProcess(100, 0, "compute", (10 + k) * GIB),),
                job=job,
            )
        )
    return out


def test_render_everything_the_pane_promises():
    w = _window()
    text = render(w[-1].job, w, "input_pipeline", View(), 100).plain
    assert "Job python train.py" in text and "running · pid 100" in text
    assert "output: /tmp/run.log (40 lines)" in text
    # the headline: steps/s beside the peak GPU memory, the history with median and p95
    assert "2 steps/s at a peak of 19.0 GiB GPU memory" in text
    assert "median 500 ms · p95 800 ms" in text and "(tqdm, step 90/100)" in text
    # the split, labelled, with the profiler command
    assert "Step split (estimate, from outside): t_input 300 ms + t_gpu 200 ms" in text
    assert "nsys profile" in text
    # visible vs used, memory per GPU over time with its trend
    assert "visible: 0,1,2,3 · used: 0" in text
    assert "GPU 0: job holds 19.0 GiB (peak 19.0 GiB) trend +61440 MiB/min" in text
    # the tree, threads, output with the OOM marked
    assert "pt_data_worker" in text and "GPU0 19.0 GiB" in text
    assert "busiest threads: pt_main_thread 97 %, pt_data_worker 44 %" in text
    assert "Output — CUDA out of memory" in text
    assert f"! {OOM}" in text and "  step 9 loss 1.0" in text


def test_render_under_sanitize_hides_names_paths_and_output():
    w = _window()
    text = render(w[-1].job, w, None, View(sanitize=True), 100).plain
    assert "train.py" not in text and "/tmp/run.log" not in text and OOM not in text
    assert "not shown under --sanitize" in text


def test_render_plain_glyphs_and_narrow():
    w = _window()
    text = render(w[-1].job, w, None, View(plain=True), 40).plain
    assert all(ord(c) < 128 or c in "·—…≈" for c in text)


def test_state_line_slurm_forms():
    pend = SchedulerEvidence("7", "PENDING", "Resources", 95.0)
    assert state_line(JobState("slurm", "x", slurm=pend)) == (
        "Slurm PENDING (reason Resources), in the queue for 1:35"
    )
    run = SchedulerEvidence("7", "RUNNING", None, 60.0, 7200.0, 6600.0, nodes="n1", restarts=2)
    line = state_line(JobState("slurm", "x", slurm=run))
    assert "on n1 for 1:50:00, 10:00 left of 2:00:00; waited 1:00 in the queue" in line
    assert "requeued 2 times (Restarts=2)" in line
    pre = SchedulerEvidence("7", "PREEMPTED")
    assert state_line(JobState("slurm", "x", slurm=pre)) == (
        "Slurm PREEMPTED; the scheduler took its resources back"
    )
    assert state_line(JobState("command", "x", exit_code=137, exit_signal="SIGKILL")) == (
        "killed by SIGKILL (exit code 137)"
    )


def test_render_from_the_monitor_under_the_simulator():
    s = sim.build("input-starved")
    m = Monitor(s, job=JobWatch.for_pid(s, 41200))
    m.run_for(15)
    w = m.history.snapshots()
    text = render(w[-1].job, w, m.diagnosis.primary, View(), 100).plain
    assert "Processes (4)" in text and "41328" in text and "pt_data_worker" in text
    assert "visible: 0,1,2,3,4,5,6,7 · used: 0" in text
    assert any(a.kind == "job_gpus_unused" for a in m.diagnosis.alerts)
