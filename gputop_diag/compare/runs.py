"""What one run gives a comparison: its figures by row, its bottleneck class over the run, and
what it ran on. Built from a recording (`replayed.py`) or a `watch --json` document
(`watch_doc.py`); compared in `judge.py`. The rows, their units and which way is better are
data here, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .stats import Figure

RECORDING = "recording"
WATCH = "watch"


@dataclass(frozen=True, slots=True)
class RowSpec:
    """One row of the comparison. `better`: "lower", "higher" or None (neither: a change is
    said, not praised); `up`/`down`: the words of a change that way; `pct_points`: a percent
    figure, whose change is also said in points."""

    key: str
    label: str
    unit: str  # "s", "/s", "%", "bytes", "W", "MHz"
    better: str | None
    up: str
    down: str
    statistic: str = "median"  # what the row's value is of its samples: "median", "mean", "peak"
    headline: bool = False  # a row the verdict may lead with


ROWS: tuple[RowSpec, ...] = (
    RowSpec("step_time_s", "step time", "s", "lower", "slower", "faster", headline=True),
    RowSpec("steps_per_s", "steps/s", "/s", "higher", "faster", "slower", headline=True),
    RowSpec("samples_per_s", "samples/s", "/s", "higher", "faster", "slower", headline=True),
    RowSpec("tokens_per_s", "tokens/s", "/s", "higher", "faster", "slower", headline=True),
    RowSpec("t_input_s", "input wait a step", "s", "lower", "more", "less"),
    RowSpec("t_sync_s", "host sync a step", "s", "lower", "more", "less"),
    RowSpec("t_comm_s", "communication a step", "s", "lower", "more", "less"),
    RowSpec("t_host_s", "host's own work a step", "s", None, "more", "less"),
    RowSpec("t_gpu_s", "GPU busy a step", "s", None, "more", "less"),
    RowSpec("gpu_util_pct", "GPU busy (NVML)", "%", None, "busier", "less busy", "mean", True),
    RowSpec("sm_active_pct", "SM activity (GPM)", "%", None, "busier", "less busy", "mean"),
    RowSpec("memory_bytes", "GPU memory, peak", "bytes", None, "more", "less", "peak"),
    RowSpec("reserved_bytes", "allocator reserved, peak", "bytes", None, "more", "less", "peak"),
    RowSpec("power_w", "power", "W", None, "more", "less", "mean"),
    RowSpec("sm_clock_mhz", "SM clock", "MHz", None, "higher", "lower", "mean"),
)
ROW = {r.key: r for r in ROWS}
# the probe's parts of a step (model.STEP_PARTS) as rows
SPLIT_ROWS = {
    "t_input": "t_input_s",
    "t_sync": "t_sync_s",
    "t_comm": "t_comm_s",
    "t_host": "t_host_s",
    "t_gpu": "t_gpu_s",
}


@dataclass(frozen=True, slots=True)
class ClassShare:
    """The bottleneck class over a run: the one held longest and its share of the ticks that
    had a verdict, the last verdict, and every class's ticks (most first). A `watch --json`
    document holds only its final verdict: `ticks` 0, `share` None."""

    primary: str
    share: float | None
    ticks: int
    final: str
    counts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class RunFigures:
    """One run as a comparison reads it."""

    shown: str  # the file, as this output names it (its pseudonym under --sanitize)
    kind: str  # RECORDING or WATCH
    figures: Mapping[str, Figure] = field(default_factory=dict)  # row key -> figure
    classes: ClassShare | None = None
    gpu_models: tuple[str, ...] = ()  # of the GPUs the run used; () unknown
    gpus_used: int | None = None
    seconds: float | None = None  # the span it covers (a recording's)
    ticks: int = 0  # snapshots replayed (a recording's)
    interval_s: float | None = None
    hostname: str | None = None
    sanitized: bool = False
    notes: tuple[str, ...] = ()
    # the batch of a sampled step, median over the run: "samples" and "tokens" a step
    per_step: Mapping[str, float] = field(default_factory=dict)

    def figure(self, key: str) -> Figure | None:
        return self.figures.get(key)
