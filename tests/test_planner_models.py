"""The memory planner against the real thing: `transformers` builds each supported family from
its published config.json on the `meta` device (no memory, no download) and the planner's
parameter count must be exact; small real models on the CPU take one real optimizer step and
the planner's weights, gradients and optimizer-state bytes must equal the sum of their tensors;
a small model's real KV cache must hold the bytes the planner says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputop_diag.planner.configs import shape_from_config
from gputop_diag.planner.shape import parameter_count, tensor_count
from gputop_diag.planner.terms import kv_cache_bytes, plan
from gputop_diag.planner.workload import Workload

# The tests that import torch in this process share one worker (`-n auto --dist loadgroup`).
pytestmark = pytest.mark.xdist_group("torch")
torch = transformers = AutoConfig = Adafactor = None  # imported by `_torch`


@pytest.fixture(scope="module", autouse=True)
def _torch():
    """torch and transformers, imported when the first of these tests runs, not when the tests
    are collected: every worker collects every test file, and the two imports cost ~2 CPU-s
    (`python -X importtime -c "import transformers"`)."""
    global torch, transformers, AutoConfig, Adafactor
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers import AutoConfig
    from transformers.optimization import Adafactor


CONFIGS = Path(__file__).parent / "data" / "configs"
# Published counts, for the eye: Llama-3-8B 8,030,261,248; Mistral-7B 7,241,732,096; Mixtral-8x7B
# 46,702,792,704; Gemma-7B 8,537,680,896; GPT-2 124,439,808; Pythia-1.4B 1,414,647,808.
FILES = sorted(p.name for p in CONFIGS.glob("*.json"))


def load(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


def hf_model(doc: dict, device: str = "meta", dtype=None):
    """The model class the file's `architectures` names, built from the file."""
    cfg = AutoConfig.for_model(**doc)
    cls = getattr(transformers, doc["architectures"][0])
    with torch.device(device):
        model = cls(cfg)
    return model if dtype is None else model.to(dtype)


@pytest.mark.parametrize("name", FILES)
def test_parameter_count_is_exact_for_every_family(name):
    doc = load(name)
    model = hf_model(doc)
    params = list(model.parameters())  # tied weights once, as the optimizer sees them
    shape = shape_from_config(doc).shape
    assert parameter_count(shape) == sum(p.numel() for p in params)
    assert tensor_count(shape) == len(params)


def test_the_configs_cover_every_family_the_planner_reads():
    from gputop_diag.planner.configs import FAMILIES

    assert {load(n)["model_type"] for n in FILES} == set(FAMILIES)


# Small models of each layout: GQA and no biases (Llama), q/k/v biases (Qwen2), fused experts
# (Mixtral), a shared expert (Qwen2-MoE), fused QKV and Conv1D (GPT-2), LayerNorm and fused QKV
# with biases (GPT-NeoX), four norms per layer (Gemma 2), the masked-LM head (BERT).
SMALL = {
    "llama": dict(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    ),
    "qwen2": dict(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    ),
    "mixtral": dict(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
        num_experts_per_tok=2,
    ),
    "qwen2_moe": dict(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=24, shared_expert_intermediate_size=40,
    ),
    "gpt2": dict(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64),
    "gpt_neox": dict(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4,
    ),
    "gemma2": dict(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    ),
    "bert": dict(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64,
    ),
}  # fmt: skip
ARCH = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "gpt_neox": "GPTNeoXForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "bert": "BertForMaskedLM",
}
OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-3),
    "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9),
    "adafactor": lambda ps: Adafactor(ps, lr=1e-3, relative_step=False, scale_parameter=False),
}


def small(family: str) -> dict:
    return {**SMALL[family], "model_type": family, "architectures": [ARCH[family]]}


def nbytes(t) -> int:
    return t.numel() * t.element_size()


def state_bytes(optimizer) -> int:
    """The optimizer's state tensors; AdamW's `step` is a host scalar (torch keeps it on the CPU
    unless the optimizer is fused or capturable): not device memory, not counted."""
    total = 0
    for state in optimizer.state.values():
        for key, v in state.items():
            if torch.is_tensor(v):
                if key == "step":
                    assert v.dim() == 0 and v.device.type == "cpu"
                    continue
                total += nbytes(v)
    return total


# every family in fp32; in bf16 (the states follow the parameters' dtype, Adafactor's stay
# fp32) one dense and one MoE layout
CASES = [(f, "fp32") for f in SMALL] + [(f, "bf16") for f in ("llama", "mixtral")]


@pytest.mark.parametrize(("family", "dtype"), CASES)
def test_weights_gradients_and_optimizer_state_are_the_real_tensors(family, dtype):
    """fp32 training, and everything in bf16 (`--precision pure`): after one backward pass and
    one step of each optimizer, the planner's terms are the bytes of the parameters, their
    .grad and the optimizer's state tensors."""
    torch.manual_seed(0)
    torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
    model = hf_model(small(family), device="cpu", dtype=torch_dtype).train()
    ids = torch.randint(0, SMALL[family]["vocab_size"], (2, 12))
    model(input_ids=ids, labels=ids).loss.backward()
    params = list(model.parameters())
    shape = shape_from_config(small(family)).shape
    for optimizer, make in OPTIMIZERS.items():
        opt = make(params)
        opt.step()  # the states' sizes do not depend on the weights an earlier step moved
        p = plan(shape, Workload(dtype=dtype, precision="pure", optimizer=optimizer))
        assert p.term("weights") == sum(nbytes(x) for x in params)
        assert p.term("gradients") == sum(nbytes(x.grad) for x in params)
        assert p.term("optimizer") == state_bytes(opt), optimizer


def cache_bytes(cache) -> int:
    return sum(nbytes(layer.keys) + nbytes(layer.values) for layer in cache.layers)


@pytest.mark.parametrize(
    ("family", "extra", "seq"),
    [
        ("llama", {}, 10),  # grouped-query attention: 2 KV heads for 4 heads
        ("mixtral", {}, 7),
        ("llama", {"num_key_value_heads": 4}, 9),  # multi-head attention
        ("mistral", {"sliding_window": 6}, 11),  # every layer keeps its last W-1 tokens
        ("gemma2", {"sliding_window": 4}, 9),  # alternate layers slide
        ("gpt2", {}, 8),
    ],
)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_kv_cache_is_what_a_real_model_allocates(family, extra, seq, dtype):
    base = small("llama" if family == "mistral" else family)
    doc = {**base, **extra}
    if family == "mistral":
        doc.update(model_type="mistral", architectures=["MistralForCausalLM"])
    torch_dtype = torch.float32 if dtype == "fp32" else torch.float16
    model = hf_model(doc, device="cpu", dtype=torch_dtype).eval()
    batch = 3
    ids = torch.randint(0, doc["vocab_size"], (batch, seq))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    shape = shape_from_config(doc).shape
    assert kv_cache_bytes(shape, batch, seq, dtype) == cache_bytes(out.past_key_values)
    p = plan(shape, Workload(mode="infer", dtype=dtype, batch=batch, seq=seq))
    assert p.term("kv_cache") == cache_bytes(out.past_key_values)
