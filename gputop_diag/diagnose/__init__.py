"""Judgement: pure functions from sample history to a diagnosis. No Textual, no I/O.

`classify(window, previous, scheduler)` names the bottleneck of a window of snapshots;
`collect_scheduler_evidence` and `collect_oom_kills` are the two small collectors whose
output it also takes (Slurm's queue and the kernel log's OOM kills).
"""

from .classify import classify, judge
from .oom import OomKill, collect_oom_kills, parse_oom_kills
from .render import DIAGNOSIS_SCHEMA, render_text, to_json
from .slurm import SchedulerEvidence, collect_scheduler_evidence, parse_squeue
from .types import ALL_PRIMARY, BOTTLENECK_CLASSES, Alert, Diagnosis, Evidence, RuledOut

__all__ = [
    "ALL_PRIMARY",
    "BOTTLENECK_CLASSES",
    "DIAGNOSIS_SCHEMA",
    "Alert",
    "Diagnosis",
    "Evidence",
    "OomKill",
    "RuledOut",
    "SchedulerEvidence",
    "classify",
    "collect_oom_kills",
    "collect_scheduler_evidence",
    "judge",
    "parse_oom_kills",
    "parse_squeue",
    "render_text",
    "to_json",
]
