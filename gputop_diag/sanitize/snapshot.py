"""A snapshot document with every identifier replaced by its pseudonym: what `snapshot
--sanitize`, `record --sanitize` and the live view's `S` write; and the seeding from a window
of snapshots every sanitized output does before it writes its first value."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ..model import Snapshot
from ..model.codec import jsonable, snapshot_to_json
from .documents import document, learn_document
from .health import seed_findings
from .table import PseudonymTable

_NAMED_PARTS = ("xid_events", "errors", "scheduler_jobs", "kernel_ooms", "probes")


def learn_snapshots(s: PseudonymTable, snaps: Iterable[Snapshot]) -> None:
    """Seed `s` from every snapshot of a window: names by field, then what the free text of
    each distinct part that names things reveals (those seldom change; the figures around
    them change every tick, so a long window costs little more than its last snapshot)."""
    parts: dict[str, dict[Any, None]] = {k: {} for k in ("system", "gpus", "mig", "processes")}
    findings: dict[Any, None] = {}  # the health findings (`Snapshot.health`, every 30 s)
    for k in (*_NAMED_PARTS, "job"):
        parts[k] = {}
    for snap in snaps:
        parts["system"][snap.system] = None
        for g in snap.gpus:
            parts["gpus"][g.static] = None
            parts["mig"].update(dict.fromkeys(g.mig_instances))
        for p in snap.processes:
            parts["processes"][dataclasses.replace(p, cpu_pct=None, rss_bytes=None)] = None
        for key in _NAMED_PARTS:
            parts[key].update(dict.fromkeys(getattr(snap, key, None) or ()))
        if snap.job is not None:
            parts["job"][snap.job] = None
        if snap.driver_chain is not None:
            parts.setdefault("driver_chain", {})[snap.driver_chain] = None
        health = getattr(snap, "health", None)
        if health is not None:
            findings.update(dict.fromkeys(health.findings))
    seed_findings(s, findings)  # mount servers and bus ids: before the free text is learnt
    doc: dict[str, Any] = {k: [jsonable(x) for x in v] for k, v in parts.items()}
    doc["gpus"] = [{"static": g} for g in doc["gpus"]]
    doc["gpus"].append({"mig_instances": doc.pop("mig")})
    learn_document(s, doc)


def sanitized_snapshot_json(
    snap: Snapshot, sanitizer: PseudonymTable | None = None
) -> dict[str, Any]:
    """The snapshot document with every identifier replaced by its pseudonym (`documents.py`)
    under `sanitizer` (a `Sanitizer`, or any pseudonym table; a fresh one when None): host
    name, GPU and MIG UUIDs, serials, PCI bus ids, user names, command-line arguments, paths;
    minor numbers, device nodes and raw kernel-log text removed. `"sanitized": true`, and
    `"redactions"` counts what was replaced, per class."""
    s = sanitizer if sanitizer is not None else PseudonymTable()
    doc = snapshot_to_json(snap)
    learn_document(s, doc)
    out = document(s, doc)
    out["sanitized"] = True
    out["redactions"] = s.summary()
    return out


def redact_snapshot_json(
    doc: dict[str, Any], sanitizer: PseudonymTable | None = None
) -> dict[str, Any]:
    """A snapshot document (`snapshot_to_json`, or any part of one) with every identifier
    replaced by its pseudonym (under `sanitizer`, a fresh table when None); `"sanitized":
    true`."""
    s = sanitizer if sanitizer is not None else PseudonymTable()
    learn_document(s, doc)
    out = document(s, doc)
    out["sanitized"] = True
    return out
