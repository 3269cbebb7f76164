"""Figures about the watched job over the history: its GPU memory per GPU and its trend, the
GPUs it uses, the headline "steps per second under a memory budget"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..model import JobState, Snapshot
from ..model.stats import slope_per_s
from .steps import step_median, step_p95, steps_per_s


@dataclass(frozen=True, slots=True)
class JobGpuMemory:
    gpu: int
    series: tuple[tuple[float, int], ...]  # (timestamp, bytes held by the job's processes)
    now_bytes: int
    peak_bytes: int
    trend_bytes_per_min: float | None  # least-squares slope over the series


def job_pids(job: JobState | None) -> set[int]:
    return {p.pid for p in job.processes} if job is not None else set()


def used_gpus(snap: Snapshot) -> tuple[int, ...]:
    """The GPUs NVML lists the job's processes on."""
    pids = job_pids(snap.job)
    return tuple(sorted({g.gpu_index for g in snap.gpu_processes if g.pid in pids}))


def gpu_memory(window: Sequence[Snapshot]) -> tuple[JobGpuMemory, ...]:
    """Per GPU, the memory the job's processes held at each snapshot (pids as of that one)."""
    series: dict[int, list[tuple[float, int]]] = {}
    for snap in window:
        pids = job_pids(snap.job)
        if not pids:
            continue
        held: dict[int, int] = {}
        for g in snap.gpu_processes:
            if g.pid in pids and g.used_memory_bytes is not None:
                held[g.gpu_index] = held.get(g.gpu_index, 0) + g.used_memory_bytes
        for gpu, b in held.items():
            series.setdefault(gpu, []).append((snap.timestamp, b))
    out = []
    for gpu in sorted(series):
        s = series[gpu]
        out.append(
            JobGpuMemory(
                gpu=gpu,
                series=tuple(s),
                now_bytes=s[-1][1],
                peak_bytes=max(b for _, b in s),
                trend_bytes_per_min=_slope(s),
            )
        )
    return tuple(out)


def _slope(points: Sequence[tuple[float, int]]) -> float | None:
    """Bytes per minute, least squares; None under 3 points or with no time between them."""
    per_s = slope_per_s([t for t, _ in points], [b for _, b in points])
    return None if per_s is None else 60.0 * per_s


@dataclass(frozen=True, slots=True)
class Throughput:
    steps_per_s: float | None
    median_s: float | None
    p95_s: float | None
    peak_gpu_memory_bytes: int | None  # the most the job held on one GPU over the window

    def headline(self) -> str:
        if self.steps_per_s is None:
            return "no step time in the job's output yet"
        mem = ""
        if self.peak_gpu_memory_bytes is not None:
            mem = f" at a peak of {self.peak_gpu_memory_bytes / 2**30:.1f} GiB GPU memory"
        return f"{self.steps_per_s:.3g} steps/s{mem}"


def throughput(window: Sequence[Snapshot]) -> Throughput:
    last = window[-1] if window else None
    steps = last.job.steps if last is not None and last.job is not None else None
    mem = gpu_memory(window)
    peak = max((m.peak_bytes for m in mem), default=None)
    return Throughput(steps_per_s(steps), step_median(steps), step_p95(steps), peak)


def gpus_used_in(window: Sequence[Snapshot]) -> tuple[int, ...]:
    """Every GPU the job's processes were on at some point of the window."""
    out: set[int] = set()
    for snap in window:
        out.update(used_gpus(snap))
    return tuple(sorted(out))
