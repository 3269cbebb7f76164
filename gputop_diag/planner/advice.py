"""The capacity class's next checks, from the planner: in training words for a training job, in
inference words for a server or a generation job, both when the command line does not say.

Without the model's shape the figures are per parameter (the planner's own counts: the ZeRO
paper's bytes per parameter, Korthikanti et al.'s activations per layer, the KV-cache formula)
with the command that plans the job's own model; with a plan (`render.document` of the job's
model) they are the plan's terms and the what-ifs that make it fit.
"""

from __future__ import annotations

from typing import Any

from .hints import JobHints
from .optimizers import BNB_BLOCK, OPTIMIZER_NAMES
from .workload import Workload, precision_of

GIB = 2**30


def bytes_per_parameter(w: Workload) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter for a workload, before sharding;
    Adafactor's factored state is close to nothing per parameter and counted as such."""
    p = precision_of(w)
    own = {
        "adamw": 2.0 * p.states,
        "sgd-momentum": 1.0 * p.states,
        "adam8bit": 2.0 + 2 * 4 / BNB_BLOCK,
    }.get(w.optimizer, 0.0)
    return float(p.weights), float(p.grads), own + p.master


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _cmd(hints: JobHints, mode: str, gpu_name: str | None) -> str:
    parts = ["gputop-diag memory --config <the model's config.json>", f"--mode {mode}"]
    if hints.batch:
        parts.append(f"--batch {hints.batch}")
    if hints.seq:
        parts.append(f"--seq {hints.seq}")
    if hints.world and mode == "train":
        parts.append(f"--world {hints.world}")
    if gpu_name:
        parts.append(f"--gpu '{gpu_name}'")
    return " ".join(parts)


def _training(hints: JobHints, gpu_bytes: int | None, gpu_name: str | None) -> list[str]:
    w = Workload(
        mode="train",
        dtype=hints.dtype or "bf16",
        precision=hints.precision or "master",
        optimizer=hints.optimizer or "adamw",
    )
    wb, gb, ob = bytes_per_parameter(w)
    per = wb + gb + ob
    what = f"{precision_of(w).words}, {OPTIMIZER_NAMES[w.optimizer]}"
    fits = ""
    if gpu_bytes:
        fits = (
            f"; on this GPU's {_gib(gpu_bytes)} that is at most "
            f"{gpu_bytes / per / 1e9:.1f} B parameters before any activation"
        )
    first = (
        f"Where does the memory go? Training keeps {per:g} bytes per parameter of model states "
        f"({what}: {wb:g} weights + {gb:g} gradients + {ob:g} optimizer, the ZeRO paper's "
        f"count){fits}; activations add s·b·h·(34 + 5·a·s/h) bytes per layer at 16-bit "
        "(Korthikanti et al. 2022)"
    )
    batch = ""
    if hints.batch:
        batch = f" (batch {hints.batch} → {max(1, hints.batch // 2)} halves them)"
    levers = (
        "Levers, largest first for long sequences: gradient checkpointing keeps 2·s·b·h per "
        "layer (full) or 34·s·b·h (selective); flash attention drops the 5·a·s² scores; a "
        f"smaller batch shrinks activations in proportion{batch}; a shorter context shrinks "
        "them in proportion, the scores with its square; a sharded optimizer divides the "
        f"{ob:g} B/param of optimizer state by the ranks (ZeRO-1), ZeRO-3/FSDP all {per:g}; "
        "mixed precision halves fp32 activations"
    )
    plan = f"Plan this job's model: {_cmd(hints, 'train', gpu_name)} (what each lever saves)"
    return [first, levers, plan]


def _inference(hints: JobHints, gpu_name: str | None, short: bool = False) -> list[str]:
    w = Workload(mode="infer", dtype=hints.dtype or "bf16", kv_dtype=hints.kv_dtype)
    wb = precision_of(w).weights
    kv_bytes = 1 if w.kv == "fp8" else (4 if w.kv == "fp32" else 2)
    first = (
        f"Inference holds the weights ({wb} bytes per parameter in {w.dtype}) and the KV cache, "
        f"M_KV = 2·L·H·T·d_head·b·{kv_bytes} bytes (L layers, H KV heads, T tokens, b "
        "sequences): it grows with every sequence and token in flight"
    )
    if short:
        return [first]
    levers = (
        "Levers: fewer sequences at once (vLLM --max-num-seqs), a shorter context "
        "(--max-model-len), the KV cache in fp8 (--kv-cache-dtype fp8) halves it, a model "
        "with fewer KV heads (grouped-query attention) divides it by heads / KV heads; "
        "weight-only int8 or fp8 halves the weights, int4 quarters them (--quant); tensor "
        "parallelism splits weights and cache over N GPUs (--tp N)"
    )
    plan = f"Plan this model: {_cmd(hints, 'infer', gpu_name)} (what each lever saves)"
    return [first, levers, plan]


def _from_plan(doc: dict[str, Any]) -> list[str]:
    terms = ", ".join(
        f"{t['label']} {_gib(t['bytes'])}" for t in doc["terms"] if t["bytes"] >= GIB // 10
    )
    mode = "training" if doc["workload"]["mode"] == "train" else "inference"
    gpu = doc.get("gpu")
    of = f" of {_gib(gpu['bytes'])}" if gpu else ""
    first = (
        f"Where the memory goes ({mode}, {doc['model']['family']} "
        f"{doc['model']['parameters'] / 1e9:.2f} B parameters, gputop-diag memory): {terms} = "
        f"{_gib(doc['total_bytes'])} per GPU{of}"
    )
    helping = [r for r in doc["what_ifs"] if r["saves"]]
    helping.sort(key=lambda r: (not r["fits"], -(r["saves"] or 0)))
    said = "; ".join(
        f"{r['lever']} ({r['change']}) saves {_gib(r['saves'])}" + (": fits" if r["fits"] else "")
        for r in helping[:4]
    )
    return [first, f"What would make it fit: {said}" if said else "No lever applies"]


def capacity_checks(
    hints: JobHints,
    gpu_bytes: int | None = None,
    gpu_name: str | None = None,
    plan: dict[str, Any] | None = None,
) -> tuple[str, ...]:
    """The planner's capacity checks for a job, most useful first."""
    if plan is not None:
        return tuple(_from_plan(plan))
    if hints.mode == "train":
        out = _training(hints, gpu_bytes, gpu_name)
    elif hints.mode == "infer":
        out = _inference(hints, gpu_name)
    else:
        train = _training(hints, gpu_bytes, gpu_name)
        out = [
            "If this is training: " + train[0][0].lower() + train[0][1:],
            "If it serves or generates: " + _inference(hints, gpu_name, short=True)[0],
            train[1],
            f"Plan the model: {_cmd(hints, 'train', gpu_name)} (or --mode infer)",
        ]
    said = "; ".join(hints.said)
    if said and out:
        out[0] += f" [from the job's command line: {said}]"
    return tuple(out)
