"""The report's Health section (`report/build.py`): the health checks' findings that are not ok
(`gputop-diag health`, docs/health.md), each with its evidence and where it was read, the next
step and the classes it bears on, every text through the report's `Sanitizer` by the one
health rule every sanitized output shares (`sanitize/health.py`): the PCI bus ids of the read
and the servers of network mounts seeded first, an environment variable's value read from the
machine kept only when it is a flag, the tool's own title and next step as it wrote them."""

from __future__ import annotations

from typing import Any

from ..model.codec import iso_time
from ..model.health import SEVERITIES, HealthReport
from ..sanitize.health import evidence_text, health_text, own_text, seed_health
from ..sanitize.sanitizer import Sanitizer

__all__ = ["health", "seed_health"]


def health(report: HealthReport | None, s: Sanitizer) -> dict[str, Any]:
    """The health checks' findings that are not ok (`gputop-diag health`): title, evidence with
    where it was read, the next step and the classes they bear on."""
    if report is None:
        return {"read": False}
    shown = [x for x in report.findings if x.severity != "ok"]
    return {
        "read": True,
        "read_at": iso_time(report.facts.timestamp),
        "worst": report.worst,
        "counts": {sev: sum(1 for x in report.findings if x.severity == sev) for sev in SEVERITIES},
        "findings": [
            {
                "id": x.id,
                "severity": x.severity,
                "title": own_text(s, x.title),
                "bears_on": list(x.bears_on),
                "layer": x.layer,
                "gpus": list(x.gpus),
                "processes": len(x.pids),
                "evidence": [
                    {
                        "text": evidence_text(s, e.text, e.source),
                        "read_from": health_text(s, e.source),
                    }
                    for e in x.evidence
                ],
                "next_step": own_text(s, x.next_step) if x.next_step else None,
            }
            for x in shown
        ],
    }
