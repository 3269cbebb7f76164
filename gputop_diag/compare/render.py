"""A comparison as text (the verdict first, then the runs, the table, how the calls were made)
and as the `gputop-diag.compare/1` JSON document (docs/compare.md)."""

from __future__ import annotations

from typing import Any

from ..model.codec import rounded
from . import text
from .judge import ClassRow, Comparison, Row
from .runs import ClassShare, RunFigures
from .stats import ALPHA, FLOOR, MIN_SAMPLES, Figure

SCHEMA = "gputop-diag.compare/1"
METHOD = (
    f"beyond the runs' variation: with {MIN_SAMPLES} or more samples in each run (per step or "
    f"per tick), a test at p < {ALPHA:g} (Mann-Whitney U for a median, Welch's t for a mean) "
    "and a change larger than either run's own drift (its first half against its second); "
    "otherwise a change larger than "
    "both runs' spread (IQR; p95 - median; the probe's range); one figure per run is not "
    f"judged; a change under {FLOOR * 100:g} % of the figure is within noise"
)


def _run_line(name: str, r: RunFigures) -> str:
    what = ["recording" if r.kind == "recording" else "watch --json"]
    if r.ticks:
        what.append(f"{r.ticks} ticks over {r.seconds or 0:.0f} s")
    if r.gpu_models:
        n = f"{r.gpus_used}\u00d7 " if r.gpus_used else ""
        what.append(n + ", ".join(r.gpu_models))
    elif r.gpus_used:
        what.append(f"{r.gpus_used} GPU{'s' * (r.gpus_used != 1)}")
    if r.hostname:
        what.append(f"on {r.hostname}")
    return f"{name}  {r.shown}  ({'; '.join(what)})"


def _class_cell(c: ClassShare | None) -> str:
    if c is None:
        return "n/a"
    if c.share is None:
        return f"{text.class_words(c.primary)} (final)"
    return f"{text.class_words(c.primary)} ({text.share(c.share)} of {c.ticks} ticks)"


def _cell(f: Figure | None, unit: str) -> str:
    return "n/a" if f is None else text.value(f.value, unit)


def _change_cell(r: Row) -> str:
    if r.change is None:
        return ""
    if r.change == 0:
        return "0"
    if r.spec.unit == "%":
        return text.change(r.change, "%")
    return f"{text.change(r.change, r.spec.unit)} ({text.percent(r.change_pct)})"


def _class_words(c: ClassRow) -> str:
    if c.changed is None:
        return "only in one run" if (c.a or c.b) else ""
    return "changed" if c.changed else "the same"


def render_text(cmp: Comparison, verbose: bool = False) -> str:
    lines = [f"verdict: {cmp.verdict}"]
    lines += [f"note: {m}" for m in cmp.mismatches]
    lines += ["", _run_line("A", cmp.a), _run_line("B", cmp.b), ""]
    table = [("", "A", "B", "change", "")]
    for r in cmp.rows:
        label = r.spec.label + (" (median)" if r.spec.key == "step_time_s" else "")
        cells = (_cell(r.a, r.spec.unit), _cell(r.b, r.spec.unit), _change_cell(r))
        table.append((label, *cells, r.short_words))
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for row in table:
        cells = [row[0].ljust(widths[0])] + [row[i].rjust(widths[i]) for i in (1, 2, 3)]
        lines.append("  ".join([*cells, row[4]]).rstrip())
    c = cmp.classes
    lines.append(f"bottleneck: A {_class_cell(c.a)}, B {_class_cell(c.b)}: {_class_words(c)}")
    step = cmp.row("step_time_s")
    if step is not None:
        spread = ", ".join(
            f"{name} {_spread(f, 's')}" for name, f in (("A", step.a), ("B", step.b)) if f
        )
        lines.append(f"step time spread: {spread}")
    lines.append("")
    if verbose:
        lines.append("how each row was judged:")
        for r in cmp.rows:
            lines.append(f"  {r.spec.label}: {r.words}; {r.judgement.how}")
            for name, f in (("A", r.a), ("B", r.b)):
                if f is not None:
                    lines.append(f"    {name}: {f.basis}")
    else:
        lines.append("(--explain: how each row was judged and what it was read from)")
    lines.append(f"how: {METHOD}")
    notes = dict.fromkeys(n for r in (cmp.a, cmp.b) for n in r.notes)
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def _spread(f: Figure, unit: str) -> str:
    if f.spread is None:
        return "n/a (one figure)"
    kind = f.spread_kind or "spread"
    n = f" over {f.n}" if f.n else ""
    return f"{kind} {text.value(f.spread, unit)}{n}"


def _figure_json(f: Figure | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "value": f.value,
        "samples": f.n,
        "spread": f.spread,
        "spread_kind": f.spread_kind,
        "basis": f.basis,
    }


def _class_json(c: ClassShare | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {
        "class": c.primary,
        "share": c.share,
        "ticks": c.ticks,
        "final": c.final,
        "counts": dict(c.counts),
    }


def _run_json(r: RunFigures) -> dict[str, Any]:
    return {
        "file": r.shown,
        "kind": r.kind,
        "gpu_models": list(r.gpu_models),
        "gpus_used": r.gpus_used,
        "seconds": r.seconds,
        "ticks": r.ticks,
        "interval_s": r.interval_s,
        "hostname": r.hostname,
        "sanitized": r.sanitized,
        "notes": list(r.notes),
    }


def to_json(cmp: Comparison) -> dict[str, Any]:
    """The document, figures rounded as every document rounds them (p-values to three
    significant digits: they are small)."""
    doc = rounded(_document(cmp))
    for row, r in zip(doc["rows"], cmp.rows, strict=True):
        p = r.judgement.p_value
        row["p_value"] = None if p is None else float(f"{p:.3g}")
    return doc


def _document(cmp: Comparison) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "verdict": cmp.verdict,
        "mismatches": list(cmp.mismatches),
        "a": _run_json(cmp.a),
        "b": _run_json(cmp.b),
        "rows": [
            {
                "key": r.spec.key,
                "label": r.spec.label,
                "unit": r.spec.unit,
                "better": r.spec.better,
                "statistic": r.spec.statistic,
                "a": _figure_json(r.a),
                "b": _figure_json(r.b),
                "change": r.change,
                "change_pct": r.change_pct,
                "call": r.judgement.call,
                "words": r.words,
                "how": r.judgement.how,
                "p_value": r.judgement.p_value,
                "drift": r.judgement.drift,
                "noise": r.judgement.noise,
            }
            for r in cmp.rows
        ],
        "bottleneck": {
            "a": _class_json(cmp.classes.a),
            "b": _class_json(cmp.classes.b),
            "changed": cmp.classes.changed,
        },
        "method": {
            "min_samples": MIN_SAMPLES,
            "alpha": ALPHA,
            "floor": FLOOR,
            "text": METHOD,
        },
    }
