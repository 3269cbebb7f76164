"""A Diagnosis as text for a terminal and as a JSON document (gputop-diag.diagnosis/1)."""

from __future__ import annotations

from typing import Any

from ..model.formats import count
from .job_kind import JOB_COMMAND, command_text
from .lead import lead_of
from .types import Alert, Diagnosis, Evidence

DIAGNOSIS_SCHEMA = "gputop-diag.diagnosis/1"


def _num(v):
    return round(v, 2) if isinstance(v, float) else v


def _evidence(e: Evidence) -> dict[str, Any]:
    return {
        "metric": e.metric,
        "value": _num(e.value),
        "threshold": _num(e.threshold),
        "unit": e.unit,
        "text": e.text,
    }


def _alert(a: Alert) -> dict[str, Any]:
    return {
        "kind": a.kind,
        "severity": a.severity,
        "text": a.text,
        "gpu": a.gpu_index,
        "gpus": list(a.gpus),
        "code": a.code,
    }


def to_json(d: Diagnosis) -> dict[str, Any]:
    """The diagnosis as a JSON-ready dict; docs/diagnosis.md describes every field."""
    from ..model.codec import rounded  # the JSON codec loads with a JSON document

    return rounded(_doc(d))


def _doc(d: Diagnosis) -> dict[str, Any]:
    from ..model.codec import iso_time

    return {
        "schema": DIAGNOSIS_SCHEMA,
        "timestamp": d.timestamp,
        "time": iso_time(d.timestamp) if d.timestamp else None,
        "window_s": d.window_s,
        "faults": [_alert(a) for a in d.faults],
        "primary": d.primary,
        "finding": d.finding,
        "confidence": d.confidence if d.has_confidence else None,
        "secondary": d.secondary,
        "secondary_evidence": [_evidence(e) for e in d.secondary_evidence],
        "scope": {"gpus": list(d.scope_gpus), "job": d.scope_job},
        "evidence": [_evidence(e) for e in d.evidence],
        "ruled_out": [{"class": r.cls, **_evidence(r.evidence)} for r in d.ruled_out],
        "checks": list(d.checks),
        "alerts": [_alert(a) for a in d.alerts],
        "evidence_available": list(d.available_evidence),
        "evidence_missing": list(d.missing_evidence),
        "candidate": {"class": d.candidate, "streak": d.candidate_streak},
    }


# Checks a lead has already answered (`lead.py`): with the driver chain named broken, asking
# whether the driver and the runtime agree repeats the verdict.
ANSWERED_BY_LEAD = {"DRIVER CHAIN": ("Driver and runtime agree?",)}


def shown_checks(d: Diagnosis) -> tuple[str, ...]:
    """The checks as a person reads them: JOB_COMMAND replaced by the job's command line, as
    one line to paste (`job_kind.command_text`), where it is known; none its lead answered."""
    lead = lead_of(d)
    answered = ANSWERED_BY_LEAD.get(lead.label, ()) if lead is not None else ()
    checks = tuple(c for c in d.checks if not c.startswith(answered)) if answered else d.checks
    cmd = command_text(d.cmdline)
    if cmd is None:
        return checks
    return tuple(c.replace(JOB_COMMAND, cmd) for c in checks)


def confidence_text(d: Diagnosis) -> str:
    """ "confidence 85%", or why there is no figure: not enough data, or the deciding evidence
    is missing."""
    if d.has_confidence:
        return f"confidence {d.confidence:.0%}"
    if d.primary == "undetermined":
        return "no verdict: the evidence that decides is missing"
    return "no verdict yet"


def render_text(d: Diagnosis) -> str:
    """The diagnosis for a terminal: verdict, evidence, why not the others, checks, alerts."""
    scope = ""
    if d.scope_gpus:
        scope = " on GPU " + ",".join(map(str, d.scope_gpus))
    if d.scope_job:
        scope += f" ({d.scope_job if d.scope_job.startswith('pid ') else 'job ' + d.scope_job})"
    lines = [f"FAULT: {a.text}" for a in d.faults]
    if d.faults:
        lines += [
            "  (a hardware fault comes first: the workload class below is secondary to it)",
            "",
        ]
    lead = lead_of(d)
    if lead is not None and lead.label != "FAULT":
        said = lead.alert.text
        if lead.next_step and "next: " in said:  # its next step on a line of its own, once
            said = said.split("next: ", 1)[0].rstrip("; ,")
        lines += [f"{lead.label}: {said}"]
        if lead.next_step:
            lines += [f"  next: {lead.next_step}"]
        lines += ["  (this comes first: the workload class below is read in its light)", ""]
    lines.append(f"Bottleneck: {d.headline}  {confidence_text(d)}{scope}")
    if d.secondary:
        lines.append(f"  and also: {d.secondary.replace('_', ' ')}")
        lines += [f"    - {e.text}" for e in d.secondary_evidence]
    if d.candidate and d.candidate != d.primary:
        lines.append(
            f"  (changing? {d.candidate.replace('_', ' ')} for "
            f"{count(d.candidate_streak, 'tick')}; "
            "held until it lasts)"
        )
    lines += ["", f"Evidence ({d.window_s:.0f} s window):"]
    lines += [f"  - {e.text}" for e in d.evidence]
    if d.available_evidence:
        lines.append("  available: " + "; ".join(d.available_evidence))
    if d.missing_evidence:
        lines.append("  missing (lower confidence): " + "; ".join(d.missing_evidence))
    if d.ruled_out:
        lines += ["", "Why not:"]
        lines += [f"  {r.cls.replace('_', ' '):<16} {r.evidence.text}" for r in d.ruled_out]
    if d.checks:
        checks = shown_checks(d)
        lines += ["", "Next checks:"] + [f"  {i}. {c}" for i, c in enumerate(checks, 1)]
    if d.alerts:
        lines += ["", "Alerts:"] + [f"  [{a.severity}] {a.text}" for a in d.alerts]
    return "\n".join(lines)
