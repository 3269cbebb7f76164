"""What a diagnosis says: frozen data the side panel, the CLI and the report all read."""

from __future__ import annotations

from dataclasses import dataclass

from ..model.classes import BOTTLENECK_CLASSES

# A diagnosis's primary: one of the seven bottleneck classes (docs/diagnosis.md; the one list is
# `model.classes`), or one of the three states that are not a bottleneck.
# "undetermined": the GPU visibly waits (idle gaps) but the evidence that tells the cause apart
# (thread data, host figures) is missing, so no class may claim it (absent evidence never votes).
OTHER_STATES = ("idle", "balanced", "undetermined", "insufficient_data")
ALL_PRIMARY = BOTTLENECK_CLASSES + OTHER_STATES


@dataclass(frozen=True, slots=True)
class Evidence:
    """One figure that decided (or argued against) a class."""

    metric: str  # e.g. "sm_util_median"
    value: float | None
    threshold: float | None
    text: str  # e.g. "SM utilization 31 % (median, 30 s) while dataloader ..."
    unit: str = ""


@dataclass(frozen=True, slots=True)
class RuledOut:
    cls: str  # one of BOTTLENECK_CLASSES
    evidence: Evidence


@dataclass(frozen=True, slots=True)
class Alert:
    kind: str  # "xid", "gpu_lost", "thermal", "power", "memory_growth", "ecc", ...
    severity: str  # "info", "warning", "critical"
    text: str
    gpu_index: int | None = None
    code: int | None = None  # the Xid, for kind "xid"
    gpus: tuple[int, ...] = ()  # every GPU it applies to (gpu_index: the first or worst)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    primary: str  # one of ALL_PRIMARY
    confidence: float  # 0..1
    scope_gpus: tuple[int, ...] = ()
    scope_job: str | None = None
    evidence: tuple[Evidence, ...] = ()
    ruled_out: tuple[RuledOut, ...] = ()
    checks: tuple[str, ...] = ()
    alerts: tuple[Alert, ...] = ()
    missing_evidence: tuple[str, ...] = ()  # e.g. ("GPM", "NVLink", "per-process samples")
    window_s: float = 0.0
    timestamp: float = 0.0
    candidate: str | None = None  # the raw class this tick, before hysteresis
    candidate_streak: int = 0  # how many ticks the candidate has held
    available_evidence: tuple[str, ...] = ()  # the kinds of evidence the window had
    # A second class also near its limit (mixed limits), with the share that put it there.
    secondary: str | None = None
    secondary_evidence: tuple[Evidence, ...] = ()
    # Hardware faults that lead above the workload class: a lost GPU, a critical Xid, a row-remap
    # failure, thermal shutdown. The class is still named; these come first on every view.
    faults: tuple[Alert, ...] = ()
    # The command line of the process the verdict is about (`scope_job`): a check that starts
    # the job again names it where it says JOB_COMMAND (`render.shown_checks`). A field of its
    # own, so that every surface sanitizes it as it does any process's command line.
    cmdline: tuple[str, ...] | None = None
    # A named finding within the class: "launch_bound" within synchronization (the GPU waits
    # on the host's kernel launches, not on a sync; docs/diagnosis.md says why it is no class).
    finding: str | None = None

    @property
    def has_confidence(self) -> bool:
        """Whether this is a verdict with a confidence figure (not too little data, not
        undetermined)."""
        return self.primary not in ("insufficient_data", "undetermined")

    @property
    def label(self) -> str:
        """The one word the side panel shows."""
        return self.primary.replace("_", " ")

    @property
    def headline(self) -> str:
        """The class with its finding, as a headline reads: "SYNCHRONIZATION (launch-bound)"."""
        tail = f" ({self.finding.replace('_', '-')})" if self.finding else ""
        return self.label.upper() + tail
