"""Inference that does not fit one GPU: weight-only quantisation and tensor parallelism, each
figure against a hand computation for a dense model (Llama-3-8B: grouped KV heads, untied
embeddings) and a Mixture-of-Experts one (Mixtral-8x7B: 8 experts, 2 per token); and the plan's
number formats against the GPU's compute capability."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gputop_diag.planner.configs import shape_from_config
from gputop_diag.planner.fit import what_ifs
from gputop_diag.planner.gpus import GB, GIB, TABLE, find_gpu
from gputop_diag.planner.parallel import rank_shape, tp_problems
from gputop_diag.planner.precision import precision_checks
from gputop_diag.planner.render import document, render_text
from gputop_diag.planner.shape import active_parameters, parameter_count
from gputop_diag.planner.terms import layer_activations, plan
from gputop_diag.planner.workload import Workload, workload_problems

CONFIGS = Path(__file__).parent / "data" / "configs"


def shape(name: str):
    return shape_from_config(json.loads((CONFIGS / name).read_text())).shape


LLAMA = shape("llama-3-8b.json")  # L 32, h 4096, 32 heads, 8 KV heads, d 128, I 14336, V 128256
MIXTRAL = shape("mixtral-8x7b.json")  # the same attention, 8 experts of I 14336, V 32000
H = 4096
INFER = Workload(mode="infer", dtype="bf16", batch=8, seq=4096, flash_attention=True)


def llama_params(q: int, kv: int, inter: int, vocab: int) -> int:
    """Llama-3-8B's parameters with q/kv output widths, the MLP's width and the vocabulary as
    given (one GPU's slice under tensor parallelism): per layer q, k, v, o, gate, up, down and
    two norms; the embedding, the output layer and the final norm."""
    layer = H * q + 2 * H * kv + q * H + 3 * H * inter + 2 * H
    return 32 * layer + 2 * vocab * H + H


def mixtral_params(q: int, kv: int, inter: int, vocab: int) -> int:
    """Mixtral-8x7B's the same way: per layer attention, the router (8 × h, replicated), 8
    experts of gate, up and down, two norms."""
    layer = H * q + 2 * H * kv + q * H + 8 * H + 8 * 3 * H * inter + 2 * H
    return 32 * layer + 2 * vocab * H + H


# -- the MoE model's size ------------------------------------------------------------------


def test_mixtral_s_total_and_active_parameters_and_bf16_weights():
    """Mixtral-8x7B: 46.7 B parameters (~93 GB in bf16), 12.9 B active: a token passes 2 of
    the 8 experts of each layer."""
    assert parameter_count(MIXTRAL) == mixtral_params(H, 1024, 14336, 32000) == 46_702_792_704
    one_expert_all_layers = 32 * 3 * H * 14336
    assert active_parameters(MIXTRAL) == 46_702_792_704 - 6 * one_expert_all_layers
    assert active_parameters(MIXTRAL) == 12_879_925_248
    weights = plan(MIXTRAL, INFER).term("weights")
    assert weights == 2 * 46_702_792_704 and 93.0e9 < weights < 93.5e9


# -- tensor parallelism ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "count", "tp", "kv_per_gpu"),
    [
        (LLAMA, llama_params, 2, 4),
        (LLAMA, llama_params, 8, 1),
        (LLAMA, llama_params, 16, 1),  # 8 KV heads over 16 GPUs: one each, replicated
        (MIXTRAL, mixtral_params, 2, 4),
        (MIXTRAL, mixtral_params, 8, 1),
    ],
)
def test_one_gpu_of_n_holds_its_slice_of_the_weights(model, count, tp, kv_per_gpu):
    """Heads, KV heads, the MLP's and each expert's width and the vocabulary are split; the
    norms and the router are whole on every GPU. Ψ/N would be off by the replicated norms and
    router, the replicated KV heads at tp 16 make k and v twice Ψ/N."""
    local = rank_shape(model, tp)
    assert local.kv_heads == kv_per_gpu
    inter = model.expert_intermediate if model.experts else model.intermediate
    expected = count(H // tp, kv_per_gpu * 128, inter // tp, model.vocab // tp)
    assert parameter_count(local) == expected
    p = plan(model, replace(INFER, tp=tp))
    assert p.term("weights") == 2 * expected
    assert p.parameters == parameter_count(model)  # the model's count stays the whole's
    if tp == 16:
        naive = parameter_count(model) // tp
        assert p.term("weights") / 2 - naive > 32 * 128 * H  # k, v replicated: not Ψ/16


def test_the_kv_cache_per_gpu_stops_shrinking_at_tp_equal_kv_heads():
    """2·L·(H_kv/N)·T·d·b·2 bytes while N ≤ H_kv = 8; one head per GPU beyond."""
    full = 2 * 32 * 8 * 4096 * 128 * 8 * 2
    for tp, expected in (
        (1, full),
        (2, full // 2),
        (4, full // 4),
        (8, full // 8),
        (16, full // 8),
    ):
        for model in (LLAMA, MIXTRAL):
            assert plan(model, replace(INFER, tp=tp)).term("kv_cache") == expected, (model, tp)
    text = plan(LLAMA, replace(INFER, tp=16)).terms
    kv = next(t for t in text if t.key == "kv_cache")
    assert "replicated 2×" in kv.formula and "stops shrinking" in kv.source


def test_activations_per_gpu_keep_the_hidden_size_and_split_heads_and_mlp():
    """Llama at tp 2, bf16, flash attention: per token 2 norms' inputs (2·2h), the QKV input
    (2h), Q and K (2·(q/2 + kv/2)), V (2·kv/2), the attention output (2·q/2), the MLP input
    (2h), the gated MLP's 4·I/2 values (×2 B), the log-sum-exp (4 B × 16 heads)."""
    local = rank_shape(LLAMA, 2)
    lin, quad = layer_activations(local, INFER, 2)
    q, kv, inter = 2048, 512, 7168
    hand = 2 * 2 * H + 2 * H + 2 * (q + kv) + 2 * kv + 2 * q + 2 * H + 2 * 4 * inter + 4 * 16
    assert (lin, quad) == (hand, 0) == (100416, 0)
    assert plan(LLAMA, replace(INFER, tp=2)).term("activations") == hand * 8 * 4096
    # the logits are gathered whole: the same on one GPU of 2 as on one alone
    assert plan(LLAMA, replace(INFER, tp=2)).term("logits") == plan(LLAMA, INFER).term("logits")


def test_tp_that_does_not_divide_the_heads_is_refused():
    qwen = shape("qwen2-7b.json")  # 28 heads, 4 KV heads
    assert tp_problems(qwen, 8) == ["28 attention heads cannot be split evenly over --tp 8"]
    assert tp_problems(qwen, 4) == [] and rank_shape(qwen, 4).kv_heads == 1
    assert tp_problems(LLAMA, 16) == []
    assert "not a multiple" in tp_problems(replace(LLAMA, heads=48, kv_heads=8), 12)[0]
    with pytest.raises(ValueError, match="cannot be split"):
        plan(qwen, replace(INFER, tp=8))


def test_tp_and_quant_are_inference_only():
    assert any("--tp is modelled for inference" in p for p in workload_problems(Workload(tp=2)))
    bad = workload_problems(Workload(quant="int4"))
    assert any("weight-only quantisation for inference" in p for p in bad)
    fp8 = workload_problems(Workload(mode="infer", dtype="fp8", quant="int4"))
    assert any("give --dtype bf16 or fp16" in p for p in fp8)
    assert workload_problems(replace(INFER, quant="int4", tp=4)) == []


# -- weight-only quantisation ---------------------------------------------------------------


def quant_parts(model) -> tuple[int, int, int, int]:
    """(quantised parameters, the sum of their output rows, their matrices, the parameters
    kept in 16 bits), by hand: attention's q, k, v, o and the MLP's or the experts' matrices
    are quantised; embedding, output layer, norms and router are kept."""
    attn_q = H * H + 2 * 1024 * H + H * H
    attn_rows, attn_mats = H + 2 * 1024 + H, 4
    if model.experts:
        mlp_q = 8 * 3 * H * 14336
        mlp_rows, mlp_mats = 8 * (2 * 14336 + H), 16  # gate_up [8, 2I, h], down [8, h, I]
        kept_layer = 8 * H + 2 * H  # router, norms
    else:
        mlp_q = 3 * H * 14336
        mlp_rows, mlp_mats = 2 * 14336 + H, 3
        kept_layer = 2 * H
    kept = 32 * kept_layer + 2 * model.vocab * H + H
    return 32 * (attn_q + mlp_q), 32 * (attn_rows + mlp_rows), 32 * (attn_mats + mlp_mats), kept


@pytest.mark.parametrize("model", [LLAMA, MIXTRAL], ids=["llama", "mixtral"])
def test_weight_only_bytes_by_hand(model):
    """int8: 1 B a weight + one fp32 scale per output row; fp8: 1 B + one fp32 scale per
    matrix; int4: 0.5 B + (fp16 scale + 4-bit zero) per 128 inputs = 0.5 + 2.5/128 B (every
    input width here is a multiple of 128); the rest at 2 B."""
    quantised, rows, mats, kept = quant_parts(model)
    assert quantised + kept == parameter_count(model)
    got = {q: plan(model, replace(INFER, quant=q)).term("weights") for q in ("int8", "fp8", "int4")}
    assert got["int8"] == quantised + 4 * rows + 2 * kept
    assert got["fp8"] == quantised + 4 * mats + 2 * kept
    assert got["int4"] == quantised * (0.5 + 2.5 / 128) + 2 * kept
    # kept in 16 bits: what quantising everything would have missed (the embeddings alone)
    assert got["int4"] - parameter_count(model) * (0.5 + 2.5 / 128) > 1.4 * model.vocab * H
    # the KV cache and the activations stay in the compute dtype
    for q in got:
        p = plan(model, replace(INFER, quant=q))
        assert p.term("kv_cache") == plan(model, INFER).term("kv_cache")
        assert p.term("activations") == plan(model, INFER).term("activations")


def test_mixtral_int4_on_one_gpu_of_two():
    """Quantisation and tensor parallelism together: the slice's matrices quantised (the row-
    split ones have half the inputs, so half the groups), its embedding slice kept."""
    local = rank_shape(MIXTRAL, 2)
    per_layer_q = H * 2048 + 2 * H * 512 + 2048 * H + 8 * 3 * H * 7168
    kept = 32 * (8 * H + 2 * H) + 2 * 16000 * H + H
    expected = 32 * per_layer_q * (0.5 + 2.5 / 128) + 2 * kept
    assert plan(MIXTRAL, replace(INFER, quant="int4", tp=2)).term("weights") == expected
    assert parameter_count(local) == 32 * per_layer_q + kept


# -- the levers -----------------------------------------------------------------------------


def test_mixtral_bf16_on_an_h100_the_levers_that_make_it_fit():
    """The filed case: 87 GiB of bf16 weights do not fit 80 GB; int8, fp8 and int4 weights do,
    and so does tensor parallelism over 2 GPUs (the fewest)."""
    gpu = find_gpu("H100-80GB")
    base = plan(MIXTRAL, INFER)
    assert base.total > gpu.bytes
    rows = {r.lever: r for r in what_ifs(MIXTRAL, INFER, gpu.bytes, compute_capability=(9, 0))}
    for q in ("int8", "fp8", "int4"):
        r = rows[f"weights in {q}"]
        after = plan(MIXTRAL, replace(INFER, quant=q)).total
        assert (r.fits, r.saves, r.total) == (True, base.total - after, after), q
    assert rows["weights in int4"].saves > 60 * GIB > rows["weights in int8"].saves > 40 * GIB
    tp = rows["tensor parallelism"]
    assert tp.change == "1 → 2 GPUs (--tp 2)" and tp.fits is True
    assert tp.total == plan(MIXTRAL, replace(INFER, tp=2)).total
    assert "the fewest GPUs that fit" in tp.note


def test_the_tp_lever_goes_to_the_fewest_gpus_that_fit():
    """Batch 32 × 8192: 32 GiB of KV cache and 73 GiB of prefill activations besides 87 GiB
    of weights: 2 GPUs are not enough, 4 are."""
    gpu = find_gpu("H100-80GB")
    w = replace(INFER, batch=32, seq=8192)
    assert plan(MIXTRAL, w).term("kv_cache") == 32 * GIB
    assert plan(MIXTRAL, replace(w, tp=2)).total > gpu.bytes
    assert plan(MIXTRAL, replace(w, tp=4)).total <= gpu.bytes
    tp = {r.lever: r for r in what_ifs(MIXTRAL, w, gpu.bytes)}["tensor parallelism"]
    assert tp.change == "1 → 4 GPUs (--tp 4)" and tp.fits is True
    # nothing fits: the most GPUs tried, said as not fitting
    huge = replace(w, batch=4096)
    tp = {r.lever: r for r in what_ifs(MIXTRAL, huge, gpu.bytes)}["tensor parallelism"]
    assert tp.change == "1 → 8 GPUs (--tp 8)" and tp.fits is False
    assert "KV heads replicated" not in tp.note


def test_levers_already_taken_and_training():
    rows = {r.lever: r for r in what_ifs(LLAMA, replace(INFER, quant="int4"), 80 * GIB)}
    assert rows["weights in int8"].saves is None and "already int4" in rows["weights in int8"].note
    rows = {r.lever: r for r in what_ifs(LLAMA, Workload(), 80 * GIB)}
    assert rows["weight-only quantisation"].saves is None
    assert rows["tensor parallelism"].saves is None


def test_fp8_weights_on_a_gpu_without_them_say_so_in_the_lever():
    rows = {r.lever: r for r in what_ifs(MIXTRAL, INFER, 80 * GIB, compute_capability=(8, 0))}
    assert "not on this GPU: fp8 weights need 8.9, it has 8.0" in rows["weights in fp8"].note
    rows = {r.lever: r for r in what_ifs(LLAMA, INFER, 80 * GIB, compute_capability=(8, 0))}
    assert "not on this GPU" not in rows["weights in fp8"].note  # dense: FP8 Marlin, W8A16


# -- precision against the hardware ---------------------------------------------------------

# NVIDIA's compute capabilities (https://developer.nvidia.com/cuda-gpus)
CUDA_GPUS = {
    "H100": (9, 0), "H200": (9, 0), "GH200": (9, 0), "B200": (10, 0), "A100": (8, 0),
    "L40S": (8, 9), "L40": (8, 9), "L4": (8, 9), "RTX4090": (8, 9), "A40": (8, 6),
    "A6000": (8, 6), "A10": (8, 6), "RTX3090": (8, 6), "T4": (7, 5), "V100": (7, 0),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TABLE))
def test_every_known_gpu_carries_its_compute_capability(name):
    model = name.split("-")[0]
    assert TABLE[name][2] == CUDA_GPUS[model]
    assert find_gpu(name).compute_capability == CUDA_GPUS[model]


def test_a40_is_its_own_gpu():
    assert find_gpu("NVIDIA A40").name == "A40-48GB" and find_gpu("A40").bytes == 48 * GB
    assert find_gpu("80GiB").compute_capability is None


@pytest.mark.parametrize(
    ("w", "cc", "subjects"),
    [
        (Workload(dtype="bf16"), (7, 0), ["bf16 compute"]),
        (Workload(dtype="bf16"), (7, 5), ["bf16 compute"]),
        (Workload(dtype="bf16"), (8, 0), []),
        (Workload(dtype="fp16"), (7, 0), []),
        (Workload(dtype="fp32"), (7, 0), ["fp32 matmuls (TF32)"]),
        (Workload(dtype="fp32"), (8, 6), []),
        (Workload(dtype="fp8"), (8, 0), ["fp8 compute"]),
        (Workload(dtype="fp8"), (8, 6), ["fp8 compute"]),
        (Workload(dtype="fp8"), (8, 9), []),
        (Workload(dtype="fp8"), (9, 0), []),
        (replace(INFER, kv_dtype="fp8"), (8, 0), ["fp8 KV cache"]),
        (replace(INFER, kv_dtype="fp8"), (9, 0), []),
        (replace(INFER, quant="fp8"), (7, 0), ["bf16 compute", "fp8 weights"]),
        (replace(INFER, dtype="fp16", quant="fp8"), (8, 0), ["fp8 weights"]),
        (replace(INFER, dtype="fp16", quant="int4"), (7, 0), ["int4 weights"]),
        (replace(INFER, dtype="fp16", quant="int8"), (7, 0), []),
        (Workload(dtype="bf16"), None, []),
    ],
)
def test_each_dtype_against_the_compute_capability(w, cc, subjects):
    assert [c.subject for c in precision_checks(w, cc)] == subjects


def test_bf16_on_a_v100_says_what_happens_and_what_fits():
    (train,) = precision_checks(Workload(dtype="bf16"), (7, 0))
    assert train.severity == "warning" and train.needs == (8, 0)
    assert "vLLM refuses bf16" in train.happens and "fp16 with a loss scaler" in train.instead
    (infer,) = precision_checks(INFER, (7, 0))
    assert "vLLM --dtype half" in infer.instead and "loss scaler" not in infer.instead
    (fp8,) = precision_checks(Workload(mode="infer", dtype="fp8"), (8, 0))
    assert fp8.needs == (8, 9) and "--quant fp8 --dtype bf16" in fp8.instead
    (old,) = precision_checks(Workload(dtype="fp8"), (7, 0))
    assert old.instead.startswith("fp16") and "loss scaler" in old.instead


def test_the_plan_carries_the_checks_in_text_and_json():
    doc = document(LLAMA, Workload(dtype="bf16"), find_gpu("V100-32GB"))
    assert doc["gpu"]["compute_capability"] == (7, 0)
    (c,) = doc["precision_checks"]
    assert (c["subject"], c["needs"], c["severity"]) == ("bf16 compute", "8.0", "warning")
    text = render_text(doc)
    assert "Precision on this GPU (compute capability 7.0):" in text
    assert "warning: bf16 compute needs compute capability 8.0 (Ampere), this GPU has 7.0" in text
    assert document(LLAMA, Workload(), find_gpu("H100"))["precision_checks"] == []
    unknown = render_text(document(LLAMA, Workload(), find_gpu("80GiB")))
    assert "compute capability is not known; dtypes not checked" in unknown
