"""The memory planner's formulas, pure: the published counts it must reproduce (Korthikanti et
al.'s 34·s·b·h + 5·a·s²·b per layer, the ZeRO paper's 16 bytes per parameter and its stages,
8-bit Adam's block layout), reading configs (what is missing or unknown is named, never
guessed), what fits and the what-ifs, the GPU table, and a job's command line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gputop_diag.planner.configs import ConfigError, shape_from_config
from gputop_diag.planner.fit import fewer_kv_heads, fit, what_ifs
from gputop_diag.planner.gpus import GIB, find_gpu
from gputop_diag.planner.hints import hints_from_argv
from gputop_diag.planner.optimizers import optimizer_state_bytes
from gputop_diag.planner.shape import ModelShape, parameter_count, problems
from gputop_diag.planner.terms import layer_activations, plan
from gputop_diag.planner.workload import Workload

CONFIGS = Path(__file__).parent / "data" / "configs"


def config(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


LLAMA = shape_from_config(config("llama-3-8b.json")).shape

# GPT as Korthikanti et al. 2022 count it: a heads of h/a, MLP 4h, LayerNorm, dropout after
# attention, after the MLP and on the attention probabilities.
GPT = ModelShape(
    family="custom",
    layers=24,
    hidden=2048,
    heads=16,
    kv_heads=16,
    head_dim=128,
    intermediate=4 * 2048,
    vocab=50304,
    gated_mlp=False,
    norm_bias=True,
    fused_qkv=True,
    qkv_bias=True,
    out_bias=True,
    mlp_bias=True,
    attention_dropout=0.1,
    hidden_dropout=0.1,
)


# -- the published counts ------------------------------------------------------------------


def test_activations_per_layer_are_korthikanti_et_al_for_gpt():
    """34·s·b·h + 5·a·s²·b bytes per layer at 16-bit (their eq. 1)."""
    lin, quad = layer_activations(GPT, Workload(), 2)
    assert (lin, quad) == (34 * GPT.hidden, 5 * GPT.heads)
    s, b, L, h, a = 2048, 4, GPT.layers, GPT.hidden, GPT.heads
    w = Workload(batch=b, seq=s)
    p = plan(GPT, w)
    expected = L * s * b * h * (34 + 5 * a * s / h)
    extra = s * b * (2 * h + h)  # the final LayerNorm's input and the embeddings' dropout mask
    assert p.term("activations") == expected + extra


def test_selective_and_full_recomputation_are_34_and_2_sbh_per_layer():
    s, b, L, h = 1024, 2, GPT.layers, GPT.hidden
    selective = plan(GPT, Workload(batch=b, seq=s, checkpointing="selective"))
    assert selective.term("activations") == 34 * s * b * h * L
    full = plan(GPT, Workload(batch=b, seq=s, checkpointing="full"))
    one_layer = s * b * h * (34 + 5 * GPT.heads * s / h)  # recomputed during its backward
    assert full.term("activations") == 2 * s * b * h * L + one_layer


def test_flash_attention_drops_the_s_squared_scores():
    w = Workload(batch=1, seq=8192)
    eager = plan(LLAMA, w).term("activations")
    flash = plan(LLAMA, replace(w, flash_attention=True)).term("activations")
    lin, quad = layer_activations(LLAMA, w, 2)
    assert quad == 2 * LLAMA.heads and LLAMA.attention_dropout == 0  # softmax output only
    assert eager - flash == LLAMA.layers * 8192 * (quad * 8192 - 4 * LLAMA.heads)


def test_mixed_precision_adam_is_16_bytes_per_parameter_and_zero_divides_it():
    """The ZeRO paper, sec. 3.1: 2 + 2 + 12 = 16 Ψ; stages 1, 2, 3 shard optimizer, gradients,
    weights across N_d ranks: (2 + 2 + 12/N), (2 + 14/N), 16/N."""
    n = parameter_count(LLAMA)
    base = plan(LLAMA, Workload(dtype="bf16", optimizer="adamw"))
    assert (base.term("weights"), base.term("gradients"), base.term("optimizer")) == (
        2 * n,
        2 * n,
        12 * n,
    )
    N = 8
    for stage, per_rank in ((1, (2 * n, 2 * n, 12 * n / N)), (2, (2 * n, 2 * n / N, 12 * n / N))):
        p = plan(LLAMA, Workload(zero=stage, world=N))
        got = (p.term("weights"), p.term("gradients"), p.term("optimizer"))
        assert got == tuple(-(-int(x) // 1) for x in per_rank)
    z3 = plan(LLAMA, Workload(zero=3, world=N))
    fsdp = plan(LLAMA, Workload(fsdp=True, world=N))
    assert z3.model_states == fsdp.model_states == -(-2 * n // N) * 2 + -(-12 * n // N)


def test_fp32_amp_and_pure_16_bit_model_states():
    n = parameter_count(LLAMA)
    assert plan(LLAMA, Workload(dtype="fp32")).model_states == 16 * n  # 4 + 4 + 8
    amp = plan(LLAMA, Workload(dtype="bf16", precision="amp"))
    assert (amp.term("weights"), amp.term("optimizer")) == (4 * n, 8 * n)
    assert plan(LLAMA, Workload(dtype="bf16", precision="pure")).model_states == 8 * n


def test_eight_bit_adam_follows_the_bitsandbytes_layout():
    """Two uint8 states and one fp32 absmax per 256 values for each; a tensor under 4096
    values keeps fp32 states (bitsandbytes' min_8bit_size)."""
    tiny = ModelShape("custom", 1, 64, 4, 4, 16, 96, 100)
    expected = 0
    for numel in (100 * 64, 64 * 64, 64 * 64, 64 * 64, 64 * 64, 96 * 64, 96 * 64, 64 * 96):
        expected += 2 * numel + 2 * 4 * -(-numel // 256)
    expected += 8 * (64 * 2 + 64)  # the two layer norms and the final norm: fp32 states
    expected += 2 * 100 * 64 + 2 * 4 * 25  # the untied output layer
    assert optimizer_state_bytes(tiny, "adam8bit", 4) == expected
    # 8-bit Adam over a big model: 2 B + 1/32 B per parameter instead of AdamW's 8
    n = parameter_count(LLAMA)
    assert abs(optimizer_state_bytes(LLAMA, "adam8bit", 4) / n - (2 + 8 / 256)) < 1e-4


def test_kv_cache_is_2_l_hkv_t_dhead_b_bytes():
    p = plan(LLAMA, Workload(mode="infer", dtype="bf16", batch=4, seq=4096))
    assert p.term("kv_cache") == 2 * 32 * 8 * 4096 * 128 * 4 * 2
    fp8 = plan(LLAMA, Workload(mode="infer", dtype="bf16", kv_dtype="fp8", batch=4, seq=4096))
    assert fp8.term("kv_cache") * 2 == p.term("kv_cache")
    assert plan(LLAMA, Workload(mode="train")).term("kv_cache") == 0
    mistral = shape_from_config(config("mistral-7b-v0.1.json")).shape
    long = plan(mistral, Workload(mode="infer", batch=1, seq=32768))
    assert long.term("kv_cache") == 2 * 32 * 4095 * 8 * 128 * 2  # the window holds W-1 tokens


# -- reading configs -----------------------------------------------------------------------


def test_missing_fields_are_named_and_defaults_said():
    doc = config("llama-3-8b.json")
    del doc["num_key_value_heads"]
    read = shape_from_config(doc)
    assert read.shape.kv_heads == 32
    assert any("num_key_value_heads not given" in n for n in read.notes)
    del doc["hidden_size"], doc["vocab_size"]
    with pytest.raises(ConfigError, match="lacks hidden_size, vocab_size"):
        shape_from_config(doc)


def test_fields_the_planner_does_not_know_are_named():
    doc = {**config("llama-3-8b.json"), "quantization_config": {"bits": 4}, "n_shared": 2}
    assert shape_from_config(doc).not_read == ("n_shared", "quantization_config")
    assert shape_from_config(config("llama-3-8b.json")).not_read == ()


def test_an_unknown_family_is_read_as_llama_style_and_said_so():
    doc = {**config("llama-3-8b.json"), "model_type": "acme"}
    read = shape_from_config(doc)
    assert read.shape.family == "acme" and parameter_count(read.shape) == 8030261248
    assert "not one the planner knows" in read.notes[0]
    with pytest.raises(ConfigError, match="not one the planner reads"):
        shape_from_config({"model_type": "t5", "d_model": 512})
    with pytest.raises(ConfigError, match="no model_type"):
        shape_from_config({"hidden_size": 4})


def test_a_multimodal_config_reads_its_text_model():
    doc = {
        "model_type": "llava",
        "architectures": ["LlavaForConditionalGeneration"],
        "text_config": config("llama-3-8b.json"),
        "vision_config": {"hidden_size": 1024},
    }
    read = shape_from_config(doc)
    assert parameter_count(read.shape) == 8030261248
    assert "vision" in read.notes[0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_attention_heads": 30}, "cannot share 8 KV heads"),
        ({"hidden_size": "4096"}, "whole number"),
        ({"tie_word_embeddings": "no"}, "true or false"),
        ({"hidden_size": float("nan")}, "whole number, not nan"),  # json.loads reads NaN
        ({"hidden_size": float("inf")}, "whole number, not inf"),
        ({"hidden_size": 1e308}, "hidden_size of 1e\\+308 is no model's size"),
        ({"num_hidden_layers": 10**30}, "num_hidden_layers of 1e\\+30 is no model's size"),
        ({"attention_dropout": float("nan")}, "must be a number, not nan"),
    ],
)
def test_impossible_shapes_are_clear_errors(change, message):
    with pytest.raises(ConfigError, match=message):
        shape_from_config({**config("llama-3-8b.json"), **change})


def test_shape_problems_name_the_options():
    bad = replace(LLAMA, layers=0, experts=4, active_experts=5, expert_intermediate=1)
    found = problems(bad)
    assert any(p.startswith("--layers must be a positive whole number") for p in found)
    assert any("active experts must be between 1 and the 4 experts" in p for p in found)


# -- what fits, what-ifs ---------------------------------------------------------------------


def test_the_largest_batch_and_longest_context_are_the_limits():
    w = Workload(dtype="bf16", optimizer="adamw", batch=2, seq=2048, flash_attention=True)
    gpu = find_gpu("H200")
    f = fit(LLAMA, w, gpu.bytes)
    assert f.largest_batch is not None and f.longest_seq is not None
    assert plan(LLAMA, replace(w, batch=f.largest_batch)).total <= gpu.bytes
    assert plan(LLAMA, replace(w, batch=f.largest_batch + 1)).total > gpu.bytes
    assert plan(LLAMA, replace(w, seq=f.longest_seq)).total <= gpu.bytes
    assert plan(LLAMA, replace(w, seq=f.longest_seq + 1)).total > gpu.bytes
    # an 8B model's states alone (120 GiB) exceed an 80 GB GPU: no batch fits
    assert fit(LLAMA, w, find_gpu("H100-80GB").bytes).largest_batch is None


def test_each_what_if_saves_what_its_plan_says():
    w = Workload(dtype="fp32", optimizer="adamw", batch=8, seq=4096)
    base = plan(LLAMA, w)
    rows = {r.lever: r for r in what_ifs(LLAMA, w, find_gpu("H100-80GB").bytes)}
    assert set(rows) >= {
        "mixed precision",
        "checkpointing: selective",
        "checkpointing: full",
        "smaller batch",
        "sharded optimizer: ZeRO-1",
        "sharded optimizer: ZeRO-3 / FSDP",
        "shorter context",
        "KV cache in fp8",
        "fewer KV heads",
        "all of the above",
    }
    full = plan(LLAMA, replace(w, checkpointing="full"))
    assert rows["checkpointing: full"].saves == base.total - full.total > 0
    mp = rows["mixed precision"]
    assert mp.saves == base.total - plan(LLAMA, replace(w, dtype="bf16")).total > 0
    assert rows["KV cache in fp8"].saves is None  # training keeps no KV cache
    assert rows["all of the above"].fits is True and rows["smaller batch"].fits is False


def test_inference_what_ifs_for_the_kv_cache():
    w = Workload(mode="infer", dtype="bf16", batch=64, seq=8192, flash_attention=True)
    rows = {r.lever: r for r in what_ifs(LLAMA, w, find_gpu("H100-80GB").bytes)}
    kv = plan(LLAMA, w).term("kv_cache")
    assert rows["KV cache in fp8"].saves == kv // 2
    assert rows["fewer KV heads"].change == "8 → 1 KV heads"
    fewer = fewer_kv_heads(LLAMA)
    assert rows["fewer KV heads"].saves == plan(LLAMA, w).total - plan(fewer, w).total
    assert rows["fewer KV heads"].saves > kv - kv // 8  # the cache, and the K, V weights
    assert rows["gradient checkpointing"].saves is None


# -- GPUs and command lines ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("H100-80GB", "H100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("h100 pcie", "H100-PCIE-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("A10", "A10-24GB"),  # not an A100
        ("NVIDIA GeForce RTX 4090", "RTX4090-24GB"),
        ("24GB", "24 GiB"),
    ],
)
def test_gpu_names(text, name):
    assert find_gpu(text).name == name


def test_unknown_gpu():
    assert find_gpu("Voodoo 5") is None
    assert find_gpu("80GiB").bytes == 80 * GIB


def test_hints_from_a_hugging_face_trainer_command_line():
    h = hints_from_argv(
        [
            "torchrun",
            "--nproc_per_node=8",
            "run_clm.py",
            "--model_name_or_path",
            "./llama3",
            "--per_device_train_batch_size",
            "4",
            "--block_size",
            "4096",
            "--bf16",
            "--optim",
            "adamw_bnb_8bit",
            "--gradient_checkpointing",
        ]
    )
    assert (h.mode, h.batch, h.seq, h.dtype, h.precision) == ("train", 4, 4096, "bf16", "amp")
    assert (h.optimizer, h.checkpointing, h.world) == ("adam8bit", "full", 8)
    assert h.config_paths == ("./llama3",)


def test_hints_from_a_server_and_from_nothing():
    h = hints_from_argv(
        ["vllm", "serve", "--max-model-len", "32768", "--max-num-seqs", "64",
         "--kv-cache-dtype", "fp8_e4m3"]
    )  # fmt: skip
    assert (h.mode, h.seq, h.batch, h.kv_dtype) == ("infer", 32768, 64, "fp8")
    assert hints_from_argv(["python", "job.py"]).mode is None
    assert hints_from_argv(None).said == ()


def test_hints_never_repeat_a_script_name():
    """A script's name may name a project: only the word that decided is said."""
    h = hints_from_argv(["python", "/home/alice/secret-proj/train_secret.py"])
    assert h.mode == "train" and not any("secret" in s for s in h.said)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"hidden_size": -5}, "hidden_size must be a positive whole number, not -5"),
        ({"hidden_size": 0}, "hidden_size must be a positive whole number, not 0"),
        ({"num_attention_heads": 0}, "num_attention_heads must be a positive whole number, not 0"),
        ({"num_key_value_heads": 0}, "num_key_value_heads must be a positive whole number, not 0"),
    ],
)
def test_a_bad_size_names_the_config_s_own_key_and_nothing_derived_from_it(change, said):
    """`hidden_size: 0` is one problem, said in the file's words: not `hidden`, and not the
    head dimension derived from it."""
    with pytest.raises(ConfigError) as e:
        shape_from_config({**config("llama-3-8b.json"), **change})
    assert str(e.value) == said


def test_a_gpt2_config_s_bad_size_names_its_key():
    gpt2 = {"model_type": "gpt2", "n_embd": 0, "n_layer": 12, "n_head": 12, "vocab_size": 50257}
    with pytest.raises(ConfigError) as e:
        shape_from_config({**gpt2, "n_positions": 1024})
    assert str(e.value) == "n_embd must be a positive whole number, not 0"


def test_the_v100s_are_nvml_s_figures_as_the_a100s_are():
    """NVML's memory.total (MiB), not the data sheet's decimal gigabytes: a V100-32GB is
    31.75 GiB, not 29.80."""
    for name, mib in (("V100-32GB", 32510), ("V100-16GB", 16160), ("A100-80GB", 81920)):
        gpu = find_gpu(name)
        assert gpu.bytes == mib * 2**20 and gpu.source == "nvml", name
    assert round(find_gpu("V100-32GB").bytes / GIB, 2) == 31.75
