"""The memory of one GPU, term by term: weights, gradients, optimizer state, activations, logits,
KV cache, buffers and the runtime's own share.

Sources, one per term (the formula and its source travel with each `Term`):
- Model states: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models" (arXiv:1910.02054), section 3.1: mixed-precision Adam keeps 2 + 2 + 12 bytes
  per parameter (16-bit weights and gradients; fp32 master weights, momentum and variance), and
  ZeRO stages 1, 2 and 3 divide the optimizer state, then the gradients, then the weights across
  the data-parallel ranks (FSDP's FULL_SHARD is stage 3:
  https://pytorch.org/docs/stable/fsdp.html).
- Optimizer state per tensor: `optimizers.py` (torch.optim, transformers' Adafactor,
  bitsandbytes' 8-bit Adam).
- Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
  Models" (arXiv:2205.05198), section 4: per layer s·b·h·(34 + 5·a·s/h) bytes at 16-bit, each
  term sized here by the model's own dimensions (grouped KV heads, gated MLPs, dropout or none);
  34·s·b·h with selective recomputation, 2·s·b·h with full recomputation. FlashAttention keeps
  no s×s scores, only a log-sum-exp per head and token (Dao et al. 2022, arXiv:2205.14135).
- KV cache: 2·L·H_kv·T·d_head·b values (the keys and values of every layer); a sliding-window
  layer keeps its last W−1 tokens (transformers' DynamicSlidingWindowLayer).
- Inference on N GPUs with tensor parallelism: one GPU's slice of the weights, KV cache and
  activations (`parallel.py`); weight-only quantisation: `quant.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from .optimizers import (
    OPTIMIZER_NAMES,
    OPTIMIZER_SOURCES,
    optimizer_formula,
    optimizer_state_bytes,
)
from .parallel import kv_replicated, rank_shape, tp_problems
from .quant import QUANT_WORDS, quantised_weights
from .shape import DTYPE_BYTES, ModelShape, layer_parameters, parameter_count, tensors
from .workload import Precision, Workload, precision_of

# DeepSpeed's default reduce_bucket_size (elements), ZeRO stages 1 and 2
# (https://www.deepspeed.ai/docs/config-json/#zero-optimizations-for-fp16-training)
ZERO_REDUCE_BUCKET = 500_000_000


@dataclass(frozen=True, slots=True)
class Term:
    key: str  # "weights", "gradients", "optimizer", "activations", "logits", "kv_cache", ...
    label: str
    bytes: int
    formula: str  # the formula with this plan's figures, one line
    source: str  # where it comes from, one sentence


@dataclass(frozen=True, slots=True)
class Plan:
    shape: ModelShape
    workload: Workload
    parameters: int
    terms: tuple[Term, ...]

    @property
    def total(self) -> int:
        return sum(t.bytes for t in self.terms)

    def term(self, key: str) -> int:
        return sum(t.bytes for t in self.terms if t.key == key)

    @property
    def model_states(self) -> int:
        return self.term("weights") + self.term("gradients") + self.term("optimizer")


def _shard(n: int, w: Workload, stage: int) -> int:
    return ceil(n / w.world) if w.world > 1 and w.stage >= stage else n


def _ranks(w: Workload, stage: int) -> str:
    return f" / {w.world} ranks" if w.world > 1 and w.stage >= stage else ""


def _mlp_values(shape: ModelShape, inter: int) -> int:
    """Values an MLP keeps per token for its backward: gated (gate and up outputs, the
    activation's output, their product) or plain (the activation's input and output)."""
    return (4 if shape.gated_mlp else 2) * inter


def layer_activations(shape: ModelShape, w: Workload, e: int) -> tuple[int, int]:
    """(bytes per token, bytes per token per token of context) one layer keeps for backward:
    Korthikanti et al.'s terms, each sized by this model's dimensions. With GPT's shape (h
    heads of h/a, MLP 4h, dropout everywhere, LayerNorm) the two are 34·h and 5·a."""
    h, q, kv, a = shape.hidden, shape.q_dim, shape.kv_dim, shape.heads
    lin = shape.norms_per_layer * e * h  # each norm's input
    lin += e * h  # the QKV projection's input
    lin += e * (q + kv)  # Q and K for Q·Kᵀ
    lin += e * kv  # V
    lin += e * q  # the attention output, the output projection's input
    if shape.qk_norm:
        lin += e * (q + kv)
    lin += e * h  # the MLP's input
    if shape.moe_layers and shape.layers:
        k = shape.active_experts
        moe = e * shape.experts + k * (e * h + e * _mlp_values(shape, shape.expert_intermediate))
        moe += e * _mlp_values(shape, shape.shared_expert_intermediate)
        dense = e * _mlp_values(shape, shape.intermediate)
        lin += (moe * shape.moe_layers + dense * shape.dense_layers) // shape.layers
    else:
        lin += e * _mlp_values(shape, shape.intermediate)
    if shape.hidden_dropout > 0:
        lin += 2 * h  # the dropout masks after attention and after the MLP (1 byte each)
    quad = 0
    if w.flash_attention:
        lin += 4 * a  # the fp32 log-sum-exp per head
    else:
        quad = e * a  # softmax output
        if shape.attention_dropout > 0:
            quad += a + e * a  # its dropout mask and output
    return lin, quad


def _activation_term(shape: ModelShape, w: Workload, p: Precision) -> Term:
    e, b, s, L = p.activations, w.batch, w.seq, shape.layers
    lin, quad = layer_activations(shape, w, e)
    one_layer = (lin + quad * s) * b * s
    src = "Korthikanti et al. 2022, sec. 4 (Megatron), sized by this model's dimensions"
    if not w.training:
        return Term(
            "activations",
            "activations",
            one_layer,
            f"one layer's working set, the prefill of b×s tokens at once: s·b·({lin} + {quad}·s)",
            "the forward pass frees each layer's activations as it goes (an upper bound); a "
            "server's chunked prefill bounds it by the chunk (vLLM --max-num-batched-tokens)",
        )
    attn = "flash attention: no s×s scores" if w.flash_attention else f"{quad}·s for the scores"
    if w.checkpointing == "full":
        kept = e * shape.hidden * b * s * L
        return Term(
            "activations",
            "activations (full recomputation)",
            kept + one_layer,
            f"each layer's input {e}·s·b·h × {L} layers + one layer recomputed "
            f"s·b·({lin} + {quad}·s)",
            src + "; full recomputation keeps 2·s·b·h per layer",
        )
    if w.checkpointing == "selective":
        return Term(
            "activations",
            "activations (selective recomputation)",
            lin * b * s * L,
            f"s·b·{lin} bytes per layer × {L} layers (attention core recomputed)",
            src + "; selective recomputation keeps 34·s·b·h per layer",
        )
    extra = e * shape.hidden if shape.final_norm else 0  # the final norm's input
    if shape.hidden_dropout > 0:
        extra += shape.hidden  # the embeddings' dropout mask
    return Term(
        "activations",
        "activations",
        one_layer * L + extra * b * s,
        f"s·b·({lin} + {quad}·s) bytes per layer × {L} layers ({attn})",
        src + ": s·b·h·(34 + 5·a·s/h) for GPT",
    )


def _logits_term(shape: ModelShape, w: Workload, p: Precision) -> Term | None:
    if shape.head not in ("lm", "mlm"):
        return None
    e, V = p.activations, shape.vocab
    if not w.training:
        return Term(
            "logits",
            "logits",
            w.batch * V * (e + 4),
            f"b·V·({e} + 4): the last position's logits and their fp32 copy",
            "generation computes the logits of the last position only",
        )
    per = e + (4 if e < 4 else 0) + 4
    return Term(
        "logits",
        "logits and loss",
        w.batch * w.seq * V * per,
        f"b·s·V·{per}: the logits, their fp32 copy and the log-softmax kept for backward",
        "Korthikanti et al. 2022 count 4·s·b·V for the fp32 cross entropy; transformers' "
        "causal-LM loss upcasts the logits to fp32",
    )


def kv_cache_tokens(shape: ModelShape, seq: int) -> int:
    """Tokens held over all layers: a sliding-window layer keeps its last W−1."""
    full = shape.layers - shape.sliding_layers
    window = shape.sliding_window or seq + 1
    return full * seq + shape.sliding_layers * min(seq, window - 1)


def kv_cache_bytes(shape: ModelShape, batch: int, seq: int, kv_dtype: str) -> int:
    """2 (keys and values) · Σ_layers tokens · H_kv · d_head · b · bytes."""
    return 2 * kv_cache_tokens(shape, seq) * shape.kv_dim * batch * DTYPE_BYTES[kv_dtype]


def _kv_term(shape: ModelShape, local: ModelShape, w: Workload) -> Term | None:
    """`local`: the slice of `shape` one GPU holds (the shape itself without --tp)."""
    if w.training:
        return None
    if shape.head in ("mlm", "pooler"):
        return Term(
            "kv_cache", "KV cache", 0, "none", "an encoder reads its input at once: no KV cache"
        )
    window = ""
    if shape.sliding_layers:
        window = f"; {shape.sliding_layers} sliding-window layers hold {shape.sliding_window - 1}"
    source = "the keys and values of every layer for every token of every sequence"
    if w.tp > 1:
        if kv_replicated(shape, w.tp):
            window += (
                f"; H_kv per GPU: 1 of {shape.kv_heads}, replicated {w.tp // shape.kv_heads}× "
                f"over --tp {w.tp}"
            )
            source += (
                "; with fewer KV heads than GPUs each GPU holds one, replicated (vLLM's "
                "QKVParallelLinear), so the cache per GPU stops shrinking at tp = KV heads"
            )
        else:
            window += f"; H_kv per GPU: {shape.kv_heads} / {w.tp}"
            source += "; tensor parallelism splits the KV heads over the GPUs"
    return Term(
        "kv_cache",
        f"KV cache ({w.kv})",
        kv_cache_bytes(local, w.batch, w.seq, w.kv),
        f"2·L·H_kv·T·d_head·b·{DTYPE_BYTES[w.kv]} = 2·{shape.layers}·{local.kv_heads}·{w.seq}·"
        f"{shape.head_dim}·{w.batch}·{DTYPE_BYTES[w.kv]}{window}",
        source,
    )


def _buffers_term(shape: ModelShape, w: Workload, p: Precision, params: int) -> Term | None:
    if not w.training or w.world <= 1:
        return None
    if w.stage >= 3:
        layer = layer_parameters(shape)
        return Term(
            "buffers",
            "gathered layers",
            2 * layer * p.weights,
            f"2 layers × {layer:,} parameters × {p.weights} B: the layer running and the next "
            "one prefetched, gathered whole",
            "ZeRO-3 / FSDP all-gather each layer's full weights just before using it",
        )
    if w.stage >= 1:
        n = min(ZERO_REDUCE_BUCKET, params)
        return Term(
            "buffers",
            "reduce bucket",
            n * p.grads,
            f"min(5e8, Ψ) elements × {p.grads} B",
            "DeepSpeed's default reduce_bucket_size for ZeRO stages 1 and 2",
        )
    return Term(
        "buffers",
        "DDP gradient buckets",
        params * p.grads,
        f"Ψ × {p.grads} B: a bucket copy of every gradient",
        "PyTorch DDP keeps gradients in buckets besides .grad unless gradient_as_bucket_view=True",
    )


def _scaled(x: int, parameters: int | None, full: int) -> int:
    """`x` scaled from the shape's count to --params where given."""
    if parameters is None or parameters == full:
        return x
    return round(x * parameters / max(1, full))


def _weights_term(
    shape: ModelShape, local: ModelShape, w: Workload, p: Precision, n: int, given: int | None
) -> Term:
    """The weights one GPU holds: all of them, a ZeRO-3 shard, a tensor-parallel slice, each
    in the weights' dtype or weight-only quantised."""
    full = parameter_count(shape)
    share = _scaled(parameter_count(local), given, full) if w.tp > 1 else n
    of = f"Ψ = {n:,} parameters"
    if w.tp > 1:
        of = f"Ψ/GPU = {share:,} of Ψ = {n:,} parameters, --tp {w.tp}"
    split = (
        "; tensor parallelism splits attention, the MLP, the experts and the vocabulary over "
        "the GPUs, replicating the norms and the router"
        if w.tp > 1
        else ""
    )
    if w.quant:
        q = quantised_weights(tensors(local), w.quant, p.weights)
        low_bytes = q.bytes - q.kept * p.weights
        return Term(
            "weights",
            f"weights ({w.quant}, weight-only)",
            _scaled(q.bytes, given, full),
            f"{q.quantised:,} quantised × {low_bytes / max(1, q.quantised):.4g} B + "
            f"{q.kept:,} kept × {p.weights} B ({of})",
            f"weight-only {QUANT_WORDS[w.quant]} for the linear layers; the embedding, norms, "
            f"biases, router and output layer in {w.dtype}" + split,
        )
    return Term(
        "weights",
        "weights",
        _shard(share * p.weights, w, 3),
        f"{'Ψ/GPU' if w.tp > 1 else 'Ψ'} × {p.weights} B{_ranks(w, 3)} ({of})",
        "the ZeRO paper's count: "
        + ("16-bit weights" if p.weights == 2 else f"{p.weights}-byte weights")
        + (", divided across ranks at stage 3" if w.training else "")
        + split,
    )


def plan(shape: ModelShape, w: Workload, parameters: int | None = None) -> Plan:
    """Every term of one GPU's memory. `parameters` replaces the shape's own count (the
    --params option: a model known by its size only). With `w.tp` > 1, one GPU of the
    tensor-parallel group (`parallel.py`)."""
    n = parameter_count(shape) if parameters is None else parameters
    p = precision_of(w)
    bad = tp_problems(shape, w.tp)
    if bad:
        raise ValueError("; ".join(bad))
    local = rank_shape(shape, w.tp)
    terms = [_weights_term(shape, local, w, p, n, parameters)]
    if w.training:
        terms.append(
            Term(
                "gradients",
                "gradients",
                _shard(n * p.grads, w, 2),
                f"Ψ × {p.grads} B{_ranks(w, 2)}",
                "one gradient per weight, in the weights' dtype; divided at ZeRO stage 2",
            )
        )
        own = optimizer_state_bytes(shape, w.optimizer, p.states)
        if parameters is not None and parameters != parameter_count(shape):
            own = round(own * parameters / max(1, parameter_count(shape)))
        master = n * p.master
        what = OPTIMIZER_NAMES[w.optimizer]
        formula = optimizer_formula(w.optimizer, p.states, p.master)
        terms.append(
            Term(
                "optimizer",
                f"optimizer state ({what})",
                _shard(own + master, w, 1),
                formula + _ranks(w, 1),
                OPTIMIZER_SOURCES[w.optimizer]
                + ("; plus the fp32 master weights (ZeRO: 4 of its 12 B)" if master else ""),
            )
        )
    terms.append(_activation_term(local, w, p))
    for extra in (
        _logits_term(shape, w, p),
        _kv_term(shape, local, w),
        _buffers_term(shape, w, p, n),
    ):
        if extra is not None:
            terms.append(extra)
    terms.append(
        Term(
            "runtime",
            "CUDA context and workspaces",
            w.overhead_bytes,
            f"{w.overhead_bytes / 2**30:.2f} GiB assumed (--overhead)",
            "what a process holds before its first tensor; measure it with nvidia-smi",
        )
    )
    return Plan(shape, w, n, tuple(terms))
