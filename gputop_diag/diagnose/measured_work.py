"""The work a job does, from the probe's sampled steps (`ProbeState.sample`, probe/sample.py):
samples and tokens a second, the FLOPs of a step and the model FLOPs utilization (MFU), the
precision it computes in against its GPU, the matrix shapes the tensor cores want aligned,
host-to-device copies (t_transfer), its loss, and whether its torch build has kernels for the
GPU (`driver/kernel_images.py`).

A sampled step is slowed by its sampling, so its own time is never used: a rate is the sampled
step's batch (or FLOPs) over the process's mean step time (`ProbeSteps.wall_s`, the other
steps). The batch, the FLOPs and the copies are assumed alike in every step (a training loop's
are); each figure says it comes from a sampled step.

MFU is counted two ways. Counted: the FLOPs torch's counter saw in the sampled step over the
mean step time. From the model's config, where it is known (`--model-config`: `model`): tokens
a second times the model's FLOPs a token (`planner.flops`: 6N + 12·L·d·s in training, 2N +
4·L·d·s in inference, the context s the batch's tokens over its samples) — PaLM's MFU
(https://arxiv.org/abs/2204.02311, appendix B), which leaves out what a job recomputes. Both
over the GPUs' peak for the dtype most matmul FLOPs ran in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..driver.kernel_images import KernelImages
from ..driver.kernel_images import check as kernel_check
from ..model import ProbeSample, ProbeShape, ProbeState, ProbeTransfer
from ..planner.precision import BF16, FP8, TF32

if TYPE_CHECKING:  # the planner's FLOPs load with a model's shape (`_model_mfu`)
    from ..planner.flops import ModelFlops
    from ..planner.shape import ModelShape

CC = tuple[int, int]
# What to check when a model's config does not look like the running job's model (a plan far
# from the measured memory, an MFU over 100 %).
CONFIG_ASSUMPTIONS = (
    "check the batch, the sequence length, the optimizer, the sharding and the config file"
)

# Dense tensor-core peak TFLOP/s by GPU model and the dtype a matmul runs in (without
# sparsity), from NVIDIA's data sheets: H100 and H200
# (https://www.nvidia.com/en-us/data-center/h100/, /h200/), A100
# (https://www.nvidia.com/en-us/data-center/a100/), L40S, L4, A10
# (https://www.nvidia.com/en-us/data-center/l40s/, /l4/, /products/a10-gpu/), V100, T4
# (https://www.nvidia.com/en-us/data-center/v100/, /tesla-t4/). "tf32" is fp32 on the tensor
# cores (torch.set_float32_matmul_precision("high")); "float32" without them.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"float32": 67, "tf32": 494.5, "bfloat16": 989.5, "float16": 989.5, "fp8": 1979},
    "H100 PCIe": {"float32": 51, "tf32": 378, "bfloat16": 756, "float16": 756, "fp8": 1513},
    "H100": {"float32": 67, "tf32": 494.5, "bfloat16": 989.5, "float16": 989.5, "fp8": 1979},
    "A100": {"float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312},
    "L40S": {"float32": 91.6, "tf32": 183, "bfloat16": 362, "float16": 362, "fp8": 733},
    "L4": {"float32": 30.3, "tf32": 60, "bfloat16": 121, "float16": 121, "fp8": 242},
    "A10": {"float32": 31.2, "tf32": 62.5, "bfloat16": 125, "float16": 125},
    "V100": {"float32": 15.7, "float16": 125},
    "T4": {"float32": 8.1, "float16": 65},
}
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
MATMUL_DOCS = (
    "https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/"
    "index.html#requirements-tc"
)


@dataclass(frozen=True, slots=True)
class Device:
    """The GPU a probed process is on, as NVML (or the probe) names it."""

    name: str | None = None
    capability: CC | None = None


@dataclass(frozen=True, slots=True)
class MeasuredWork:
    """The work of the probed processes that sampled a step, every process together."""

    pids: tuple[int, ...]
    sampled_step: int  # the newest sampled step (of the first process)
    samples_per_step: int | None  # per process, summed
    tokens_per_step: int | None
    batch_from: str | None
    samples_per_s: float | None
    tokens_per_s: float | None
    flops_per_step: int  # every process's sampled step, summed
    achieved_tflops: float | None  # flops_per_step over the mean step
    peak_tflops: float | None  # the GPUs' peak for the dtype the matmuls ran in
    mfu: float | None  # achieved / peak (0..1)
    mfu_why: str | None  # why there is no MFU
    compute_dtype: str | None  # the dtype most matmul FLOPs ran in
    compute_share: float | None
    loss: float | None
    precision: tuple[str, ...]  # what the precision costs on this GPU (warnings)
    settings: str  # the precision settings in words
    misaligned: tuple[ProbeShape, ...]
    misaligned_share: float | None  # of the matmul and convolution FLOPs
    h2d: ProbeTransfer | None
    d2h: ProbeTransfer | None
    transfer_s: float | None  # host seconds a step in host-to-device copies (mean)
    kernel_images: tuple[str, ...]  # a build without kernels (or only PTX) for a GPU
    # what the diagnosis judges the precision by (the first sampled process's, `tf32`: fp32
    # matmuls may use the tensor cores; `fp16_unscaled`: any process trains in fp16 unscaled)
    capability: CC | None = None
    gpu_name: str | None = None
    tf32: bool = False
    autocast: bool = False
    fp16_unscaled: bool = False
    # MFU from the model's config (`--model-config`), beside the counted one: its FLOPs a token
    # (the first sampled process's context), the TFLOP/s it implies, the MFU or why none
    model_flops: ModelFlops | None = None
    model_tflops: float | None = None
    model_mfu: float | None = None
    model_mfu_why: str | None = None


def devices_of(memory: Sequence) -> dict[int, Device]:
    """pid -> its GPU, from the rows of `measured.process_memory` (NVML's name and capability)."""
    return {
        r.pid: Device(getattr(r, "gpu_name", None), getattr(r, "compute_capability", None))
        for r in memory
    }


def peak_for(name: str | None, dtype: str | None) -> float | None:
    """The dense peak TFLOP/s of GPU `name` in `dtype` ("tf32" for fp32 on tensor cores)."""
    if not name or not dtype:
        return None
    key = "fp8" if dtype in FP8_DTYPES else dtype
    for model, peaks in PEAK_TFLOPS.items():  # the longer names ("H100 PCIe") come first
        if model.lower() in name.lower():
            return peaks.get(key)
    return None


def _tf32(s: ProbeSample) -> bool:
    return s.allow_tf32 is True or s.matmul_precision in ("high", "medium")


def settings_text(s: ProbeSample) -> str:
    """ "autocast cuda bfloat16; fp32 matmul precision highest (TF32 off); no gradient scaler"."""
    parts = []
    if s.autocast:
        parts.append("autocast " + ", ".join(f"{d} {t}" for d, t in s.autocast))
    else:
        parts.append("no autocast")
    if s.matmul_precision is not None:
        parts.append(
            f"fp32 matmul precision {s.matmul_precision} (TF32 {'on' if _tf32(s) else 'off'})"
        )
    if s.backward:
        parts.append("a gradient scaler" if s.grad_scaler else "no gradient scaler")
    return "; ".join(parts)


def _compute_dtype(s: ProbeSample) -> tuple[str | None, float | None]:
    total = sum(f for _, f in s.dtype_flops)
    if not s.dtype_flops or total <= 0:
        return None, None
    dtype, flops = s.dtype_flops[0]
    return dtype, flops / total


def precision_findings(s: ProbeSample, cc: CC | None) -> list[str]:
    """What the dtypes of the sampled step cost on a GPU of compute capability `cc` (None: not
    known, e.g. a CPU job: only what holds on any GPU is said)."""
    dtype, share = _compute_dtype(s)
    out = []
    where = f"compute capability {cc[0]}.{cc[1]}" if cc is not None else None
    if dtype == "float32" and (share or 0) >= 0.5 and not _tf32(s) and cc is not None:
        if cc >= TF32:
            out.append(
                f"fp32 matmuls without TF32 on {where} (TF32 tensor cores from 8.0): most of "
                "the GPU's math is unused; torch.set_float32_matmul_precision('high'), or "
                "autocast to bf16 (https://pytorch.org/docs/stable/notes/cuda.html"
                "#tensorfloat-32-tf32-on-ampere-and-later-devices)"
            )
    if dtype == "float16" and s.backward and not s.grad_scaler:
        out.append(
            "fp16 training without a gradient scaler: gradients below fp16's smallest value "
            "become zero; scale the loss with torch.amp.GradScaler "
            "(https://pytorch.org/docs/stable/amp.html#gradient-scaling)"
            + (", or use bf16 (this GPU has it)" if cc is not None and cc >= BF16 else "")
        )
    if dtype == "bfloat16" and cc is not None and cc < BF16:
        out.append(
            f"bf16 on {where}: no bf16 tensor cores before 8.0 (Ampere), so its matmuls run "
            "without them; fp16 with a gradient scaler uses the tensor cores"
        )
    if dtype in FP8_DTYPES and cc is not None and cc < FP8:
        out.append(f"fp8 matmuls on {where}: fp8 tensor cores start at 8.9 (Ada, Hopper)")
    return out


def _rate(per_step: int | None, wall_s: float | None) -> float | None:
    return per_step / wall_s if per_step is not None and wall_s else None


def measured_work(
    probes: Sequence[ProbeState],
    devices: Mapping[int, Device] | None = None,
    model: ModelShape | None = None,
) -> MeasuredWork | None:
    """The work of `probes` that sampled a step and step now; None where none did. `model`: the
    shape of the model the job runs (`--model-config`), for MFU from its FLOPs a token."""
    devices = devices or {}
    rows = [p for p in probes if p.sample is not None and p.steps is not None]
    if not rows:
        return None
    first = rows[0].sample
    samples = tokens = None
    samples_s = tokens_s = achieved = peak = None
    flops = 0
    why = None
    for p in rows:
        s, wall = p.sample, p.steps.wall_s
        if s.samples is not None:
            samples = (samples or 0) + s.samples
            samples_s = (samples_s or 0.0) + (_rate(s.samples, wall) or 0.0)
        if s.tokens is not None:
            tokens = (tokens or 0) + s.tokens
            tokens_s = (tokens_s or 0.0) + (_rate(s.tokens, wall) or 0.0)
        flops += s.flops
        if s.flops and wall:
            achieved = (achieved or 0.0) + s.flops / wall / 1e12
        dev = devices.get(p.pid) or Device(s.device_name, s.capability)
        name = dev.name or s.device_name
        dtype, _ = _compute_dtype(s)
        key = "tf32" if dtype == "float32" and _tf32(s) else dtype
        top = peak_for(name, key)
        if top is None:
            why = why or (
                "no GPU: a CPU job"
                if not p.cuda and name is None
                else f"no peak known for {name or 'its GPU'} in {key or 'its dtype'}"
            )
        else:
            peak = (peak or 0.0) + top
    if not flops:
        why = "torch counted no FLOPs in the sampled step"
    mfu = achieved / peak if achieved is not None and peak and why is None else None
    planned = _model_mfu(rows, model, peak if why is None else None) if model else {}
    dtype, share = _compute_dtype(first)
    precision: list[str] = []
    for p in rows:
        dev = devices.get(p.pid) or Device(p.sample.device_name, p.sample.capability)
        cc = dev.capability or p.sample.capability
        precision += [f for f in precision_findings(p.sample, cc) if f not in precision]
    total_mm = sum(p.sample.matmul_flops for p in rows)
    bad = sum(p.sample.misaligned_flops for p in rows)
    shapes = tuple(sh for sh in first.shapes if sh.misaligned)
    h2d = [p.sample.h2d.seconds if p.sample.h2d else 0.0 for p in rows]
    dev = devices.get(rows[0].pid) or Device()
    return MeasuredWork(
        pids=tuple(p.pid for p in rows),
        sampled_step=first.step,
        samples_per_step=samples,
        tokens_per_step=tokens,
        batch_from=first.batch_from,
        samples_per_s=samples_s,
        tokens_per_s=tokens_s,
        flops_per_step=flops,
        achieved_tflops=achieved,
        peak_tflops=peak if why is None else None,
        mfu=mfu,
        mfu_why=why,
        compute_dtype=dtype,
        compute_share=share,
        loss=next((p.sample.loss for p in rows if p.sample.loss is not None), None),
        precision=tuple(precision),
        settings=settings_text(first),
        misaligned=shapes,
        misaligned_share=bad / total_mm if total_mm else None,
        h2d=first.h2d,
        d2h=first.d2h,
        transfer_s=sum(h2d) / len(h2d),
        kernel_images=kernel_problems(probes, devices),
        capability=dev.capability or first.capability,
        gpu_name=dev.name or first.device_name,
        tf32=_tf32(first),
        autocast=bool(first.autocast),
        fp16_unscaled=any(_fp16_unscaled(p.sample) for p in rows),
        **planned,
    )


def _model_mfu(
    rows: Sequence[ProbeState], model: ModelShape, peak: float | None
) -> dict[str, object]:
    """MFU from the model's FLOPs a token: each process's tokens a second (its sampled batch
    over its mean step) times the FLOPs a token in its context, summed, over `peak`."""
    from ..planner.flops import flops_per_token

    tflops, first = 0.0, None
    for p in rows:
        s, wall = p.sample, p.steps.wall_s
        if not (s.tokens and s.samples and wall):
            continue
        flops = flops_per_token(model, s.tokens // s.samples, training=s.backward)
        first = first or flops
        tflops += s.tokens / wall * flops.per_token / 1e12
    if first is None:
        why = "no token ids in the sampled batch: tokens a second unknown"
        return {"model_mfu_why": why}
    out: dict[str, object] = {"model_flops": first, "model_tflops": tflops}
    if peak:
        out["model_mfu"] = tflops / peak
    else:
        out["model_mfu_why"] = "no peak known for the GPU in its dtype"
    return out


def _fp16_unscaled(s: ProbeSample) -> bool:
    """Training whose matmuls run mostly in fp16 with no gradient scaler."""
    return _compute_dtype(s)[0] == "float16" and s.backward and not s.grad_scaler


def kernel_problems(
    probes: Sequence[ProbeState], devices: Mapping[int, Device] | None = None
) -> tuple[str, ...]:
    """Each probed process's torch build against its GPU (NVML's capability, else the one the
    probe read): a build without kernels for it, or with only PTX. Said from the probe's first
    record on, whether or not the job has launched a kernel yet."""
    return tuple(dict.fromkeys(k.problem for k in kernel_checks(probes, devices)))


def kernel_checks(
    probes: Sequence[ProbeState], devices: Mapping[int, Device] | None = None
) -> tuple[KernelImages, ...]:
    """`kernel_problems` as the checks that found them: one per process whose build has no
    cubin for its GPU (`runs` False: no kernel image; else only PTX)."""
    devices = devices or {}
    out: list[KernelImages] = []
    for p in probes:
        dev = devices.get(p.pid)
        cc = (dev.capability if dev else None) or (p.sample.capability if p.sample else None)
        images = kernel_check(p.arch_list, cc) if cc is not None else None
        if images is not None and images.problem:
            out.append(images)
    return tuple(out)
