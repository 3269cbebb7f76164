"""Step times from job output, failure lines, the step-time split estimate, the job's alerts."""

from __future__ import annotations

import pytest

from gputop_diag.diagnose.alerts import job_alerts
from gputop_diag.diagnose.step_split import PROFILER_COMMANDS, estimate
from gputop_diag.job.output import EVIDENCE_OF, classify_line
from gputop_diag.job.steps import (
    StepParser,
    StepRegexError,
    compile_step_regex,
    percentile,
    step_median,
    step_p95,
    steps_per_s,
)
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
)


def parse(lines, t0=0.0, dt=1.0, regex=None):
    p = StepParser(compile_step_regex(regex) if regex else None)
    for k, batch in enumerate(lines):
        t = t0 + k * dt
        for line in batch if isinstance(batch, list) else [batch]:
            p.feed(line, t)
        p.end_read(t)
    return p.stats()


def test_tqdm_it_per_s_and_s_per_it():
    fast = [f" {i}%|###   | {i}/100 [00:12<00:22, 28.91it/s]" for i in range(1, 11)]
    s = parse([fast])
    assert s.source == "tqdm" and s.step == 10 and s.total == 100
    assert steps_per_s(s) == pytest.approx(28.91)
    slow = [f"{i}/50 [01:10<02:00,  2.50s/it]" for i in range(1, 8)]
    s = parse([slow])
    assert step_median(s) == pytest.approx(2.5)  # tqdm prints s/it below one step a second


def test_tqdm_without_total_and_warmup_dropped():
    lines = ["1it [00:01, 0.5it/s]", "2it [00:02, 1.0it/s]"] + [
        f"{k}it [00:0{k}, 4.00it/s]" for k in range(3, 9)
    ]
    s = parse([lines])
    assert s.total is None and s.step == 8
    assert set(s.step_times_s) == {0.25}  # the first two (compile, warm-up) are left out


def test_a_bar_redrawn_without_progress_counts_once():
    s = parse([[f"{k}/10 [00:01<00:02, 5.00it/s]" for k in (1, 2, 3, 3, 3, 3, 4)]])
    assert len(s.step_times_s) == 2  # steps 3 and 4 after the warm-up of 1 and 2


def test_lightning_bar():
    line = "Epoch 3:  35%|███▌      | 350/1000 [00:12<00:22, 28.9it/s, v_num=0, loss=0.12]"
    s = parse([[line.replace("350/", f"{n}/") for n in (350, 351, 352, 353)]])
    assert s.source == "lightning" and s.total == 1000
    assert steps_per_s(s) == pytest.approx(28.9)


def test_hf_trainer_log_and_speed():
    s = parse(
        [
            "{'loss': 1.234, 'grad_norm': 3.1, 'learning_rate': 5e-05, 'epoch': 0.5}",
            "{'train_runtime': 12.3, 'train_samples_per_second': 32.5, "
            "'train_steps_per_second': 4.0, 'train_loss': 1.1, 'epoch': 1.0}",
        ]
    )
    assert s.source == "hf-trainer" and step_median(s) == pytest.approx(0.25)


def test_megatron_iteration_ms():
    lines = [
        f" iteration      {k}/    1000 | consumed samples: {k * 8} | elapsed time per iteration "
        "(ms): 430.0 | learning rate: 1.0E-04 |"
        for k in range(1, 6)
    ]
    s = parse([lines])
    assert s.source == "iteration-ms" and s.step == 5 and s.total == 1000
    assert step_median(s) == pytest.approx(0.43)


def test_plain_step_loss_differenced_against_read_times():
    # 5 steps between reads one second apart: 0.2 s a step
    s = parse([f"step {5 * k} | loss {2.0 - k / 10:.2f}" for k in range(10)])
    assert s.source == "step-loss" and s.step == 45
    assert step_median(s) == pytest.approx(0.2)


def test_plain_step_loss_with_its_own_time():
    s = parse([[f"Step: {k}, loss=1.0, time: 310ms" for k in range(1, 6)]])
    assert step_median(s) == pytest.approx(0.31)


def test_counter_going_back_starts_again():
    s = parse([f"step {k} loss 1" for k in (10, 20, 30, 1, 11, 21)], dt=2.0)
    assert s.step == 21 and set(s.step_times_s) == {0.2}


def test_step_regex_forms():
    s = parse([[f"[it {k}] took 250ms" for k in range(1, 6)]], regex=r"took (?P<ms>\d+)ms")
    assert s.source == "regex" and step_median(s) == pytest.approx(0.25)
    s = parse([f"done batch {10 * k}" for k in range(6)], regex=r"done batch (\d+)")
    assert s.step == 50 and step_median(s) == pytest.approx(0.1)
    with pytest.raises(StepRegexError, match="needs a group"):
        compile_step_regex("loss")
    with pytest.raises(StepRegexError, match="not a regular expression"):
        compile_step_regex("(")


def test_other_lines_tell_nothing():
    p = StepParser()
    for line in ("loading checkpoint", "Epoch 1 done", "steps: none", "", "lossy 3"):
        assert not p.feed(line, 0.0)
    assert p.stats() is None


def test_percentiles():
    assert percentile([], 95) is None
    assert percentile(range(1, 101), 95) == 95
    s = StepStats("tqdm", 1, None, (0.1,) * 19 + (1.0,))
    assert step_median(s) == pytest.approx(0.1) and step_p95(s) == pytest.approx(0.1)
    assert step_p95(StepStats("tqdm", 1, None, (0.1,) * 18 + (1.0, 1.0))) == 1.0


# -- failure lines -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_oom"),
        ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", "cuda_oom"),
        ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate", "cuda_oom"),
        (
            "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
            "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600042 milliseconds before timing out.",
            "nccl_timeout",
        ),
        ("Some NCCL operations have failed or timed out. Due to the async", "nccl_timeout"),
        ("DistBackendError: NCCL error in: ../nccl.cpp:1, unhandled system error", "nccl_error"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
        ("RuntimeError: CUDA error: device-side assert triggered", "cuda_error"),
        ("step 10 loss 2.3", None),
        ("NCCL_TIMEOUT=1800 set", None),
        ("memory: 12 GiB free", None),
    ],
)  # fmt: skip
def test_failure_lines(line, kind):
    assert classify_line(line) == kind


def test_what_failure_lines_are_evidence_of():
    assert EVIDENCE_OF["cuda_oom"] == "capacity"
    assert EVIDENCE_OF["nccl_timeout"] == "communication"


# -- the split and the alerts ------------------------------------------------------------------
def _gpu(i, util, samples=()):
    return GpuState(index=i, static=GpuStatic(index=i), util_gpu_pct=util, util_samples=samples)


def _snap(t, gpus, job=None, procs=()):
    return Snapshot(timestamp=t, system=SystemInfo("h"), gpus=gpus, gpu_processes=procs, job=job)


def test_split_estimate_from_busy_share_and_the_class():
    steps = StepStats("tqdm", 100, None, (0.5,) * 10)
    window = [_snap(k, (_gpu(0, 40.0, (40.0, 40.0)), _gpu(1, 100.0))) for k in range(5)]
    sp = estimate(steps, window, [0], "input_pipeline")
    assert sp.estimate and sp.step_s == pytest.approx(0.5)
    parts = dict(sp.parts)
    assert parts["t_gpu"] == pytest.approx(0.2) and parts["t_input"] == pytest.approx(0.3)
    assert parts["t_sync"] is None and "input" in sp.basis
    sp = estimate(steps, window, [0], "balanced")
    assert sp.wait_part is None and dict(sp.parts)["t_input"] is None
    assert sp.wait_s == pytest.approx(0.3)
    assert estimate(None, window, [0], "input_pipeline") is None
    assert estimate(steps, window, [], "input_pipeline") is None
    assert any("nsys profile" in c for c in PROFILER_COMMANDS)


def _job(**kw):
    base = dict(target="slurm", label="Slurm job 7", processes=(JobProcess(10), JobProcess(11)))
    base.update(kw)
    return JobState(**base)


def test_job_alerts_from_output_exit_and_gpus():
    ev = (
        OutputEvent("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory", 4),
        OutputEvent("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory", 9),
        OutputEvent("nccl_timeout", "Watchdog caught collective operation timeout", 12),
    )
    running = SchedulerEvidence("7", "RUNNING", nodes="gpu01", gpus_requested=8)
    procs = (GpuProcess(10, 0, "compute", 2**30),)
    a = job_alerts(_snap(0, (), _job(output_events=ev, slurm=running), procs))
    kinds = {x.kind: x for x in a}
    assert "device capacity" in kinds["job_cuda_oom"].text and "×2" in kinds["job_cuda_oom"].text
    assert "line 9" in kinds["job_cuda_oom"].text
    assert "communication" in kinds["job_nccl_timeout"].text
    assert "holds 8 GPUs and uses 1" in kinds["job_gpus_unused"].text
    killed = job_alerts(_snap(0, (), _job(exit_signal="SIGKILL", exit_code=137)))
    assert killed[0].kind == "job_signal" and "SIGKILL" in killed[0].text
    # a multi-node job's GPUs are not all here: no finding
    far = SchedulerEvidence("7", "RUNNING", nodes="gpu[01-02]", gpus_requested=16)
    assert not job_alerts(_snap(0, (), _job(slurm=far), procs))
    seen = job_alerts(_snap(0, (), _job(target="pid", visible_gpus="0,1,2,3"), procs))
    assert "sees 4 GPUs" in seen[0].text
