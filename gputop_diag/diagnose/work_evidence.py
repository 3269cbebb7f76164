"""What the probe's sampled step measured (`measured_work.py`, `Features.work`) as the
classifier's evidence, checks and alerts, where it bears on the class the figures decided.

The sampled step never decides a class: the figures do. Where they name one it bears on, it
says why in the job's own terms and gives the first checks:
- compute: fp32 matmuls without TF32 on a GPU with TF32 tensor cores (compute capability 8.0 or
  later); fp32 where bf16 autocast would fit (fp16 with a gradient scaler before 8.0); bf16 or
  fp8 on a GPU without their tensor cores; a fifth or more of the matmul FLOPs in shapes the
  tensor cores want aligned;
- bandwidth: fp32 operands where bf16 moves half the bytes;
- capacity: fp32 weights and activations where bf16 would halve them (the activations measured
  by the probe said in GiB).
Whatever the class, fp16 training without a gradient scaler is a correctness alert (its small
gradients become zero), and a torch build without a kernel image for the GPU is the driver
chain broken at the framework build (critical: the job's first kernel fails); a build with only
PTX for it is an info alert (the driver compiles every kernel at start).

Sources: TF32 and the float32 matmul precision, PyTorch's CUDA semantics notes
(https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices);
autocast and GradScaler (https://pytorch.org/docs/stable/amp.html); the tensor cores' alignment
(NVIDIA's Matrix Multiplication Background User's Guide, `measured_work.MATMUL_DOCS`); the
error users see without a kernel image, CUDA Runtime API cudaErrorNoKernelImageForDevice (209).
Pure: a Diagnosis and the window's features in, a Diagnosis out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..driver.kernel_images import KernelImages
from ..model import formats
from ..planner.precision import BF16, FP16, TF32
from . import thresholds as T
from .features import Features
from .measured_work import FP8_DTYPES, MATMUL_DOCS, MeasuredWork, peak_for
from .rules import as_pct, ev
from .types import Alert, Diagnosis, Evidence

TF32_DOCS = (
    "https://pytorch.org/docs/stable/notes/cuda.html"
    "#tensorfloat-32-tf32-on-ampere-and-later-devices"
)
AMP_DOCS = "https://pytorch.org/docs/stable/amp.html"
SCALER_DOCS = AMP_DOCS + "#gradient-scaling"
INSTALL_DOCS = "https://pytorch.org/get-started/locally/"
ERR_NO_KERNEL_IMAGE = "CUDA error: no kernel image is available for execution on the device"
# The classes the sampled step bears on, each with its evidence and checks below.
BEARS_ON = ("compute", "bandwidth", "capacity")

CHECK_TF32 = (
    "Enable TF32 for the fp32 matmuls: torch.backends.cuda.matmul.allow_tf32 = True, or "
    f"torch.set_float32_matmul_precision('high') at the start of the job ({TF32_DOCS})"
)
CHECK_BF16 = (
    "bf16 autocast: with torch.autocast('cuda', dtype=torch.bfloat16): around the forward pass "
    f"and the loss (bf16 needs no gradient scaler) ({AMP_DOCS})"
)
CHECK_FP16 = (
    "fp16 autocast: with torch.autocast('cuda', dtype=torch.float16): around the forward pass "
    f"and the loss, the loss scaled by torch.amp.GradScaler ({SCALER_DOCS})"
)
# autocast is on and these matmuls still run in fp32: outside its region, or cast back
CHECK_OUTSIDE_AUTOCAST = (
    "These matmuls run outside the autocast region (or are forced to fp32): widen the region "
    "to the whole forward pass and the loss, and check for .float() casts and "
    f"torch.autocast(..., enabled=False) around them ({AMP_DOCS})"
)
# The class's own check the precision checks replace (checks.CHECKS).
REPLACED = {"compute": ("Tensor cores in use?",)}
# Checks that stay ahead of the precision checks: what the allocator measured, memory growth.
AHEAD = ("Restart with PYTORCH_CUDA_ALLOC_CONF", "Memory grows")


def _at(w: MeasuredWork) -> str:
    return f"measured in the job (sampled step {w.sampled_step})"


def _cc(cc: tuple[int, int] | None) -> str:
    return f"compute capability {cc[0]}.{cc[1]}" if cc is not None else "its GPU"


def _fp32(w: MeasuredWork) -> bool:
    return w.compute_dtype == "float32" and (w.compute_share or 0.0) >= T.WORK_DTYPE_SHARE


def _tflops(name: str | None, dtype: str) -> str | None:
    peak = peak_for(name, dtype)
    return None if peak is None else f"{peak:g}"


def _state(w: MeasuredWork) -> str:
    """ "TF32 off and no autocast", "TF32 on and autocast cuda bfloat16"."""
    autocast = w.settings.split("; ")[0]  # `settings_text` says autocast first
    return f"TF32 {'on' if w.tf32 else 'off'} and {autocast}"


def _lower_precision_check(w: MeasuredWork) -> str | None:
    """The autocast that fits this GPU: bf16 from 8.0, fp16 with a scaler from 7.0; where
    autocast is already on, the fp32 matmuls are outside its region."""
    cc = w.capability
    if cc is None or cc < FP16:
        return None
    if w.autocast:
        return CHECK_OUTSIDE_AUTOCAST
    return CHECK_BF16 if cc >= BF16 else CHECK_FP16


# -- evidence ----------------------------------------------------------------------------------


def _fp32_compute(w: MeasuredWork) -> list[Evidence]:
    """fp32 matmuls on a GPU whose tensor cores would run them faster: TF32 off, or on where
    bf16 (fp16 before 8.0) would double the peak."""
    cc = w.capability
    if not _fp32(w) or cc is None or cc < FP16:
        return []
    share = w.compute_share or 0.0
    head = f"{_at(w)}: {as_pct(share)} of the matmul FLOPs in float32, {_state(w)}, on {_cc(cc)}"
    name = w.gpu_name
    fp32, tf32, bf16 = (_tflops(name, d) for d in ("float32", "tf32", "bfloat16"))
    if cc >= TF32 and not w.tf32:
        peaks = (
            f" ({fp32} TFLOP/s on this GPU), not the tensor cores ({tf32} in TF32, {bf16} in bf16)"
            if fp32 and tf32 and bf16
            else ", not the tensor cores (TF32 from 8.0)"
        )
        text = f"{head}: they run on the CUDA cores{peaks}"
    elif w.autocast:
        text = f"{head}: autocast is on, yet these matmuls run in float32"
    elif cc >= BF16:
        peaks = f" ({tf32} to {bf16} TFLOP/s on this GPU)" if tf32 and bf16 else ""
        text = f"{head}: bf16 autocast would double the tensor cores' peak{peaks}"
    else:
        text = (
            f"{head}: fp16 autocast with a gradient scaler would run them on the tensor cores "
            "(fp16 ones from 7.0, no bf16 ones before 8.0)"
        )
    return [ev("work_fp32_share", 100 * share, 100 * T.WORK_DTYPE_SHARE, text)]


def _misaligned(w: MeasuredWork) -> list[Evidence]:
    share = w.misaligned_share
    if not w.misaligned or share is None or share < T.MISALIGNED_FLOP_SHARE:
        return []
    sh = w.misaligned[0]
    dims = " ".join(f"{k} {v}" for k, v in zip(sh.dim_names, sh.dims, strict=False))
    at = f" at {sh.site}" if sh.site else ""
    extra = len(w.misaligned) - 1
    more = f", and {formats.count(extra, 'more shape')}" if extra > 0 else ""
    text = (
        f"{_at(w)}: {as_pct(share)} of the matmul FLOPs in shapes the tensor cores want in "
        f"multiples of {_align(sh.dtype)}: {sh.op} {sh.dtype} {dims} "
        f"({', '.join(sh.misaligned)} not aligned){at}{more}: the tensor cores run them padded, "
        "or not at all"
    )
    return [ev("work_misaligned_share", 100 * share, 100 * T.MISALIGNED_FLOP_SHARE, text)]


def _align(dtype: str) -> int:
    """The multiple the tensor cores want a dimension in: 16 in fp8, 8 in 16-bit."""
    return 16 if dtype in FP8_DTYPES else 8


def _unsupported(w: MeasuredWork) -> list[Evidence]:
    """bf16 or fp8 matmuls on a GPU without their tensor cores (`precision_findings`)."""
    return [
        ev("work_precision", None, None, f"{_at(w)}: {p}", "")
        for p in w.precision
        if p.startswith(("bf16 on", "fp8 matmuls on"))
    ]


def _fp32_bytes(w: MeasuredWork) -> list[Evidence]:
    if not _fp32(w) or _lower_precision_check(w) is None:
        return []
    share = w.compute_share or 0.0
    text = (
        f"{_at(w)}: {as_pct(share)} of the matmul FLOPs in float32, {_state(w)}: each "
        "operand moves 4 bytes where bf16 or fp16 moves 2"
    )
    return [ev("work_fp32_share", 100 * share, 100 * T.WORK_DTYPE_SHARE, text)]


def _fullest(f: Features):
    rows = [r for r in f.measured_memory if r.reserved_bytes is not None or r.peak_bytes]
    return max(rows, key=lambda r: r.peak_bytes or r.reserved_bytes or 0) if rows else None


def _fp32_memory(w: MeasuredWork, f: Features) -> list[Evidence]:
    if not _fp32(w):
        return []
    r = _fullest(f)
    held = []
    if r is not None:
        held = [
            f"{name} {formats.gib_unit(b)}"
            for name, b in (
                ("activations and temporaries", r.activations_bytes),
                ("parameters", r.params_bytes),
                ("gradients", r.grads_bytes),
            )
            if b
        ]
    measured = f" ({', '.join(held)} at the peak)" if held else ""
    text = (
        f"{_at(w)}: matmuls in float32, {_state(w)}: the weights and activations are fp32"
        f"{measured}; in bf16 they take half"
    )
    share = w.compute_share or 0.0
    return [ev("work_fp32_share", 100 * share, 100 * T.WORK_DTYPE_SHARE, text)]


def work_evidence(cls: str, f: Features) -> tuple[Evidence, ...]:
    """What the sampled step says of class `cls`; () where it says nothing of it."""
    w = f.work
    if w is None or cls not in BEARS_ON:
        return ()
    if cls == "compute":
        return (*_fp32_compute(w), *_unsupported(w), *_misaligned(w))
    if cls == "bandwidth":
        return tuple(_fp32_bytes(w))
    return tuple(_fp32_memory(w, f))


# -- checks ------------------------------------------------------------------------------------


def _pad_check(w: MeasuredWork) -> str:
    sh = w.misaligned[0]
    k = _align(sh.dtype)
    dims = dict(zip(sh.dim_names, sh.dims, strict=False))
    pads = ", ".join(f"{d} {dims[d]} -> {-(-dims[d] // k) * k}" for d in sh.misaligned if d in dims)
    at = f" at {sh.site}" if sh.site else ""
    return (
        f"Pad the misaligned dimensions to multiples of {k}: {pads} ({sh.op}{at}); a vocabulary "
        f"or hidden size padded to a multiple of 64 keeps every matmul aligned ({MATMUL_DOCS})"
    )


def _memory_check(w: MeasuredWork, f: Features) -> str:
    r = _fullest(f)
    act = r.activations_bytes if r is not None else None
    saved = (
        f", about {formats.gib_unit(act // 2)} of the {formats.gib_unit(act)} measured"
        if act
        else ""
    )
    if w.autocast:  # on already: what stays fp32 is outside it
        return CHECK_OUTSIDE_AUTOCAST
    cc = w.capability
    if cc is not None and FP16 <= cc < BF16:  # no bf16 tensor cores before 8.0
        how = (
            f"fp16 autocast{saved}: with torch.autocast('cuda', dtype=torch.float16): around "
            "the forward pass, the loss scaled by torch.amp.GradScaler; fp16 weights"
        )
    else:
        how = (
            f"bf16 autocast{saved}: with torch.autocast('cuda', dtype=torch.bfloat16): around "
            "the forward pass; bf16 weights (model.to(torch.bfloat16))"
        )
    return f"Halve the activations with {how} halve the parameters and gradients too ({AMP_DOCS})"


def work_checks(cls: str, f: Features) -> tuple[str, ...]:
    """The first checks the sampled step gives class `cls`."""
    w = f.work
    if w is None or cls not in BEARS_ON:
        return ()
    out: list[str] = []
    if cls == "compute":
        if _fp32_compute(w):
            cc = w.capability
            if cc is not None and cc >= TF32 and not w.tf32:
                out.append(CHECK_TF32)
            out.append(_lower_precision_check(w) or CHECK_BF16)
        if any(p.startswith("bf16 on") for p in w.precision):
            out.append(CHECK_FP16)
        if _misaligned(w):
            out.append(_pad_check(w))
    elif cls == "bandwidth" and _fp32_bytes(w):
        out.append(_lower_precision_check(w) or CHECK_BF16)
    elif cls == "capacity" and _fp32(w):
        out.append(_memory_check(w, f))
    return tuple(out)


# -- alerts ------------------------------------------------------------------------------------


def kernel_image_alert(k: KernelImages) -> Alert:
    """A build without a kernel image for the GPU: the chain broken at the framework build, as
    the driver chain's alerts read (critical: it leads); with only PTX for it, an info alert."""
    if k.runs:
        return Alert("kernel_image", "info", f"framework build: {k.problem}")
    cc = f"{k.capability[0]}.{k.capability[1]}"
    sm = f"sm_{k.capability[0]}{k.capability[1]}"
    return Alert(
        "driver_chain",
        "critical",
        f'driver chain broken at the framework build (users see "{ERR_NO_KERNEL_IMAGE}"): '
        f"torch is built for {', '.join(k.arch_list)}, none of which runs on compute "
        f"capability {cc} ({sm}); next: install a torch build that lists {sm} ({INSTALL_DOCS})",
    )


def work_alerts(f: Features) -> tuple[Alert, ...]:
    """The sampled step's alerts, whatever the class: a build without kernels for the GPU, and
    fp16 training without a gradient scaler."""
    out = list(dict.fromkeys(kernel_image_alert(k) for k in f.kernel_images))
    w = f.work
    if w is not None and w.fp16_unscaled:
        bf16 = w.capability is not None and w.capability >= BF16
        out.append(
            Alert(
                "precision",
                "warning",
                f"precision: fp16 training without a gradient scaler ({_at(w)}): gradients "
                "below fp16's smallest value become zero and the model stops learning from "
                f"them; next: scale the loss with torch.amp.GradScaler ({SCALER_DOCS})"
                + (", or train in bf16 (this GPU has it)" if bf16 else ""),
            )
        )
    return tuple(out)


def _merged(alerts: Sequence[Alert], new: Sequence[Alert]) -> tuple[Alert, ...]:
    """`new` among `alerts` by severity: the critical ones first, the warnings before the
    first info alert, the info ones last."""
    crit = [a for a in new if a.severity == "critical"]
    warn = [a for a in new if a.severity == "warning"]
    info = [a for a in new if a.severity not in ("critical", "warning")]
    cut = next((k for k, a in enumerate(alerts) if a.severity == "info"), len(alerts))
    return (*crit, *alerts[:cut], *warn, *alerts[cut:], *info)


def with_work(d: Diagnosis, f: Features) -> Diagnosis:
    """`d` with what the sampled step says: its evidence after the deciding figure (compute,
    bandwidth) or last (capacity), its checks first (after the allocator's and the growth's for
    capacity), and its alerts. Nothing without a sampled step or a kernel-image problem."""
    alerts = work_alerts(f)
    if f.work is None and not alerts:
        return d
    evidence, checks = d.evidence, d.checks
    judged = d.primary in BEARS_ON and d.has_confidence
    found = work_evidence(d.primary, f) if judged else ()
    if found:
        at = len(evidence) if d.primary == "capacity" else min(1, len(evidence))
        evidence = (*evidence[:at], *found, *evidence[at:])
    first = work_checks(d.primary, f) if judged else ()
    if first:
        kept = [c for c in checks if not c.startswith(REPLACED.get(d.primary, ()))]
        ahead = 0
        while ahead < len(kept) and kept[ahead].startswith(AHEAD):
            ahead += 1
        checks = (*kept[:ahead], *first, *kept[ahead:])
    return replace(d, evidence=evidence, checks=tuple(checks), alerts=_merged(d.alerts, alerts))
