"""The step-time split t_step = t_input + t_host + t_transfer + t_gpu + t_sync + t_comm, estimated
from outside the process.

What can be seen from outside: the step time (the job's output) and the share of that time the
job's GPUs were busy (NVML's busy-time samples over the same period). t_gpu is that share of the
step; the rest is waiting, attributed to one part by the diagnosis (input pipeline: t_input;
synchronization: t_sync; communication: t_comm), or left as one unsplit wait when nothing names
it. This is an estimate; the profiler commands in `PROFILER_COMMANDS` measure each part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean

from ..job.steps import step_median
from ..model import Snapshot, StepStats

PARTS = ("t_input", "t_host", "t_transfer", "t_gpu", "t_sync", "t_comm")
# The class whose evidence a wait is attributed to -> the part of the step it is.
WAIT_PART = {
    "input_pipeline": "t_input",
    "synchronization": "t_sync",
    "communication": "t_comm",
    "scheduler": None,
}
PROFILER_COMMANDS = (
    "nsys profile -t cuda,nvtx,osrt,cudnn,cublas --capture-range=cudaProfilerApi -o step <cmd>",
    "torch.profiler.profile(schedule=torch.profiler.schedule(wait=5, warmup=2, active=3), "
    "on_trace_ready=torch.profiler.tensorboard_trace_handler('./tb'))",
)


@dataclass(frozen=True, slots=True)
class StepSplit:
    step_s: float  # the median step time
    gpu_busy_share: float  # 0..1, of the job's GPUs over the window
    parts: tuple[tuple[str, float | None], ...]  # (part, seconds) in PARTS order; None: unknown
    wait_s: float  # the step time the GPUs did not work
    wait_part: str | None  # the part the wait is attributed to; None: not split
    basis: str  # how the estimate was made, in words
    estimate: bool = True


def gpu_busy_share(window: Sequence[Snapshot], gpus: Sequence[int]) -> float | None:
    """The mean busy share of `gpus` over the window: NVML's own samples where given, else the
    per-tick utilization."""
    values: list[float] = []
    for snap in window:
        for g in snap.gpus:
            if g.index not in gpus or g.lost:
                continue
            if g.util_samples:
                values.extend(g.util_samples)
            elif g.util_gpu_pct is not None:
                values.append(g.util_gpu_pct)
    if not values:
        return None
    return max(0.0, min(1.0, mean(values) / 100.0))


def estimate(
    steps: StepStats | None, window: Sequence[Snapshot], gpus: Sequence[int], primary: str | None
) -> StepSplit | None:
    """The split of the median step, or None without a step time or GPU samples."""
    step = step_median(steps)
    if not step or not gpus:
        return None
    share = gpu_busy_share(window, gpus)
    if share is None:
        return None
    t_gpu = step * share
    wait = max(0.0, step - t_gpu)
    part = WAIT_PART.get(primary or "")
    parts: list[tuple[str, float | None]] = []
    for name in PARTS:
        if name == "t_gpu":
            parts.append((name, t_gpu))
        elif part is not None:
            parts.append((name, wait if name == part else None))
        else:
            parts.append((name, None))
    basis = (
        f"GPU busy {share:.0%} of the step (NVML samples on GPU "
        f"{', '.join(map(str, sorted(gpus)))})"
    )
    if part is not None:
        basis += f"; the wait attributed to {part} by the {primary.replace('_', ' ')} evidence"
    else:
        basis += "; the wait is not attributed (no class names it)"
    return StepSplit(step, share, tuple(parts), wait, part, basis)
