"""A Diagnosis as text for a terminal and as a JSON document (gputop-diag.diagnosis/1)."""

from __future__ import annotations

from typing import Any

from .types import Diagnosis

DIAGNOSIS_SCHEMA = "gputop-diag.diagnosis/1"


def to_json(d: Diagnosis) -> dict[str, Any]:
    def ev(e):
        return {
            "metric": e.metric,
            "value": e.value,
            "threshold": e.threshold,
            "unit": e.unit,
            "text": e.text,
        }

    return {
        "schema": DIAGNOSIS_SCHEMA,
        "timestamp": d.timestamp,
        "window_s": d.window_s,
        "primary": d.primary,
        "confidence": d.confidence,
        "scope": {"gpus": list(d.scope_gpus), "job": d.scope_job},
        "evidence": [ev(e) for e in d.evidence],
        "ruled_out": [{"class": r.cls, **ev(r.evidence)} for r in d.ruled_out],
        "checks": list(d.checks),
        "alerts": [
            {"kind": a.kind, "severity": a.severity, "text": a.text, "gpu": a.gpu_index}
            for a in d.alerts
        ],
        "missing_evidence": list(d.missing_evidence),
        "candidate": d.candidate,
    }


def render_text(d: Diagnosis) -> str:
    scope = ""
    if d.scope_gpus:
        scope = " on GPU " + ",".join(map(str, d.scope_gpus))
    if d.scope_job:
        scope += f" (job {d.scope_job})"
    lines = [f"Bottleneck: {d.label.upper()}  confidence {d.confidence:.0%}{scope}"]
    lines += ["", "Evidence:"] + [f"  - {e.text}" for e in d.evidence]
    if d.missing_evidence:
        lines.append("  (not available: " + "; ".join(d.missing_evidence) + ")")
    if d.ruled_out:
        lines += ["", "Why not:"]
        lines += [f"  {r.cls.replace('_', ' '):<16} {r.evidence.text}" for r in d.ruled_out]
    if d.checks:
        lines += ["", "Next checks:"] + [f"  {i}. {c}" for i, c in enumerate(d.checks, 1)]
    if d.alerts:
        lines += ["", "Alerts:"] + [f"  [{a.severity}] {a.text}" for a in d.alerts]
    return "\n".join(lines)
