"""Two runs side by side: every row both runs (or one) have, the change from A to B and whether
it exceeds the runs' own variation (`stats.judge`), the bottleneck class of each, what differs
in what they ran on, and the verdict: the one line that says what changed that matters."""

from __future__ import annotations

from dataclasses import dataclass

from . import text
from .runs import ROWS, SPLIT_ROWS, ClassShare, RowSpec, RunFigures
from .stats import BEYOND, MISSING, NOT_JUDGED, SAME, WITHIN, Figure, Judgement, judge

PCT_POINTS_FLOOR = 1.0  # a busy time or SM activity moving under one point is within noise
SPLIT_FLOOR = 0.01  # a part of the step moving under 1 % of the step is within noise
ALSO_SAID = 3  # other rows beyond the runs' variation the verdict names
# work a second first: a step of another batch is another step (its time compares nothing)
VERDICT_ORDER = ("samples_per_s", "tokens_per_s", "step_time_s", "steps_per_s", "gpu_util_pct")
WORK_ROWS = ("samples_per_s", "tokens_per_s")
STEP_ROWS = ("step_time_s", "steps_per_s")  # figures of a step: of another batch, not comparable
BATCH_FLOOR = 0.01  # batches within 1 % of each other are the same batch


@dataclass(frozen=True, slots=True)
class Row:
    spec: RowSpec
    a: Figure | None
    b: Figure | None
    judgement: Judgement
    caveat: str | None = None  # why the change compares nothing: "another batch"

    @property
    def change(self) -> float | None:
        if self.a is None or self.b is None:
            return None
        return self.b.value - self.a.value

    @property
    def change_pct(self) -> float | None:
        if self.change is None or self.a is None or self.a.value == 0:
            return None
        return 100.0 * self.change / abs(self.a.value)

    @property
    def direction(self) -> str | None:
        """The row's word for this change ("faster", "more"); None without one."""
        if not self.change:
            return None
        return self.spec.up if self.change > 0 else self.spec.down

    @property
    def words(self) -> str:
        """ "faster by 33 % (beyond the runs' variation)", "within noise", …"""
        call = self.judgement.call
        if call == MISSING:
            return "only in A" if self.b is None else "only in B"
        if self.caveat:
            return f"not comparable: {self.caveat}"
        if call == SAME:
            return "no change"
        if call == WITHIN:
            return "within noise"
        by = self.by()
        if call == NOT_JUDGED:
            return f"{self.direction} by {by} (not judged: one figure per run)"
        return f"{self.direction} by {by} (beyond the runs' variation)"

    @property
    def short_words(self) -> str:
        """The table's column: "faster, beyond variation", "within noise", …"""
        call = self.judgement.call
        if call in (BEYOND, NOT_JUDGED) and not self.caveat:
            return f"{self.direction}, {'beyond variation' if call == BEYOND else 'not judged'}"
        return self.words

    def by(self) -> str:
        """How much: 33 %, 54 points; a part of the step in its own unit (746 ms: its share
        of itself says little)."""
        size = abs(self.change or 0.0)
        pct = self.change_pct
        if self.spec.unit == "%" or pct is None or self.spec.key in SPLIT_ROWS.values():
            return text.change(size, self.spec.unit)[1:]
        return text.percent(abs(pct))[1:]


@dataclass(frozen=True, slots=True)
class ClassRow:
    a: ClassShare | None
    b: ClassShare | None

    @property
    def changed(self) -> bool | None:
        if self.a is None or self.b is None:
            return None
        return self.a.primary != self.b.primary


@dataclass(frozen=True, slots=True)
class Comparison:
    a: RunFigures
    b: RunFigures
    rows: tuple[Row, ...]
    classes: ClassRow
    mismatches: tuple[str, ...]
    verdict: str

    def row(self, key: str) -> Row | None:
        return next((r for r in self.rows if r.spec.key == key), None)


def compare(a: RunFigures, b: RunFigures) -> Comparison:
    """B against A, row by row."""
    step = [f.value for f in (a.figure("step_time_s"), b.figure("step_time_s")) if f]
    batch = batch_differs(a, b)
    rows = []
    for spec in ROWS:
        fa, fb = a.figure(spec.key), b.figure(spec.key)
        if fa is None and fb is None:
            continue
        floor, words = 0.0, ""
        if spec.unit == "%":
            floor, words = PCT_POINTS_FLOOR, f"{PCT_POINTS_FLOOR:g} point"
        elif spec.key in SPLIT_ROWS.values() and step:
            floor, words = SPLIT_FLOOR * max(step), f"{SPLIT_FLOOR * 100:g} % of the step time"
        caveat = "another batch" if batch and spec.key in STEP_ROWS and fa and fb else None
        rows.append(Row(spec, fa, fb, judge(fa, fb, floor, words), caveat))
    classes = ClassRow(a.classes, b.classes)
    mismatches = _mismatches(a, b)
    verdict = _verdict(rows, classes, batch)
    return Comparison(a, b, tuple(rows), classes, mismatches, verdict)


def batch_differs(a: RunFigures, b: RunFigures) -> str | None:
    """ "the batch differs (2,048 vs 64 samples a step): step times are not comparable", or
    None where both runs sampled the same batch (or either sampled none)."""
    for unit in ("samples", "tokens"):
        na, nb = a.per_step.get(unit), b.per_step.get(unit)
        if na and nb and abs(na - nb) > BATCH_FLOOR * max(na, nb):
            return (
                f"the batch differs ({na:,.0f} vs {nb:,.0f} {unit} a step): "
                "step times are not comparable"
            )
    return None


def _mismatches(a: RunFigures, b: RunFigures) -> tuple[str, ...]:
    """What differs in what the two runs ran on or how they were read: said, and compared
    all the same."""
    out = []
    if a.gpu_models and b.gpu_models and set(a.gpu_models) != set(b.gpu_models):
        out.append(
            f"different GPU models: A ran on {', '.join(a.gpu_models)}, B on "
            f"{', '.join(b.gpu_models)}: the hardware differs as well as the run"
        )
    if a.gpus_used and b.gpus_used and a.gpus_used != b.gpus_used:
        out.append(
            f"A used {a.gpus_used} GPU{'s' * (a.gpus_used != 1)}, B {b.gpus_used}: "
            "per-GPU figures are means over each run's own GPUs"
        )
    if a.interval_s and b.interval_s and a.interval_s != b.interval_s:
        out.append(
            f"recorded every {a.interval_s:g} s (A) and {b.interval_s:g} s (B): per-tick "
            "figures average over different spans"
        )
    probed = [r.shown for r in (a, b) if r.figure("t_input_s") or r.figure("t_host_s")]
    if len(probed) == 1:
        who = "A" if probed[0] == a.shown else "B"
        out.append(f"only {who} was measured inside the job (the probe): the split is one-sided")
    return tuple(out)


def _lead(rows: list[Row]) -> Row | None:
    by_key = {r.spec.key: r for r in rows if r.a is not None and r.b is not None}
    return next((by_key[k] for k in VERDICT_ORDER if k in by_key), None)


def _figures(row: Row) -> str:
    """ "step time 1.20 s \u2192 800 ms" """
    spec = row.spec
    return (
        f"{spec.label} {text.value(row.a.value, spec.unit)} \u2192 "
        f"{text.value(row.b.value, spec.unit)}"
    )


def _lacking(rows: list[Row]) -> str:
    """Which run lacks what the verdict leads with: "no step time, throughput or GPU busy
    time in A (B has a step time)"."""
    held = {r.spec.key: r for r in rows if r.spec.key in VERDICT_ORDER}
    in_a = [r.spec.label for r in held.values() if r.a is not None]
    in_b = [r.spec.label for r in held.values() if r.b is not None]
    said = "no step time, throughput or GPU busy time in "
    if not in_a and not in_b:
        return said + "either run"
    if not in_a:
        return said + f"A (B has {', '.join(in_b)})"
    return said + f"B (A has {', '.join(in_a)})"


def _verdict(rows: list[Row], classes: ClassRow, batch: str | None = None) -> str:
    lead = _lead(rows)
    if lead is None:
        return _with_the_rest(_lacking(rows), lead, rows, classes)
    spec, call = lead.spec, lead.judgement.call
    figures = _figures(lead)
    step = next((r for r in rows if r.spec.key == "step_time_s"), None)
    also_step = ""
    if spec.key in WORK_ROWS and batch is None and step is not None and step.change is not None:
        also_step = f"; {_figures(step)}, the same batch"
    if call in (SAME, WITHIN):
        said = f"no change beyond the runs' variation: {figures} (within noise{also_step})"
    else:
        how = text.percent(lead.change_pct) if spec.unit != "%" else text.change(lead.change, "%")
        tail = (
            "beyond the runs' variation"
            if call == BEYOND
            else "not judged: one figure per run carries no variation"
        )
        said = f"B is {lead.direction} than A: {figures} ({how}{also_step}), {tail}"
    if batch is not None:
        said += f"; {batch}"
    return _with_the_rest(said, lead, rows, classes)


def _with_the_rest(said: str, lead: Row | None, rows: list[Row], classes: ClassRow) -> str:
    """The verdict's lead, then the bottleneck class, then the other rows beyond the runs'
    variation (the first `ALSO_SAID` in the rows' order)."""
    said = said[0].upper() + said[1:]
    if classes.changed is True:
        said += (
            f"; the bottleneck moved from {text.class_words(classes.a.primary)} to "
            f"{text.class_words(classes.b.primary)}"
        )
    elif classes.changed is False:
        said += f"; the bottleneck is {text.class_words(classes.a.primary)} in both"
    also = [
        r
        for r in rows
        if r is not lead
        and r.judgement.call == BEYOND
        and r.spec.key not in ("steps_per_s", "step_time_s")
        and r.change is not None
    ]
    if also:
        named = ", ".join(
            f"{r.spec.label} {text.change(r.change, r.spec.unit)}" for r in also[:ALSO_SAID]
        )
        more = f" and {len(also) - ALSO_SAID} more" if len(also) > ALSO_SAID else ""
        also_words = "also beyond it" if lead is not None else "beyond the runs' variation"
        said += f"; {also_words}: {named}{more}"
    return said
