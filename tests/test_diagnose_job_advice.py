"""The advice follows the job and the story: a model server gets no training advice and the
checks name the job's own command line; memory that grows before it is full heads the verdict
with its time to full; one pid is named throughout a verdict."""

from __future__ import annotations

import pytest

from gputop_diag import sim
from gputop_diag.diagnose.job_kind import (
    SERVING,
    TRAINING,
    UNKNOWN,
    command_text,
    job_kind,
    kind_of_argv,
)
from gputop_diag.diagnose.lead import lead_of
from gputop_diag.diagnose.render import render_text, shown_checks
from gputop_diag.model import GpuProcess, ProcessInfo, Snapshot, SystemInfo
from gputop_diag.monitor.core import Monitor

TRAINING_WORDS = ("train.py", "enable AMP", "optimizer", "DataLoader", "gradient", "DDP")


def diagnosis_of(scenario: str, seconds: int = 20):
    src = sim.build(scenario)
    m = Monitor(src, interval=1.0)
    try:
        for _ in range(seconds):
            m.tick()
            src.clock.sleep(1.0)
        _, d = m.window()
    finally:
        m.close()
    return d


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (("python", "serve.py", "--model", "m"), SERVING),
        (("vllm", "serve", "meta-llama/Llama-3-8B"), SERVING),
        (("python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"), SERVING),
        (("text-generation-launcher", "--model-id", "m"), SERVING),
        (("/opt/tritonserver/bin/tritonserver", "--model-repository=/models"), SERVING),
        (("torchserve", "--start", "--model-store", "store"), SERVING),
        (("python", "train.py", "--config", "c.yaml"), TRAINING),
        (("torchrun", "--nproc-per-node", "8", "train_ddp.py"), TRAINING),
        (("python", "main.py", "--learning-rate", "3e-4"), TRAINING),
        (("python", "job.py"), UNKNOWN),
        ((), UNKNOWN),
    ],
)
def test_the_kind_of_job_is_read_from_its_command_line(argv, kind):
    assert kind_of_argv(argv) == kind


def _snap(*cmds: tuple[str, ...]) -> Snapshot:
    procs = tuple(ProcessInfo(pid=100 + k, cmdline=c) for k, c in enumerate(cmds))
    gpu = tuple(GpuProcess(100 + k, k, "compute") for k in range(len(cmds)))
    return Snapshot(0.0, SystemInfo("h"), processes=procs, gpu_processes=gpu)


def test_the_kind_of_a_snapshot_is_its_processes_agreeing():
    assert job_kind(_snap(("python", "serve.py"), ("python", "job.py"))) == SERVING
    assert job_kind(_snap(("python", "serve.py"), ("python", "train.py"))) == UNKNOWN
    # the process the verdict is about decides
    assert job_kind(_snap(("python", "serve.py"), ("python", "train.py")), pid=101) == TRAINING
    assert job_kind(None) == UNKNOWN


def test_a_command_line_is_quoted_for_the_shell_without_its_secrets():
    assert command_text(("python", "serve.py", "--name", "a b")) == "python serve.py --name 'a b'"
    assert command_text(("vllm", "serve", "m", "--api-key", "sk-1")) == (
        "vllm serve m --api-key <secret>"
    )
    assert command_text(("tgi", "--hf-token=hf_x")) == "tgi --hf-token=<secret>"
    long = ("torchrun", "--nproc-per-node", "8", "train.py", *(["--flag"] * 40))
    assert command_text(long) == "torchrun --nproc-per-node 8 train.py …"
    assert command_text(None) is None


@pytest.mark.slow
def test_a_model_server_gets_no_training_advice_and_its_own_command():
    d = diagnosis_of("mig")  # python serve.py --model mistral-7b on MIG instances
    checks = "\n".join(shown_checks(d))
    assert d.primary == "compute"
    for word in TRAINING_WORDS:
        assert word not in checks, word
    assert "python serve.py --model mistral-7b" in checks


@pytest.mark.slow
def test_a_training_job_gets_its_own_command_not_a_fixed_one():
    d = diagnosis_of("bandwidth-bound")  # python finetune_norms.py --fused false
    checks = shown_checks(d)
    assert any("ncu" in c and "python finetune_norms.py --fused false" in c for c in checks)
    assert not any("train.py" in c for c in checks)
    # the command travels as a command line of its own: sanitized as one (render.to_json)
    assert d.cmdline[:4] == ("python", "finetune_norms.py", "--fused", "false")
    assert any("<the job's command>" in c for c in d.checks)


@pytest.mark.slow
def test_memory_growing_before_full_heads_the_verdict_with_its_time_to_full():
    d = diagnosis_of("memory-leak", seconds=30)
    assert d.primary == "capacity"  # the class is unchanged (bench/accuracy.py)
    lead = lead_of(d)
    assert lead is not None and lead.label == "MEMORY GROWING"
    assert "full in ~" in lead.alert.text
    assert d.checks[0].startswith("Memory grows") and "full in ~" in d.checks[0]
    assert "_record_memory_history" in d.checks[0]
    assert sum("_record_memory_history" in c for c in d.checks) == 1  # said once
    assert render_text(d).startswith("MEMORY GROWING: ")


@pytest.mark.slow
def test_a_full_gpu_is_still_headlined_capacity():
    d = diagnosis_of("capacity")
    assert d.primary == "capacity"
    assert lead_of(d) is None or lead_of(d).label != "MEMORY GROWING"


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["input-starved", "sync-step", "capacity"])
def test_one_pid_throughout_a_verdict(scenario):
    d = diagnosis_of(scenario)
    assert d.scope_job is not None and d.scope_job.startswith("pid ")
    pid = d.scope_job.removeprefix("pid ")
    text = " ".join((*d.checks, *(e.text for e in d.evidence)))
    named = {w.strip(",;:()") for w in text.split() if w.strip(",;:()").isdigit()}
    pids = {w for w in named if len(w) == 5 and w.startswith("41")}  # the demo's job pids
    assert pids <= {pid, "41440"}, (pid, pids)  # 41440: the co-tenant capacity names as such
    if scenario != "capacity":
        assert any(f"--pid {pid}" in c for c in d.checks)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["compute-bound", "bandwidth-bound", "comm-bound", "mig"])
def test_the_verdict_speaks_plain_words(scenario):
    """No unexplained `roof`, `practical peak` or bare `GPM` (the issue's jargon)."""
    d = diagnosis_of(scenario)
    texts = [e.text for e in d.evidence] + [r.evidence.text for r in d.ruled_out]
    texts += list(d.secondary_evidence and [e.text for e in d.secondary_evidence])
    for text in texts:
        assert "roof" not in text and "practical peak" not in text, text
        explained = text.replace("counters (GPM)", "").replace("GPM counters", "")
        assert "GPM" not in explained, text  # only where it says what GPM is


@pytest.mark.slow
def test_interconnect_figures_say_they_are_tx_plus_rx_in_the_panel_and_the_pane():
    from gputop_diag.tui.panes.utilization import detail_texts

    d = diagnosis_of("comm-bound")
    nvlink = next(e for e in d.evidence if e.metric == "nvlink_in_dips")
    assert "(TX+RX)" in nvlink.text
    src = sim.build("comm-bound")
    m = Monitor(src, interval=1.0)
    try:
        for _ in range(3):
            m.tick()
            src.clock.sleep(1.0)
        g = m.last.snapshot.gpu(0)
    finally:
        m.close()
    line = detail_texts(g)["nvlink"]
    assert "TX+RX" in line
    total = (g.nvlink_tx_kib_s + g.nvlink_rx_kib_s) * 1024 / 1e9
    assert f"TX+RX {total:.1f} GB/s" in " ".join(line.split())
