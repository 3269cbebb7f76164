"""CUDA at step boundaries: an event per boundary, the caching allocator's figures per step.

Only when the job has initialized CUDA itself (`torch.cuda.is_initialized()`): the probe never
creates a CUDA context, and never asks `torch.cuda.is_available()`, which initializes the driver
and "poisons fork" (its docstring; https://pytorch.org/docs/stable/notes/multiprocessing.html
#poison-fork-in-multiprocessing).

gpu_span_s of a step is `start.elapsed_time(end)` of the events recorded on the current stream at
its two boundaries (https://pytorch.org/docs/stable/generated/torch.cuda.Event.html): the span
of the GPU's timeline for that step, idle gaps included. It is read only once both events have
completed (`Event.query()`, which does not block), so a step's record may be written a few
steps late; it is never waited for.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

MAX_LATE_STEPS = 8  # a record waits at most this many boundaries for its end event


def cuda_in_use(torch: ModuleType | None) -> bool:
    try:
        return torch is not None and bool(torch.cuda.is_initialized())
    except Exception:
        return False


def capturing(torch: ModuleType) -> bool:
    """Whether the current stream is being captured into a CUDA graph: no event is recorded
    or queried then, or the job's own capture would be invalidated
    (https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs)."""
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:
        return True  # cannot tell: stay out of the way


def capturing_any(torch: ModuleType | None) -> bool:
    """A CUDA graph capture under way in a job that uses CUDA (no question asked otherwise)."""
    return cuda_in_use(torch) and capturing(torch)


def mark(torch: ModuleType) -> Any:
    if capturing(torch):
        return None
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def elapsed_s(start: Any, end: Any) -> float | None:
    """Seconds between two recorded events once both are done; None while either is pending."""
    if start is None or end is None or not (end.query() and start.query()):
        return None
    return start.elapsed_time(end) / 1000.0


def memory(torch: ModuleType) -> dict[str, int] | None:
    """The allocator's figures at this step (https://pytorch.org/docs/stable/generated/
    torch.cuda.memory_stats.html). "peak" is the peak since the job started (or since the job
    itself last reset it): the probe never resets it, since the job may report
    `torch.cuda.max_memory_allocated()` itself."""
    stats = torch.cuda.memory.memory_stats_as_nested_dict()
    if not stats:
        return None
    figures = {
        "allocated": stats["allocated_bytes"]["all"]["current"],
        "reserved": stats["reserved_bytes"]["all"]["current"],
        "peak": stats["allocated_bytes"]["all"]["peak"],
        "inactive_split": stats["inactive_split_bytes"]["all"]["current"],
        "retries": stats["num_alloc_retries"],
        "ooms": stats["num_ooms"],
    }
    return figures


def arch_list(torch: ModuleType | None) -> list[str]:
    """The GPU architectures the job's torch was built for ("sm_80", "compute_90"): what
    `torch.cuda.get_arch_list()` returns, read from the build's flags without asking the driver
    anything (older releases' `get_arch_list` calls `is_available()` first)."""
    try:
        flags = getattr(torch._C, "_cuda_getArchFlags", None) if torch is not None else None
        text = flags() if flags is not None else None
        return [a for a in text.split() if a[:3] in ("sm_", "com")] if text else []
    except Exception:
        return []


def current_device(torch: ModuleType) -> int | None:
    """The CUDA device the job's current stream is on (an index among CUDA_VISIBLE_DEVICES)."""
    try:
        return int(torch.cuda.current_device())
    except Exception:
        return None
