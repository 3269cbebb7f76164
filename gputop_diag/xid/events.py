"""Kernel messages → GPU driver events. Pure: no I/O, no clock.

Finds in each message (`kernlog.records`): Xid lines of every driver era (with and without
`pid=`/`name=`, `'<unknown>'`, MIG `GPU-I`/`GPU-CI` forms, any PCI domain, NVLink5 payloads, "caused
by previous Xid N"), NVSwitch SXid lines (their detail lines folded in), and the driver messages
that are not Xids: fallen off the bus without an Xid, probe and RmInitAdapter failures (with the
minor number), API mismatch (old and new wording, over several lines), GSP timeouts, reset required,
NVLink training and RX detection, RC watchdog, NVML's driver/library mismatch, PCIe AER
(open-gpu-kernel-modules `kernel_rc.c`, `krcReportXid`); and the messages of the GPU's
neighbours (`xid/neighbours.py`: the RDMA NIC's ports, `nvidia-peermem`, a crash in NCCL). OOM
kills come out of the same pass (`oom.oom_kill_in`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ..model import OomKill
from . import neighbours
from .kernlog import LogRecord, ParseStats, records
from .oom import oom_kill_in

_MAX_JOIN = 6  # records a multi-line driver message may span
# Lines that say what the machine is, not that something happened: the driver naming a GPU, the
# driver loading, a NIC port's link (or cable) coming back (it tells a flap from a port down).
BOOKKEEPING_KINDS = frozenset({"gpu_announce", "driver_loaded", "nic_link_up"})


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """A GPU driver event found in the kernel log."""

    kind: str  # "xid", "sxid", a DRIVER_MESSAGES kind or one of BOOKKEEPING_KINDS
    timestamp: float | None = None  # epoch seconds (None: the source gave none)
    uptime_s: float | None = None
    code: int | None = None  # the Xid or SXid number
    pci: str | None = None  # "0000:3b:00": domain:bus:device, lowercase (SXid: with ".f")
    gpu_index: int | None = None  # filled in by mapping the bus id through NVML's
    gpu_uuid: str | None = None
    pid: int | None = None
    process_name: str | None = None
    gpu_instance: int | None = None  # MIG
    compute_instance: int | None = None
    detail: str = ""  # the text after the code, or the message
    raw: str = ""  # the line(s) as read, for local display only
    source: str = ""  # where it was read first
    sources: tuple[str, ...] = ()  # every source that had it
    fatal: bool | None = None  # SXid and NVLink5 lines say
    caused_by: int | None = None  # Xid 45: "caused by previous Xid N"
    minor: int | None = None  # RmInitAdapter: /dev/nvidiaN
    version: str | None = None  # the kernel module's version (load line, API mismatch)
    client_version: str | None = None  # API mismatch: the user-space side's version
    switch: int | None = None  # nvidia-nvswitchN
    link: int | None = None  # NVLink number
    location: str | None = None  # Xid 13: "GPC 1, TPC 3, SM 0"
    recovery_action: str | None = None  # Xid 154: the action the driver now asks for
    # what a neighbour's message names beside `pci`: a NIC's interface ("enp12s0f0np0") or
    # cable module ("module 0"), the NCCL library a process crashed in
    device: str | None = None

    @property
    def when(self) -> float | None:
        return self.timestamp


@dataclass
class ParsedLog:
    events: list[KernelEvent] = field(default_factory=list)
    ooms: list[OomKill] = field(default_factory=list)
    stats: ParseStats = field(default_factory=ParseStats)


# --- messages → events --------------------------------------------------------------------------
_PCI3 = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>" + _PCI3 + r")(?:\.[0-7])?"
    r"(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\): ?(?P<xid>\d+),\s*"
    r"(?:pid=(?P<pid>'<unknown>'|<unknown>|\d*),\s*)?(?:name=(?P<name>.*?),\s)?(?P<msg>.*)",
    re.DOTALL,
)
_SXID = re.compile(
    r"nvidia-nvswitch(?P<sw>\d+): SXid \(PCI:(?P<pci>" + _PCI3 + r"\.[0-7])\): (?P<sxid>\d+),"
    r"\s*(?P<msg>.*)",
    re.DOTALL,
)
_ANNOUNCE = re.compile(r"NVRM: GPU at PCI:(?P<pci>" + _PCI3 + r"): (?P<uuid>GPU-[0-9a-fA-F-]+)")
_LOADED = re.compile(r"NVRM: loading NVIDIA UNIX (?P<what>.*?)\s+(?P<ver>\d{3}\.\d+(?:\.\d+)?)\s")
_BDF = r"(?P<bdf>" + _PCI3 + r"\.[0-7])"
# The driver names a GPU that fell off the bus with or without its PCI domain ("GPU 18:00.0",
# "GPU 0000:18:00.0"; gpud's xid/kmsg.go reads both), and NVML's 8-digit domain is met too.
_BDF_ANY = r"(?:PCI:)?(?P<bdf>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_FELL_PROBE = re.compile(
    r"NVRM: The NVIDIA GPU " + _BDF_ANY + r"\b.*?fallen off the bus", re.DOTALL
)
_FELL_SHORT = re.compile(r"NVRM:\s+GPU " + _BDF_ANY + r":\s+GPU has fallen off the bus")
_PROBE_FAILED = re.compile(r"NVRM: The NVIDIA probe routine failed for (?P<n>\d+) device")
_INIT_FAILED = re.compile(
    r"NVRM: (?:GPU " + _BDF + r": )?RmInitAdapter failed!?\s*(?:\((?P<rc>[^)]*)\))?"
)
_INIT_MINOR = re.compile(
    r"NVRM: (?:GPU " + _BDF + r": )?rm_init_adapter failed,? (?:for )?device (?:bearing )?"
    r"minor number (?P<minor>\d+)"
)
_API_OLD = re.compile(
    r"API mismatch: the client has the version (?P<client>\d+(?:\.\d+)+), but\s+this kernel "
    r"module has the version (?P<module>\d+(?:\.\d+)+)"
)
_API_NEW = re.compile(
    r"API mismatch: the client '(?P<comm>[^']*)' \(pid (?P<pid>\d+)\)\s+has the version "
    r"(?P<client>\d+(?:\.\d+)+), but this kernel module has\s+the version "
    r"(?P<module>\d+(?:\.\d+)+)"
)
_GSP = re.compile(
    r"NVRM: (?:GPU\d+ )?(?:\w+: )?.*?(?:GSP Timeout|Heartbeat timed out|PMU has halted|"
    r"unexpected WPR2 already up|No firmware image found|GSP RPC timeout)"
)
_RESET_REQUIRED = re.compile(r"Reset required \[NV_ERR_RESET_REQUIRED\]")
_NVLINK_TRAIN = re.compile(
    r"NVRM: (?:\w+: )?(?:knvlinkDiscoverPostRxDetLinks\w*: .*failed|.*NVLink.*training.*fail"
    r"|.*link training failed)",
    re.IGNORECASE,
)
# NVLink post-RX-detection, a stage of link training: the driver could not update the mask of
# links that detected their peer, or read a peer's (https://github.com/leptonai/gpud
# components/accelerator/nvidia/nvlink/kmsg.go; https://github.com/NVIDIA/open-gpu-kernel-modules
# src/nvidia/src/kernel/gpu/nvlink/arch/hopper/kernel_nvlink_gh100.c).
_NVLINK_RX_DETECT = re.compile(
    r"NVRM: (?:GPU \S+: )?(?:knvlinkUpdatePostRxDetectLinkMask_\w+: Failed to update Rx Detect "
    r"Link mask|knvlinkDiscoverPostRxDetLinks_\w+: Getting peer ?(?P<peer>\d+)(?:'s)? "
    r"postRxDetLinkMask failed)"
)
_RC_WATCHDOG = re.compile(r"RC watchdog: GPU is probably locked")
_NVML_MISMATCH = re.compile(r"(?:Failed to initialize NVML|nvml error): [Dd]river/library version")
_AER = re.compile(r"(?:pcieport|nvidia) " + _BDF + r": AER: (?P<msg>.*(?:Uncorrected|Fatal).*)")
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")
_LOCATION = re.compile(r"\(GPC (\d+), TPC (\d+), SM (\d+)\)")
_LINK = re.compile(r"\bLink (-?\d+)\b|\bon link (\d+)", re.IGNORECASE)
_RECOVERY = re.compile(r"recovery action changed from .*? to (?:0x[0-9a-f]+ )?\((?P<to>[^)]*)\)")
_FATAL = re.compile(r"\b(Non-?fatal|Fatal)\b", re.IGNORECASE)


def _bus_of(bdf: str) -> str | None:
    """A bus id the driver printed, with or without its domain, as "0000:3b:00"."""
    return canonical_pci(bdf if bdf.count(":") >= 2 else "0000:" + bdf)


def canonical_pci(bus_id: str | None) -> str | None:
    """Any bus-id form ("PCI:0000:3b:00", "00000000:3B:00.0", "0000:3b:00.0") as
    "0000:3b:00"; None when it is not one."""
    if not bus_id:
        return None
    m = re.search(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})", bus_id)
    if not m:
        return None
    d, b, v = (int(x, 16) for x in m.groups())
    return f"{d:04x}:{b:02x}:{v:02x}"


def _flat(text: str) -> str:
    """A multi-line driver message on one line: continuation `NVRM:` tags dropped."""
    parts = [p.strip() for p in text.split("\n")]
    out = parts[0]
    for p in parts[1:]:
        out += " " + re.sub(r"^(?:NVRM:\s*)", "", p)
    return re.sub(r"[ \t]{2,}", " ", out)


def _xid_event(m: re.Match, rec: LogRecord, source: str) -> KernelEvent:
    pid_text = (m.group("pid") or "").strip("'")
    name = m.group("name")
    msg = m.group("msg").strip()
    caused = _CAUSED_BY.search(msg)
    loc = _LOCATION.search(msg)
    link = _LINK.search(msg)
    fatal = _FATAL.search(msg)
    rec_action = _RECOVERY.search(msg)
    return KernelEvent(
        kind="xid",
        timestamp=rec.timestamp,
        uptime_s=rec.uptime_s,
        code=int(m.group("xid")),
        pci=canonical_pci(m.group("pci")),
        pid=int(pid_text) if pid_text.isdigit() else None,
        process_name=None if name in (None, "<unknown>", "") else name,
        gpu_instance=int(m.group("gi")) if m.group("gi") else None,
        compute_instance=int(m.group("ci")) if m.group("ci") else None,
        detail=msg,
        raw=rec.raw,
        source=source,
        sources=(source,),
        fatal=None if not fatal else not fatal.group(1).lower().startswith("non"),
        caused_by=int(caused.group(1)) if caused else None,
        location=f"GPC {loc.group(1)}, TPC {loc.group(2)}, SM {loc.group(3)}" if loc else None,
        link=int(next(g for g in link.groups() if g is not None)) if link else None,
        recovery_action=rec_action.group("to") if rec_action else None,
    )


def _event(kind: str, rec: LogRecord, source: str, **kw) -> KernelEvent:
    return KernelEvent(
        kind=kind,
        timestamp=rec.timestamp,
        uptime_s=rec.uptime_s,
        raw=rec.raw,
        source=source,
        sources=(source,),
        **kw,
    )


def events_in(rec: LogRecord, source: str = "") -> list[KernelEvent]:
    """The driver events one kernel message holds (usually none or one)."""
    text = rec.text
    if (
        "NVRM" not in text
        and "SXid" not in text
        and "NVML" not in text.upper()
        and ("AER" not in text)
    ):
        if not any(tag in text for tag in neighbours.TAGS):
            return []
        found = neighbours.match(_flat(text))
        return [_event(found[0], rec, source, **found[1])] if found else []
    m = _XID.search(text)
    if m:
        return [_xid_event(m, rec, source)]
    m = _SXID.search(text)
    if m:
        msg = m.group("msg").strip()
        fatal = _FATAL.search(msg)
        link = _LINK.search(msg)
        return [
            _event(
                "sxid",
                rec,
                source,
                code=int(m.group("sxid")),
                pci=m.group("pci").lower(),
                switch=int(m.group("sw")),
                detail=msg,
                fatal=None if not fatal else not fatal.group(1).lower().startswith("non"),
                link=int(next(g for g in link.groups() if g is not None)) if link else None,
            )
        ]
    flat = _flat(text)
    m = _ANNOUNCE.search(flat)
    if m:
        return [
            _event(
                "gpu_announce",
                rec,
                source,
                pci=canonical_pci(m.group("pci")),
                gpu_uuid=m.group("uuid"),
                detail=flat,
            )
        ]
    m = _LOADED.search(flat)
    if m:
        flavour = "open" if "Open" in m.group("what") else "proprietary"
        return [
            _event(
                "driver_loaded",
                rec,
                source,
                version=m.group("ver"),
                detail=f"{flavour} kernel module {m.group('ver')}",
            )
        ]
    for kind, pat in (("fallen_off_bus", _FELL_PROBE), ("fallen_off_bus", _FELL_SHORT)):
        m = pat.search(flat)
        if m:
            return [_event(kind, rec, source, pci=_bus_of(m.group("bdf")), detail=flat)]
    m = _INIT_MINOR.search(flat)
    if m:
        return [
            _event(
                "init_failed",
                rec,
                source,
                pci=canonical_pci(m.group("bdf")),
                minor=int(m.group("minor")),
                detail=flat,
            )
        ]
    m = _INIT_FAILED.search(flat)
    if m:
        return [_event("init_failed", rec, source, pci=canonical_pci(m.group("bdf")), detail=flat)]
    m = _PROBE_FAILED.search(flat)
    if m:
        return [_event("probe_failed", rec, source, detail=flat)]
    m = _API_NEW.search(flat) or _API_OLD.search(flat)
    if m:
        g = m.groupdict()
        return [
            _event(
                "api_mismatch",
                rec,
                source,
                version=g["module"],
                client_version=g["client"],
                process_name=g.get("comm"),
                pid=int(g["pid"]) if g.get("pid") else None,
                detail=flat,
            )
        ]
    if "API mismatch" in flat:  # cut short: still the condition, versions unknown
        return [_event("api_mismatch", rec, source, detail=flat)]
    m = _NVLINK_RX_DETECT.search(flat)
    if m:
        peer = m.group("peer")
        device = f"peer {peer}" if peer is not None else None
        return [_event("nvlink_training", rec, source, detail=flat, device=device)]
    for kind, pat in (
        ("reset_required", _RESET_REQUIRED),
        ("gsp_timeout", _GSP),
        ("rc_watchdog", _RC_WATCHDOG),
        ("nvlink_training", _NVLINK_TRAIN),
        ("nvml_mismatch", _NVML_MISMATCH),
    ):
        if pat.search(flat):
            return [_event(kind, rec, source, detail=flat)]
    m = _AER.search(flat)
    if m:  # the device the port names ("… received: 0000:01:00.0"), else the port
        dev = re.search(r"received: (" + _PCI3 + r"\.[0-7])", flat)
        bdf = dev.group(1) if dev else m.group("bdf")
        return [_event("pcie_aer", rec, source, pci=canonical_pci(bdf), detail=flat)]
    found = neighbours.match(flat) if any(tag in text for tag in neighbours.TAGS) else None
    return [_event(found[0], rec, source, **found[1])] if found else []


def _needs_more(text: str) -> bool:
    """A driver message that goes on in the next records (each line its own printk)."""
    flat = _flat(text)
    if "API mismatch" in flat:
        return not (_API_OLD.search(flat) or _API_NEW.search(flat))
    if re.search(r"NVRM: The NVIDIA GPU (?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}", flat):
        return "fallen off the bus" not in flat and "not supported" not in flat
    return False


def parse_records(recs: Iterable[LogRecord], source: str = "", parsed: ParsedLog | None = None):
    """Events and OOM kills in `recs`, in order: multi-record driver messages joined, SXid
    detail lines folded into their SXid."""
    out = parsed if parsed is not None else ParsedLog()
    held: LogRecord | None = None
    joined = 0

    def emit(rec: LogRecord) -> None:
        kill = oom_kill_in(rec.text, rec.timestamp)
        if kill is not None:
            out.ooms.append(kill)
            return
        for ev in events_in(rec, source):
            prev = out.events[-1] if out.events else None
            if (
                ev.kind == "sxid"
                and prev is not None
                and prev.kind == "sxid"
                and (prev.code, prev.switch, prev.pci) == (ev.code, ev.switch, ev.pci)
                and _close(prev, ev, 1.0)
            ):
                fatal = prev.fatal if prev.fatal is not None else ev.fatal
                link = prev.link if prev.link is not None else ev.link
                out.events[-1] = replace(
                    prev,
                    detail=prev.detail + "; " + ev.detail,
                    raw=prev.raw + "\n" + ev.raw,
                    fatal=fatal,
                    link=link,
                )
                continue
            if (
                ev.kind == "init_failed"
                and prev is not None
                and prev.kind == "init_failed"
                and prev.minor is None
                and (prev.pci is None or ev.pci is None or prev.pci == ev.pci)
                and _close(prev, ev, 1.0)
            ):  # "RmInitAdapter failed!" then "rm_init_adapter failed, … minor number N"
                out.events[-1] = replace(
                    prev,
                    minor=ev.minor,
                    pci=prev.pci or ev.pci,
                    detail=prev.detail + "; " + ev.detail,
                    raw=prev.raw + "\n" + ev.raw,
                )
                continue
            k = _same_fall(out.events, ev)
            if k is not None:  # one GPU falling off the bus, said twice: one event
                other = out.events[k]
                xid = other if other.kind == "xid" else ev
                out.events[k] = replace(xid, raw=other.raw + "\n" + ev.raw)
                continue
            out.events.append(ev)

    for rec in recs:
        if held is not None:
            if rec.text.startswith("NVRM:") and joined < _MAX_JOIN and _close_rec(held, rec):
                held = LogRecord(
                    held.text + "\n" + rec.text,
                    held.timestamp,
                    held.uptime_s,
                    held.raw + "\n" + rec.raw,
                )
                joined += 1
                if not _needs_more(held.text):
                    emit(held)
                    held = None
                continue
            emit(held)
            held = None
        if _needs_more(rec.text):
            held, joined = rec, 0
            continue
        emit(rec)
    if held is not None:
        emit(held)
    return out


FALL_KINDS = {"xid", "fallen_off_bus"}
FALL_WINDOW_S = 5.0  # the driver prints the Xid 79 and "has fallen off the bus" together


def _same_fall(events: list[KernelEvent], ev: KernelEvent, back: int = 4) -> int | None:
    """The index of a recent event that reports the same fall off the bus as `ev` (an Xid 79
    and the driver's "GPU has fallen off the bus" line for one bus id, seconds apart)."""
    if ev.kind not in FALL_KINDS or (ev.kind == "xid" and ev.code != 79) or ev.pci is None:
        return None
    for k in range(len(events) - 1, max(-1, len(events) - 1 - back), -1):
        e = events[k]
        if (
            {e.kind, ev.kind} == FALL_KINDS
            and (e.code if e.kind == "xid" else ev.code) == 79
            and e.pci == ev.pci
            and _close(e, ev, FALL_WINDOW_S)
        ):
            return k
    return None


def _close(a: KernelEvent, b: KernelEvent, seconds: float) -> bool:
    if a.timestamp is not None and b.timestamp is not None:
        return abs(a.timestamp - b.timestamp) <= seconds
    if a.uptime_s is not None and b.uptime_s is not None:
        return abs(a.uptime_s - b.uptime_s) <= seconds
    return a.timestamp is None and b.timestamp is None


def _close_rec(a: LogRecord, b: LogRecord) -> bool:
    if a.timestamp is not None and b.timestamp is not None:
        return abs(a.timestamp - b.timestamp) <= 2.0
    if a.uptime_s is not None and b.uptime_s is not None:
        return abs(a.uptime_s - b.uptime_s) <= 2.0
    return True


def parse_lines(
    lines: Iterable[bytes | str],
    source: str = "",
    ref_time: float | None = None,
    boot_time: float | None = None,
    parsed: ParsedLog | None = None,
) -> ParsedLog:
    """Everything in raw log lines: events, OOM kills, and what was skipped."""
    out = parsed if parsed is not None else ParsedLog()
    stats = ParseStats()
    parse_records(records(lines, stats, ref_time, boot_time), source, out)
    out.stats.add(stats)
    return out
