"""Weight-only quantisation for inference: the linear layers' weights in 8 or 4 bits, the
activations and the KV cache in the compute dtype.

What is quantised: the weight matrices of attention, the MLP and the experts. The embedding, the
norms, the biases, the MoE router and the output layer stay in the compute dtype, as the common
tools leave them (transformers keeps the output layer unquantised, `modules_to_not_convert`:
https://huggingface.co/docs/transformers/main/en/quantization/overview; AWQ's Mixtral
checkpoints keep the router `gate`).

The bytes of a matrix of `rows` outputs × `cols` inputs, per scheme:
- int8: one byte a weight and one fp32 scale per output row (bitsandbytes' LLM.int8(): `CB`
  and `SCB`, Dettmers et al. 2022, arXiv:2208.07339;
  https://huggingface.co/docs/bitsandbytes/main/en/reference/nn/linear8bit).
- int4: half a byte a weight, and per group of 128 inputs of each output an fp16 scale and a
  4-bit zero point (GPTQ's and AWQ's `qweight`, `scales`, `qzeros` with the default group size
  128: Frantar et al. 2022, arXiv:2210.17323; Lin et al. 2023, arXiv:2306.00978;
  https://huggingface.co/docs/transformers/main/en/quantization/gptq): 0.5 + 2.5/128 ≈ 0.52
  bytes a weight. GPTQ's act-order index (`g_idx`, 4 bytes per input) is not counted.
- fp8: one byte a weight and one fp32 scale per matrix (per expert in a fused expert tensor):
  vLLM's per-tensor fp8 (https://docs.vllm.ai/en/latest/features/quantization/fp8.html).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

from .shape import TensorGroup

QUANTS = ("int8", "int4", "fp8")
INT4_GROUP = 128  # GPTQConfig's and AwqConfig's default group_size
QUANT_WORDS = {
    "int8": "int8 (one fp32 scale per output row)",
    "int4": f"int4 (fp16 scale and 4-bit zero per {INT4_GROUP} inputs)",
    "fp8": "fp8 (one fp32 scale per matrix)",
}
# Tensors kept in the compute dtype even where they are matrices
_KEPT = ("router.weight", "shared_expert_gate.weight")


def quantised(g: TensorGroup) -> bool:
    """Whether weight-only quantisation stores this tensor in the low-bit format."""
    return g.part in ("attention", "mlp", "experts") and len(g.dims) >= 2 and g.name not in _KEPT


def matrix_bytes(dims: tuple[int, ...], quant: str) -> int:
    """The stored bytes of one weight tensor [..., rows, cols] under `quant`, its scales and
    zero points included (a 3-D expert tensor is one matrix per expert)."""
    *lead, rows, cols = dims
    mats = prod(lead) if lead else 1
    if quant == "int8":
        return mats * (rows * cols + 4 * rows)
    if quant == "int4":
        groups = ceil(cols / INT4_GROUP)
        return mats * (ceil(rows * cols / 2) + 2 * rows * groups + ceil(rows * groups / 2))
    if quant == "fp8":
        return mats * (rows * cols + 4)
    raise ValueError(quant)


@dataclass(frozen=True, slots=True)
class QuantWeights:
    bytes: int
    quantised: int  # parameters stored in the low-bit format
    kept: int  # parameters left in the compute dtype


def quantised_weights(
    groups: tuple[TensorGroup, ...], quant: str, dtype_bytes: int
) -> QuantWeights:
    """The weights of `groups` with their matrices in `quant`, the rest at `dtype_bytes`."""
    total = low = kept = 0
    for g in groups:
        if quantised(g):
            total += matrix_bytes(g.dims, quant) * g.count
            low += g.numel
        else:
            total += g.numel * dtype_bytes
            kept += g.numel
    return QuantWeights(total, low, kept)
