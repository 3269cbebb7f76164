"""A Hugging Face `config.json` (already parsed: a dict) as a `ModelShape`.

Each family is read by the field names its `transformers` configuration class uses (LlamaConfig,
MistralConfig, Qwen2Config, Qwen3Config, GemmaConfig, Gemma2Config, MixtralConfig,
Qwen2MoeConfig, GPT2Config, GPTNeoXConfig, BertConfig, RobertaConfig:
https://huggingface.co/docs/transformers/model_doc/llama and its siblings). A field the planner
needs and the file lacks is taken from that class's default and named; a field it does not know
is named as not read. Nothing is guessed silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .shape import ModelShape, problems

LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "mixtral", "qwen2_moe")
FAMILIES = (*LLAMA_LIKE, "gpt2", "gpt_neox", "bert", "roberta")

# Fields that do not change how much memory the model takes (token ids, initialisation, norm
# epsilons, rotary settings, activation function names, logit soft-capping, router loss weights,
# the task heads' names) or that the planner reads itself.
HARMLESS = frozenset(
    {
        "_name_or_path",
        "activation_function",
        "architectures",
        "attn_logit_softcapping",
        "bos_token_id",
        "cache_implementation",
        "classifier_dropout",
        "decoder_start_token_id",
        "dtype",
        "eos_token_id",
        "final_logit_softcapping",
        "gradient_checkpointing",
        "hidden_act",
        "hidden_activation",
        "id2label",
        "initializer_range",
        "is_decoder",
        "label2id",
        "layer_norm_eps",
        "layer_norm_epsilon",
        "model_type",
        "n_ctx",
        "norm_topk_prob",
        "output_router_logits",
        "pad_token_id",
        "partial_rotary_factor",
        "position_embedding_type",
        "pretraining_tp",
        "problem_type",
        "query_pre_attn_scalar",
        "reorder_and_upcast_attn",
        "rms_norm_eps",
        "rope_parameters",
        "rope_scaling",
        "rope_theta",
        "rotary_emb_base",
        "rotary_pct",
        "router_aux_loss_coef",
        "router_jitter_noise",
        "scale_attn_by_inverse_layer_idx",
        "scale_attn_weights",
        "sep_token_id",
        "summary_activation",
        "summary_first_dropout",
        "summary_proj_to_labels",
        "summary_type",
        "summary_use_proj",
        "task_specific_params",
        "tokenizer_class",
        "torch_dtype",
        "transformers_version",
        "use_cache",
        "use_parallel_residual",
        "attention_dropout",
        "attn_pdrop",
        "embd_pdrop",
        "resid_pdrop",
        "hidden_dropout",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "max_window_layers",
        "use_sliding_window",
        "layer_types",
    }
)

_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8"}


class ConfigError(ValueError):
    """The file cannot be read as a model: a missing field without a default, an unknown family,
    an impossible shape. The message names what and why."""


@dataclass(frozen=True, slots=True)
class ReadConfig:
    shape: ModelShape
    architecture: str | None  # the file's first `architectures` entry
    checkpoint_dtype: str | None  # "bf16", "fp16", "fp32": how the checkpoint is stored
    notes: tuple[str, ...] = ()  # defaults taken and values derived, one line each
    not_read: tuple[str, ...] = ()  # fields the planner does not know
    keys: Mapping[str, str] = field(default_factory=dict)  # a shape's size -> the key that set it


# A shape's sizes as the configs name them (transformers' LlamaConfig, GPTNeoXConfig, BertConfig
# and GPT2Config: https://huggingface.co/docs/transformers/model_doc/gpt2#transformers.GPT2Config).
KEYS = {
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "intermediate": "intermediate_size",
    "vocab": "vocab_size",
}
GPT2_KEYS = {
    "layers": "n_layer",
    "hidden": "n_embd",
    "heads": "n_head",
    "kv_heads": "n_head",
    "head_dim": "the head dimension (n_embd / n_head)",
    "intermediate": "n_inner",
    "vocab": "vocab_size",
}


# The largest whole number a config field may hold (a 32-bit int's, which some configs use as
# "no limit"): the largest real sizes (a vocabulary of a few hundred thousand, a context of a few
# million tokens) are far below it.
MAX_FIELD = 2**31 - 1


class _Reader:
    def __init__(self, doc: Mapping[str, Any], family: str) -> None:
        self.doc, self.family = doc, family
        self.read: set[str] = set()
        self.notes: list[str] = []
        self.missing: list[str] = []

    def need(self, name: str) -> int:
        self.read.add(name)
        v = self.doc.get(name)
        if v is None:
            self.missing.append(name)
            return 0
        return self._int(name, v)

    def _int(self, name: str, v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"{name} must be a whole number, not {v!r}")
        if v != int(v):
            raise ConfigError(f"{name} must be a whole number, not {v!r}")
        if v < 0:
            raise ConfigError(f"{name} must be a positive whole number, not {v!r}")
        if v > MAX_FIELD:  # no model has a dimension near it: a typo, or a file that is not one
            raise ConfigError(f"{name} of {v:.3g} is no model's size (at most {MAX_FIELD:,})")
        return int(v)

    def get(self, name: str, default: Any, why: str) -> Any:
        """The field, or `default` with a note saying so (`why`: where the default comes from)."""
        self.read.add(name)
        v = self.doc.get(name)
        if v is None:
            if why:
                self.notes.append(f"{name} not given: {default!r} ({why})")
            return default
        if isinstance(default, bool):
            if not isinstance(v, bool):
                raise ConfigError(f"{name} must be true or false, not {v!r}")
            return v
        if isinstance(default, float):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"{name} must be a number, not {v!r}")
            return float(v)
        if isinstance(default, int):
            return self._int(name, v)
        return v

    def optional_int(self, name: str) -> int | None:
        """A whole number the config may leave out (null): None then, without a note."""
        self.read.add(name)
        v = self.doc.get(name)
        return None if v is None else self._int(name, v)

    def int_list(self, name: str) -> list[int]:
        self.read.add(name)
        v = self.doc.get(name) or []
        if not isinstance(v, list):
            raise ConfigError(f"{name} must be a list of layer numbers, not {v!r}")
        return [self._int(name, x) for x in v]

    def derive(self, name: str, value: int, how: str) -> int:
        self.read.add(name)
        v = self.doc.get(name)
        if v is not None:
            return self._int(name, v)
        self.notes.append(f"{name} derived: {how} = {value}")
        return value

    def check(self) -> None:
        if self.missing:
            raise ConfigError(
                f"the {self.family} config lacks {', '.join(self.missing)} (needed for the "
                "parameter count; no default exists)"
            )


def _sliding(r: _Reader, layers: int, window: int | None, rule: str) -> int:
    """How many layers attend within a sliding window: `layer_types` when the file lists them,
    else the family's own rule (`rule`: "all", "after_max_window", "alternate")."""
    types = r.doc.get("layer_types")
    if isinstance(types, list) and types:
        r.read.add("layer_types")
        return sum(1 for t in types if t == "sliding_attention")
    if window is None:
        return 0
    if rule == "all":
        return layers
    if rule == "alternate":  # Gemma 2: layers 0, 2, 4, ... slide (Gemma2Config.layer_types)
        return math.ceil(layers / 2)
    # Qwen2/Qwen3: with use_sliding_window, the layers from max_window_layers on slide
    first = r.optional_int("max_window_layers")
    first = layers if first is None else first
    return max(0, layers - first)


def _llama_like(r: _Reader, family: str) -> ModelShape:
    hidden = r.need("hidden_size")
    layers = r.need("num_hidden_layers")
    heads = r.need("num_attention_heads")
    vocab = r.need("vocab_size")
    inter = r.need("intermediate_size")
    r.check()
    kv = r.get("num_key_value_heads", heads, "the config class's default: one per attention head")
    head_dim = r.derive("head_dim", hidden // max(1, heads), "hidden_size / num_attention_heads")
    tied_default = family in ("gemma", "gemma2")
    tied = r.get(
        "tie_word_embeddings",
        tied_default,
        f"{family}'s config class default",
    )
    bias = False
    qkv_bias = out_bias = False
    if family in ("qwen2", "qwen2_moe"):
        qkv_bias = True  # Qwen2Attention: q, k, v with bias, o without
    elif family != "mistral" and family != "mixtral":
        bias = r.get("attention_bias", False, "")
        qkv_bias = out_bias = bias
    mlp_bias = r.get("mlp_bias", False, "") if family == "llama" else False
    window = r.optional_int("sliding_window")
    if family in ("qwen2", "qwen3", "qwen2_moe") and not r.get("use_sliding_window", False, ""):
        window = None
    rule = {"gemma2": "alternate", "mistral": "all", "mixtral": "all"}.get(
        family, "after_max_window"
    )
    sliding = _sliding(r, layers, window, rule) if window else 0
    experts = active = expert_inter = moe_layers = shared = 0
    if family == "mixtral":
        experts = r.need("num_local_experts")
        active = r.need("num_experts_per_tok")
        expert_inter, moe_layers = inter, layers
    elif family == "qwen2_moe":
        experts = r.need("num_experts")
        active = r.need("num_experts_per_tok")
        expert_inter = r.need("moe_intermediate_size")
        shared = r.optional_int("shared_expert_intermediate_size") or 0
        step = r.optional_int("decoder_sparse_step") or 1
        only_dense = set(r.int_list("mlp_only_layers"))
        moe_layers = sum(
            1 for i in range(layers) if i not in only_dense and experts and (i + 1) % step == 0
        )
    r.check()
    return ModelShape(
        family=family,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        intermediate=inter,
        vocab=vocab,
        norms_per_layer=4 if family == "gemma2" else 2,
        qk_norm=family == "qwen3",
        qkv_bias=qkv_bias,
        out_bias=out_bias,
        mlp_bias=mlp_bias,
        tied_embeddings=tied,
        experts=experts,
        active_experts=active,
        expert_intermediate=expert_inter,
        moe_layers=moe_layers,
        shared_expert_intermediate=shared,
        shared_expert_gate=bool(shared),
        sliding_window=window if sliding else None,
        sliding_layers=sliding,
        attention_dropout=r.get("attention_dropout", 0.0, ""),
        max_positions=r.optional_int("max_position_embeddings"),
    )


def _gpt2(r: _Reader) -> ModelShape:
    hidden = r.need("n_embd")
    layers = r.need("n_layer")
    heads = r.need("n_head")
    vocab = r.need("vocab_size")
    positions = r.need("n_positions")
    r.check()
    inter = r.derive("n_inner", 4 * hidden, "4 × n_embd (GPT2Config's default)")
    drop = r.get("resid_pdrop", 0.1, "GPT2Config's default")
    return ModelShape(
        family="gpt2",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // max(1, heads),
        intermediate=inter,
        vocab=vocab,
        gated_mlp=False,
        norm_bias=True,
        fused_qkv=True,
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        positions=positions,
        tied_embeddings=r.get("tie_word_embeddings", True, "GPT2Config's default"),
        attention_dropout=r.get("attn_pdrop", 0.1, "GPT2Config's default"),
        hidden_dropout=drop,
        max_positions=positions,
    )


def _gpt_neox(r: _Reader) -> ModelShape:
    hidden = r.need("hidden_size")
    layers = r.need("num_hidden_layers")
    heads = r.need("num_attention_heads")
    inter = r.need("intermediate_size")
    vocab = r.need("vocab_size")
    r.check()
    bias = r.get("attention_bias", True, "GPTNeoXConfig's default")
    return ModelShape(
        family="gpt_neox",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // max(1, heads),
        intermediate=inter,
        vocab=vocab,
        gated_mlp=False,
        norm_bias=True,
        fused_qkv=True,
        qkv_bias=bias,
        out_bias=bias,
        mlp_bias=True,
        tied_embeddings=r.get("tie_word_embeddings", False, "GPTNeoXConfig's default"),
        attention_dropout=r.get("attention_dropout", 0.0, ""),
        hidden_dropout=r.get("hidden_dropout", 0.0, ""),
        max_positions=r.optional_int("max_position_embeddings"),
    )


def _encoder(r: _Reader, family: str, architecture: str | None) -> ModelShape:
    hidden = r.need("hidden_size")
    layers = r.need("num_hidden_layers")
    heads = r.need("num_attention_heads")
    inter = r.need("intermediate_size")
    vocab = r.need("vocab_size")
    positions = r.need("max_position_embeddings")
    r.check()
    types = r.get("type_vocab_size", 2, f"{family}'s config class default")
    arch = architecture or ""
    if arch.endswith("ForMaskedLM"):
        head = "mlm"
    else:
        head = "pooler"
        if arch and not arch.endswith("Model"):
            r.notes.append(
                f"the {arch} head is not modelled: counted as the base model with its pooler"
            )
    return ModelShape(
        family=family,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // max(1, heads),
        intermediate=inter,
        vocab=vocab,
        gated_mlp=False,
        norm_bias=True,
        qkv_bias=True,
        out_bias=True,
        mlp_bias=True,
        positions=positions,
        token_types=types,
        embedding_norm=True,
        final_norm=False,
        tied_embeddings=r.get("tie_word_embeddings", True, f"{family}'s config class default"),
        head=head,
        attention_dropout=r.get("attention_probs_dropout_prob", 0.1, "BertConfig's default"),
        hidden_dropout=r.get("hidden_dropout_prob", 0.1, "BertConfig's default"),
        max_positions=positions,
    )


def shape_from_config(doc: Mapping[str, Any]) -> ReadConfig:
    """The model a parsed `config.json` describes. ConfigError when it cannot be read."""
    if not isinstance(doc, Mapping):
        raise ConfigError("a config.json holds one JSON object")
    family = doc.get("model_type")
    lead: list[str] = []
    if family not in FAMILIES and isinstance(doc.get("text_config"), Mapping):
        lead.append(
            f"a {family or 'multimodal'} config: its text model (text_config) is read; other "
            "towers (vision, audio) are not counted"
        )
        doc = {**doc["text_config"], "architectures": doc.get("architectures")}
        family = doc.get("model_type")
        if isinstance(family, str) and family.endswith("_text"):
            family = family[: -len("_text")]
    if not isinstance(family, str) or not family:
        raise ConfigError("the config names no model_type: is this a model's config.json?")
    arch_list = doc.get("architectures")
    architecture = arch_list[0] if isinstance(arch_list, list) and arch_list else None
    if family not in FAMILIES:
        if not all(k in doc for k in ("hidden_size", "num_hidden_layers", "intermediate_size")):
            raise ConfigError(
                f"model_type {family!r} is not one the planner reads ({', '.join(FAMILIES)}); "
                "give the shape with --layers, --hidden, --heads, --intermediate, --vocab"
            )
        lead.append(
            f"model_type {family!r} is not one the planner knows: read as a Llama-style decoder "
            "(gated MLP, RMSNorm, no biases); its parameter count is not checked"
        )
        r = _Reader(doc, family)
        shape = _llama_like(r, "llama")
        shape = replace(shape, family=family)
    else:
        r = _Reader(doc, family)
        if family in LLAMA_LIKE:
            shape = _llama_like(r, family)
        elif family == "gpt2":
            shape = _gpt2(r)
        elif family == "gpt_neox":
            shape = _gpt_neox(r)
        else:
            shape = _encoder(r, family, architecture)
    keys = GPT2_KEYS if family == "gpt2" else KEYS
    bad = problems(shape, keys)
    if bad:
        raise ConfigError("; ".join(bad))
    dtype_name = doc.get("torch_dtype") or doc.get("dtype")
    dtype = _DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    not_read = tuple(sorted(k for k in doc if k not in r.read and k not in HARMLESS))
    return ReadConfig(shape, architecture, dtype, tuple(lead + r.notes), not_read, keys)
