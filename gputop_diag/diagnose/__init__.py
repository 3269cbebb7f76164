"""Judgement: pure functions from sample history to a diagnosis. No Textual, no I/O."""

from .classify import classify, judge
from .render import DIAGNOSIS_SCHEMA, render_text, to_json
from .slurm import SchedulerEvidence, collect_scheduler_evidence
from .types import Alert, Diagnosis, Evidence, RuledOut

__all__ = [
    "DIAGNOSIS_SCHEMA",
    "Alert",
    "Diagnosis",
    "Evidence",
    "RuledOut",
    "SchedulerEvidence",
    "classify",
    "collect_scheduler_evidence",
    "judge",
    "render_text",
    "to_json",
]
