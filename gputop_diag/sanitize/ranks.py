"""A distributed job's ranks as a sanitized surface shows them (`diagnose/ranks.py`'s
`RanksView`, as `watch --sanitize`, the report and the live view's `--sanitize` print it): the
ranks stay (they name no one and are what the reader compares); each rank's node becomes its
host pseudonym, its pid a `pid-…` pseudonym (another node's process ids are printed nowhere
else), the paths in its stack and in the verdicts are replaced as paths are.

Read by shape, not by type: the sanitizer stands below `diagnose` (docs/architecture.md), so a
ranks document is told by its keys, and the sanitized copy is rebuilt on the object it came
from (a pid pseudonym is text where the type says a number, which the model's decoder refuses).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .documents import document
from .table import PseudonymTable

_KEYS = frozenset({"rows", "world", "straggler", "verdict", "hang"})


def is_ranks(doc: Any) -> bool:
    """`doc` is a `RanksView` as `jsonable` writes it."""
    return isinstance(doc, dict) and _KEYS <= doc.keys() and isinstance(doc.get("rows"), list)


def ranks_document(s: PseudonymTable, doc: dict[str, Any]) -> dict[str, Any]:
    """The ranks document sanitized: every field by what it holds (`documents.py`: the node
    a host name, the stacks and verdicts free text), then each rank's pid a pseudonym."""
    out = document(s, doc)
    out["rows"] = [_pid(s, row) for row in out["rows"]]
    if isinstance(out.get("straggler"), dict):
        out["straggler"] = _pid(s, out["straggler"])
    return out


def sanitized_ranks(s: PseudonymTable, obj: Any, doc: dict[str, Any]) -> Any:
    """`obj` (a `RanksView`, `doc` its document, already learnt) sanitized, of its own type."""
    return rebuilt(obj, ranks_document(s, doc))


def _pid(s: PseudonymTable, row: dict[str, Any]) -> dict[str, Any]:
    pid = row.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        return {**row, "pid": s.pseudonym("pid", str(pid))}
    return row


def rebuilt(obj: Any, doc: Any) -> Any:
    """`obj` with the values of `doc` (its `jsonable` document, changed), built on `obj`'s own
    structure rather than its type hints: dataclasses and tuples stay what they were, a leaf
    takes the document's value whatever its type."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and isinstance(doc, dict):
        changes = {
            f.name: rebuilt(getattr(obj, f.name), doc[f.name])
            for f in dataclasses.fields(obj)
            if f.init and f.name in doc
        }
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, tuple) and isinstance(doc, list) and len(obj) == len(doc):
        return tuple(rebuilt(o, d) for o, d in zip(obj, doc, strict=True))
    return doc
