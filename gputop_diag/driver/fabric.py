"""The fabric manager of an NVSwitch system: a layer of the chain between the kernel module and
NVML, judged by the health checks' fabric findings (NVIDIA Fabric Manager User Guide,
https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..model import Snapshot
from ..model.health import Finding
from .facts import Problem
from .wording import problem

FABRIC_LAYER = "fabric_manager"  # the `layer` of the health findings that feed it
# The layer's state in words, as `gputop-diag driver` and the Driver pane say it
FABRIC_STATE_WORDS = {
    "ok": "ok",
    "broken": "BROKEN (error 802)",
    "warning": "WARNING",
    "unknown": "not fully checked",
}


@dataclass(frozen=True, slots=True)
class FabricFacts:
    """The fabric manager of an NVSwitch system, as the health checks judged it: a layer of the
    chain between the kernel module and NVML. Where there is no NVSwitch there is no such layer
    (None, never "missing")."""

    state: str  # "ok", "broken" (CUDA cannot start: error 802), "warning", "unknown"
    text: str  # the findings' titles, or what was found to be well
    next_step: str = ""
    evidence: tuple[tuple[str, str], ...] = ()  # (text, where it was read)
    gpus: tuple[int, ...] = ()
    ids: tuple[str, ...] = ()  # the health findings behind it


def fabric_facts(findings: Sequence[Finding]) -> FabricFacts | None:
    """The layer from the health findings whose layer is the fabric manager's; None when there
    are none (no NVSwitch: the health checks then give the layer no finding)."""
    mine = [f for f in findings if f.layer == FABRIC_LAYER]
    if not mine:
        return None
    bad = [f for f in mine if f.severity in ("critical", "warning")]
    shown = bad or mine
    state = (
        "broken"
        if any(f.severity == "critical" for f in bad)
        else "warning"
        if bad
        else "ok"
        if all(f.severity == "ok" for f in mine)
        else "unknown"
    )
    return FabricFacts(
        state,
        "; ".join(f.title for f in shown),
        next((f.next_step for f in shown if f.next_step), ""),
        tuple((e.text, e.source) for f in shown for e in f.evidence),
        tuple(sorted({g for f in shown for g in f.gpus})),
        tuple(f.id for f in shown),
    )


def fabric_from_snapshot(snap: Snapshot) -> FabricFacts | None:
    """The layer from the health report a snapshot carries (`Snapshot.health`, the Monitor's
    slow source); None before it was read, in older recordings, and without NVSwitches."""
    health = getattr(snap, "health", None)  # a field of snapshots since health joined the Monitor
    return fabric_facts(health.findings) if health is not None else None


def fabric_problem(fabric: FabricFacts | None) -> Problem | None:
    """The layer's problem when it is broken or warns; None when it is well or not known."""
    if fabric is None or fabric.state in ("ok", "unknown"):
        return None
    return problem(
        "fabric_broken" if fabric.state == "broken" else "fabric_warning",
        text=fabric.text,
        title=fabric.text.split("; ")[0],
        next_step=fabric.next_step,
    )
