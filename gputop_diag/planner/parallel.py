"""Tensor parallelism for inference: what one GPU of N holds.

Megatron-LM's layout (Shoeybi et al. 2019, "Megatron-LM", arXiv:1909.08053, sec. 3), as vLLM
runs it (https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/layers/linear.py,
`ColumnParallelLinear`, `RowParallelLinear`, `QKVParallelLinear`): the query, key and
value projections and the MLP's gate and up projections are split by columns (heads, and the
intermediate size), the output and down projections by rows, so each GPU holds 1/N of them; an
MoE layer splits every expert's intermediate size the same way (vLLM's FusedMoE without expert
parallelism); the embedding and the output layer are split by vocabulary (VocabParallelEmbedding,
ParallelLMHead; its padding of the vocabulary to a multiple of 64 is not counted); the norms, the
biases added after a row split, the router and position embeddings are replicated.

Keys and values follow the KV heads: with H_kv ≥ N each GPU holds H_kv/N of them; with grouped-
query attention where H_kv < N each GPU holds one KV head, replicated N/H_kv times (vLLM's
QKVParallelLinear: `num_kv_head_replicas`), so the KV cache per GPU stops shrinking at N = H_kv.
Each GPU's activations keep the full hidden size (after each all-reduce) and 1/N of the heads
and of the intermediate size. The logits are gathered whole (vocabulary-parallel, then gathered).
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from .shape import ModelShape


def kv_heads_per_rank(shape: ModelShape, tp: int) -> int:
    """The KV heads one GPU holds: H_kv/N, or one (replicated) where H_kv < N."""
    return max(1, shape.kv_heads // tp)


def kv_replicated(shape: ModelShape, tp: int) -> bool:
    return tp > shape.kv_heads


def tp_problems(shape: ModelShape, tp: int) -> list[str]:
    """Why `shape` cannot be split over `tp` GPUs (vLLM's checks: heads divide evenly, and KV
    heads divide N or N divides them)."""
    if tp < 1:
        return [f"--tp must be at least 1, not {tp}"]
    if tp == 1:
        return []
    out = []
    if shape.heads % tp:
        out.append(f"{shape.heads} attention heads cannot be split evenly over --tp {tp}")
    elif shape.kv_heads >= tp and shape.kv_heads % tp:
        out.append(f"{shape.kv_heads} KV heads cannot be split evenly over --tp {tp}")
    elif shape.kv_heads < tp and tp % shape.kv_heads:
        out.append(f"--tp {tp} is not a multiple of the {shape.kv_heads} KV heads (to replicate)")
    return out


def rank_shape(shape: ModelShape, tp: int) -> ModelShape:
    """The slice of the model one GPU of `tp` holds, as a shape: its heads, KV heads,
    intermediate sizes and vocabulary divided; the hidden size whole. Its parameter count is the
    GPU's share of the weights, its activations and KV cache the GPU's (the logits excepted:
    they are gathered whole)."""
    if tp <= 1:
        return shape
    return replace(
        shape,
        heads=shape.heads // tp,
        kv_heads=kv_heads_per_rank(shape, tp),
        intermediate=ceil(shape.intermediate / tp),
        expert_intermediate=ceil(shape.expert_intermediate / tp),
        shared_expert_intermediate=ceil(shape.shared_expert_intermediate / tp),
        vocab=ceil(shape.vocab / tp),
    )
