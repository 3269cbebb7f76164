"""What each optimizer keeps on the device, tensor by tensor, exactly as it allocates it.

torch.optim.AdamW keeps exp_avg and exp_avg_sq like the parameter (its `step` a host scalar
unless fused or capturable); torch.optim.SGD keeps a momentum_buffer only with momentum
(https://pytorch.org/docs/stable/optim.html); transformers' Adafactor keeps a factored second
moment (a row and a column vector per matrix, the whole of a vector) and an RMS scalar, in fp32
(Shazeer & Stern 2018, arXiv:1804.04235); bitsandbytes' 8-bit Adam keeps two uint8 states with
one fp32 absmax per block of 256 values, and fp32 states for tensors under 4096 values (Dettmers
et al. 2022, "8-bit Optimizers via Block-wise Quantization", arXiv:2110.02861; bitsandbytes
`Optimizer2State.init_state`, `min_8bit_size`). The fp32 master weights of mixed precision are
the plan's, not the optimizer's.
"""

from __future__ import annotations

from math import ceil, prod

from .shape import ModelShape, tensors

OPTIMIZERS = ("adamw", "sgd", "sgd-momentum", "adafactor", "adam8bit")
OPTIMIZER_NAMES = {
    "adamw": "AdamW",
    "sgd": "SGD",
    "sgd-momentum": "SGD with momentum",
    "adafactor": "Adafactor",
    "adam8bit": "8-bit Adam",
}
# bitsandbytes' 8-bit optimizers: block size and the smallest tensor kept in 8 bits
BNB_BLOCK = 256
BNB_MIN_8BIT_SIZE = 4096


def optimizer_state_bytes(shape: ModelShape, optimizer: str, state_bytes: int) -> int:
    """The optimizer's own state on the device, tensor by tensor, exactly as the optimizer
    allocates it (master weights not included)."""
    total = 0
    for g in tensors(shape):
        n = prod(g.dims)
        if optimizer == "adamw":
            per = 2 * n * state_bytes  # exp_avg, exp_avg_sq; `step` stays on the host
        elif optimizer == "sgd-momentum":
            per = n * state_bytes  # momentum_buffer
        elif optimizer == "adafactor":  # fp32 whatever the parameter's dtype
            if len(g.dims) >= 2:
                rows = prod(g.dims[:-1])
                cols = prod(g.dims[:-2]) * g.dims[-1]
                per = 4 * (rows + cols) + 4  # exp_avg_sq_row, exp_avg_sq_col, RMS
            else:
                per = 4 * n + 4  # exp_avg_sq, RMS
        elif optimizer == "adam8bit":
            if n >= BNB_MIN_8BIT_SIZE:
                per = 2 * n + 2 * 4 * ceil(n / BNB_BLOCK)  # state1, state2, absmax1, absmax2
            else:
                per = 2 * n * 4
        else:  # plain SGD keeps nothing
            per = 0
        total += per * g.count
    return total


def optimizer_formula(optimizer: str, states: int, master: int) -> str:
    """The optimizer term's formula in words, for one line of the plan."""
    extra = f" + Ψ × {master} B master" if master else ""
    if optimizer == "adamw":
        return f"Ψ × 2 moments × {states} B{extra}"
    if optimizer == "sgd-momentum":
        return f"Ψ × 1 momentum × {states} B{extra}"
    if optimizer == "adafactor":
        return f"(rows + columns) of each matrix × 4 B, a vector's size × 4 B{extra}"
    if optimizer == "adam8bit":
        return f"Ψ × 2 × (1 B + 4 B per {BNB_BLOCK} values){extra}"
    return f"none{extra}"


OPTIMIZER_SOURCES = {
    "adamw": "torch.optim.AdamW keeps exp_avg and exp_avg_sq per parameter",
    "sgd": "torch.optim.SGD without momentum keeps no state",
    "sgd-momentum": "torch.optim.SGD keeps one momentum_buffer per parameter",
    "adafactor": "Adafactor (Shazeer & Stern 2018) factors the second moment, in fp32",
    "adam8bit": "8-bit Adam, block-wise quantized (Dettmers et al. 2022, bitsandbytes); "
    "tensors under 4096 values keep fp32 states",
}
