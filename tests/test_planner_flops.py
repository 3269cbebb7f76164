"""The planner's FLOPs per token (6N + 12·L·d·s, PaLM's appendix B) against hand computations
from the configs' own numbers: Llama-3-8B (dense, untied), Mixtral-8x7B (two of eight experts a
token), GPT-2 (tied head, learned positions) and Mistral-7B (a sliding window)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputop_diag.planner.configs import shape_from_config
from gputop_diag.planner.flops import flops_per_token, matmul_parameters

CONFIGS = Path(__file__).parent / "data" / "configs"


def _shape(name: str):
    return shape_from_config(json.loads((CONFIGS / f"{name}.json").read_text())).shape


def test_llama_3_8b_by_hand():
    h, inter, layers, vocab, kv = 4096, 14336, 32, 128256, 8 * 128
    per_layer = h * h + 2 * h * kv + h * h + 3 * h * inter + 2 * h  # q, k, v, o, MLP, 2 norms
    n = layers * per_layer + h + vocab * h  # the final norm and the untied head, no embedding
    assert n == 7_504_924_672
    f = flops_per_token(_shape("llama-3-8b"), 2048)
    assert f.matmul_params == n
    assert f.matmul == 6 * n
    assert f.attention == 12 * layers * h * 2048
    assert f.per_token == 48_250_773_504 and f.formula == "6N + 12·L·d·s"
    infer = flops_per_token(_shape("llama-3-8b"), 2048, training=False)
    assert infer.per_token == 2 * n + 4 * layers * h * 2048


def test_mixtral_counts_the_two_experts_a_token_takes():
    h, inter, layers, vocab, kv, experts = 4096, 14336, 32, 32000, 8 * 128, 8
    attention = 2 * h * h + 2 * h * kv
    active = layers * (attention + experts * h + 2 * 3 * h * inter + 2 * h) + h + vocab * h
    assert active == 12_748_853_248  # the "12.9B active" of Mixtral's model card, less embeddings
    f = flops_per_token(_shape("mixtral-8x7b"), 4096)
    assert f.matmul_params == active
    assert f.per_token == 6 * active + 12 * layers * h * 4096
    every = layers * (attention + experts * h + 8 * 3 * h * inter + 2 * h) + h + vocab * h
    assert f.per_token < 6 * every  # not all eight experts


def test_a_tied_head_is_a_matmul_and_position_tables_are_not():
    h, layers, vocab = 768, 12, 50257
    per_layer = 3 * h * h + 3 * h + h * h + h + 2 * 4 * h * h + 4 * h + h + 2 * 2 * h
    # the blocks (qkv, proj, MLP with biases, two LayerNorms), the final LayerNorm, the head
    assert matmul_parameters(_shape("gpt2")) == layers * per_layer + 2 * h + vocab * h


def test_a_sliding_window_caps_the_context_of_its_layers():
    s = _shape("mistral-7b-v0.1")  # every layer within 4096 tokens
    assert s.sliding_window == 4096 and s.sliding_layers == s.layers
    short, long = flops_per_token(s, 2048), flops_per_token(s, 32768)
    assert short.attention == 12 * 32 * 4096 * 2048
    assert long.attention == 12 * 32 * 4096 * 4096


@pytest.mark.parametrize("seq", [0, -5])
def test_a_context_under_one_token_counts_as_one(seq):
    assert flops_per_token(_shape("gpt2"), seq).seq == 1
