"""The figures measured inside a job (`measured.py`) as text lines and as a JSON object, for the
`watch` summary: the step split with each part said measured or not, the lines of code that
sync, and each probed process's memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..model import ProbeState, formats
from ..model.codec import jsonable
from .measured import PART_FIELD, PART_WORDS, MeasuredSplit, ProcessMemory, measured_split
from .measured_rules import secs

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


def split_text(m: MeasuredSplit) -> str:
    """ "input 750 ms (62 %) + sync 3 ms (0 %) + comm not measured + host 436 ms (36 %) =
    1.20 s; GPU busy 450 ms (38 %)"."""
    parts = []
    for part in ("t_input", "t_sync", "t_comm", "t_host"):
        word = PART_WORDS[part]
        if m.is_measured(part):
            parts.append(f"{word} {secs(m.seconds(part))} ({_pct(m.share(part))})")
        else:
            parts.append(f"{word} not measured")
    gpu = m.share("t_gpu")
    tail = f"GPU busy {secs(m.seconds('t_gpu'))} ({_pct(gpu)})" if gpu is not None else ""
    return " + ".join(parts) + f" = {secs(m.step_s)}" + (f"; {tail}" if tail else "")


def measured_lines(
    probes: Sequence[ProbeState], memory: Sequence[ProcessMemory], ranks: int = 0
) -> list[str]:
    """The summary's lines: the split, the sync sites, each process's memory, the notes.
    With `ranks` (a distributed job), the split is said to be the ranks' mean."""
    m = measured_split(probes)
    out = []
    if m is not None:
        n = len(m.pids)
        who = f"the mean of {ranks} ranks" if ranks > 1 else f"{n} process{'es' if n > 1 else ''}"
        out.append(f"step split (measured in the job, {who}, {m.steps} steps): {split_text(m)}")
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


def measured_json(
    probes: Sequence[ProbeState], memory: Sequence[ProcessMemory]
) -> dict[str, Any] | None:
    """The measured figures as the watch document's `measured` object; None without a probe."""
    if not probes:
        return None
    m = measured_split(probes)
    split = None
    if m is not None:
        split = {
            "estimate": False,
            "processes": list(m.pids),
            "steps": m.steps,
            "step_s": m.step_s,
            "parts": {part: m.seconds(part) for part in PART_FIELD},
            "shares": {part: m.share(part) for part in PART_FIELD},
            "measured": [part for part in PART_FIELD if m.is_measured(part)],
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
        "processes": jsonable(list(probes)),
    }
