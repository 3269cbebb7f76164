"""The FLOPs a model does per token, from its shape: what model FLOPs utilization (MFU) divides
by the GPU's peak.

Per token, a forward pass multiplies each weight once (2 FLOPs: a multiply and an add) and the
backward pass twice as much again, so training costs 6·N and inference 2·N, N the parameters of
the matrix multiplications a token passes through (Kaplan et al. 2020, "Scaling Laws for Neural
Language Models", section 2.1, https://arxiv.org/abs/2001.08361). Attention adds, per token and
layer, the scores and their weighted sum over the context: 2·2·d·s forward (d the query width,
heads × head_dim; s the tokens attended to), so 12·L·d·s in training; with 6·N this is the
model FLOPs of PaLM's MFU (Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with
Pathways", appendix B, https://arxiv.org/abs/2204.02311), counted without causal masking as there.

N leaves out the embedding tables (a lookup, not a matmul) and keeps the output head (a matmul,
also where its weight is the embedding's: tied). A Mixture-of-Experts layer counts the experts a
token is routed to (`shape.active_parameters`), not all of them. A layer that attends within a
sliding window attends to min(s, window) tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from .shape import ModelShape, active_parameters, tensors

TRAIN_MATMUL = 6  # FLOPs per matmul parameter and token: forward 2, backward 4
INFER_MATMUL = 2
TRAIN_ATTENTION = 12  # FLOPs per query width, context token and layer: 3 × (2 + 2)
INFER_ATTENTION = 4


@dataclass(frozen=True, slots=True)
class ModelFlops:
    """The FLOPs of one token through a model of a given context."""

    matmul_params: int  # N: the active parameters of the matmuls (no embedding tables)
    matmul: int  # 6·N (training) or 2·N (inference)
    attention: int  # 12·Σ d·s over the layers (training) or 4·Σ d·s
    seq: int
    training: bool

    @property
    def per_token(self) -> int:
        return self.matmul + self.attention

    @property
    def formula(self) -> str:
        """How it was counted, in the papers' terms."""
        return "6N + 12·L·d·s" if self.training else "2N + 4·L·d·s"


def matmul_parameters(shape: ModelShape) -> int:
    """The active parameters a token's matmuls use: every parameter a token passes through, less
    the embedding tables, plus the output head's weight where it is the embedding's (tied)."""
    embedding = sum(g.numel for g in tensors(shape) if g.part == "embedding")
    head = (
        shape.vocab * shape.hidden if shape.tied_embeddings and shape.head in ("lm", "mlm") else 0
    )
    return active_parameters(shape) - embedding + head


def attended(shape: ModelShape, seq: int) -> int:
    """Σ over the layers of the tokens each attends to: s, or the window for sliding layers."""
    window = shape.sliding_window
    sliding = min(shape.sliding_layers, shape.layers) if window else 0
    near = min(seq, window) if window else seq
    return (shape.layers - sliding) * seq + sliding * near


def flops_per_token(shape: ModelShape, seq: int, training: bool = True) -> ModelFlops:
    """The model FLOPs of one token in a sequence of `seq` tokens, training (forward and
    backward) or inference (forward)."""
    n = matmul_parameters(shape)
    seq = max(1, int(seq))
    per_n, per_attention = (
        (TRAIN_MATMUL, TRAIN_ATTENTION) if training else (INFER_MATMUL, INFER_ATTENTION)
    )
    return ModelFlops(
        matmul_params=n,
        matmul=per_n * n,
        attention=per_attention * shape.q_dim * attended(shape, seq),
        seq=seq,
        training=training,
    )
