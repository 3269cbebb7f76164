"""Node and job health, judged: each finding with its severity, evidence, next step and the
bottleneck class it bears on (docs/health.md). Pure: facts in (`collect/health/` reads them),
findings out; no I/O, no clock."""

from __future__ import annotations

from ..model.health import SEVERITIES, Finding, HealthFacts, HealthReport
from .node import fabric_findings, gsp_findings, ib_findings, persistence_findings
from .pci import acs_findings, aer_findings, count_findings, link_findings
from .processes import environment_findings, stuck_findings

__all__ = ["judge"]


def judge(facts: HealthFacts) -> HealthReport:
    """Every check's findings, the most urgent first (checks keep their order within a
    severity)."""
    found: list[Finding] = []
    found += environment_findings(facts.processes)
    found += stuck_findings(facts.processes)
    found += count_findings(facts.pci, facts.nvml)
    found += link_findings(facts.pci, facts.nvml)
    found += aer_findings(facts.pci, facts.nvml)
    found += acs_findings(facts.pci)
    found += persistence_findings(facts.nvml)
    found += gsp_findings(facts.nvml)
    found += fabric_findings(facts.pci, facts.nvml, facts.fabric_manager)
    found += ib_findings(facts.interconnect, len(facts.nvml.gpus))
    order = {s: k for k, s in enumerate(SEVERITIES)}
    ranked = sorted(enumerate(found), key=lambda kf: (order[kf[1].severity], kf[0]))
    return HealthReport(tuple(f for _, f in ranked), facts)
