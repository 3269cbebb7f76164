"""A `watch --json` document's figures (schema `gputop-diag.watch/1`, docs/watch.md).

The document is a summary of the watch: the step times the job printed (the newest 240, one a
step: samples), else the probe's median and 95th percentile of each rank's steps (a value and a
spread), the probe's mean split of the step, the peak memory, the samples and tokens a second
of a sampled step, and the final verdict. Figures the document holds once (the split, the
memory) are compared but not judged: one figure per run carries no variation.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from .runs import SPLIT_ROWS, WATCH, ClassShare, RunFigures
from .stats import Figure, from_samples

WATCH_SCHEMA = "gputop-diag.watch/1"


class DocumentError(ValueError):
    """The document is not a watch document this reader can use; the text says where."""


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _dict(doc: Any, key: str) -> dict:
    v = doc.get(key) if isinstance(doc, dict) else None
    return v if isinstance(v, dict) else {}


def _list(doc: Any, key: str) -> list:
    v = doc.get(key) if isinstance(doc, dict) else None
    return v if isinstance(v, list) else []


def watch_figures(doc: dict, shown: str) -> RunFigures:
    """The figures of one `watch --json` document; DocumentError when it is not one."""
    if not isinstance(doc, dict) or doc.get("schema") != WATCH_SCHEMA:
        raise DocumentError(f"not a {WATCH_SCHEMA} document")
    measured = _dict(doc, "measured")
    probes = [p for p in _list(measured, "processes") if isinstance(p, dict)]
    figures: dict[str, Figure] = {}
    step = _step(doc, probes)
    if step is not None:
        figures["step_time_s"] = step
        figures["steps_per_s"] = _rate(step, 1.0, step.basis)
    work = _dict(measured, "work")
    batches = {}
    for key, per_step in (
        ("samples_per_s", "samples_per_step"),
        ("tokens_per_s", "tokens_per_step"),
    ):
        batch = _num(work.get(per_step))
        rate = _num(work.get(key))
        if batch:
            batches[per_step.removesuffix("_per_step")] = batch
        if step is not None and batch:
            figures[key] = _rate(step, batch, "the probe's sampled batch over the step time")
        elif rate is not None:
            figures[key] = Figure(rate, basis="the probe's sampled step")
    figures.update(_once(doc, measured))
    primary = _dict(doc, "diagnosis").get("primary")
    classes = None
    if isinstance(primary, str) and primary:
        classes = ClassShare(primary, None, 0, primary)
    models = []
    for p in probes:
        name = _dict(p, "sample").get("device_name")
        if isinstance(name, str) and name and name not in models:
            models.append(name)
    gpus = {m.get("gpu") for m in _list(doc, "gpu_memory") if isinstance(m, dict)}
    return RunFigures(
        shown=shown,
        kind=WATCH,
        figures=figures,
        classes=classes,
        gpu_models=tuple(models),
        gpus_used=len(gpus) or None,
        per_step=batches,
        notes=(
            "a watch --json document holds the watch's summary: GPU busy time, SM activity, "
            "power and clocks tick by tick are in a recording (watch --record FILE)",
        ),
    )


def _once(doc: dict, measured: dict) -> dict[str, Figure]:
    """The figures the document holds once: the probe's split of the step, the peak memory,
    the allocator's reserved memory."""
    out = {}
    split = _dict(measured, "step_split")
    parts = _dict(split, "parts")
    shown_parts = set(_list(split, "measured"))
    for part, key in SPLIT_ROWS.items():
        v = _num(parts.get(part))
        if v is not None and (part in shown_parts or not shown_parts):
            out[key] = Figure(v, basis="the probe's mean over its newest steps")
    peaks = [_num(m.get("peak_bytes")) for m in _list(doc, "gpu_memory") if isinstance(m, dict)]
    peaks = [p for p in peaks if p is not None]
    if peaks:
        out["memory_bytes"] = Figure(max(peaks), basis="the job's processes, busiest GPU")
    reserved = [
        _num(m.get("reserved_bytes")) for m in _list(measured, "memory") if isinstance(m, dict)
    ]
    reserved = [r for r in reserved if r is not None]
    if reserved:
        out["reserved_bytes"] = Figure(max(reserved), basis="the probe's allocator figures")
    return out


def _step(doc: dict, probes: list[dict]) -> Figure | None:
    """The job's printed step times (one a step); else the probe's median steps of its ranks,
    with the 95th percentile beyond the median as the spread; else the summary's."""
    steps = _dict(_dict(doc, "job"), "steps")
    times = [_num(v) for v in _list(steps, "step_times_s")]
    times = [v for v in times if v is not None and v > 0]
    if times:
        source = steps.get("source") if isinstance(steps.get("source"), str) else "output"
        return from_samples(times, f"the job's output ({source}), {len(times)} steps")
    p50s, spreads = [], []
    for p in probes:
        s = _dict(p, "steps")
        p50, p95 = _num(s.get("wall_p50_s")), _num(s.get("wall_p95_s"))
        if p50 is None:
            p50 = _num(s.get("wall_s"))
        if p50 is not None and p50 > 0:
            p50s.append(p50)
            if p95 is not None and p95 >= p50:
                spreads.append(p95 - p50)
    if p50s:
        return Figure(
            statistics.median(p50s),
            spread=statistics.median(spreads) if spreads else None,
            spread_kind="p95 - median" if spreads else None,
            basis=f"the probe's median step, {len(p50s)} process{'es' * (len(p50s) != 1)}",
        )
    summary = _dict(doc, "steps")
    median, p95 = _num(summary.get("median_s")), _num(summary.get("p95_s"))
    if median is None or median <= 0:
        return None
    spread = p95 - median if p95 is not None and p95 >= median else None
    return Figure(
        median,
        spread=spread,
        spread_kind="p95 - median" if spread is not None else None,
        basis="the watch summary's median step",
    )


def _rate(step: Figure, per_step: float, basis: str) -> Figure:
    """`per_step` a step as a rate: per sample where the step has samples; else over the
    median step, its spread the step's relative spread (a rate is 1/step times a constant)."""
    if step.samples:
        fig = from_samples([per_step / v for v in step.samples if v > 0], basis)
        if fig is not None:
            return fig
    spread = None if step.spread is None else per_step / step.value * step.spread / step.value
    return Figure(per_step / step.value, spread=spread, spread_kind=step.spread_kind, basis=basis)
