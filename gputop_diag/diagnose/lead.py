"""What heads a diagnosis on every surface: the most severe cause when it is not the workload's
class — a hardware fault, a broken driver chain, throttling that explains a compute- or
bandwidth-bound class, memory that grows towards full before it is full — with its own first
next step. Pure: a Diagnosis in, a Lead out."""

from __future__ import annotations

from dataclasses import dataclass

from . import thresholds as T
from .types import Alert, Diagnosis


@dataclass(frozen=True, slots=True)
class Lead:
    """What heads the panel when something outranks the workload's class. The first next step
    is its own."""

    label: str
    alert: Alert
    next_step: str | None


THROTTLE_KINDS = ("thermal", "power")
THROTTLE_EXPLAINS = ("compute", "bandwidth")
# The first step for memory that grows every step: find what holds it (PyTorch's memory
# snapshot, pytorch.org/docs/stable/torch_cuda_memory.html).
GROWTH_STEP = (
    "find what grows: in the job, from torch.cuda import memory; "
    "memory._record_memory_history(), and after a few steps "
    "memory._dump_snapshot('mem.pkl'); open the file at pytorch.org/memory_viz (tensors "
    "kept with their graph, logged tensors not detached)"
)


def next_step_of(a: Alert) -> str | None:
    """The step a lead alert's text names: after `next: ` (its first sentence), else its
    closing advice after the last colon (`…: check cooling and airflow`)."""
    if a.kind == "memory_growth":
        return GROWTH_STEP
    if "next: " in a.text:
        step = a.text.split("next: ", 1)[1]
        return step.split(". ", 1)[0].rstrip(".")
    if a.kind != "driver_chain" and ": " in a.text:  # the chain's texts name a step with next:
        return a.text.rsplit(": ", 1)[1].rstrip(".")
    return None


def _growing_before_full(d: Diagnosis) -> Alert | None:
    """The memory-growth alert of a capacity verdict while the memory is not yet full: the
    growth, with its time to full, is the story, not a lack of capacity."""
    if d.primary != "capacity":
        return None
    used = max(
        (e.value for e in d.evidence if e.metric == "mem_used_pct_max" and e.value is not None),
        default=None,
    )
    if used is not None and used >= T.CAPACITY_WARN_PCT:
        return None
    return next((a for a in d.alerts if a.kind == "memory_growth"), None)


def lead_of(d: Diagnosis | None) -> Lead | None:
    """The most severe cause, when it is not the class: fault > broken driver chain >
    throttling that explains the class > memory growing towards full."""
    if d is None:
        return None
    if d.faults:
        return Lead("FAULT", d.faults[0], next_step_of(d.faults[0]))
    nvml = next((e for e in d.evidence if e.metric == "nvml"), None)
    if d.primary == "insufficient_data" and nvml is not None:  # NVML failed machine-wide
        cause = Alert("nvml", "critical", d.evidence[0].text)
        return Lead("NO GPU DATA", cause, nvml.text.removeprefix("next: "))
    for a in d.alerts:
        if a.kind == "driver_chain" and a.severity == "critical":
            return Lead("DRIVER CHAIN", a, next_step_of(a))
    if d.primary in THROTTLE_EXPLAINS:
        for a in d.alerts:
            if a.kind in THROTTLE_KINDS and a.severity in ("warning", "critical"):
                return Lead("THROTTLED", a, next_step_of(a))
    growth = _growing_before_full(d)
    if growth is not None:
        return Lead("MEMORY GROWING", growth, next_step_of(growth))
    return None
