"""How the model is run (`Workload`: training or inference, the dtype and precision, the
optimizer, batch, context, sharding, checkpointing, weight-only quantisation, tensor
parallelism), what makes a workload impossible, and the bytes per value it implies
(`Precision`). `terms.py` sizes the memory from them."""

from __future__ import annotations

from dataclasses import dataclass

from .optimizers import OPTIMIZERS
from .quant import QUANTS
from .shape import DTYPE_BYTES

MODES = ("train", "infer")
DTYPES = tuple(DTYPE_BYTES)
PRECISIONS = ("master", "amp", "pure")
CHECKPOINTING = ("none", "selective", "full")

# The CUDA context, the kernels it loads and the libraries' workspaces: what a process holds
# before its first tensor. An assumption, shown as one (measure it: nvidia-smi beside a process
# that ran `torch.zeros(1, device="cuda")`); `--overhead` replaces it.
RUNTIME_BYTES = 512 * 2**20


@dataclass(frozen=True, slots=True)
class Workload:
    """How the model is run. `precision` matters for 16-bit training only: "master" keeps 16-bit
    weights and gradients with an fp32 master copy in the optimizer (DeepSpeed, Megatron, FSDP
    MixedPrecision), "amp" autocasts over fp32 weights (torch.autocast, HF Trainer --bf16),
    "pure" keeps everything in 16 bits (model.to(torch.bfloat16))."""

    mode: str = "train"
    dtype: str = "bf16"
    precision: str = "master"
    optimizer: str = "adamw"
    batch: int = 1
    seq: int = 2048
    zero: int = 0
    fsdp: bool = False
    world: int = 1
    checkpointing: str = "none"
    flash_attention: bool = False
    kv_dtype: str | None = None  # None: the dtype (16-bit where the dtype is fp8)
    overhead_bytes: int = RUNTIME_BYTES
    quant: str | None = None  # inference: weight-only "int8", "int4", "fp8"; None: the dtype
    tp: int = 1  # inference: tensor-parallel GPUs the model is split over

    @property
    def stage(self) -> int:
        """The ZeRO stage in effect (FSDP's full sharding is stage 3)."""
        return 3 if self.fsdp else self.zero

    @property
    def training(self) -> bool:
        return self.mode == "train"

    @property
    def kv(self) -> str:
        if self.kv_dtype is not None:
            return self.kv_dtype
        return "bf16" if self.dtype == "fp8" else self.dtype


def workload_problems(w: Workload) -> list[str]:
    out = []
    for name, value, allowed in (
        ("mode", w.mode, MODES),
        ("dtype", w.dtype, DTYPES),
        ("optimizer", w.optimizer, OPTIMIZERS),
        ("precision", w.precision, PRECISIONS),
        ("checkpointing", w.checkpointing, CHECKPOINTING),
    ):
        if value not in allowed:
            out.append(f"--{name} must be one of {', '.join(allowed)}, not {value!r}")
    if w.kv_dtype is not None and w.kv_dtype not in DTYPES:
        out.append(f"--kv-dtype must be one of {', '.join(DTYPES)}, not {w.kv_dtype!r}")
    if w.quant is not None:
        if w.quant not in QUANTS:
            out.append(f"--quant must be one of {', '.join(QUANTS)}, not {w.quant!r}")
        elif w.training:
            out.append(
                "--quant is weight-only quantisation for inference (--mode infer); training "
                "keeps its weights in --dtype (QLoRA's frozen 4-bit base is not modelled)"
            )
        elif w.dtype == "fp8":
            out.append(
                "--quant keeps the weights in low bits and computes in --dtype: give --dtype "
                "bf16 or fp16 (--dtype fp8 already stores the weights in fp8)"
            )
    if w.tp < 1:
        out.append(f"--tp must be at least 1, not {w.tp}")
    elif w.tp > 1 and w.training:
        out.append(
            "--tp is modelled for inference (--mode infer); for training give --world N with "
            "--zero or --fsdp"
        )
    for name, v in (("batch", w.batch), ("seq", w.seq), ("world", w.world)):
        if v < 1:
            out.append(f"--{name} must be at least 1, not {v}")
    if not 0 <= w.zero <= 3:
        out.append(f"--zero must be 0, 1, 2 or 3, not {w.zero}")
    if w.overhead_bytes < 0:
        out.append("--overhead cannot be negative")
    return out


@dataclass(frozen=True, slots=True)
class Precision:
    """Bytes per parameter of each model state, and per activation value."""

    weights: int
    grads: int
    states: int  # the optimizer's own states (AdamW's moments, SGD's momentum)
    master: int  # an fp32 master copy of the weights, kept by the optimizer
    activations: int
    words: str


def precision_of(w: Workload) -> Precision:
    if not w.training:
        act = 4 if w.dtype == "fp32" else 2
        if w.quant:
            words = f"{w.quant} weights (weight-only), {w.dtype} compute"
            return Precision(DTYPE_BYTES[w.dtype], 0, 0, 0, act, words)
        return Precision(DTYPE_BYTES[w.dtype], 0, 0, 0, act, f"{w.dtype} weights")
    if w.dtype == "fp32":
        return Precision(4, 4, 4, 0, 4, "fp32")
    half = "bf16" if w.dtype == "fp8" else w.dtype
    lead = f"{w.dtype} compute, " if w.dtype == "fp8" else ""
    if w.precision == "amp":
        return Precision(4, 4, 4, 0, 2, f"{lead}{half} autocast over fp32 weights")
    if w.precision == "pure":
        return Precision(2, 2, 2, 0, 2, f"{lead}{half} throughout, no master weights")
    return Precision(2, 2, 4, 4, 2, f"{lead}{half} mixed precision with fp32 master weights")
