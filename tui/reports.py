"""What the live view's `s` and `S` write.

`s`: the sanitized report (`report/`, as `gputop-diag report` writes it) of the snapshots the
view holds (its last ten minutes) and the diagnosis of the last one: Markdown and JSON, safe to
paste into a public issue. Built in a worker thread; under `--sanitize` its pseudonyms are the
ones on screen (the session's key), otherwise a report has a key of its own.

`S`: the last snapshot as JSON, for local use, carrying the Xid history the Xid pane shows:
every Xid event of this run (not only the last tick's) and the driver events read from the
kernel log. Under `--sanitize` it holds the screen's pseudonyms and is checked once more before
it is written (fail closed: nothing is written if an identifier is left).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gputop_diag.collect.identity import read_machine_names
from gputop_diag.diagnose.types import Diagnosis
from gputop_diag.model import Snapshot
from gputop_diag.model.codec import jsonable, snapshot_to_json
from gputop_diag.report.build import Report, ReportSource, make_report, save_report
from gputop_diag.sanitize.sanitizer import Sanitizer, leak_note
from gputop_diag.tui.feed import Update
from gputop_diag.tui.saving import Saved, write_into


class NotSafe(Exception):
    """A sanitized document still holds an identifier; the message says what kind (never the
    identifier itself)."""


def build_report(
    snaps: list[Snapshot],
    diagnosis: Diagnosis | None,
    *,
    source: ReportSource,
    environ: Mapping[str, str] | None,
    sources: Any,
    key: bytes | None,
    model_config: Any = None,
) -> Report:
    """The sanitized report of the view's window (`Feeder.window()`), under `key` (None: a
    key of its own)."""
    if not snaps or diagnosis is None:
        raise ValueError("nothing sampled yet")
    return make_report(
        snaps,
        diagnosis,
        source=source,
        environ=dict(environ or {}),
        sources=sources,
        sanitizer=Sanitizer(key) if key is not None else None,
        model_config=model_config,
    )


def write_report(report: Report, dirs: list[str], create_first: bool = True) -> Saved:
    """Write the report's Markdown (`path`) and JSON (`also`) into the first directory of
    `dirs` that takes them."""
    return write_into(lambda d: save_report(report, d), dirs, create_first)


def snapshot_document(
    update: Update, kernel_events: tuple = (), key: bytes | None = None, sources: Any = None
) -> dict[str, Any]:
    """The `S` document: the last snapshot with every Xid event of this run, and the kernel
    log's driver events as the Xid pane lists them (`xid_history`).

    With `key` (`--sanitize`) the snapshot is the one on screen (already pseudonyms) and the
    kernel events pass through a sanitizer under the same key, seeded from the snapshot as
    sampled; raises NotSafe when the finished document still holds an identifier."""
    chronological = tuple(reversed(update.xid_events))
    doc = snapshot_to_json(replace(update.snapshot, xid_events=chronological))
    history = [jsonable(e) for e in kernel_events]
    if key is None:
        doc["xid_history"] = history
        return doc
    s = Sanitizer(key)
    if sources is not None:
        s.seed_machine(read_machine_names(sources))
    raw = snapshot_to_json(update.sampled or update.snapshot)
    s.learn_document(raw)
    s.learn_document({"xid_history": history})
    s.document(raw)  # every original of the sampled snapshot, for the check below
    doc["xid_history"] = s.document({"xid_history": history})["xid_history"]
    doc["sanitized"] = True
    found = s.leaks(json.dumps(doc, ensure_ascii=False))
    if found:
        raise NotSafe(leak_note(found))
    return doc
