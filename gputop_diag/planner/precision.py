"""The plan's number formats against the GPU's compute capability: what the GPU has no tensor
cores or kernels for, what happens then, and the format that fits.

Compute capabilities are NVIDIA's (https://developer.nvidia.com/cuda-gpus). What each format
needs, and what the common tools do without it:
- bf16: tensor cores from 8.0 (Ampere). Below, PyTorch still runs bf16 (without its tensor
  cores, slowly: `torch.cuda.is_bf16_supported(including_emulation=False)` is False,
  https://github.com/pytorch/pytorch/issues/124996), FlashAttention-2 needs Ampere
  (https://github.com/Dao-AILab/flash-attention), and vLLM refuses it ("Bfloat16 is only
  supported on GPUs with compute capability of at least 8.0", a ValueError:
  https://github.com/vllm-project/vllm/issues/1284). fp16 takes the same two bytes; training in
  fp16 needs a loss scaler (https://pytorch.org/docs/stable/amp.html#gradient-scaling).
- TF32 (fp32 matmuls on tensor cores): from 8.0
  (https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices).
- fp16 tensor cores: from 7.0 (Volta).
- fp8 compute: from 8.9 (Ada, Hopper). Below, Transformer Engine refuses ("Device compute
  capability 8.9 or higher required for FP8 execution", `check_fp8_support` in
  https://github.com/NVIDIA/TransformerEngine/blob/main/transformer_engine/pytorch/fp8.py), and
  vLLM runs fp8 weights as weight-only W8A16 with its FP8 Marlin kernel from 7.5
  (https://docs.vllm.ai/en/latest/features/quantization/fp8.html).
- An fp8 KV cache below 8.9 is stored in fp8 and converted in software for attention
  (https://docs.vllm.ai/en/latest/features/quantization/quantized_kvcache/).
- int4 weights: AWQ's kernels from 7.5, GPTQ's from 7.0 (vLLM's table:
  https://docs.vllm.ai/en/v0.9.2/features/quantization/supported_hardware.html).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the constants load without the plan (the classifier reads them)
    from .workload import Workload

CC = tuple[int, int]
BF16 = (8, 0)
TF32 = (8, 0)
FP16 = (7, 0)
FP8 = (8, 9)
FP8_MARLIN = (7, 5)
AWQ = (7, 5)
ARCH = {(7, 0): "Volta", (7, 5): "Turing", (8, 0): "Ampere", (8, 9): "Ada"}


@dataclass(frozen=True, slots=True)
class PrecisionCheck:
    """One format the plan uses that this GPU lacks hardware for."""

    subject: str  # "bf16 compute", "fp8 weights", ...
    needs: CC  # the compute capability it needs
    severity: str  # "warning": refused or emulated; "note": works, slower or partly
    happens: str  # what happens on this GPU
    instead: str  # the format that fits, "" when the plan can stay as it is
    source: str  # a public URL


def cc_text(cc: CC) -> str:
    return f"{cc[0]}.{cc[1]}"


def _needs(cc: CC) -> str:
    arch = f" ({ARCH[cc]})" if cc in ARCH else ""
    return f"compute capability {cc_text(cc)}{arch}"


def _bf16(w: Workload) -> PrecisionCheck:
    if w.training:
        instead = (
            "fp16 with a loss scaler (--dtype fp16; torch.amp.GradScaler, HF Trainer --fp16): "
            "the same 2 bytes, so this plan's figures hold"
        )
    else:
        instead = "fp16 (--dtype fp16; vLLM --dtype half): the same 2 bytes, this plan holds"
    return PrecisionCheck(
        "bf16 compute",
        BF16,
        "warning",
        "no bf16 tensor cores: PyTorch runs bf16 without them (slowly; "
        "torch.cuda.is_bf16_supported(including_emulation=False) is False), FlashAttention-2 "
        "does not run, vLLM refuses bf16 (ValueError)",
        instead,
        "https://github.com/vllm-project/vllm/issues/1284",
    )


def _fp8(w: Workload, cc: CC) -> PrecisionCheck:
    if cc >= BF16:
        instead = "bf16 (--dtype bf16)"
        if not w.training:
            instead += "; to keep fp8 weights: --quant fp8 --dtype bf16 (weight-only W8A16)"
    else:
        instead = "fp16 (--dtype fp16" + (" with a loss scaler)" if w.training else ")")
        if not w.training and cc >= FP8_MARLIN:
            instead += "; to keep fp8 weights: --quant fp8 --dtype fp16 (weight-only W8A16)"
    return PrecisionCheck(
        "fp8 compute",
        FP8,
        "warning",
        "no fp8 tensor cores: Transformer Engine and torch._scaled_mm refuse fp8 matmuls; vLLM "
        "runs an fp8 checkpoint weight-only (fp8 weights, 16-bit compute) with FP8 Marlin",
        instead,
        "https://github.com/NVIDIA/TransformerEngine/blob/main/transformer_engine/pytorch/fp8.py",
    )


def _quant_fp8(cc: CC, moe: bool) -> PrecisionCheck | None:
    if cc < FP8_MARLIN:
        return PrecisionCheck(
            "fp8 weights",
            FP8_MARLIN,
            "warning",
            "vLLM's FP8 Marlin kernel (weight-only fp8) needs Turing or newer",
            "--quant int8 (bitsandbytes) or --quant int4 (GPTQ runs from 7.0)",
            "https://docs.vllm.ai/en/latest/features/quantization/fp8.html",
        )
    if cc < FP8:
        extra = "; vLLM's fused MoE layers need 8.9 for fp8" if moe else ""
        return PrecisionCheck(
            "fp8 weights",
            FP8,
            "note" if not moe else "warning",
            "weight-only W8A16 with FP8 Marlin: fp8 storage, 16-bit matmuls" + extra,
            "--quant int8 or int4 (the same or less memory)" if moe else "",
            "https://docs.vllm.ai/en/latest/features/quantization/fp8.html",
        )
    return None


def precision_checks(w: Workload, cc: CC | None, moe: bool = False) -> tuple[PrecisionCheck, ...]:
    """What of `w`'s formats the GPU of compute capability `cc` lacks; () when it has all of
    them or `cc` is not known. `moe`: the model has expert layers."""
    if cc is None:
        return ()
    out: list[PrecisionCheck] = []
    if w.dtype == "bf16" and cc < BF16:
        out.append(_bf16(w))
    elif w.dtype == "fp8" and cc < FP8:
        out.append(_fp8(w, cc))
    elif w.dtype == "fp32" and cc < TF32:
        out.append(
            PrecisionCheck(
                "fp32 matmuls (TF32)",
                TF32,
                "note",
                "no TF32 tensor cores: fp32 matmuls run in full fp32 on the CUDA cores (slower; "
                "the memory is as planned)",
                "fp16 mixed precision (--dtype fp16) to use the tensor cores" if cc >= FP16 else "",
                "https://pytorch.org/docs/stable/notes/cuda.html"
                "#tensorfloat-32-tf32-on-ampere-and-later-devices",
            )
        )
    elif w.dtype == "fp16" and cc < FP16:
        out.append(
            PrecisionCheck(
                "fp16 compute",
                FP16,
                "note",
                "no tensor cores: fp16 matmuls run on the CUDA cores",
                "",
                "https://developer.nvidia.com/cuda-gpus",
            )
        )
    if not w.training and w.kv == "fp8" and w.dtype != "fp8" and cc < FP8:
        out.append(
            PrecisionCheck(
                "fp8 KV cache",
                FP8,
                "note",
                "no hardware fp8 conversion: the cache is stored in fp8 and converted in "
                "software for attention (the memory saving holds; attention is not faster)",
                "",
                "https://docs.vllm.ai/en/latest/features/quantization/quantized_kvcache/",
            )
        )
    if w.quant == "fp8":
        q = _quant_fp8(cc, moe)
        if q is not None:
            out.append(q)
    elif w.quant == "int4" and cc < AWQ:
        out.append(
            PrecisionCheck(
                "int4 weights",
                AWQ,
                "note",
                "AWQ's kernels need Turing or newer; a GPTQ checkpoint runs here",
                "a GPTQ int4 checkpoint (the same memory)",
                "https://docs.vllm.ai/en/v0.9.2/features/quantization/supported_hardware.html",
            )
        )
    return tuple(out)


def check_line(c: PrecisionCheck, cc: CC) -> str:
    """One check in words: what it needs, what happens here, what fits."""
    text = (
        f"{c.severity}: {c.subject} needs {_needs(c.needs)}, this GPU has {cc_text(cc)}: "
        f"{c.happens}"
    )
    return text + (f"; instead: {c.instead}" if c.instead else "")


def quant_fits_gpu(quant: str, cc: CC | None, moe: bool = False) -> str:
    """ "" when weight-only `quant` runs on a GPU of `cc` (or `cc` is not known), else why not."""
    if cc is None:
        return ""
    if quant == "fp8" and (cc < FP8_MARLIN or (moe and cc < FP8)):
        need = FP8 if moe else FP8_MARLIN
        return f"not on this GPU: fp8 weights need {cc_text(need)}, it has {cc_text(cc)}"
    return ""
