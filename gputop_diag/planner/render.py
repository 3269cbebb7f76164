"""The memory plan as a JSON document (`gputop-diag.memory/1`) and as text. Pure: the command
reads the files and the GPUs, this turns figures into words."""

from __future__ import annotations

import textwrap
from dataclasses import asdict, replace
from typing import Any

from ..model import formats
from .fit import MAX_BATCH, MAX_SEQ, fit, what_ifs
from .gpus import SOURCE_WORDS, GpuMemory
from .optimizers import OPTIMIZER_NAMES
from .precision import cc_text, check_line, precision_checks
from .shape import ModelShape, active_parameters
from .terms import plan
from .workload import Workload, precision_of

SCHEMA = "gputop-diag.memory/1"
GIB = 2**30
WIDTH = 100  # the text's lines, where they can be wrapped


def document(
    shape: ModelShape,
    w: Workload,
    gpu: GpuMemory | None,
    *,
    parameters: int | None = None,
    model: dict[str, Any] | None = None,
    notes: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Everything the plan says: each term with its share, formula and source; the total per
    GPU against the GPU; headroom; the largest batch and longest context that fit; the
    what-ifs. `model`: where the shape came from (config path, architecture, notes)."""
    p = plan(shape, w, parameters)
    capacity = gpu.bytes if gpu is not None else None
    f = fit(shape, w, capacity, parameters)
    total = p.total
    terms = [
        {
            "term": t.key,
            "label": t.label,
            "bytes": t.bytes,
            "share": round(t.bytes / total, 4) if total else 0.0,
            "formula": t.formula,
            "source": t.source,
        }
        for t in p.terms
    ]
    fits_at_one = None
    if f.largest_batch is None and capacity is not None:
        fits_at_one = plan(shape, replace(w, batch=1), parameters).total
    cc = gpu.compute_capability if gpu is not None else None
    checks = precision_checks(w, cc, moe=shape.experts > 0)
    return {
        "schema": SCHEMA,
        "model": {
            **(model or {}),
            "family": shape.family,
            "parameters": p.parameters,
            "active_parameters": active_parameters(shape) if parameters is None else None,
            "shape": {k: v for k, v in asdict(shape).items() if k != "family"},
        },
        "workload": {
            **asdict(w),
            "kv_dtype": w.kv if not w.training else None,
            "zero_stage": w.stage,
            "precision_words": precision_of(w).words,
        },
        "gpu": None if gpu is None else asdict(gpu),
        "terms": terms,
        "total_bytes": total,
        "model_states_bytes": p.model_states,
        "fits": f.fits,
        "headroom_bytes": f.headroom,
        "largest_batch": f.largest_batch,
        "largest_batch_is_cap": f.largest_batch == MAX_BATCH,
        "batch_1_bytes": fits_at_one,
        "longest_seq": f.longest_seq,
        "longest_seq_is_cap": f.longest_seq == MAX_SEQ,
        "what_ifs": [
            asdict(r) for r in what_ifs(shape, w, capacity, parameters, compute_capability=cc)
        ],
        "precision_checks": [
            {**asdict(c), "needs": cc_text(c.needs), "line": check_line(c, cc)}
            for c in checks
            if cc is not None
        ],
        "notes": list(notes),
    }


def gib(n: int | None, signed: bool = False) -> str:
    if n is None:
        return "n/a"
    return f"{n / GIB:+.2f}" if signed else f"{n / GIB:.2f}"


def count(n: int) -> str:
    """8.03 B, 124.4 M."""
    if n >= 10**9:
        return f"{n / 1e9:.2f} B"
    if n >= 10**6:
        return f"{n / 1e6:.1f} M"
    return f"{n:,}"


def _shape_line(s: dict[str, Any]) -> str:
    kv = f"{s['kv_heads']} KV heads" if s["kv_heads"] != s["heads"] else "as many KV heads"
    parts = [
        f"{s['layers']} layers",
        f"hidden {s['hidden']}",
        f"{s['heads']} heads ({kv}, head dim {s['head_dim']})",
    ]
    if s["experts"]:
        parts.append(
            f"{s['experts']} experts ({s['active_experts']} per token, intermediate "
            f"{s['expert_intermediate']})"
        )
    if s["intermediate"] and s["moe_layers"] < s["layers"]:
        parts.append(f"intermediate {s['intermediate']}")
    parts.append(f"vocabulary {s['vocab']}" + (", tied embeddings" if s["tied_embeddings"] else ""))
    if s["sliding_layers"]:
        parts.append(f"{s['sliding_layers']} layers with a {s['sliding_window']}-token window")
    return ", ".join(parts)


def _workload_line(w: dict[str, Any]) -> str:
    if w["mode"] == "train":
        parts = [
            f"training: {w['precision_words']}",
            OPTIMIZER_NAMES[w["optimizer"]],
            f"batch {w['batch']} × {w['seq']} tokens",
        ]
        if w["world"] > 1:
            shard = f"ZeRO-{w['zero_stage']}" if w["zero_stage"] else "DDP"
            parts.append(f"{w['world']} GPUs, " + ("FSDP" if w["fsdp"] else shard))
        else:
            parts.append("1 GPU")
        parts.append(
            "no checkpointing"
            if w["checkpointing"] == "none"
            else f"{w['checkpointing']} checkpointing"
        )
    else:
        parts = [
            f"inference: {w['precision_words']}",
            f"{formats.count(w['batch'], 'sequence')} × {w['seq']} tokens",
            f"KV cache {w['kv_dtype']}",
        ]
        if w["tp"] > 1:
            parts.append(f"one GPU of {w['tp']} (tensor parallelism)")
    parts.append("flash attention" if w["flash_attention"] else "eager attention")
    return ", ".join(parts)


def render_text(doc: dict[str, Any]) -> str:
    m, w, gpu = doc["model"], doc["workload"], doc["gpu"]
    where = f" ({m['config']})" if m.get("config") else " (shape options)"
    active = ""
    if m.get("active_parameters") and m["active_parameters"] != m["parameters"]:
        active = f", {count(m['active_parameters'])} active per token"
    lines = [f"Memory plan: {m['family']}, {count(m['parameters'])} parameters{active}{where}"]
    lines += _wrap(_shape_line(m["shape"]), "  ")
    lines += _wrap(_workload_line(w), "  ")
    if gpu is not None:
        lines += _wrap(_gpu_line(gpu), "  ")
    lines += ["", f"{'term':<34} {'GiB':>9} {'share':>6}  formula"]
    for t in doc["terms"]:
        lines.append(
            f"{t['label']:<34} {gib(t['bytes']):>9} {t['share'] * 100:>5.1f}%  {t['formula']}"
        )
    lines.append(f"{'total per GPU':<34} {gib(doc['total_bytes']):>9}")
    lines += _fit_lines(doc)
    lines += _precision_lines(doc)
    lines += ["", "Where each line comes from:"]
    for t in doc["terms"]:
        lines += _wrap(f"{t['label']}: {t['source']}", "  ")
    lines += ["", "What-ifs, one change at a time:"]
    lines.append(f"  {'lever':<34} {'change':<44} {'saves GiB':>9} {'total':>8}  fits")
    for r in doc["what_ifs"]:
        if r["saves"] is None:
            lines.append(f"  {r['lever']:<34} n/a: {r['note']}")
            continue
        fits = "-" if r["fits"] is None else ("yes" if r["fits"] else "no")
        lines.append(
            f"  {r['lever']:<34} {r['change']:<44} {gib(r['saves']):>9} {gib(r['total']):>8}"
            f"  {fits}" + (f"  ({r['note']})" if r["note"] else "")
        )
    if doc["notes"]:
        lines += ["", "Read from the config and assumed:"] + [f"  {n}" for n in doc["notes"]]
    return "\n".join(lines)


def _gpu_line(gpu: dict[str, Any]) -> str:
    """The GPU, its size and where both came from: `--gpu` (the planner's table, or a size)
    or NVML (this machine's, the simulator's, a recording's)."""
    more = f" × {gpu['count']}" if gpu["count"] > 1 else ""
    cc = gpu.get("compute_capability")
    cap = f", compute capability {cc[0]}.{cc[1]}" if cc else ""
    if gpu.get("origin", "--gpu") == "--gpu":
        where = f"from --gpu: {SOURCE_WORDS.get(gpu['source'], gpu['source'])}"
    else:
        where = gpu["source"]
    return f"GPU: {gpu['name']}{more}, {gib(gpu['bytes'])} GiB{cap} ({where})"


def _precision_lines(doc: dict[str, Any]) -> list[str]:
    gpu = doc["gpu"]
    if gpu is None:
        return []
    if not gpu.get("compute_capability"):
        return ["", "Precision: the GPU's compute capability is not known; dtypes not checked"]
    if not doc["precision_checks"]:
        return []
    cc = gpu["compute_capability"]
    out = ["", f"Precision on this GPU (compute capability {cc[0]}.{cc[1]}):"]
    for c in doc["precision_checks"]:
        out += _wrap(c["line"], "  ")
    return out


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
    )


def _fit_lines(doc: dict[str, Any]) -> list[str]:
    gpu = doc["gpu"]
    if gpu is None:
        return [
            "no GPU to fit against (none usable here): give --gpu MODEL (H100-80GB, ...) or run "
            "it on the GPU machine"
        ]
    head = doc["headroom_bytes"]
    verdict = (
        f"fits, headroom {gib(head)} GiB" if doc["fits"] else f"does NOT fit: {gib(-head)} GiB over"
    )
    out = [f"{'GPU memory':<34} {gib(gpu['bytes']):>9}  {verdict}"]
    w = doc["workload"]
    if doc["largest_batch"] is None:
        out.append(f"largest batch that fits: none (batch 1 needs {gib(doc['batch_1_bytes'])} GiB)")
    else:
        cap = " or more" if doc["largest_batch_is_cap"] else ""
        out.append(f"largest batch that fits: {doc['largest_batch']}{cap} at {w['seq']} tokens")
    if doc["longest_seq"] is None:
        out.append(f"longest context that fits: none at batch {w['batch']}")
    else:
        cap = " or more" if doc["longest_seq_is_cap"] else ""
        beyond = ""
        limit = doc["model"]["shape"].get("max_positions")
        if limit and doc["longest_seq"] > limit:
            beyond = f" (the model was trained for {limit})"
        out.append(
            f"longest context that fits: {doc['longest_seq']}{cap} tokens at batch "
            f"{w['batch']}{beyond}"
        )
    return out
