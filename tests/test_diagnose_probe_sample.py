"""What the probe's sampled step measured reaches the verdict (`diagnose/work_evidence.py`):
fp32 without TF32 and fp32 where bf16 would fit are compute evidence with their checks first,
misaligned shapes with a large share of the FLOPs too; fp32 operands are bandwidth evidence and
fp32 weights and activations capacity evidence; fp16 without a gradient scaler is an alert on
any class, and a build without a kernel image for the GPU is the driver chain broken at the
framework build. Each fact is judged with and without it, so each assertion can fail.

Windows are the simulator's, sampled by the real collectors once per scenario; the probe
states (with a "sample" record read by the real reader) are laid on them as the Monitor
attaches them."""

from __future__ import annotations

import functools
from dataclasses import replace

from gputop_diag import sim
from gputop_diag.collect.probe import sample_of
from gputop_diag.diagnose.classify import judge
from gputop_diag.diagnose.lead import lead_of
from gputop_diag.diagnose.render import render_text
from gputop_diag.model import GIB, ProbeMemory, ProbeState, ProbeSteps, Snapshot
from gputop_diag.monitor.sampler import Sampler

FP32 = {
    "kind": "sample",
    "t": 0.0,
    "step": 7,
    "wall_s": 0.5,
    "flops": 4_000_000_000,
    "matmul_flops": 3_000_000_000,
    "misaligned_flops": 0,
    "dtype_flops": {"float32": 3_000_000_000},
    "shapes": [],
    "batch": {"samples": 8, "tokens": 256, "from": "the batch's input_ids"},
    "loss": 2.5,
    "backward": True,
    "grad_scaler": False,
    "autocast": {},
    "matmul_precision": "highest",
    "allow_tf32": False,
}
TF32_ON = {**FP32, "matmul_precision": "high", "allow_tf32": True}
BF16 = {
    **FP32,
    "dtype_flops": {"bfloat16": 3_000_000_000},
    "autocast": {"cuda": "bfloat16"},
}
FP16_UNSCALED = {**FP32, "dtype_flops": {"float16": 3_000_000_000}, "autocast": {"cuda": "float16"}}
MISALIGNED = {
    **BF16,
    "misaligned_flops": 1_500_000_000,
    "shapes": [
        {
            "op": "addmm",
            "dtype": "bfloat16",
            "dims": {"M": 256, "N": 50257, "K": 768},
            "count": 2,
            "flops": 1_500_000_000,
            "misaligned": ["N"],
            "site": "/home/alice/secretproj/train.py:50",
        }
    ],
}


@functools.cache
def outside(name: str, seconds: int = 30) -> tuple[Snapshot, ...]:
    """`seconds` of a scenario sampled from outside, oldest first."""
    sources = sim.build(name)
    sampler = Sampler(sources)
    for k in range(seconds):
        if k:
            sources.clock.sleep(1.0)
        sampler.sample()
    sampler.close()
    return sampler.history.snapshots()


def _probe(
    pid: int, at: float, sample: dict | None, memory=None, t_input: float = 0.001, **kw
) -> ProbeState:
    steps = ProbeSteps(
        steps=40,
        last_step=100,
        last_at=at,
        wall_s=0.2,
        t_input_s=t_input,
        t_sync_s=0.001,
        t_host_s=0.199 - t_input,
        measured=("t_input", "t_sync"),
    )
    return ProbeState(
        pid=pid,
        start_ticks=1,
        cuda=True,
        steps=steps,
        memory=memory,
        sample=sample_of({**sample, "t": at}, at) if sample is not None else None,
        **kw,
    )


def probed(window, sample: dict | None, **kw) -> list[Snapshot]:
    """`window` with a probe in each GPU process of each snapshot, its newest sampled step
    `sample` (None: none sampled yet)."""
    out = []
    for s in window:
        pids = sorted({p.pid for p in s.gpu_processes})
        out.append(replace(s, probes=tuple(_probe(pid, s.timestamp, sample, **kw) for pid in pids)))
    return out


def texts(d) -> str:
    return "\n".join(e.text for e in d.evidence)


def _capability(window) -> tuple[int, int]:
    return window[-1].gpus[0].static.compute_capability


# -- compute -----------------------------------------------------------------------------------


def test_fp32_without_tf32_on_ampere_or_later_is_compute_evidence_with_tf32_and_bf16_first():
    window = outside("compute-bound")
    assert _capability(window) >= (8, 0)
    plain = judge(window)
    assert plain.primary == "compute"
    d = judge(probed(window, FP32))
    assert d.primary == "compute"  # evidence, never the class
    assert d.evidence[1].metric == "work_fp32_share"
    assert "100 % of the matmul FLOPs in float32" in d.evidence[1].text
    assert "TF32 off" in d.evidence[1].text and "CUDA cores" in d.evidence[1].text
    assert d.checks[0].startswith("Enable TF32") and "set_float32_matmul_precision" in d.checks[0]
    assert d.checks[1].startswith("bf16 autocast")
    # the class's own question about tensor cores gives way to the measured answer
    assert not any(c.startswith("Tensor cores in use?") for c in d.checks)
    assert any(c.startswith("Tensor cores in use?") for c in plain.checks)
    assert "float32" not in texts(plain) and not plain.checks[0].startswith("Enable TF32")


def test_fp32_with_tf32_on_says_bf16_would_fit_and_not_tf32():
    d = judge(probed(outside("compute-bound"), TF32_ON))
    assert d.primary == "compute"
    assert "bf16 autocast would double the tensor cores' peak" in texts(d)
    assert d.checks[0].startswith("bf16 autocast")
    assert not any(c.startswith("Enable TF32") for c in d.checks)


def test_fp32_matmuls_under_autocast_are_outside_its_region_not_a_reason_to_turn_it_on():
    """autocast on and the matmuls still fp32: they run outside its region (or are cast back);
    "turn on bf16 autocast" would be advice to do what the job already does."""
    under = {**FP32, "autocast": {"cuda": "bfloat16"}}
    for sample, first in ((under, 1), ({**under, **TF32_ON, "autocast": under["autocast"]}, 0)):
        d = judge(probed(outside("compute-bound"), sample))
        assert d.primary == "compute"
        assert "autocast cuda bfloat16" in texts(d)
        assert d.checks[first].startswith("These matmuls run outside the autocast region")
        assert not any(c.startswith(("bf16 autocast", "fp16 autocast")) for c in d.checks)
        assert "bf16 autocast would double" not in texts(d)


def test_bf16_matmuls_aligned_add_nothing_to_compute():
    window = outside("compute-bound")
    plain, d = judge(window), judge(probed(window, BF16))
    assert d.evidence == plain.evidence and d.checks == plain.checks
    assert d.alerts == plain.alerts


def test_misaligned_shapes_with_a_large_share_are_compute_evidence_and_a_padding_check():
    window = outside("compute-bound")
    d = judge(probed(window, MISALIGNED))
    (e,) = [e for e in d.evidence if e.metric == "work_misaligned_share"]
    assert "50 % of the matmul FLOPs in shapes the tensor cores want in multiples of 8" in e.text
    assert "N 50257" in e.text
    pad = next(c for c in d.checks if c.startswith("Pad the misaligned dimensions"))
    assert "N 50257 -> 50264" in pad
    small = {**MISALIGNED, "misaligned_flops": 300_000_000}  # 10 %: under the share
    quiet = judge(probed(window, small))
    assert not any(e.metric == "work_misaligned_share" for e in quiet.evidence)
    assert not any(c.startswith("Pad the") for c in quiet.checks)


def test_a_class_the_sample_does_not_bear_on_gets_no_precision_evidence():
    window = outside("input-starved")
    d = judge(probed(window, FP32, t_input=0.12))
    assert d.primary == "input_pipeline"
    assert "float32" not in texts(d)
    assert not any("TF32" in c or "autocast" in c for c in d.checks)


# -- bandwidth and capacity ----------------------------------------------------------------------


def test_fp32_operands_are_bandwidth_evidence():
    window = outside("bandwidth-bound")
    plain = judge(window)
    assert plain.primary == "bandwidth"
    d = judge(probed(window, FP32))
    assert "each operand moves 4 bytes where bf16 or fp16 moves 2" in texts(d)
    assert d.checks[0].startswith(("bf16 autocast", "fp16 autocast"))
    assert "4 bytes" not in texts(judge(probed(window, BF16)))


def test_fp32_weights_and_activations_are_capacity_evidence_with_the_measured_gib():
    window = outside("capacity")
    plain = judge(window)
    assert plain.primary == "capacity"
    memory = ProbeMemory(allocated_bytes=30 * GIB, reserved_bytes=32 * GIB, peak_bytes=36 * GIB)
    sizes = dict(params_bytes=4 * GIB, grads_bytes=4 * GIB, optimizer_bytes=8 * GIB)
    d = judge(probed(window, FP32, memory=memory, **sizes))
    assert d.primary == "capacity"
    said = texts(d)
    assert "the weights and activations are fp32" in said and "in bf16 they take half" in said
    assert "activations and temporaries 20.0 GiB" in said
    halve = next(c for c in d.checks if c.startswith("Halve the activations"))
    assert "10.0 GiB of the 20.0 GiB measured" in halve
    bf16 = judge(probed(window, BF16, memory=memory, **sizes))
    assert "fp32" not in texts(bf16) and not any(c.startswith("Halve") for c in bf16.checks)


# -- alerts --------------------------------------------------------------------------------------


def test_fp16_training_without_a_scaler_is_an_alert_on_any_class():
    for scenario in ("compute-bound", "input-starved"):
        window = outside(scenario)
        d = judge(probed(window, FP16_UNSCALED))
        (a,) = [a for a in d.alerts if a.kind == "precision"]
        assert a.severity == "warning" and "without a gradient scaler" in a.text
        assert "GradScaler" in a.text
        scaled = judge(probed(window, {**FP16_UNSCALED, "grad_scaler": True}))
        assert not any(a.kind == "precision" for a in scaled.alerts)
        inference = judge(probed(window, {**FP16_UNSCALED, "backward": False}))
        assert not any(a.kind == "precision" for a in inference.alerts)


def test_a_build_without_a_kernel_image_is_the_driver_chain_broken_and_leads():
    window = outside("compute-bound")
    cc = _capability(window)
    old = ("sm_50", "sm_60", "sm_70")
    d = judge(probed(window, None, arch_list=old))  # no step sampled yet: said all the same
    (a,) = [a for a in d.alerts if a.kind == "driver_chain"]
    assert a.severity == "critical" and d.alerts[0] == a
    assert "no kernel image is available for execution on the device" in a.text
    assert f"sm_{cc[0]}{cc[1]}" in a.text and "sm_50, sm_60, sm_70" in a.text
    lead = lead_of(d)
    assert lead is not None and lead.label == "DRIVER CHAIN"
    assert lead.next_step.startswith("install a torch build that lists")
    assert render_text(d).startswith("DRIVER CHAIN: driver chain broken at the framework build")
    native = judge(probed(window, None, arch_list=(*old, f"sm_{cc[0]}{cc[1]}")))
    assert not any(a.kind in ("driver_chain", "kernel_image") for a in native.alerts)
    ptx = judge(probed(window, None, arch_list=(*old, "compute_70")))
    (info,) = [a for a in ptx.alerts if a.kind == "kernel_image"]
    assert info.severity == "info" and "only PTX (compute_70)" in info.text
    assert lead_of(ptx) is None
