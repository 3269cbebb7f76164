"""The Job pane's figures as data (`diagnose.job_view`): which lines are failures, what the job
holds on each GPU, the busiest threads, the split measured inside the job or estimated."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gputop_diag import sim
from gputop_diag.collect.job import JobWatch
from gputop_diag.collect.probe import sample_of
from gputop_diag.diagnose.job_view import job_view
from gputop_diag.model import (
    GpuProcess,
    GpuState,
    GpuStatic,
    JobProcess,
    JobState,
    OutputEvent,
    ProbeState,
    ProbeSteps,
    Snapshot,
    StepStats,
    SystemInfo,
    ThreadInfo,
)
from gputop_diag.monitor.core import Monitor

GIB = 2**30
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def _window(n: int = 10) -> list[Snapshot]:
    procs = (
        JobProcess(100, 1, 0, "python", None, 99.0, 4 * GIB, 12,
                   (ThreadInfo(101, "pt_main_thread", 97.0), ThreadInfo(102, "idle", 0.5))),
        JobProcess(110, 100, 1, "pt_data_worker", None, 45.0, GIB, 3,
                   (ThreadInfo(110, "pt_data_worker", 44.0),)),
    )  # fmt: skip
    job = JobState(
        target="command",
        label="python train.py",
        root_pids=(100,),
        processes=procs,
        log_path="/tmp/run.log",
        output_tail=("step 9 loss 1.0", OOM, "step 10 loss 0.9"),
        output_events=(
            OutputEvent("nccl_timeout", "NCCL watchdog thread terminated with exception", 3),
            OutputEvent("cuda_oom", OOM, 40),
        ),
        steps=StepStats("tqdm", 90, 100, (0.5,) * 18 + (0.8,) * 2),
    )
    gpus = (
        GpuState(index=0, static=GpuStatic(0), util_gpu_pct=40.0),
        GpuState(index=1, static=GpuStatic(1), util_gpu_pct=0.0),
    )
    return [
        Snapshot(
            timestamp=1000.0 + k,
            system=SystemInfo("h"),
            gpus=gpus,
            gpu_processes=(GpuProcess(100, 0, "compute", (10 + k) * GIB),),
            job=job,
        )
        for k in range(n)
    ]


def test_output_lines_are_marked_and_failures_above_them_kept():
    w = _window()
    v = job_view(w[-1].job, w, None, output_lines=2)
    assert [(line.text, line.failure) for line in v.output_lines] == [
        (OOM, True),
        ("step 10 loss 0.9", False),
    ]
    # the OOM line is on screen; the NCCL line above the last two is kept as an older failure
    assert [e.kind for e in v.older_failures] == ["nccl_timeout"]
    assert v.output_labels == ("CUDA out of memory", "NCCL timeout")


def test_gpu_memory_threads_and_the_estimated_split():
    w = _window()
    v = job_view(w[-1].job, w, "input_pipeline")
    assert v.used_gpus == (0,)
    assert v.held_by(100) == ((0, 19 * GIB),) and v.held_by(110) == ()
    assert [m.peak_bytes for m in v.gpu_memory] == [19 * GIB]
    # busiest first; a thread under 1 % is not named
    assert [(b.name, b.cpu_pct) for b in v.busiest_threads] == [
        ("pt_main_thread", 97.0),
        ("pt_data_worker", 44.0),
    ]
    assert v.has_output_steps and v.measured is None and v.measured_steps_per_s is None
    assert v.estimate is not None and v.estimate.wait_part == "t_input"
    assert abs(v.estimate.gpu_busy_share - 0.4) < 1e-9


def test_no_step_time_without_steps_in_the_output():
    w = _window()
    job = replace(w[-1].job, steps=None)
    v = job_view(job, w, None)
    assert not v.has_output_steps and v.estimate is None


def test_the_split_measured_inside_the_job_under_the_simulator():
    s = sim.build("sync-measured")
    m = Monitor(s, job=JobWatch.for_pid(s, 41200))
    m.run_for(40)
    w = m.history.snapshots()
    v = job_view(w[-1].job, w, m.diagnosis.primary)
    mv = v.measured
    assert mv is not None and mv.split is not None and mv.stale_s is None
    assert v.measured_steps_per_s is not None and v.measured_last_step is not None
    parts = {p.part: p for p in mv.parts}
    assert {"t_sync", "t_host"} <= set(parts) and parts["t_sync"].share > 0.3
    assert mv.sync_sites and abs(sum(s.share for s in mv.sync_sites) - 1.0) < 1e-9
    assert mv.memory and all(r.reserved_bytes is not None for r in mv.memory)
    # a tick long after the last step: the split stands, said to be stale
    later = replace(w[-1], timestamp=w[-1].timestamp + 1000)
    assert job_view(w[-1].job, w, None, shown=later).measured.stale_s > 900


def _probed(window: list[Snapshot], sample: dict | None, **kw) -> list[Snapshot]:
    """`window` with a probe in the job's main process (pid 100), its newest sampled step
    `sample` read by the real reader (None: none sampled yet)."""
    out = []
    for s in window:
        steps = ProbeSteps(50, 60, s.timestamp, 0.02, 0.001, 0.0, t_host_s=0.019)
        steps = replace(steps, measured=("t_input", "t_sync"))
        taken = sample_of({**sample, "t": s.timestamp}, s.timestamp) if sample else None
        probe = ProbeState(pid=100, start_ticks=1, cuda=True, steps=steps, sample=taken, **kw)
        out.append(replace(s, probes=(probe,)))
    return out


SAMPLE = {
    "kind": "sample",
    "step": 7,
    "wall_s": 0.5,
    "flops": 400_000_000_000,
    "matmul_flops": 3_000_000_000,
    "misaligned_flops": 1_500_000_000,
    "dtype_flops": {"float16": 3_000_000_000},
    "shapes": [
        {
            "op": "addmm",
            "dtype": "float16",
            "dims": {"M": 256, "N": 1001, "K": 64},
            "count": 2,
            "flops": 1_500_000_000,
            "misaligned": ["N"],
            "site": "train.py:50",
        }
    ],
    "transfers": {
        "h2d": {"count": 2, "bytes": 8 * 2**20, "seconds": 0.004, "non_blocking": 2},
    },
    "batch": {"samples": 8, "tokens": 256, "from": "the batch's input_ids"},
    "loss": 2.5,
    "backward": True,
    "grad_scaler": False,
    "autocast": {"cuda": "float16"},
    "matmul_precision": "highest",
    "allow_tf32": False,
    "capability": [8, 0],
    "device_name": "NVIDIA A100-SXM4-80GB",
}


def test_the_sampled_step_s_work_precision_shapes_and_transfers_reach_the_job_pane():
    w = _window()
    plain = job_view(w[-1].job, _probed(w, None), None).measured
    assert plain is not None and plain.work_lines == ()  # a probe, but no step sampled yet
    w = _probed(w, SAMPLE)
    lines = job_view(w[-1].job, w, None).measured.work_lines
    text = "\n".join(lines)
    assert lines[0].startswith("work (measured in the job, sampled step 7): 8 samples a step")
    assert "400 samples/s" in lines[0] and "12.8 k tokens/s" in lines[0]
    assert "MFU 6 % of 312 TFLOP/s" in lines[0] and "loss 2.5" in lines[0]
    assert "matmuls in float16 (100 % of their FLOPs)" in text
    assert "fp16 training without a gradient scaler" in text
    assert "50 % of the matmul FLOPs in shapes" in text and "N 1001" in text
    assert "host to device 2 copies of 8 MiB" in text and "pageable" in text
    assert "kernel images" not in text


def test_the_job_pane_says_a_build_without_kernels_for_the_gpu_before_any_step():
    w = _window()
    built = ("sm_50", "sm_60", "sm_70")
    lines = job_view(w[-1].job, _probed(w, SAMPLE, arch_list=built), None).measured.work_lines
    (said,) = [line for line in lines if line.startswith("kernel images: ")]
    assert "no kernel image is available for this device" in said and "8.0" in said
    fits = job_view(w[-1].job, _probed(w, SAMPLE, arch_list=(*built, "sm_80")), None)
    assert not any(line.startswith("kernel images") for line in fits.measured.work_lines)


def test_the_job_pane_s_split_holds_the_sampled_transfer_taken_out_of_the_host_s_time():
    """The split `watch` prints ("transfer 4.0 ms (sampled)") is the split the pane stacks."""
    from rich.text import Text

    from gputop_diag.tui.panes.base import View
    from gputop_diag.tui.panes.job import _split_bar

    w = _probed(_window(), SAMPLE)
    mv = job_view(w[-1].job, w, None).measured
    parts = {p.part: p for p in mv.parts}
    assert [p.part for p in mv.parts] == ["t_input", "t_sync", "t_transfer", "t_host"]
    assert parts["t_transfer"].seconds == pytest.approx(0.004)
    assert parts["t_transfer"].word == "transfer (sampled)"
    assert parts["t_host"].seconds == pytest.approx(0.019 - 0.004)
    assert sum(p.seconds for p in mv.parts) == pytest.approx(mv.split.step_s, rel=1e-6)
    t = Text()
    _split_bar(t, mv, View(), 100)
    assert "transfer (sampled) 4.0 ms" in t.plain and "▚" in t.plain
