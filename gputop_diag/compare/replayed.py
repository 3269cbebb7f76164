"""A recording's figures, read tick by tick as the Monitor replays it (`load.py` feeds it the
ticks of `monitor.core.run`, the loop `--replay FILE diagnose` runs): each tick is cut down at
once to the few numbers a comparison needs, so an hour's recording is not held in memory.

Per tick: the bottleneck class the Monitor judged (its window and hysteresis, as in the live
view), and over the GPUs the run used (those NVML lists its processes on; the watched job's
where there is one): the mean GPU busy time, SM activity (GPM), power and SM clock, and the
most memory the processes held on one GPU. From the probe inside the job (`watch --probe`):
the step time of the steps taken since the tick before (the newest step's counter and time,
differenced per process), the step's split as the probe aggregates it, the allocator's
reserved memory and the batch of a sampled step (samples and tokens a step, where the probe
read them). Without the probe, the step times the job printed (`watch`'s `Snapshot.job`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..diagnose.measured import measured_split, recent_probes
from ..job.figures import job_pids
from ..model import Snapshot, StepStats
from .runs import RECORDING, ROW, SPLIT_ROWS, ClassShare, RunFigures
from .stats import Figure, from_samples

NO_VERDICT = ("insufficient_data",)  # ticks whose window was too short to judge


@dataclass(frozen=True, slots=True)
class _Tick:
    at: float
    primary: str
    gpus: dict[int, tuple]  # index -> (util %, SM active %, held bytes, power W, SM MHz)
    busy_gpus: frozenset[int]  # GPUs NVML lists the run's processes on
    step_s: float | None  # the steps taken since the tick before
    split: tuple | None  # (newest step, steps each, {row key: seconds})
    reserved: int | None
    samples_per_step: int | None
    tokens_per_step: int | None


class ReplayedRun:
    """Takes a recording's ticks (`add(snapshot, primary)`), then gives its `RunFigures`."""

    def __init__(self) -> None:
        self._ticks: list[_Tick] = []
        self._last_step: dict[tuple[int, int], tuple[int, float]] = {}
        self._job_steps: StepStats | None = None
        self._models: dict[int, str] = {}
        self._hostname: str | None = None

    def add(self, snap: Snapshot, primary: str) -> None:
        pids = job_pids(snap.job)
        procs = [g for g in snap.gpu_processes if not pids or g.pid in pids]
        held: dict[int, int] = {}
        for g in procs:
            if g.used_memory_bytes is not None:
                held[g.gpu_index] = held.get(g.gpu_index, 0) + g.used_memory_bytes
        gpus = {}
        for g in snap.gpus:
            if g.lost:
                continue
            if g.static.name:
                self._models[g.index] = g.static.name
            sm = g.gpm.sm_util_pct if g.gpm is not None else None
            gpus[g.index] = (
                g.util_gpu_pct,
                sm,
                held.get(g.index, g.mem_used_bytes if not procs else None),
                g.power_w,
                g.sm_clock_mhz,
            )
        probes = recent_probes(snap, pids or None)
        split = measured_split(probes)
        split_row = None
        if split is not None:
            newest = max(p.steps.last_step for p in probes if p.steps is not None)
            parts = {SPLIT_ROWS[k]: v for k, v in split.parts if split.is_measured(k)}
            split_row = (newest, split.steps_each, parts)
        reserved = [p.memory.reserved_bytes for p in probes if p.memory is not None]
        batch = [getattr(p, "sample", None) for p in probes]  # older probes sample no step
        if snap.job is not None and snap.job.steps is not None:
            self._job_steps = snap.job.steps
        self._hostname = snap.system.hostname or self._hostname
        self._ticks.append(
            _Tick(
                at=snap.timestamp,
                primary=primary,
                gpus=gpus,
                busy_gpus=frozenset(g.gpu_index for g in procs),
                step_s=self._step_since(snap, pids),
                split=split_row,
                reserved=max((r for r in reserved if r is not None), default=None),
                samples_per_step=_batch(batch, "samples"),
                tokens_per_step=_batch(batch, "tokens"),
            )
        )

    def _step_since(self, snap: Snapshot, pids: set[int]) -> float | None:
        """The mean step of the steps each probed process (of the watched job, where there is
        one) took since it was last seen (its newest step's counter and end time), the median
        over the processes that stepped."""
        out = []
        for p in snap.probes or ():
            s = p.steps
            if s is None or (pids and p.pid not in pids):
                continue
            key = (p.pid, p.start_ticks)
            before = self._last_step.get(key)
            self._last_step[key] = (s.last_step, s.last_at)
            if before is None or s.last_step <= before[0] or s.last_at <= before[1]:
                continue  # first seen, no new step, or a counter that went back (a restart)
            out.append((s.last_at - before[1]) / (s.last_step - before[0]))
        return statistics.median(out) if out else None

    def figures(self, shown: str, interval_s: float, sanitized: bool) -> RunFigures:
        ticks = self._ticks
        used = set().union(*(t.busy_gpus for t in ticks)) if ticks else set()
        if not used:  # nothing ran on a GPU: every GPU
            used = set().union(*(t.gpus.keys() for t in ticks)) if ticks else set()
        figures: dict[str, Figure] = {}
        step = self._step_figure()
        if step is not None:
            figures["step_time_s"] = step
            rate = from_samples([1 / v for v in step.samples if v > 0], step.basis)
            if rate is not None:
                figures["steps_per_s"] = rate
        for key, unit in (("samples_per_s", "samples"), ("tokens_per_s", "tokens")):
            rate = self._rate(unit)
            if rate is not None:
                figures[key] = rate
        figures.update(self._split_figures())
        per_gpu = (  # (row, its place in `_Tick.gpus`, how the GPUs are joined, words)
            ("gpu_util_pct", 0, "mean", "NVML's busy time"),
            ("sm_active_pct", 1, "mean", "GPM's SM activity"),
            ("memory_bytes", 2, "max", "memory its processes held, busiest GPU"),
            ("power_w", 3, "mean", "NVML's power draw"),
            ("sm_clock_mhz", 4, "mean", "NVML's SM clock"),
        )
        n_used = len(used)
        for key, i, how, words in per_gpu:
            series = [_over(t.gpus, used, i, how) for t in ticks]
            fig = from_samples(
                [v for v in series if v is not None],
                f"{words}, per tick, {n_used} GPU{'s' * (n_used != 1)}",
                ROW[key].statistic,
            )
            if fig is not None:
                figures[key] = fig
        reserved = from_samples(
            [t.reserved for t in ticks if t.reserved is not None],
            "the probe's allocator figures, per tick",
            "peak",
        )
        if reserved is not None:
            figures["reserved_bytes"] = reserved
        span = ticks[-1].at - ticks[0].at if len(ticks) > 1 else 0.0
        models = self._models
        per_step = {}
        for unit in ("samples", "tokens"):
            held = [getattr(t, f"{unit}_per_step") for t in ticks]
            held = [v for v in held if v]
            if held:
                per_step[unit] = statistics.median(held)
        return RunFigures(
            shown=shown,
            kind=RECORDING,
            figures=figures,
            classes=class_share([t.primary for t in ticks]),
            gpu_models=tuple(dict.fromkeys(models[i] for i in sorted(used) if i in models)),
            gpus_used=n_used or None,
            seconds=span,
            ticks=len(ticks),
            interval_s=interval_s,
            hostname=None if sanitized else self._hostname,
            sanitized=sanitized,
            per_step=per_step,
        )

    def _step_figure(self) -> Figure | None:
        probed = [t.step_s for t in self._ticks if t.step_s is not None]
        if probed:
            n = len(probed)
            return from_samples(probed, f"measured in the job by the probe, {n} ticks of steps")
        s = self._job_steps
        if s is not None and s.step_times_s:
            n = len(s.step_times_s)
            return from_samples(s.step_times_s, f"the job's output ({s.source}), {n} steps")
        return None

    def _rate(self, unit: str) -> Figure | None:
        """Samples or tokens a second: a sampled step's batch (every process's) over the step
        time of each tick."""
        out = []
        for t in self._ticks:
            batch = t.samples_per_step if unit == "samples" else t.tokens_per_step
            if batch and t.step_s:
                out.append(batch / t.step_s)
        return from_samples(out, f"the probe's sampled batch over each tick's steps ({unit})")

    def _split_figures(self) -> dict[str, Figure]:
        """Each measured part of the step. The probe aggregates a part over its newest steps,
        so the aggregates of two ticks share most of their steps: only aggregates over steps
        no earlier one covered are samples of their own. With fewer of those than the test
        needs, the newest aggregate, with the range of the aggregates over the run as its
        spread."""
        rows = [t.split for t in self._ticks if t.split is not None]
        if not rows:
            return {}
        apart = [rows[0]]
        for row in rows[1:]:
            if row[0] - apart[-1][0] >= row[1]:
                apart.append(row)
        out = {}
        for key in SPLIT_ROWS.values():
            series = [r[2][key] for r in rows if r[2].get(key) is not None]
            if not series:
                continue
            own = [r[2][key] for r in apart if r[2].get(key) is not None]
            fig = from_samples(own, f"the probe's means over {len(own)} separate sets of steps")
            if fig is None or fig.n < 8:
                newest = series[-1]
                fig = Figure(
                    newest,
                    spread=max(series) - min(series) if len(series) > 1 else None,
                    spread_kind="range of the probe's means over the run",
                    basis=f"the probe's newest mean, {len(series)} ticks",
                )
            out[key] = fig
        return out


def _over(gpus: dict[int, tuple], used: set[int], i: int, how: str) -> float | None:
    values = [gpus[g][i] for g in used if g in gpus and gpus[g][i] is not None]
    if not values:
        return None
    return max(values) if how == "max" else sum(values) / len(values)


def _batch(samples: Sequence, name: str) -> int | None:
    values = [getattr(s, name, None) for s in samples if s is not None]
    values = [v for v in values if v]
    return sum(values) if values else None


def class_share(primaries: Iterable[str]) -> ClassShare | None:
    """The class held longest over the ticks that had a verdict, its share, the last one."""
    all_ticks = list(primaries)
    judged = [p for p in all_ticks if p not in NO_VERDICT]
    if not judged:
        if not all_ticks:
            return None
        return ClassShare(all_ticks[-1], None, 0, all_ticks[-1])
    counts = Counter(judged).most_common()
    primary, n = counts[0]
    return ClassShare(primary, n / len(judged), len(judged), all_ticks[-1], tuple(counts))
