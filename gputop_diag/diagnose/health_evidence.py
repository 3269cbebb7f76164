"""Node and job health findings (`Snapshot.health`, docs/health.md) as the classifier's evidence.

A finding speaks only where it is critical or a warning. One that bears on the class the timing
figures decided names the cause in the evidence, with where it was read, raises the confidence
and gives that class its first check. One that bears on a class the figures do not name never
flips the verdict: it is an alert ("health: …") with its next step. Findings of the fabric
manager are a layer of the driver chain (`alerts.driver_chain_alerts`), never read here; the
driver-layer findings (persistence, GSP firmware) and a failed health read are info at most.
Pure: a Diagnosis, the window's features and the newest snapshot in, a Diagnosis out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from ..driver.compat import FABRIC_LAYER
from ..model import Snapshot, formats
from ..model.health import ENV_ASSIGNMENT, Finding, HealthEvidence
from . import thresholds as T
from .features import Features
from .types import BOTTLENECK_CLASSES, Alert, Diagnosis, Evidence

COUNTED = ("critical", "warning")  # ok and info findings add nothing
# The source the environment and ACS findings give to the evidence that says what they do
# (health/processes.py, health/pci.py): not a place something was read.
WHAT_IT_DOES = "what it does"

# Finding id -> the classes it may be evidence of and whether it names the cause (it explains
# the class) or only fits it. The classes are also in the finding's `bears_on`; a class must be
# in both. Sources: CUDA C Programming Guide, "CUDA Environment Variables" (launches made
# synchronous); NCCL, "Environment Variables" and "Troubleshooting: PCI Access Control Services"
# (transports off, P2P sent up to the root complex); PyTorch "CUDA semantics", memory management
# (without the caching allocator every allocation is a synchronizing cudaMalloc); NVIDIA
# GPUDirect RDMA (without nvidia_peermem NCCL stages through host memory).
VOTES: dict[str, tuple[tuple[str, ...], bool]] = {
    "env.cuda_launch_blocking": (("synchronization",), True),
    "env.pytorch_no_cuda_memory_caching": (("capacity", "synchronization"), True),
    "env.nccl_p2p_disable": (("communication",), True),
    "env.nccl_shm_disable": (("communication",), True),
    "env.nccl_ib_disable": (("communication",), True),
    "pcie.acs": (("communication",), False),
    "ib.port_down": (("communication",), False),
    "ib.port_rate": (("communication",), False),
    "ib.peermem": (("communication",), False),
    "pcie.link_downtrained": (("input_pipeline", "communication"), False),
    "pcie.aer": (("input_pipeline", "communication"), False),
    "procs.d_state": (("input_pipeline",), True),
    # the kernel log's (xid/health.py): a port that went down or flaps, its cable, power or
    # temperature, GPUDirect RDMA errors (nvidia-peermem), an NVLink that did not train
    "kernel.nic_port": (("communication",), False),
    "kernel.nic_port_flapping": (("communication",), False),
    "kernel.nic_cable_error": (("communication",), False),
    "kernel.nic_temperature": (("communication",), False),
    "kernel.nic_power": (("communication",), False),
    "kernel.peermem_error": (("communication",), False),
    "kernel.nvlink_training": (("communication",), False),
}
# Never a vote, always an alert: a GPU on the PCI bus that NVML lacks was lost before or while
# the driver loaded, so the job gets fewer GPUs than the node has; a process that crashed in
# NCCL is the job's failure, not how fast it runs.
ALERT_ONLY = ("pci.gpu_count", "kernel.nccl_segfault")
# Info alerts at most, never evidence: the driver's own settings and a health read that failed.
INFO_ONLY = ("nvml.", "health.check_failed")
# Classes a finding counts for only when the job spans more than one GPU or node.
SPANNING_CLASSES = ("communication",)

# What a finding does to the job, where its own evidence does not say it.
EFFECT = {
    "procs.d_state": "the loader workers cannot read, so the GPUs wait for their batches",
    "pcie.link_downtrained": "host-to-GPU copies and PCIe peer traffic run at the lower link rate",
    "pcie.aer": "replayed transactions slow the link",
    "ib.port_down": "collectives between nodes lose that port's bandwidth",
    "ib.port_rate": "the slowest port paces the collectives between nodes",
    "pci.gpu_count": "the job gets fewer GPUs than the node has",
}
MAX_QUOTED = 3  # evidence lines quoted from one finding; the rest counted
# An environment variable's value is quoted only when it is a flag (`1`, `true`, a small number):
# any other value may be a name (a path, a project) and is said as "set", as the report does.
FLAG_VALUE = re.compile(r"(?i)-?\d{1,6}|true|false|yes|no|on|off")


def label(cls: str) -> str:
    return cls.replace("_", " ")


def counted(snap: Snapshot | None) -> tuple[Finding, ...]:
    """The findings that speak: critical or warning, not the fabric manager's (the driver chain
    judges those). None before health was read and in recordings made before it was."""
    report = getattr(snap, "health", None) if snap is not None else None
    if report is None:
        return ()
    return tuple(f for f in report.findings if f.severity in COUNTED and f.layer != FABRIC_LAYER)


def spans(f: Features, snap: Snapshot) -> bool:
    """Whether the job spans more than one GPU (running kernels in the window, or holding one:
    an idle job still has its GPUs) or more than one node (its Slurm allocation)."""
    held = {p.gpu_index for p in snap.gpu_processes}
    job = snap.job
    nodes = job.slurm.nodes if job is not None and job.slurm is not None else None
    return f.multi_gpu or len(held) > 1 or bool(nodes and ("," in nodes or "[" in nodes))


def classes_of(finding: Finding, spanning: bool) -> tuple[str, ...]:
    """The classes `finding` is evidence of; () for those that are alerts or info only."""
    if finding.id in ALERT_ONLY or finding.id.startswith(INFO_ONLY) or finding.layer is not None:
        return ()
    allowed = VOTES.get(finding.id, (finding.bears_on, False))[0]
    out = tuple(c for c in allowed if c in finding.bears_on and c in BOTTLENECK_CLASSES)
    return tuple(c for c in out if spanning or c not in SPANNING_CLASSES)


def names_cause(finding: Finding) -> bool:
    return VOTES.get(finding.id, ((), False))[1]


def _flags_only(text: str) -> str:
    """`NAME=value` kept where the value is a flag, else `NAME set`."""
    return ENV_ASSIGNMENT.sub(
        lambda m: m.group(0) if FLAG_VALUE.fullmatch(m.group(2)) else f"{m.group(1)} set", text
    )


def _with_source(e: HealthEvidence) -> str:
    """`text (source)`, or `text (…; source)` where the text closes on its own parenthesis."""
    text = _flags_only(e.text)
    if text.endswith(")"):
        return f"{text[:-1]}; {e.source})"
    return f"{text} ({e.source})"


def _about(e: HealthEvidence, pid: int) -> bool:
    return e.text.startswith(f"pid {pid} ") or f"pid {pid}'s" in e.text


def quoted(finding: Finding, pid: int | None = None) -> str:
    """What the finding read and where: for a finding per process, the lines of one process
    (`pid`'s where it is one of them) and how many more; else its first lines."""
    read = [e for e in finding.evidence if e.source != WHAT_IT_DOES]
    if not read:
        return finding.title
    if finding.pids:
        subject = pid if pid in finding.pids else finding.pids[0]
        mine = [e for e in read if _about(e, subject)] or read[:1]
        more = len(finding.pids) - 1
        others = formats.count(more, "more process", "more processes")
        tail = f", and {others} alike" if more > 0 else ""
        return "; ".join(_with_source(e) for e in mine[:MAX_QUOTED]) + tail
    more = len(read) - MAX_QUOTED
    tail = f"; {formats.count(more, 'more line')} in gputop-diag health" if more > 0 else ""
    return "; ".join(_with_source(e) for e in read[:MAX_QUOTED]) + tail


def effect(finding: Finding) -> str | None:
    own = next((e.text for e in finding.evidence if e.source == WHAT_IT_DOES), None)
    return own or EFFECT.get(finding.id)


def cause_evidence(cls: str, finding: Finding, pid: int | None) -> Evidence:
    """ "synchronization: CUDA_LAUNCH_BLOCKING=1 in pid 41200's environment (GPU 0;
    /proc/41200/environ) — every kernel launch waits …" """
    head = "" if finding.check == "environment" else f"{finding.title}: "
    does = effect(finding)
    text = f"{label(cls)}: {head}{quoted(finding, pid)}" + (f" — {does}" if does else "")
    return Evidence(f"health.{finding.id}", None, None, text)


def health_alert(finding: Finding, pid: int | None, severity: str | None = None) -> Alert:
    """ "health: <title> — <what was read, where>; next: <step>" """
    does = effect(finding)
    what = quoted(finding, pid) + (f" — {does}" if does and finding.id in EFFECT else "")
    step = f"; next: {finding.next_step}" if finding.next_step else ""
    gpus = tuple(finding.gpus)
    return Alert(
        "health",
        severity or finding.severity,
        f"health: {finding.title} — {what}{step}",
        gpus[0] if gpus else None,
        gpus=gpus,
    )


def _story_pid(d: Diagnosis) -> int | None:
    job = d.scope_job or ""
    return int(job[4:]) if job.startswith("pid ") and job[4:].isdigit() else None


# Checks of a class that a named cause makes wrong or secondary: (dropped, brought forward), by
# the start of the check's text. Loader workers in D state on a mount do not want more workers
# (each new one blocks on the same mount), nor the loader timed alone (it hangs there too):
# the storage check comes first.
CAUSE_CHECKS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "procs.d_state": (("Raise DataLoader num_workers", "Time the loader alone"), ("Storage:",)),
}


def _after_cause(checks: Sequence[str], causes: Sequence[Finding]) -> tuple[str, ...]:
    """The class's own checks once `causes` are named (CAUSE_CHECKS)."""
    dropped: tuple[str, ...] = ()
    first: tuple[str, ...] = ()
    for x in causes:
        drop, bring = CAUSE_CHECKS.get(x.id, ((), ()))
        dropped, first = dropped + drop, first + bring
    kept = [c for c in checks if not c.startswith(dropped)] if dropped else list(checks)
    return (*(c for c in kept if first and c.startswith(first)),
            *(c for c in kept if not (first and c.startswith(first))))  # fmt: skip


def _first_checks(findings: Sequence[Finding]) -> list[str]:
    out: list[str] = []
    for x in findings:
        if x.next_step:
            check = f"{x.title}: {x.next_step}"
            if check not in out:
                out.append(check)
    return out


def with_health(d: Diagnosis, f: Features, snap: Snapshot | None) -> Diagnosis:
    """`d` with the health findings of `snap`: the cause of its class named, with a higher
    confidence and the first check; the findings that bear on another class (or on none the
    figures can name) as alerts. Never another class: the figures decide it."""
    findings = counted(snap)
    if not findings or snap is None:
        return d
    spanning = spans(f, snap)
    pid = _story_pid(d)
    judged = d.primary in BOTTLENECK_CLASSES and d.has_confidence
    causes: list[Finding] = []
    alerts: list[Alert] = []
    for x in findings:
        classes = classes_of(x, spanning)
        if judged and d.primary in classes:
            causes.append(x)
        elif x.id.startswith(INFO_ONLY) or (x.layer is not None and x.id not in ALERT_ONLY):
            alerts.append(health_alert(x, pid, "info"))
        elif classes or x.id in ALERT_ONLY:
            alerts.append(health_alert(x, pid))
        # else: a finding on a class this job cannot show (communication on one GPU)
    if not causes:
        return replace(d, alerts=_merged(d.alerts, alerts)) if alerts else d
    causes.sort(key=lambda x: (not names_cause(x), COUNTED.index(x.severity)))
    bonus = T.HEALTH_CAUSE_BONUS if names_cause(causes[0]) else T.HEALTH_FITS_BONUS
    confidence = max(d.confidence, min(T.HEALTH_CONF_MAX, round(d.confidence + bonus, 2)))
    named = tuple(cause_evidence(d.primary, x, pid) for x in causes)
    return replace(
        d,
        confidence=confidence,
        evidence=(*named, *d.evidence),
        checks=(*_first_checks(causes), *_after_cause(d.checks, causes)),
        alerts=_merged(d.alerts, alerts),
    )


def _merged(alerts: Sequence[Alert], health: Sequence[Alert]) -> tuple[Alert, ...]:
    """The health alerts after the classifier's critical and warning alerts, before its info
    ones (the order of each is kept)."""
    cut = next((k for k, a in enumerate(alerts) if a.severity == "info"), len(alerts))
    return (*alerts[:cut], *health, *alerts[cut:])
