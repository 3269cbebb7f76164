"""The probe's sampled step: the pure parts (kernel images, the tensor cores' alignment, which
copies are transfers, the batch), the reader of its "sample" record, what the diagnosis makes of
it (samples and tokens a second, MFU, precision, shapes, t_transfer), and one real CPU training
loop sampled in this process (torch: in the SLOW list)."""

from __future__ import annotations

import json

import pytest

from gputop_diag.collect.probe import _Records, sample_of
from gputop_diag.diagnose.measured import measured_split
from gputop_diag.diagnose.measured_render import measured_json, measured_lines, split_text
from gputop_diag.diagnose.measured_work import Device, kernel_problems, measured_work, peak_for
from gputop_diag.driver.kernel_images import check, runs_on
from gputop_diag.model import ProbeState, ProbeSteps
from gputop_diag.probe import sample as S
from gputop_diag.sanitize.sanitizer import Sanitizer

# -- kernel images (nvcc's rules) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "cc", "runs"),
    [
        ("sm_80", (8, 0), True),
        ("sm_80", (8, 6), True),  # a cubin runs on a later minor of its major
        ("sm_86", (8, 0), False),
        ("sm_80", (9, 0), False),  # ...never on another major
        ("compute_80", (9, 0), True),  # PTX compiles for every later capability
        ("compute_90", (8, 9), False),
        ("sm_90a", (9, 0), True),  # architecture-specific: that capability only
        ("sm_90a", (10, 0), False),
        ("sm_100f", (10, 3), True),  # family-specific: later minors of its major
        ("sm_120", (12, 0), True),
        ("bogus", (8, 0), False),
    ],
)
def test_a_build_architecture_runs_where_nvcc_says(arch, cc, runs):
    assert runs_on(arch, cc) is runs


def test_no_kernel_image_is_said_for_a_gpu_the_build_lacks_and_ptx_only_is_a_note():
    build = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert check(build, (8, 9)).problem is None  # sm_86 runs on 8.9
    missing = check(["sm_50", "sm_60", "sm_70"], (9, 0))
    assert not missing.runs
    assert missing.problem.startswith("no kernel image is available for this device")
    assert "sm_90" in missing.problem
    jit = check(["sm_80", "compute_80"], (9, 0))
    assert jit.runs and jit.jit and "PTX (compute_80)" in jit.problem
    assert check([], (9, 0)) is None  # a CPU build says nothing


# -- the probe's pure parts ----------------------------------------------------------------------


def test_misaligned_dimensions_by_dtype():
    dims = {"M": 256, "N": 1001, "K": 64}
    assert S.misaligned(dims, "bfloat16") == ["N"]
    assert S.misaligned({"M": 24, "N": 40, "K": 8}, "float8_e4m3fn") == ["M", "N", "K"]
    assert S.misaligned({"M": 32, "N": 48, "K": 16}, "float8_e4m3fn") == []
    assert S.misaligned(dims, "float32") == []  # no such rule in fp32


def test_which_copies_are_transfers():
    assert S.copy_kind("cpu", "cuda") == "h2d"
    assert S.copy_kind("cuda", "cpu") == "d2h"
    assert S.copy_kind("cuda", "cuda") is None
    assert S.copy_kind("cpu", "meta") is None and S.copy_kind("cpu", "cpu") is None


def test_sampling_is_off_with_zero_and_every_minute_by_default():
    assert S.sample_every_s({}) == S.SAMPLE_EVERY_S
    assert S.sample_every_s({S.SAMPLE_VARIABLE: "0"}) is None
    assert S.sample_every_s({S.SAMPLE_VARIABLE: "2.5"}) == 2.5


# -- the reader ----------------------------------------------------------------------------------

SAMPLE = {
    "kind": "sample",
    "t": 100.0,
    "step": 7,
    "wall_s": 0.5,
    "ops": 200,
    "flops": 4_000_000_000,
    "matmul_flops": 3_000_000_000,
    "misaligned_flops": 1_500_000_000,
    "dtype_flops": {"float16": 2_700_000_000, "float32": 300_000_000},
    "shapes": [
        {
            "op": "addmm",
            "dtype": "float16",
            "dims": {"M": 256, "N": 1001, "K": 64},
            "count": 2,
            "flops": 1_500_000_000,
            "misaligned": ["N"],
            "site": "/home/alice/secretproj/train.py:50",
        }
    ],
    "transfers": {
        "h2d": {
            "count": 2,
            "bytes": 8 * 2**20,
            "seconds": 0.004,
            "pinned_bytes": 0,
            "non_blocking": 2,
        }
    },
    "batch": {"samples": 8, "tokens": 256, "from": "the batch's input_ids"},
    "loss": 2.5,
    "backward": True,
    "grad_scaler": None,
    "autocast": {"cuda": "float16"},
    "matmul_precision": "highest",
    "allow_tf32": False,
    "capability": [8, 0],
    "device_name": "NVIDIA A100-SXM4-80GB",
}


def _state(sample: dict, wall_s: float = 0.02, **kw) -> ProbeState:
    steps = ProbeSteps(
        steps=50,
        last_step=60,
        last_at=100.0,
        wall_s=wall_s,
        t_input_s=0.001,
        t_sync_s=0.0,
        t_host_s=wall_s - 0.001,
        measured=("t_input", "t_sync"),
    )
    return ProbeState(
        pid=42, start_ticks=1, cuda=True, steps=steps, sample=sample_of(sample, 100.0), **kw
    )


def test_the_reader_takes_a_sample_and_refuses_a_malformed_one():
    s = sample_of(SAMPLE, 100.0)
    assert s.samples == 8 and s.tokens == 256 and s.loss == 2.5 and s.capability == (8, 0)
    assert s.shapes[0].dims == (256, 1001, 64) and s.shapes[0].misaligned == ("N",)
    assert s.h2d.nbytes == 8 * 2**20 and s.h2d.pinned_bytes == 0 and s.d2h is None
    assert s.dtype_flops[0] == ("float16", 2_700_000_000)
    for bad in (
        {**SAMPLE, "step": -1},
        {**SAMPLE, "flops": "many"},
        {**SAMPLE, "batch": {"samples": 1.5}},
        {**SAMPLE, "shapes": [{"op": "mm"}]},
        {**SAMPLE, "transfers": {"h2d": {"count": 1, "bytes": -4, "seconds": 0.1}}},
    ):
        assert sample_of(bad, 100.0) is None


def test_a_sampled_step_is_left_out_of_the_step_figures():
    r = _Records(42, 1)
    base = {"kind": "step", "measured": ["t_input"], "t_input_s": 0.001, "t_host_s": 0.01}
    for n in range(1, 6):
        r.take({**base, "t": float(n), "step": n, "wall_s": 0.011})
    r.take({**base, "t": 6.0, "step": 6, "wall_s": 0.5, "sampled": True})
    assert r.take({**SAMPLE, "t": 6.0})
    state = r.state()
    assert state.steps.wall_s == pytest.approx(0.011)  # not pulled up by the 0.5 s step
    assert state.sample.step == 7


# -- what the diagnosis makes of it --------------------------------------------------------------


def test_rates_mfu_precision_shapes_and_transfer_from_a_sampled_step():
    w = measured_work([_state(SAMPLE)])
    assert w.samples_per_s == pytest.approx(8 / 0.02)
    assert w.tokens_per_s == pytest.approx(256 / 0.02)
    # 4 GFLOP a 20 ms step: 0.2 TFLOP/s of the A100's 312 in fp16
    assert w.achieved_tflops == pytest.approx(0.2)
    assert w.mfu == pytest.approx(0.2 / 312)
    assert w.misaligned_share == pytest.approx(0.5)
    assert w.transfer_s == pytest.approx(0.004)
    assert w.loss == 2.5
    assert any("fp16 training without a gradient scaler" in p for p in w.precision)
    scaled = measured_work([_state({**SAMPLE, "grad_scaler": True})])
    assert not any("gradient scaler" in p for p in scaled.precision)


def test_fp32_without_tf32_is_said_on_ampere_only():
    fp32 = {**SAMPLE, "dtype_flops": {"float32": 10}, "autocast": {}}
    on_a100 = measured_work([_state(fp32)])
    assert any("fp32 matmuls without TF32" in p for p in on_a100.precision)
    v100 = measured_work([_state(fp32)], {42: Device("Tesla V100-SXM2-16GB", (7, 0))})
    assert not any("TF32" in p for p in v100.precision)
    tf32 = measured_work([_state({**fp32, "matmul_precision": "high"})])
    assert not any("TF32" in p for p in tf32.precision)
    assert tf32.peak_tflops == 156  # the A100's TF32 peak, not its fp32 one


def test_bf16_before_ampere_and_the_peak_table():
    bf16 = {**SAMPLE, "dtype_flops": {"bfloat16": 10}}
    w = measured_work([_state(bf16)], {42: Device("Tesla T4", (7, 5))})
    assert any("bf16 on compute capability 7.5" in p for p in w.precision)
    assert w.mfu is None and "no peak known for Tesla T4 in bfloat16" in w.mfu_why
    assert peak_for("NVIDIA H100 PCIe", "bfloat16") == 756
    assert peak_for("NVIDIA H100 80GB HBM3", "bfloat16") == 989.5


def test_the_kernel_image_check_reads_nvml_s_capability_before_the_job_uses_cuda():
    p = ProbeState(pid=42, start_ticks=1, arch_list=("sm_70", "sm_75"))
    lines = measured_lines([p], [])
    assert not any("kernel images" in line for line in lines)  # no GPU known: nothing said
    with_gpu = measured_work([_state(SAMPLE, arch_list=("sm_70",))], {})
    assert with_gpu.kernel_images  # the probe's own capability (8.0) against sm_70
    (said,) = kernel_problems([p], {42: Device("NVIDIA H100 80GB HBM3", (9, 0))})
    assert said.startswith("no kernel image is available for this device")
    assert kernel_problems([p], {42: Device("Tesla T4", (7, 5))}) == ()


def test_the_split_says_the_transfer_measured_and_the_host_what_remains():
    state = _state(SAMPLE)
    m = measured_split([state])
    text = split_text(m, 0.004)
    assert "transfer 4.0 ms (20 %, sampled) + host 15 ms (75 %)" in text
    doc = measured_json([state], [])
    split = doc["step_split"]
    assert split["parts"]["t_transfer"] == pytest.approx(0.004)
    assert split["parts"]["t_host"] == pytest.approx(0.015)
    assert split["sampled"] == ["t_transfer"]
    assert doc["work"]["loss"] == 2.5 and doc["work"]["tokens_per_s"] == pytest.approx(12800)
    json.dumps(doc)


def test_a_shape_s_line_of_code_is_sanitized_like_a_sync_site():
    s = Sanitizer()
    shown = s.model(_state(SAMPLE))
    site = shown.sample.shapes[0].site
    assert "alice" not in site and "secretproj" not in site and site.endswith(":50")
    text = "\n".join(measured_lines([shown], []))
    assert "alice" not in text and "shapes (sampled step 7)" in text


# -- a real CPU training loop, sampled in this process (torch) -----------------------------------


@pytest.mark.xdist_group("torch")  # imports torch here: the worker that has it
def test_a_sampled_step_of_a_real_loop_sees_its_batch_shapes_precision_and_loss(
    tmp_path, monkeypatch
):
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.utils.data import DataLoader

    import gputop_diag.probe as probe
    from gputop_diag.probe.schema import probe_dir

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv(S.SAMPLE_VARIABLE, "0.001")
    backward_before = vars(torch.Tensor)["backward"]
    running = probe._start(by_hand=True)
    assert running is not None
    try:
        ids = torch.randint(0, 1001, (64, 16))
        data = [{"input_ids": ids[i], "labels": ids[i]} for i in range(64)]
        model = nn.Sequential(nn.Embedding(1001, 32), nn.Linear(32, 1001))
        optimizer = torch.optim.AdamW(model.parameters())
        for batch in DataLoader(data, batch_size=8):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(batch["input_ids"])
            labels = batch["labels"].flatten()
            loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        probe._stop()
    assert vars(torch.Tensor)["backward"] is backward_before  # put back
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None
    (path,) = (tmp_path / probe_dir({"XDG_RUNTIME_DIR": str(tmp_path)})).glob("probe-*.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    samples = [r for r in records if r["kind"] == "sample"]
    sampled = {r["step"] for r in records if r["kind"] == "step" and r.get("sampled")}
    assert samples and {s["step"] for s in samples} == sampled
    s = samples[0]
    assert s["batch"] == {"samples": 8, "tokens": 128, "from": "the batch's input_ids"}
    assert s["autocast"] == {"cpu": "bfloat16"} and s["backward"] is True
    assert isinstance(s["loss"], float) and s["loss"] > 0
    # the output layer: 128 tokens x 1001 x 32 in bf16, N = 1001 not a multiple of 8
    head = next(x for x in s["shapes"] if x["op"] == "addmm")
    assert head["dims"] == {"M": 128, "N": 1001, "K": 32} and head["misaligned"] == ["N"]
    assert head["dtype"] == "bfloat16" and head["site"].startswith("tests/test_probe_sample.py:")
    assert head["flops"] == 2 * 128 * 1001 * 32
    r = _Records(*map(int, path.stem.removeprefix("probe-").split("-")))
    for record in records:
        assert r.take(record)
    state = r.state()
    assert state.sample is not None and state.steps is not None
    lines = measured_lines([state], [])
    assert any(line.startswith("work (measured in the job, sampled step") for line in lines)
    assert any("tokens/s" in line and "loss" in line for line in lines)
