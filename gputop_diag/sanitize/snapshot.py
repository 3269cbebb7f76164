"""A snapshot document with every identifier replaced by its pseudonym: what `snapshot
--sanitize`, `record --sanitize` and the live view's `S` write."""

from __future__ import annotations

from typing import Any

from ..model import Snapshot
from ..model.codec import snapshot_to_json
from .sanitizer import Sanitizer


def sanitized_snapshot_json(snap: Snapshot, sanitizer: Sanitizer | None = None) -> dict[str, Any]:
    """The snapshot document with every identifier replaced by its pseudonym (`sanitizer.py`):
    host name, GPU and MIG UUIDs, serials, PCI bus ids, user names, command-line arguments,
    paths; minor numbers, device nodes and raw kernel-log text removed. `"sanitized": true`,
    and `"redactions"` counts what was replaced, per class."""
    s = sanitizer if sanitizer is not None else Sanitizer()
    doc = snapshot_to_json(snap)
    s.learn_document(doc)
    out = s.document(doc)
    out["sanitized"] = True
    out["redactions"] = s.summary()
    return out


def redact_snapshot_json(doc: dict[str, Any], sanitizer: Sanitizer | None = None) -> dict[str, Any]:
    """A snapshot document (`snapshot_to_json`, or any part of one) with every identifier
    replaced by its pseudonym; `"sanitized": true`."""
    s = sanitizer if sanitizer is not None else Sanitizer()
    s.learn_document(doc)
    out = s.document(doc)
    out["sanitized"] = True
    return out
