"""The report's "Measured in the job" section: what the probes inside the job measured
(`gputop-diag watch --probe`): the step split over their latest steps, each probed process's
memory, and the work of the newest sampled step (samples and tokens a second, FLOPs, MFU or
why none, the loss, the precision and what it costs on this GPU, misaligned shapes, host-device
copies) with the build's kernels for the GPU (`diagnose/measured_work.py`).

Built from the newest snapshot of the window that carries probes, sanitized as every surface
sanitizes it (`Sanitizer.model`: the lines of the job's code become path pseudonyms with their
line number, names their pseudonyms); the JSON is `measured_render.measured_json`'s object
(watch's `measured`) without the raw probe states; the Markdown is rendered from it alone, so
the two say the same."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..diagnose.job_view import job_probes
from ..diagnose.measured import probed_snapshot, process_memory, recent_probes
from ..diagnose.measured_render import measured_json, mfu_text, tflops_text
from ..diagnose.measured_rules import secs
from ..model import Snapshot, formats
from ..sanitize.sanitizer import Sanitizer

_PARTS = (
    ("t_input", "input"),
    ("t_sync", "sync"),
    ("t_comm", "comm"),
    ("t_transfer", "transfer"),
    ("t_host", "host"),
)
_MEMORY = (
    ("allocated", "allocated_bytes"),
    ("reserved", "reserved_bytes"),
    ("NVML", "nvml_used_bytes"),
    ("parameters", "params_bytes"),
    ("gradients", "grads_bytes"),
    ("optimizer", "optimizer_bytes"),
    ("activations", "activations_bytes"),
)
MAX_SHAPES = 5  # misaligned shapes listed


def measured_section(snaps: Sequence[Snapshot], s: Sanitizer) -> dict[str, Any] | None:
    """The watched job's probes (every probe where no job is watched) at the newest snapshot
    that carries them, sanitized; None without a probe."""
    probed = probed_snapshot(snaps)
    if probed is None:
        return None
    shown = s.model(probed)
    probes = job_probes(shown.job, shown) if shown.job is not None else tuple(shown.probes)
    if not probes:
        return None
    recent = recent_probes(shown, {p.pid for p in probes}, at=snaps[-1].timestamp) or probes
    doc = measured_json(recent, process_memory(shown, {p.pid for p in recent}))
    if doc is None:
        return None
    doc.pop("processes", None)  # the raw probe states: the figures above say what they measured
    doc["stepping"] = bool(recent_probes(shown, {p.pid for p in probes}, at=snaps[-1].timestamp))
    return doc


def _pct(share: float | None) -> str:
    return formats.pct(None if share is None else 100 * share)


def _size(b: int | None) -> str:
    if b is not None and b < 2**20:
        return f"{b / 1024:.0f} KiB"
    return formats.size(b)


def _num(n: float | None, unit: str = "") -> str:
    if n is None:
        return "n/a"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.3g} {unit}".rstrip()


def _split(split: dict[str, Any]) -> str:
    parts, shares, measured = split["parts"], split["shares"], set(split["measured"])
    sampled = set(split.get("sampled") or ())
    out = []
    for part, word in _PARTS:
        if part not in parts:
            continue
        if part in measured or part in sampled:
            tail = ", sampled" if part in sampled else ""
            out.append(f"{word} {secs(parts[part])} ({_pct(shares.get(part))}{tail})")
        else:
            out.append(f"{word} not measured")
    text = " + ".join(out) + f" = {secs(split['step_s'])} a step"
    if "t_gpu" in measured:
        text += f"; GPU busy {secs(parts.get('t_gpu'))} ({_pct(shares.get('t_gpu'))})"
    n = len(split.get("processes") or ())
    return f"{text}; over {split['steps']} steps of {formats.count(n, 'process', 'processes')}"


def _work(w: dict[str, Any]) -> str:
    batch = "batch n/a"
    if w.get("samples_per_step") is not None:
        batch = (
            f"{w['samples_per_step']} samples a step ({w.get('batch_from')}), "
            f"{_num(w.get('samples_per_s'))} samples/s"
        )
    tokens = (
        f"{_num(w['tokens_per_s'])} tokens/s ({w.get('tokens_per_step')} a step)"
        if w.get("tokens_per_s") is not None
        else "tokens/s n/a (no token ids in the batch)"
    )
    flops = f"{_num(w.get('flops_per_step'), 'FLOP')} a step"
    if w.get("achieved_tflops") is not None:
        flops += f", {tflops_text(w['achieved_tflops'])} TFLOP/s"
    mfu = (
        f"MFU {mfu_text(w['mfu'])} of {_num(w.get('peak_tflops'))} TFLOP/s"
        if w.get("mfu") is not None
        else f"MFU n/a ({w.get('mfu_why')})"
    )
    loss = f"; loss {w['loss']:.4g}" if w.get("loss") is not None else ""
    return f"{batch}; {tokens}; {flops}; {mfu}{loss}"


def _transfer(word: str, t: dict[str, Any] | None) -> str:
    if not t:
        return f"{word} none"
    nbytes, pinned = t.get("nbytes") or 0, t.get("pinned_bytes") or 0
    how = "pinned" if pinned >= nbytes else "pageable"
    if 0 < pinned < nbytes:
        how = f"{_size(pinned)} of it pinned"
    return (
        f"{word} {formats.count(t.get('count') or 0, 'copy', 'copies')} of {_size(nbytes)}, "
        f"{secs(t.get('seconds'))} of the host's time, {how}, "
        f"{t.get('non_blocking') or 0} non_blocking"
    )


def _shape_row(sh: dict[str, Any]) -> list[Any]:
    names, sizes = sh.get("dim_names") or "", sh.get("dims") or ()
    dims = " ".join(f"{k} {v}" for k, v in zip(names, sizes, strict=False))
    return [
        sh.get("op"),
        sh.get("dtype"),
        dims,
        ", ".join(sh.get("misaligned") or ()),
        sh.get("count"),
        _num(sh.get("flops"), "FLOP"),
        sh.get("site") or "n/a",
    ]


def measured_markdown(
    section: dict[str, Any], table: Callable[..., list[str]], md: Callable[[Any], str]
) -> list[str]:
    """The section in Markdown (`table`, `md`: the report's own Markdown helpers)."""
    out = [
        "Measured inside the job by its probe (`gputop-diag watch --probe`), over each "
        "process's latest steps; the work from a step it sampled (the batch, the FLOPs and the "
        "copies assumed alike in every step)."
    ]
    split = section.get("step_split")
    if split:
        stale = "" if section.get("stepping", True) else " (no recent step: the last ones seen)"
        out += ["", f"**Step split**{stale}: {md(_split(split))}."]
    else:
        out += ["", "**Step split**: the probe saw no step."]
    w = section.get("work")
    if w:
        at = f"sampled step {w.get('sampled_step')}"
        p = w.get("precision") or {}
        dtype = (
            f"matmuls in {p['compute_dtype']} ({_pct(p.get('compute_share'))} of their FLOPs)"
            if p.get("compute_dtype")
            else "no matmul seen"
        )
        out += [
            "",
            f"**Work** ({at}): {md(_work(w))}.",
            "",
            f"**Precision** ({at}): {md(dtype)}; {md(p.get('settings') or '')}.",
        ]
        out += [f"- {md(x)}" for x in p.get("findings") or ()]
        shapes = w.get("shapes") or {}
        bad = shapes.get("misaligned") or []
        if bad:
            out += [
                "",
                f"**Shapes** ({at}): {_pct(shapes.get('misaligned_share'))} of the matmul FLOPs "
                "in shapes the tensor cores want in multiples of 8 (16-bit) or 16 (fp8):",
                "",
                *table(
                    ["op", "dtype", "dimensions", "not aligned", "count", "FLOPs", "where"],
                    [_shape_row(sh) for sh in bad[:MAX_SHAPES]],
                    "lllllrl",
                ),
            ]
        elif shapes.get("misaligned_share") is not None:
            out += ["", f"**Shapes** ({at}): every matmul and convolution aligned."]
        t = w.get("transfers") or {}
        moved = _transfer("host to device", t.get("h2d"))
        moved += "; " + _transfer("device to host", t.get("d2h"))
        out += ["", f"**Transfers** ({at}): {md(moved)}."]
    for k in section.get("kernel_images") or ():
        out += ["", f"**Kernel images**: {md(k)}."]
    # the processes with an allocator or model figure (NVML's alone is the memory section's)
    measured = ("reserved_bytes", "params_bytes")
    rows = [r for r in section.get("memory") or () if any(r.get(n) is not None for n in measured)]
    if rows:
        out += [
            "",
            *table(
                ["pid", "rank", *(word for word, _ in _MEMORY)],
                [
                    [r.get("pid"), "-" if r.get("rank") is None else r["rank"]]
                    + [_size(r.get(n)) for _, n in _MEMORY]
                    for r in rows
                ],
                "rr" + "r" * len(_MEMORY),
            ),
        ]
    return out
