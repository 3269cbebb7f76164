"""The figures measured inside a job (`measured.py`) as text lines and as a JSON object, for the
`watch` summary: the step split with each part said measured or not, the lines of code that
sync, and each probed process's memory."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..model import ProbeState, formats
from ..model.codec import jsonable
from ..planner.shape import ModelShape
from .measured import PART_FIELD, PART_WORDS, MeasuredSplit, ProcessMemory, measured_split
from .measured_rules import secs
from .measured_work import (
    CONFIG_ASSUMPTIONS,
    MeasuredWork,
    devices_of,
    kernel_problems,
    measured_work,
)

PINNED_DOCS = "https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers"
_MEMORY = (
    ("allocated", "allocated_bytes"),
    ("reserved", "reserved_bytes"),
    ("NVML", "nvml_used_bytes"),
    ("parameters", "params_bytes"),
    ("gradients", "grads_bytes"),
    ("optimizer", "optimizer_bytes"),
    ("activations", "activations_bytes"),
    ("KV cache", "kv_cache_bytes"),
)


def _size(b: int | None) -> str:
    """Bytes as they read best, down to KiB (a small model's parameters)."""
    if b is not None and b < 2**20:
        return f"{b / 1024:.0f} KiB"
    return formats.size(b)


def _pct(share: float | None) -> str:
    return formats.pct(None if share is None else 100 * share)


def mfu_text(share: float | None) -> str:
    """An MFU (0..1) as a percentage, whole from 1 % (46 %, 3 %), with two significant digits
    under it (0.42 %, 0.0042 %): a whole percentage would say 0 % of a job that does work."""
    if share is None:
        return "n/a"
    v = 100 * share
    if v <= 0 or v >= 1:
        return f"{v:.0f} %"
    return f"{v:.{1 - math.floor(math.log10(v))}f} %"


def split_text(m: MeasuredSplit, transfer_s: float | None = None) -> str:
    """ "input 750 ms (62 %) + sync 3 ms (0 %) + comm not measured + host 436 ms (36 %) =
    1.20 s; GPU busy 450 ms (38 %)". With `transfer_s` (host-to-device copies, measured in a
    sampled step), the host's time is what remains after them."""
    parts = []
    for part in ("t_input", "t_sync", "t_comm", "t_host"):
        word = PART_WORDS[part]
        seconds, share = m.seconds(part), m.share(part)
        if part == "t_host" and transfer_s is not None and seconds is not None:
            moved = min(transfer_s, seconds)
            parts.append(f"transfer {secs(moved)} ({_pct(moved / m.step_s)}, sampled)")
            seconds = seconds - moved
            share = seconds / m.step_s if m.step_s > 0 else None
        if m.is_measured(part):
            parts.append(f"{word} {secs(seconds)} ({_pct(share)})")
        else:
            parts.append(f"{word} not measured")
    gpu = m.share("t_gpu")
    tail = f"GPU busy {secs(m.seconds('t_gpu'))} ({_pct(gpu)})" if gpu is not None else ""
    return " + ".join(parts) + f" = {secs(m.step_s)}" + (f"; {tail}" if tail else "")


def measured_lines(
    probes: Sequence[ProbeState],
    memory: Sequence[ProcessMemory],
    ranks: int = 0,
    model: ModelShape | None = None,
) -> list[str]:
    """The summary's lines: the split, the sync sites, each process's memory, the notes.
    With `ranks` (a distributed job), the split is said to be the ranks' mean; with `model`
    (`--model-config`), MFU from its FLOPs a token beside the counted one."""
    m = measured_split(probes)
    devices = devices_of(memory)
    work = measured_work(probes, devices, model)
    out = []
    if m is not None:
        n = len(m.pids)
        who = f"the mean of {ranks} ranks" if ranks > 1 else f"{n} process{'es' if n > 1 else ''}"
        transfer = work.transfer_s if work is not None else None
        split = split_text(m, transfer)
        out.append(f"step split (measured in the job, {who}, {m.steps} steps): {split}")
        if m.sync_sites:
            total = sum(s.seconds for s in m.sync_sites) or 1.0
            count = f"{m.sync_count:.1f} a step " if m.sync_count is not None else ""
            out.append(
                f"  syncs {count}at: "
                + ", ".join(
                    f"{s.site} {s.call} ({_pct(s.seconds / total)})" for s in m.sync_sites[:3]
                )
            )
    elif probes:
        out.append("step split (measured in the job): the probe saw no step")
    out += work_lines(work) if work is not None else []
    out += [f"kernel images: {k}" for k in kernel_problems(probes, devices)]
    for r in memory:
        figures = [
            f"{word} {_size(getattr(r, name))}"
            for word, name in _MEMORY
            if getattr(r, name) is not None
        ]
        if figures:
            rank = f" rank {r.rank}" if r.rank is not None else ""
            out.append(f"memory (measured) pid {r.pid}{rank}: " + ", ".join(figures))
    for note in dict.fromkeys(n for p in probes for n in p.notes):
        out.append(f"  probe note: {note}")
    return out


def _num(n: float | None, unit: str = "") -> str:
    """1234567 -> "1.23 M"; a figure as it reads best."""
    if n is None:
        return "n/a"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.3g} {unit}".rstrip()


def _shape_text(sh: Any) -> str:
    dims = " ".join(f"{k} {v}" for k, v in zip(sh.dim_names, sh.dims, strict=False))
    at = f" at {sh.site}" if sh.site else ""
    return f"{sh.op} {sh.dtype} {dims} ({', '.join(sh.misaligned)} not aligned){at}"


def _transfer_text(word: str, t: Any) -> str:
    if t is None:
        return f"{word} none"
    pinned = "pinned" if t.pinned_bytes >= t.nbytes else "pageable"
    if 0 < t.pinned_bytes < t.nbytes:
        pinned = f"{_size(t.pinned_bytes)} of it pinned"
    return (
        f"{word} {formats.count(t.count, 'copy', 'copies')} of {_size(t.nbytes)}, "
        f"{secs(t.seconds)} of the host's time, {pinned}, {t.non_blocking} non_blocking"
    )


def tflops_text(v: float) -> str:
    """Achieved TFLOP/s as it reads: three significant digits, whole with thousands separators
    from 100 (1,490, not 1.49e+03)."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


# A config-derived MFU above this is no utilization: the config is not the running job's model.
IMPOSSIBLE_MFU = 1.0


def config_mismatch_words(mfu: float) -> str:
    """What an impossible config MFU says instead of the figure."""
    return (
        f"n/a from the model's config: it implies more than {mfu_text(IMPOSSIBLE_MFU)} of the "
        f"peak, so the config does not look like the running job's model ({CONFIG_ASSUMPTIONS})"
    )


def _mfu_words(w: MeasuredWork) -> str:
    """ "MFU 46 % of 67 TFLOP/s"; with the model's config, both and which is which."""
    peak = f" of {_num(w.peak_tflops)} TFLOP/s"
    counted = f"MFU {mfu_text(w.mfu)}" if w.mfu is not None else f"MFU n/a ({w.mfu_why})"
    if w.model_flops is None and w.model_mfu_why is None:
        return counted + (peak if w.mfu is not None else "")
    counted += " counted in the sampled step" if w.mfu is not None else ""
    f = w.model_flops
    if w.model_mfu is not None and w.model_mfu > IMPOSSIBLE_MFU:  # the figure is not shown
        return (
            counted
            + (peak if w.peak_tflops is not None else "")
            + "; MFU "
            + (config_mismatch_words(w.model_mfu))
        )
    if w.model_mfu is not None and f is not None:
        planned = (
            f"{mfu_text(w.model_mfu)} from the model's config ({f.formula}: "
            f"{_num(f.per_token, 'FLOP')} a token at s {f.seq})"
        )
    else:
        planned = f"n/a from the model's config ({w.model_mfu_why})"
    return f"{counted}, {planned}" + (peak if w.peak_tflops is not None else "")


def work_lines(w: MeasuredWork) -> list[str]:
    """The work, precision, shapes and copies of the sampled step, in words."""
    at = f"sampled step {w.sampled_step}"
    batch = "batch n/a"
    if w.samples_per_step is not None:
        batch = (
            f"{w.samples_per_step} samples a step ({w.batch_from}), "
            f"{_num(w.samples_per_s)} samples/s"
        )
    tokens = (
        f"{_num(w.tokens_per_s)} tokens/s ({w.tokens_per_step} a step)"
        if w.tokens_per_s is not None
        else "tokens/s n/a (no token ids in the batch)"
    )
    mfu = _mfu_words(w)
    flops = f"{_num(w.flops_per_step, 'FLOP')} a step"
    if w.achieved_tflops is not None:
        flops += f", {tflops_text(w.achieved_tflops)} TFLOP/s"
    loss = f"; loss {w.loss:.4g}" if w.loss is not None else ""
    out = [f"work (measured in the job, {at}): {batch}; {tokens}; {flops}; {mfu}{loss}"]
    dtype = (
        f"matmuls in {w.compute_dtype} ({_pct(w.compute_share)} of their FLOPs)"
        if w.compute_dtype is not None
        else "no matmul seen"
    )
    out.append(f"precision ({at}): {dtype}; {w.settings}")
    out += [f"  precision: {p}" for p in w.precision]
    if w.misaligned:
        out.append(
            f"shapes ({at}): {_pct(w.misaligned_share)} of the matmul FLOPs in shapes the "
            "tensor cores want in multiples of 8 (16-bit) or 16 (fp8): "
            + "; ".join(_shape_text(sh) for sh in w.misaligned[:3])
        )
    elif w.misaligned_share is not None:
        out.append(f"shapes ({at}): every matmul and convolution aligned for the tensor cores")
    out.append(
        f"transfers ({at}): "
        + _transfer_text("host to device", w.h2d)
        + "; "
        + _transfer_text("device to host", w.d2h)
    )
    t = w.h2d
    if t is not None and t.non_blocking and t.pinned_bytes < t.nbytes:
        out.append(
            "  transfers: non_blocking copies from pageable memory are staged and wait for the "
            f"copy; pin the batch (DataLoader(pin_memory=True)) ({PINNED_DOCS})"
        )
    return out


def _transfer_json(t: Any) -> dict[str, Any] | None:
    if t is None:
        return None
    return jsonable(t)


def work_json(w: MeasuredWork | None) -> dict[str, Any] | None:
    if w is None:
        return None
    return {
        "sampled_step": w.sampled_step,
        "samples_per_step": w.samples_per_step,
        "tokens_per_step": w.tokens_per_step,
        "batch_from": w.batch_from,
        "samples_per_s": w.samples_per_s,
        "tokens_per_s": w.tokens_per_s,
        "flops_per_step": w.flops_per_step,
        "achieved_tflops": w.achieved_tflops,
        "peak_tflops": w.peak_tflops,
        "mfu": w.mfu,
        "mfu_why": w.mfu_why,
        # MFU from the model's config (--model-config): its FLOPs a token, tokens/s times them
        "model_flops_per_token": w.model_flops.per_token if w.model_flops else None,
        "model_flops_formula": w.model_flops.formula if w.model_flops else None,
        "model_tflops": w.model_tflops,
        "model_mfu": w.model_mfu,
        "model_mfu_why": w.model_mfu_why,
        "loss": w.loss,
        "precision": {
            "compute_dtype": w.compute_dtype,
            "compute_share": w.compute_share,
            "settings": w.settings,
            "findings": list(w.precision),
        },
        "shapes": {
            "misaligned_share": w.misaligned_share,
            "misaligned": jsonable(list(w.misaligned)),
        },
        "transfers": {
            "t_transfer_s": w.transfer_s,
            "h2d": _transfer_json(w.h2d),
            "d2h": _transfer_json(w.d2h),
        },
    }


def measured_json(
    probes: Sequence[ProbeState],
    memory: Sequence[ProcessMemory],
    model: ModelShape | None = None,
) -> dict[str, Any] | None:
    """The measured figures as the watch document's `measured` object; None without a probe."""
    if not probes:
        return None
    m = measured_split(probes)
    devices = devices_of(memory)
    work = measured_work(probes, devices, model)
    split = None
    if m is not None:
        transfer = work.transfer_s if work is not None else None
        host = m.seconds("t_host")
        parts = {part: m.seconds(part) for part in PART_FIELD}
        shares = {part: m.share(part) for part in PART_FIELD}
        if transfer is not None and host is not None:
            moved = min(transfer, host)
            parts["t_transfer"], parts["t_host"] = moved, host - moved
            if m.step_s > 0:
                shares["t_transfer"] = moved / m.step_s
                shares["t_host"] = parts["t_host"] / m.step_s
        split = {
            "estimate": False,
            "processes": list(m.pids),
            "steps": m.steps,
            "step_s": m.step_s,
            "parts": parts,
            "shares": shares,
            "measured": [part for part in PART_FIELD if m.is_measured(part)],
            # measured in a sampled step only (probe/sample.py), assumed alike in the others
            "sampled": ["t_transfer"] if "t_transfer" in parts else [],
            "t_comm_total_s": m.t_comm_total_s,
            "sync_count": m.sync_count,
            "sync_sites": jsonable(m.sync_sites),
        }
    return {
        "step_split": split,
        "memory": [
            {
                "pid": r.pid,
                "rank": r.rank,
                "gpus": list(r.gpus),
                **{name: getattr(r, name) for _, name in _MEMORY},
                "peak_bytes": r.peak_bytes,
                "inactive_split_bytes": r.inactive_split_bytes,
                "alloc_retries": r.alloc_retries,
                "ooms": r.ooms,
                "fragmented": r.fragmented,
            }
            for r in memory
        ],
        "work": work_json(work),
        "kernel_images": list(kernel_problems(probes, devices)),
        "processes": jsonable(list(probes)),
    }
