"""A model's shape and the parameter tensors it implies.

The tensors are laid out as Hugging Face `transformers` lays them out (5.x): separate q/k/v/o
projections (one fused query-key-value tensor for GPT-2 and GPT-NeoX), gated MLPs as gate, up
and down projections, a Mixture-of-Experts layer as a router, one 3-D `gate_up_proj`
[experts, 2·I, h] and one `down_proj` [experts, h, I]. The count of parameters depends only on
the shapes; the per-tensor layout matters for what an optimizer keeps per tensor (Adafactor's
factored second moment, 8-bit Adam's small-tensor fallback), so it is kept exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import prod

# Bytes per element of the dtypes the planner speaks of.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True, slots=True)
class TensorGroup:
    """`count` parameter tensors of the same shape, all in one part of the model."""

    part: str  # "embedding", "attention", "mlp", "experts", "norm", "head"
    name: str  # transformers' name, without the layer index
    dims: tuple[int, ...]
    count: int = 1

    @property
    def numel(self) -> int:
        return prod(self.dims) * self.count


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the memory of a model depends on. A field left at its default is absent from the
    model (no biases, no learned positions, no experts)."""

    family: str  # "llama", "gpt2", ..., or "custom" (shape options)
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    gated_mlp: bool = True  # SwiGLU/GeGLU: gate, up and down projections; else up and down
    norm_bias: bool = False  # LayerNorm (weight and bias) rather than RMSNorm (weight)
    norms_per_layer: int = 2  # Gemma 2: 4 (pre- and post-norms around attention and MLP)
    qk_norm: bool = False  # a norm over head_dim on queries and keys (Qwen3, Gemma 3)
    fused_qkv: bool = False  # one query-key-value tensor (GPT-2, GPT-NeoX)
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    positions: int = 0  # learned position embeddings (GPT-2, BERT)
    token_types: int = 0  # BERT's token-type embeddings
    embedding_norm: bool = False  # BERT: a LayerNorm after the embeddings
    final_norm: bool = True
    tied_embeddings: bool = False
    head: str = "lm"  # "lm" (causal LM), "mlm" (BERT's masked-LM head), "pooler", "none"
    experts: int = 0  # routed experts per MoE layer
    active_experts: int = 0  # experts each token goes through
    expert_intermediate: int = 0
    moe_layers: int = 0  # how many of the layers are MoE layers
    shared_expert_intermediate: int = 0  # Qwen-MoE's always-on expert
    shared_expert_gate: bool = False
    sliding_window: int | None = None
    sliding_layers: int = 0  # layers that attend within `sliding_window` only
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    max_positions: int | None = None

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers


# The sizes a shape must have above zero, as the options that set them name them.
OPTION_NAMES: dict[str, str] = {
    "layers": "--layers",
    "hidden": "--hidden",
    "heads": "--heads",
    "kv_heads": "--kv-heads",
    "head_dim": "--head-dim",
    "intermediate": "--intermediate",
    "vocab": "--vocab",
}


def _follows_a_bad_size(shape: ModelShape, field: str) -> bool:
    """Whether `field` is bad because a size it is derived from is: the head dimension from
    hidden / heads, KV heads one per head by default, GPT-2's inner size 4 x hidden."""
    if field == "head_dim":
        return shape.hidden <= 0 or shape.heads <= 0
    if field == "kv_heads":
        return shape.heads <= 0 and shape.kv_heads == shape.heads
    if field == "intermediate":
        return shape.hidden <= 0 and shape.intermediate == 4 * shape.hidden
    return False


def problems(shape: ModelShape, names: Mapping[str, str] | None = None) -> list[str]:
    """What makes `shape` impossible, in the words of what set it: `names` maps a size to the
    config's key for it (`hidden_size`), the options' names (`--hidden`) otherwise. A size
    derived from one already said to be bad is not said again."""
    said = {**OPTION_NAMES, **(names or {})}
    out = []
    for field in OPTION_NAMES:
        v = getattr(shape, field)
        if field == "intermediate" and shape.dense_layers <= 0:
            continue  # every layer an MoE layer: no dense MLP
        if v <= 0 and not _follows_a_bad_size(shape, field):
            out.append(f"{said[field]} must be a positive whole number, not {v}")
    if shape.heads > 0 and shape.kv_heads > 0 and shape.heads % shape.kv_heads:
        out.append(
            f"{shape.heads} heads cannot share {shape.kv_heads} KV heads evenly (grouped-query "
            "attention needs heads to be a multiple of KV heads)"
        )
    if shape.experts:
        if not 0 < shape.active_experts <= shape.experts:
            out.append(
                f"active experts must be between 1 and the {shape.experts} experts, "
                f"not {shape.active_experts}"
            )
        if shape.expert_intermediate <= 0:
            out.append("an MoE model needs the experts' intermediate size")
    if shape.fused_qkv and shape.kv_heads != shape.heads:
        out.append("a fused query-key-value projection has as many KV heads as heads")
    return out


def _norm(name: str, shape: ModelShape, dim: int, count: int) -> list[TensorGroup]:
    out = [TensorGroup("norm", f"{name}.weight", (dim,), count)]
    if shape.norm_bias:
        out.append(TensorGroup("norm", f"{name}.bias", (dim,), count))
    return out


def _attention(s: ModelShape) -> list[TensorGroup]:
    L, h = s.layers, s.hidden
    if s.fused_qkv:
        out = [TensorGroup("attention", "qkv.weight", (3 * s.q_dim, h), L)]
        if s.qkv_bias:
            out.append(TensorGroup("attention", "qkv.bias", (3 * s.q_dim,), L))
    else:
        out = [
            TensorGroup("attention", "q_proj.weight", (s.q_dim, h), L),
            TensorGroup("attention", "k_proj.weight", (s.kv_dim, h), L),
            TensorGroup("attention", "v_proj.weight", (s.kv_dim, h), L),
        ]
        if s.qkv_bias:
            out += [
                TensorGroup("attention", "q_proj.bias", (s.q_dim,), L),
                TensorGroup("attention", "k_proj.bias", (s.kv_dim,), L),
                TensorGroup("attention", "v_proj.bias", (s.kv_dim,), L),
            ]
    out.append(TensorGroup("attention", "o_proj.weight", (h, s.q_dim), L))
    if s.out_bias:
        out.append(TensorGroup("attention", "o_proj.bias", (h,), L))
    if s.qk_norm:  # RMSNorm over head_dim, weight only
        out += [
            TensorGroup("norm", "q_norm.weight", (s.head_dim,), L),
            TensorGroup("norm", "k_norm.weight", (s.head_dim,), L),
        ]
    return out


def _mlp(s: ModelShape, inter: int, count: int, part: str, prefix: str) -> list[TensorGroup]:
    if count == 0 or inter == 0:
        return []
    h = s.hidden
    ups = ("gate_proj", "up_proj") if s.gated_mlp else ("up_proj",)
    out = [TensorGroup(part, f"{prefix}{n}.weight", (inter, h), count) for n in ups]
    out.append(TensorGroup(part, f"{prefix}down_proj.weight", (h, inter), count))
    if s.mlp_bias:
        out += [TensorGroup(part, f"{prefix}{n}.bias", (inter,), count) for n in ups]
        out.append(TensorGroup(part, f"{prefix}down_proj.bias", (h,), count))
    return out


def _experts(s: ModelShape) -> list[TensorGroup]:
    n, h, E, ie = s.moe_layers, s.hidden, s.experts, s.expert_intermediate
    if not n:
        return []
    out = [TensorGroup("experts", "router.weight", (E, h), n)]
    up = 2 * ie if s.gated_mlp else ie
    out += [
        TensorGroup("experts", "experts.gate_up_proj", (E, up, h), n),
        TensorGroup("experts", "experts.down_proj", (E, h, ie), n),
    ]
    out += _mlp(s, s.shared_expert_intermediate, n, "experts", "shared_expert.")
    if s.shared_expert_gate:
        out.append(TensorGroup("experts", "shared_expert_gate.weight", (1, h), n))
    return out


def tensors(s: ModelShape) -> tuple[TensorGroup, ...]:
    """Every parameter tensor of the model, grouped by shape (tied weights once)."""
    h = s.hidden
    out = [TensorGroup("embedding", "embed_tokens.weight", (s.vocab, h))]
    if s.positions:
        out.append(TensorGroup("embedding", "position_embeddings.weight", (s.positions, h)))
    if s.token_types:
        out.append(TensorGroup("embedding", "token_type_embeddings.weight", (s.token_types, h)))
    if s.embedding_norm:
        out += _norm("embeddings.norm", s, h, 1)
    out += _attention(s)
    out += _norm("layer_norms", s, h, s.norms_per_layer * s.layers)
    out += _mlp(s, s.intermediate, s.dense_layers, "mlp", "mlp.")
    out += _experts(s)
    if s.final_norm:
        out += _norm("norm", s, h, 1)
    if s.head == "lm" and not s.tied_embeddings:
        out.append(TensorGroup("head", "lm_head.weight", (s.vocab, h)))
    elif s.head == "mlm":  # transform (dense + LayerNorm), the decoder's bias; its weight tied
        out += [
            TensorGroup("head", "transform.dense.weight", (h, h)),
            TensorGroup("head", "transform.dense.bias", (h,)),
            TensorGroup("head", "transform.norm.weight", (h,)),
            TensorGroup("head", "transform.norm.bias", (h,)),
            TensorGroup("head", "decoder.bias", (s.vocab,)),
        ]
        if not s.tied_embeddings:
            out.append(TensorGroup("head", "decoder.weight", (s.vocab, h)))
    elif s.head == "pooler":
        out += [
            TensorGroup("head", "pooler.dense.weight", (h, h)),
            TensorGroup("head", "pooler.dense.bias", (h,)),
        ]
    return tuple(g for g in out if g.count > 0)


def parameter_count(s: ModelShape) -> int:
    return sum(g.numel for g in tensors(s))


def tensor_count(s: ModelShape) -> int:
    return sum(g.count for g in tensors(s))


def layer_parameters(s: ModelShape) -> int:
    """The parameters of the largest transformer layer (an MoE layer where the model has
    them): what ZeRO-3 / FSDP gathers at a time."""
    groups = tensors(s)
    model_level = {"norm.weight", "norm.bias", "embeddings.norm.weight", "embeddings.norm.bias"}
    shared = sum(
        g.numel for g in groups if g.part in ("attention", "norm") and g.name not in model_level
    )
    mlp = sum(g.numel for g in groups if g.part == "mlp")
    experts = sum(g.numel for g in groups if g.part == "experts")
    biggest = experts // s.moe_layers if s.moe_layers else mlp // max(1, s.dense_layers)
    return shared // max(1, s.layers) + biggest


def active_parameters(s: ModelShape) -> int:
    """Parameters a token passes through: all of them, less the experts it is not routed to."""
    total = parameter_count(s)
    if not s.moe_layers:
        return total
    per_expert = (3 if s.gated_mlp else 2) * s.hidden * s.expert_intermediate
    return total - s.moe_layers * (s.experts - s.active_experts) * per_expert
