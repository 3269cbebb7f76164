"""Node and job health: what the health readers found (facts) and what the judgement made of it
(findings). Frozen data only; the readers are in `collect/health/`, the judgement in `health/`.

A reading that could not be made says why in `problem`, in the words a person acts on:
"permission denied", "absent", "not available from this driver", "not supported", or the error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .classes import BOTTLENECK_CLASSES

HEALTH_SCHEMA = "gputop-diag.health/1"

SEVERITIES = ("critical", "warning", "info", "ok")  # most urgent first
# The bottleneck classes a finding can bear on: the classifier's own names, the one list.
HEALTH_CLASSES = BOTTLENECK_CLASSES

# Why a reading is missing: one vocabulary for every reader.
DENIED = "permission denied"
ABSENT = "absent"
NO_SYMBOL = "not available from this driver"
NOT_SUPPORTED = "not supported"


@dataclass(frozen=True, slots=True)
class Reading:
    """One value and where it was read (a path, an NVML call, a command); `problem` when the
    value could not be had."""

    value: Any
    source: str
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


# -- facts: processes ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ProcessEnv:
    """The health-relevant variables of one process's environment (/proc/<pid>/environ); only
    the watched names are kept, never the whole environment."""

    pid: int
    name: str | None
    source: str  # /proc/<pid>/environ
    variables: tuple[tuple[str, str], ...] = ()
    problem: str | None = None
    gpus: tuple[int, ...] = ()  # the GPUs NVML lists it on (empty: a watched job's process)


@dataclass(frozen=True, slots=True)
class MountRef:
    """A mount a stuck process touches: through an open file (`via` "fd N") or its working
    directory."""

    mount_point: str
    fs_type: str
    device: str  # the mount source: server:/export for NFS
    via: str


@dataclass(frozen=True, slots=True)
class StuckProcess:
    """A process of a GPU job in uninterruptible sleep (state D in /proc/<pid>/stat)."""

    pid: int
    name: str
    state: str  # "D"
    wchan: str | None  # /proc/<pid>/wchan: the kernel function it waits in ("0": unknown)
    root_pid: int  # the GPU process (or watched job process) it belongs to
    mounts: tuple[MountRef, ...] = ()
    mounts_problem: str | None = None  # why its mounts or open files could not be read


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    envs: tuple[ProcessEnv, ...] = ()
    stuck: tuple[StuckProcess, ...] = ()
    examined: int = 0  # processes whose state was read (GPU processes and their descendants)
    unreadable: int = 0  # of those, how many could not be read (gone or denied)


# -- facts: PCI ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AcsBridge:
    """ACS control on one bridge above a GPU, from `lspci -vvv -s BDF` ("ACSCtl:" line)."""

    bdf: str
    flags: tuple[tuple[str, bool], ...] = ()  # ("SrcValid", True), ("ReqRedir", True), ...
    has_acs: bool | None = None  # False: the capability list shows no ACS; None: not read
    problem: str | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class PciGpu:
    """An NVIDIA display or 3D controller on the PCI bus (/sys/bus/pci/devices/BDF)."""

    bdf: str  # 0000:18:00.0
    device_id: str | None = None  # 0x2330
    class_code: str | None = None  # 0x030200
    link_speed: Reading | None = None  # current_link_speed, "32.0 GT/s PCIe"
    link_speed_max: Reading | None = None
    link_width: Reading | None = None
    link_width_max: Reading | None = None
    aer: tuple[tuple[str, Reading], ...] = ()  # ("correctable", Reading(total)), ...
    bridges: tuple[str, ...] = ()  # the bridges above it, nearest first
    acs: tuple[AcsBridge, ...] = ()


@dataclass(frozen=True, slots=True)
class PciFacts:
    gpus: tuple[PciGpu, ...] = ()
    nvswitches: tuple[str, ...] = ()  # BDFs of vendor 0x10de class 0x0680 devices
    problem: str | None = None  # /sys/bus/pci/devices could not be listed
    source: str = "/sys/bus/pci/devices"


# -- facts: NVML --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class FabricState:
    """NVML's view of a GPU's place in the NVLink fabric (nvmlDeviceGetGpuFabricInfo[V])."""

    state: str  # "not_supported", "not_started", "in_progress", "completed"
    status: int | None = None  # nvmlReturn_t of the registration
    source: str = ""


@dataclass(frozen=True, slots=True)
class NvmlGpu:
    index: int
    bus_id: str | None  # NVML form: 00000000:18:00.0
    name: str | None = None
    util_gpu_pct: float | None = None
    persistence: Reading | None = None  # True / False
    gsp_firmware: Reading | None = None  # (enabled, default) as booleans
    pcie_gen: Reading | None = None
    pcie_gen_max: Reading | None = None
    pcie_width: Reading | None = None
    pcie_width_max: Reading | None = None
    fabric: Reading | None = None  # value: FabricState
    lost: bool = False


@dataclass(frozen=True, slots=True)
class NvmlFacts:
    gpus: tuple[NvmlGpu, ...] = ()
    driver_version: str | None = None
    problem: str | None = None  # NVML could not be opened (no driver)


# -- facts: interconnect ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class IbPort:
    """/sys/class/infiniband/<device>/ports/<port>/: state, phys_state, rate, link_layer."""

    device: str
    port: str
    state: str | None  # "4: ACTIVE"
    phys_state: str | None  # "5: LinkUp"
    rate: str | None  # "400 Gb/sec (4X NDR)"
    link_layer: str | None  # "InfiniBand" or "Ethernet" (RoCE)
    problem: str | None = None
    source: str = ""


@dataclass(frozen=True, slots=True)
class InterconnectFacts:
    ib_ports: tuple[IbPort, ...] = ()
    ib_problem: str | None = None  # /sys/class/infiniband: absent (no IB) or unreadable
    peermem: Reading | None = None  # value: the loaded module's name, or None
    source: str = "/sys/class/infiniband"


@dataclass(frozen=True, slots=True)
class FabricManagerFacts:
    """The fabric manager of an NVSwitch system: what the machine says of it."""

    dev_nodes: tuple[str, ...] = ()  # /dev/nvidia-nvswitch*
    service: Reading | None = None  # `systemctl is-active nvidia-fabricmanager`: "active", ...
    version: Reading | None = None  # `nv-fabricmanager --version`
    asked: bool = False  # False: no NVSwitch found, the service was not asked about


@dataclass(frozen=True, slots=True)
class HealthFacts:
    """Everything one health read found."""

    timestamp: float
    hostname: str
    processes: ProcessFacts = field(default_factory=ProcessFacts)
    pci: PciFacts = field(default_factory=PciFacts)
    nvml: NvmlFacts = field(default_factory=NvmlFacts)
    interconnect: InterconnectFacts = field(default_factory=InterconnectFacts)
    fabric_manager: FabricManagerFacts = field(default_factory=FabricManagerFacts)
    read_s: float | None = None  # wall time of the read


# -- findings -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class HealthEvidence:
    text: str  # "CUDA_LAUNCH_BLOCKING=1"
    source: str  # "/proc/41216/environ"


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's verdict, tied to the bottleneck class it bears on."""

    id: str  # "env.cuda_launch_blocking"
    severity: str  # one of SEVERITIES
    title: str
    evidence: tuple[HealthEvidence, ...] = ()
    next_step: str = ""  # one copyable command line, or a sentence where there is none
    bears_on: tuple[str, ...] = ()  # classes of HEALTH_CLASSES
    check: str = ""  # the check it belongs to: "environment", "pcie_link", ...
    gpus: tuple[int, ...] = ()
    pids: tuple[int, ...] = ()
    layer: str | None = None  # a layer of the driver chain ("fabric_manager"), where it is one


@dataclass(frozen=True, slots=True)
class HealthReport:
    findings: tuple[Finding, ...]
    facts: HealthFacts

    @property
    def worst(self) -> str:
        return next((s for s in SEVERITIES if any(f.severity == s for f in self.findings)), "ok")


# -- the recorded form ---------------------------------------------------------------------------
# What a recording carries of a health read: the findings and when they were read (and how long
# the read took); never the raw facts (paths, environments, bus layout the findings do not need).
# `recorded(report)` is that form as a HealthReport; `health_to_json` / `health_from_json` are its
# exact JSON codec: health_from_json(health_to_json(r)) == recorded(r).


def recorded(report: HealthReport) -> HealthReport:
    """`report` as a recording carries it: the findings, the read's time and duration."""
    f = report.facts
    return HealthReport(
        report.findings, HealthFacts(timestamp=f.timestamp, hostname="", read_s=f.read_s)
    )


def finding_to_json(x: Finding) -> dict[str, Any]:
    """One finding as JSON values (a recording's and `health --json`'s)."""
    return {
        "id": x.id,
        "severity": x.severity,
        "check": x.check,
        "title": x.title,
        "bears_on": list(x.bears_on),
        "layer": x.layer,
        "gpus": list(x.gpus),
        "pids": list(x.pids),
        "evidence": [{"text": e.text, "source": e.source} for e in x.evidence],
        "next_step": x.next_step,
    }


def health_to_json(report: HealthReport) -> dict[str, Any]:
    """The recorded form of `report` as JSON values."""
    return {
        "read_at": report.facts.timestamp,
        "read_s": report.facts.read_s,
        "findings": [finding_to_json(x) for x in report.findings],
    }


def _want(ok: bool, what: str, where: str) -> None:
    if not ok:
        raise ValueError(f"expected {what} at health.{where}")


def _strings(v: Any, where: str) -> tuple[str, ...]:
    _want(isinstance(v, list) and all(isinstance(s, str) for s in v), "an array of strings", where)
    return tuple(v)


def _ints(v: Any, where: str) -> tuple[int, ...]:
    _want(isinstance(v, list) and all(type(i) is int for i in v), "an array of integers", where)
    return tuple(v)


_FINDING_STRINGS = ("id", "severity", "check", "title", "next_step")


def _finding(d: Any, where: str) -> Finding:
    # Checked first and named only on failure: a long recording holds many findings, and
    # building each message for every one of them was most of the time it took to read.
    if not isinstance(d, dict):
        _want(False, "an object", where)
    for k in _FINDING_STRINGS:
        if not isinstance(d.get(k), str):
            _want(False, "a string", f"{where}.{k}")
    if d["severity"] not in SEVERITIES:
        _want(False, "one of " + ", ".join(SEVERITIES), f"{where}.severity")
    layer = d.get("layer")
    if layer is not None and not isinstance(layer, str):
        _want(False, "a string or null", where)
    ev = d.get("evidence", [])
    if not isinstance(ev, list):
        _want(False, "an array", f"{where}.evidence")
    evidence = []
    for k, e in enumerate(ev):
        if not isinstance(e, dict):
            _want(False, "an object", f"{where}.evidence[{k}]")
        text, source = e.get("text"), e.get("source")
        if not (isinstance(text, str) and isinstance(source, str)):
            _want(False, "text and source strings", f"{where}.evidence[{k}]")
        evidence.append(HealthEvidence(text, source))
    bears_on, gpus, pids = d.get("bears_on", []), d.get("gpus", []), d.get("pids", [])
    return Finding(
        d["id"],
        d["severity"],
        d["title"],
        tuple(evidence),
        d["next_step"],
        () if bears_on == [] else _strings(bears_on, f"{where}.bears_on"),
        d["check"],
        () if gpus == [] else _ints(gpus, f"{where}.gpus"),
        () if pids == [] else _ints(pids, f"{where}.pids"),
        layer,
    )


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def health_from_json(data: Any) -> HealthReport:
    """A recorded health read back (`recorded(report)` exactly); ValueError naming the first
    value of the wrong shape."""
    _want(isinstance(data, dict), "an object", "")
    _want(_number(data.get("read_at")), "a number", "read_at")
    read_s = data.get("read_s")
    _want(read_s is None or _number(read_s), "a number or null", "read_s")
    found = data.get("findings", [])
    _want(isinstance(found, list), "an array", "findings")
    findings = tuple(_finding(d, f"findings[{k}]") for k, d in enumerate(found))
    facts = HealthFacts(timestamp=data["read_at"], hostname="", read_s=read_s)
    return HealthReport(findings, facts)


# -- what a finding's text names, for the sanitizer -----------------------------------------------
# The server of a network mount in a D-state finding's evidence ("nfs4 from fs01:/export") and
# an environment variable's value ("NCCL_P2P_DISABLE=value"): names no field of the finding says.
MOUNT_SERVER = re.compile(r"(?<![\w/.-])([A-Za-z][\w.-]*):/")
ENV_ASSIGNMENT = re.compile(r"\b([A-Z][A-Z0-9_]*)=(\S*)")


def mount_servers(findings: Iterable[Finding]) -> set[str]:
    """The servers of the network mounts the findings' evidence names (to seed as host names)."""
    return {m for f in findings for e in f.evidence for m in MOUNT_SERVER.findall(e.text)}
