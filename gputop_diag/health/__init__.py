"""Node and job health, judged: each finding with its severity, evidence, next step and the
bottleneck class it bears on (docs/health.md). Pure: facts in (`collect/health/` reads them),
findings out; no I/O, no clock."""

from __future__ import annotations

from collections.abc import Sequence

from ..model.health import SEVERITIES, Finding, HealthFacts, HealthReport
from .node import (
    driver_findings,
    fabric_findings,
    gsp_findings,
    ib_findings,
    persistence_findings,
)
from .pci import acs_findings, aer_findings, count_findings, link_findings
from .processes import environment_findings, stuck_findings

__all__ = ["judge", "with_findings"]


def judge(facts: HealthFacts, kernel: Sequence[Finding] = ()) -> HealthReport:
    """Every check's findings, the most urgent first (checks keep their order within a
    severity). `kernel`: the kernel log's findings (`xid.health.kernel_findings`: a network
    port, GPUDirect RDMA, NVLink training, a crash in NCCL), judged where the log was read."""
    found: list[Finding] = []
    found += environment_findings(facts.processes)
    found += stuck_findings(facts.processes)
    found += count_findings(facts.pci, facts.nvml)
    found += link_findings(facts.pci, facts.nvml)
    found += aer_findings(facts.pci, facts.nvml)
    found += acs_findings(facts.pci, facts.nvml)
    found += driver_findings(facts.nvml)
    found += persistence_findings(facts.nvml)
    found += gsp_findings(facts.nvml)
    found += fabric_findings(facts.pci, facts.nvml, facts.fabric_manager)
    found += ib_findings(facts.interconnect, len(facts.nvml.gpus))
    return HealthReport(_ranked([*found, *kernel]), facts)


def with_findings(report: HealthReport | None, extra: Sequence[Finding]) -> HealthReport | None:
    """`report` with `extra` findings in their place by severity (the live view's kernel-log
    findings beside a health read's); those of a check `extra` speaks for are replaced."""
    if report is None or not extra:
        return report
    checks = {f.check for f in extra}
    kept = [f for f in report.findings if f.check not in checks]
    return HealthReport(_ranked([*kept, *extra]), report.facts)


def _ranked(found: Sequence[Finding]) -> tuple[Finding, ...]:
    order = {s: k for k, s in enumerate(SEVERITIES)}
    ranked = sorted(enumerate(found), key=lambda kf: (order[kf[1].severity], kf[0]))
    return tuple(f for _, f in ranked)
