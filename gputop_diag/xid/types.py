"""The Xid triage's vocabulary: its windows and thresholds, the groups, findings, chains and
triage it returns, and the helpers the chains and patterns share (`triage.py` puts them together).
Pure: data in, data out."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from ..model import Snapshot, XidEvent
from .catalog import CAUSES, DRIVER_MESSAGES, SEVERITIES, entry, sxid_entry
from .events import KernelEvent, canonical_pci

NVML_MATCH_S = 15.0  # an NVML event and its kernel line: the NVML one is stamped at the poll
FOLLOW_S = 10.0  # a sympathetic Xid this soon after another one on the same GPU follows it
WIDE_WINDOW_S = 300.0  # events on several GPUs this close together are one host-wide event
REMAP_WINDOW_S = 86400.0  # 48 then 63/64 on the same GPU
DRIVER_UPDATE_S = 7 * 86400.0  # Xids this soon after a new driver version loaded
HISTORY_MATCH_S = 5.0  # a sampled snapshot this close to an event describes the GPU at the time
BUSY_UTIL_PCT = 90.0
BUSY_POWER_PCT = 95.0
HOT_C = 85.0
MEMORY_FULL_PCT = 95.0
# Events that say something happened to a GPU (not bookkeeping lines).
DEVICE_KINDS = frozenset({"xid", "sxid", *DRIVER_MESSAGES})


@dataclass(frozen=True, slots=True)
class GpuRef:
    """A GPU as NVML names it now."""

    index: int
    uuid: str | None = None
    pci: str | None = None  # canonical "0000:3b:00"
    lost: bool = False


@dataclass(frozen=True)
class TriageContext:
    """What besides the log the triage reads."""

    gpus: tuple[GpuRef, ...] = ()
    history: Sequence[Snapshot] = ()  # sampled snapshots, oldest first (the live view's)
    module_version: str | None = None  # the loaded kernel module (/proc/driver/nvidia/version)
    library_version: str | None = None  # NVML's (user space)
    nvml_mismatch: bool = False  # NVML itself said driver/library version mismatch
    private: bool = True  # False (--sanitize): no process names, pids or UUIDs in the text


@dataclass(frozen=True, slots=True)
class XidGroup:
    """The events of one code on one GPU."""

    kind: str
    code: int | None
    gpu: str  # "GPU 3", "GPU at 0000:3b:00", "NVSwitch 3", "host"
    gpu_index: int | None
    gpu_uuid: str | None
    pci: str | None
    count: int
    first: float | None
    last: float | None
    pids: tuple[int, ...]
    process_names: tuple[str, ...]
    title: str  # "Xid 79 FALLEN_OFF_BUS"
    meaning: str
    causes: str
    question: str
    step: str
    severity: str
    follows: str | None = None  # "Xid 149": the sympathetic Xid's cause
    sources: tuple[str, ...] = ()
    locations: tuple[str, ...] = ()  # Xid 13: "GPC 1, TPC 3, SM 0" of each event that names one


@dataclass(frozen=True, slots=True)
class Finding:
    """One row of the evidence → next-question table, found in this history."""

    evidence: str  # what was seen
    question: str  # the question it leads to
    detail: str  # what the history says toward the answer
    action: str  # what to do once answered
    severity: str
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Chain:
    """One event leading to another."""

    first: str
    then: str
    gpu: str
    meaning: str
    action: str
    severity: str


@dataclass(frozen=True)
class XidTriage:
    events: tuple[KernelEvent, ...] = ()  # device events, mapped and merged, oldest first
    groups: tuple[XidGroup, ...] = ()  # most urgent first
    findings: tuple[Finding, ...] = ()
    chains: tuple[Chain, ...] = ()
    driver_loads: tuple[KernelEvent, ...] = ()
    lost_gpus: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def route(self) -> tuple[str, ...]:
        """The triage as steps: for each group, most urgent first, the question then the
        action; sympathetic groups point at the Xid they follow."""
        out = []
        for g in self.groups:
            if g.follows:
                continue
            times = f" ×{g.count}" if g.count > 1 else ""
            out.append(f"{g.title}{times} on {g.gpu}: ask: {g.question} Then: {g.step}")
        return tuple(out)


# --- GPUs ---------------------------------------------------------------------------------------
def sanitized(events: Sequence[KernelEvent]) -> list[KernelEvent]:
    """The events with what identifies a machine or a person removed, as a public note requires of
    public notes: no kernel text, process names, pids, UUIDs, bus ids or network interface names
    (pseudonyms keep the GPUs, NICs and processes apart: gpu-1, pci-1, nic-1, proc-1, in order of
    appearance). A cable module's number, a peer's and NCCL's library name are kept."""
    names: dict[str, str] = {}

    def alias(value: str | None, prefix: str) -> str | None:
        if value is None:
            return None
        return names.setdefault(
            value, f"{prefix}-{sum(v.startswith(prefix) for v in names.values()) + 1}"
        )

    return [
        replace(
            e,
            detail="",
            raw="",
            pid=None,
            process_name=alias(e.process_name, "proc"),
            gpu_uuid=alias(e.gpu_uuid, "gpu"),
            pci=alias(e.pci, "pci"),
            device=e.device if _PUBLIC_DEVICE.fullmatch(e.device or "") else alias(e.device, "nic"),
        )
        for e in events
    ]


# What a neighbour's line names that says nothing of the machine: "module 3", "peer 0", a
# library's file name.
_PUBLIC_DEVICE = re.compile(r"(?:module|peer) \d+|lib[\w.+-]+\.so[\w.]*|")


def gpu_refs(snap: Snapshot | None) -> tuple[GpuRef, ...]:
    if snap is None:
        return ()
    return tuple(
        GpuRef(g.index, g.static.uuid, canonical_pci(g.static.pci_bus_id), g.lost)
        for g in snap.gpus
    )


def map_gpus(events: Sequence[KernelEvent], gpus: Sequence[GpuRef]) -> list[KernelEvent]:
    """Each event's GPU index and UUID, through NVML's bus ids and the driver's own
    "GPU at PCI:… GPU-uuid" lines (which name the GPU of that boot even when NVML cannot)."""
    by_pci = {g.pci: g for g in gpus if g.pci}
    by_uuid = {g.uuid: g for g in gpus if g.uuid}
    announced: dict[str, str] = {}
    out = []
    for ev in events:
        if ev.kind == "gpu_announce" and ev.pci and ev.gpu_uuid:
            announced[ev.pci] = ev.gpu_uuid
        if ev.pci is None or ev.kind == "sxid" or subject_of(ev) != "gpu":
            out.append(ev)
            continue
        g = by_pci.get(ev.pci)
        uuid = ev.gpu_uuid or announced.get(ev.pci) or (g.uuid if g else None)
        if uuid in by_uuid:  # the GPU NVML knows by that UUID, wherever it sits now
            index = by_uuid[uuid].index
        elif g is not None and (g.uuid is None or g.uuid == uuid):
            index = g.index
        else:
            index = ev.gpu_index  # mapped before (and sanitized since), or unknown
        out.append(replace(ev, gpu_index=index, gpu_uuid=uuid))
    return out


def from_nvml(x: XidEvent, gpus: Sequence[GpuRef]) -> KernelEvent:
    g = next((g for g in gpus if g.index == x.gpu_index), None)
    return KernelEvent(
        kind="xid",
        timestamp=x.timestamp,
        code=x.xid,
        pci=canonical_pci(x.pci_bus_id) or (g.pci if g else None),
        gpu_index=x.gpu_index,
        gpu_uuid=g.uuid if g else None,
        pid=x.pid,
        process_name=x.process_name,
        detail=x.message,
        source=x.source,
        sources=(x.source,),
    )


def join_nvml(events: Sequence[KernelEvent], nvml: Sequence[KernelEvent]) -> list[KernelEvent]:
    """NVML's events folded into the kernel lines they also appear as (same GPU, same code,
    within NVML_MATCH_S); the rest added."""
    out = list(events)
    for n in nvml:
        hit = next(
            (
                k
                for k, e in enumerate(out)
                if e.kind == "xid"
                and e.code == n.code
                and n.source not in e.sources
                and same_gpu(e, n)
                and e.timestamp is not None
                and abs(e.timestamp - n.timestamp) <= NVML_MATCH_S
            ),
            None,
        )
        if hit is None:
            out.append(n)
        else:
            out[hit] = replace(out[hit], sources=out[hit].sources + (n.source,))
    return sorted(out, key=lambda e: (e.timestamp is None, e.timestamp or 0.0))


def same_gpu(a: KernelEvent, b: KernelEvent) -> bool:
    if a.gpu_uuid and b.gpu_uuid:
        return a.gpu_uuid == b.gpu_uuid
    if a.gpu_index is not None and b.gpu_index is not None:
        return a.gpu_index == b.gpu_index
    return a.pci is not None and a.pci == b.pci


def subject_of(ev: KernelEvent) -> str:
    """What an event happened to: "gpu", "nvswitch", "nic" (a network adapter's port), "host"
    or "process" (catalog.DriverMessageInfo.subject)."""
    if ev.kind == "sxid":
        return "nvswitch"
    info = DRIVER_MESSAGES.get(ev.kind)
    return info.subject if info is not None else "gpu"


def nic_name(ev: KernelEvent) -> str:
    """ "NIC 0000:0c:00.1 enp12s0f1np1": the adapter's function and what the line names of it."""
    parts = ["NIC", ev.pci or "?"] if ev.pci or not ev.device else ["NIC"]
    return " ".join([*parts, *([ev.device] if ev.device else [])])


def gpu_key(ev: KernelEvent) -> str:
    """The physical GPU: its UUID when known (indexes move across reboots), else its bus id
    (a NIC: its function and port; a host-wide message: the host)."""
    if ev.kind == "sxid":
        return f"nvswitch{ev.switch}"
    subject = subject_of(ev)
    if subject == "nic":
        return f"nic {ev.pci} {ev.device}"
    if subject in ("host", "process"):
        return "host"
    return ev.gpu_uuid or ev.pci or (f"index{ev.gpu_index}" if ev.gpu_index is not None else "?")


def gpu_name(ev: KernelEvent) -> str:
    if ev.kind == "sxid":
        return f"NVSwitch {ev.switch}"
    subject = subject_of(ev)
    if subject == "nic":
        return nic_name(ev)
    if subject in ("host", "process"):
        return "the host"
    if ev.gpu_index is not None:
        return f"GPU {ev.gpu_index}"
    if ev.pci:
        return f"GPU at {ev.pci}"
    if ev.minor is not None:
        return f"/dev/nvidia{ev.minor}"
    return "the host"


def title_of(ev: KernelEvent) -> str:
    if ev.kind == "xid":
        return f"Xid {ev.code} {entry(ev.code).name}"
    if ev.kind == "sxid":
        return f"SXid {ev.code} ({sxid_entry(ev.code).unit})"
    info = DRIVER_MESSAGES.get(ev.kind)
    return info.title if info else ev.kind


def when(ts: float | None) -> str:
    if ts is None:
        return "time unknown"
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def words(names: Sequence[str]) -> str:
    names = list(dict.fromkeys(names))
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def sev_rank(s: str) -> int:
    return SEVERITIES.index(s) if s in SEVERITIES else 1


# --- the triage ---------------------------------------------------------------------------------
def near(a: KernelEvent, b: KernelEvent, seconds: float) -> bool:
    if a.timestamp is not None and b.timestamp is not None:
        return abs(a.timestamp - b.timestamp) <= seconds
    if a.uptime_s is not None and b.uptime_s is not None:
        return abs(a.uptime_s - b.uptime_s) <= seconds
    return False


def info_of(e: KernelEvent, fatal: bool) -> tuple[str, str, str, str, str]:
    """(meaning, causes, question, step, severity) for an event's kind."""
    if e.kind == "xid":
        x = entry(e.code)
        return x.meaning, x.cause_words, x.question, x.step, x.severity
    if e.kind == "sxid":
        s = sxid_entry(e.code)
        return (s.meaning, CAUSES["nvlink"], s.question, s.step, "critical" if fatal else "warning")
    d = DRIVER_MESSAGES[e.kind]
    return d.meaning, ", ".join(CAUSES[c] for c in d.causes), d.question, d.step, d.severity
