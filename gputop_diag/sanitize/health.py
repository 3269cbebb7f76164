"""The health checks' findings (`gputop-diag health`, docs/health.md) through the sanitizer: the
one rule for every output that carries them (the `health` command, the report's Health section,
a snapshot's `health` in `snapshot`, `record`, `diagnose`, a replay). What a finding names
beyond the snapshots is seeded first: the PCI bus ids its evidence names, the servers of the
network mounts (`fs01:/export`); then its free text is written by who wrote it. What the
checks read from the machine (an evidence line, where it was read) keeps an environment
variable's value only when it is a flag (`1`, `true`): any other value may name a path or a
project. What the tool wrote itself (a finding's title and next step, the evidence that says
what it does: `OWN_SOURCE`) is its own advice (`NCCL_DEBUG=INFO`, `NCCL_NET_GDR_LEVEL=LOC`),
kept as every other surface keeps the tool's words: only the identifiers in it replaced. Both
name a process the way the processes section names it; the rest is free text."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..model.health import ENV_ASSIGNMENT, MOUNT_SERVER, Finding, HealthReport, mount_servers
from .table import PseudonymTable
from .text import learn, sanitize
from .titles import process_name

# A value that tells nothing about anyone: a flag or a small number (CUDA and NCCL read 1 as on).
SAFE_ENV_VALUE = re.compile(r"(?i)-?\d{1,6}|true|false|yes|no|on|off")
# "pid 41328 (pt_data_worker)": a process's name (comm, at most 15 characters); never the
# sources a diagnosis quotes after a pid ("pid 41200 (/proc/41328/stat, /proc/41328/wchan)").
_PID_NAME = re.compile(r"\bpid (\d+) \(([^()/,;]{1,16})\)")
_BDF = re.compile(r"(?i)\b[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\b")
# The tool's own words in a finding (its id, check, severity, layer, classes): kept as they are.
_VOCABULARY = re.compile(r"[a-z][a-z0-9_.]*")
_FREE_TEXT = ("title", "next_step")  # the tool's own sentences (they may quote a read name)
# The source of the evidence that says what a finding does to a job (health/processes.py,
# health/pci.py, xid/health.py; diagnose/health_evidence.py quotes the others only): the
# tool's words, not a place something was read.
OWN_SOURCE = "what it does"


def _finding_texts(f: Finding) -> list[str]:
    return [f.title, f.next_step or "", *(t for e in f.evidence for t in (e.text, e.source))]


def seed_texts(s: PseudonymTable, texts: Iterable[str]) -> None:
    """Seed what findings' texts name that no field says: the servers of network mounts (as
    host names) and PCI bus ids."""
    for t in texts:
        if not t:
            continue
        for server in MOUNT_SERVER.findall(t):
            s.seed_hostname(server)
        for bdf in _BDF.findall(t):
            s.seed_pci(bdf)


def seed_findings(s: PseudonymTable, findings: Iterable[Finding]) -> None:
    """Seed from findings (a snapshot's `health`, a recording's): mount servers, bus ids, then
    whatever their free text reveals."""
    findings = list(findings)
    for server in sorted(mount_servers(findings)):
        s.seed_hostname(server)
    texts = [t for f in findings for t in _finding_texts(f)]
    seed_texts(s, texts)
    learn(s, texts)


def seed_health(s: PseudonymTable, report: HealthReport | None) -> None:
    """Seed what a health read names beyond the snapshots: the PCI bus ids of GPUs, bridges and
    switches (from the facts where the read's are at hand), the servers of network mounts and
    the bus ids its findings' evidence names."""
    if report is None:
        return
    f = report.facts
    for g in f.pci.gpus:
        for b in (g.bdf, *g.bridges):
            s.seed_pci(b)
    for b in f.pci.nvswitches:
        s.seed_pci(b)
    for g in f.nvml.gpus:
        s.seed_pci(g.bus_id)
    seed_findings(s, report.findings)


def health_text(s: PseudonymTable, text: str | None) -> str | None:
    """Text read from the machine (a finding's evidence, where it was read): an environment
    variable's value kept only when it is a flag, the name of a process the way the processes
    section shows it, then the sanitizer."""
    if not text:
        return text
    text = ENV_ASSIGNMENT.sub(
        lambda m: (
            f"{m.group(1)}="
            + (
                m.group(2)
                if not m.group(2) or SAFE_ENV_VALUE.fullmatch(m.group(2))
                else s.pseudonym("env", m.group(2))
            )
        ),
        text,
    )
    return own_text(s, text)


def own_text(s: PseudonymTable, text: str | None) -> str | None:
    """Text the tool wrote (a finding's title and next step, what it does; a diagnosis's
    sentence that quotes findings, whose quoted evidence says a non-flag value as `NAME set`):
    its advice kept (`NCCL_DEBUG=INFO`), the name of a process the way the processes section
    shows it, and the identifiers it quotes replaced by the sanitizer."""
    if not text:
        return text
    text = _PID_NAME.sub(lambda m: f"pid {m.group(1)} ({process_name(s, m.group(2))})", text)
    return sanitize(s, text) or text


def evidence_text(s: PseudonymTable, text: str | None, source: str | None) -> str | None:
    """An evidence line: the tool's own (`OWN_SOURCE`) as its words, any other as read."""
    return own_text(s, text) if source == OWN_SOURCE else health_text(s, text)


def is_finding(v: Any) -> bool:
    """`v` is a finding of the JSON shape (`health_to_json`, `gputop-diag health --json`)."""
    return (
        isinstance(v, dict)
        and isinstance(v.get("id"), str)
        and isinstance(v.get("severity"), str)
        and isinstance(v.get("check"), str)
        and isinstance(v.get("evidence"), list)
    )


def quotes_findings(v: Any) -> bool:
    """`v` is a diagnosis's evidence (`health.<id>`) or alert (kind `health`) whose text
    quotes findings (diagnose/health_evidence.py)."""
    if not isinstance(v, dict) or not isinstance(v.get("text"), str):
        return False
    metric, kind = v.get("metric"), v.get("kind")
    return (isinstance(metric, str) and metric.startswith("health.")) or kind == "health"


def _word(s: PseudonymTable, v: Any) -> Any:
    if isinstance(v, str) and v and not _VOCABULARY.fullmatch(v):
        return sanitize(s, v)
    if isinstance(v, list):
        return [_word(s, x) for x in v]
    return v


def learn_finding(s: PseudonymTable, v: dict[str, Any]) -> list[str]:
    """Seed from a finding of the JSON shape; its free texts, to learn from."""
    texts = [v.get(k) for k in _FREE_TEXT]
    for e in v["evidence"]:
        if isinstance(e, dict):
            texts += [e.get("text"), e.get("source")]
    texts = [t for t in texts if isinstance(t, str) and t]
    seed_texts(s, texts)
    return texts


def finding_document(s: PseudonymTable, v: dict[str, Any]) -> dict[str, Any]:
    """A finding of the JSON shape: its title and next step as the tool's words (`own_text`),
    its evidence by who wrote it (`evidence_text`); its id, check, severity, layer and classes
    kept (the tool's own words), GPU indices and pids as numbers."""
    out: dict[str, Any] = {}
    for k, x in v.items():
        if k in _FREE_TEXT:
            out[k] = own_text(s, x) if isinstance(x, str) else x
        elif k == "evidence":
            out[k] = [_evidence_document(s, e) if isinstance(e, dict) else _word(s, e) for e in x]
        else:
            out[k] = _word(s, x)
    return out


def _evidence_document(s: PseudonymTable, e: dict[str, Any]) -> dict[str, Any]:
    source = e.get("source")
    return {
        k: (evidence_text(s, x, source) if k == "text" else health_text(s, x))
        if isinstance(x, str)
        else x
        for k, x in e.items()
    }
