"""What the live view's `s` and `S` write, and where (`saving.py`): the view hands over what it
holds and is told where the file went; it writes nothing itself.

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
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..collect.identity import read_machine_names
from ..diagnose.types import Diagnosis
from ..model import Snapshot
from ..model.codec import jsonable, snapshot_to_json
from ..monitor.core import Monitor
from ..monitor.view import Update
from ..sanitize.sanitizer import Sanitizer, leak_note
from ..sources import Sources
from .build import Report, ReportSource, make_report, save_report
from .saving import Saved, save_dirs, write_into, write_json


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


@dataclass
class LiveSaves:
    """The live view's saves: `save_dir` (`--save-dir`; None: the state directory, then the
    fallbacks), the session's `key` under --sanitize (None: a report has a key of its own);
    `replay`: the recording played (a `Recording`, or what reads like one)."""

    sources: Sources | None
    replay: Any = None
    key: bytes | None = None
    save_dir: str | None = None

    def _source(self, interval: float) -> ReportSource:
        if self.replay is not None:
            return ReportSource("recording", interval_s=self.replay.header.interval_s)
        if self.sources.simulated:
            return ReportSource("simulator", self.sources.scenario, interval)
        return ReportSource("live", interval_s=interval)

    def report(self, monitor: Monitor, model_config: Any = None) -> tuple[Saved, tuple]:
        """`s`: the sanitized report of the Monitor's window (Markdown and JSON), written;
        where it went and the sections left out as not safe to share. TickStuck when a tick
        holds the history; ValueError before the first tick."""
        snaps, diagnosis = monitor.window()
        report = build_report(
            snaps,
            diagnosis,
            source=self._source(monitor.interval),
            environ=self.sources.environ if self.sources is not None else None,
            sources=self.sources,
            key=self.key,
            model_config=model_config,
        )
        saved = write_report(report, save_dirs(self.save_dir), self.save_dir is None)
        return saved, tuple(report.left_out)

    def snapshot(self, latest: Update) -> Saved:
        """`S`: the last snapshot as JSON, with the Xid history the Xid pane shows, written.
        NotSafe under --sanitize when an identifier is left (nothing is written)."""
        triage = latest.xid_triage
        events: Any = triage.events if triage is not None else ()
        doc = snapshot_document(latest, events, self.key, self.sources)
        return write_json(doc, save_dirs(self.save_dir), create_first=self.save_dir is None)

    def shown(self, text: str) -> str:
        """`text` (a message naming directories) as the screen may show it."""
        return text if self.key is None else Sanitizer(self.key).text(text) or text

    def shown_path(self, path: str) -> str:
        """Where a file went, as a message names it: absolute; under --sanitize its directory
        as the session's pseudonym and its own name as it is (`~user-x/path-y/gputop-diag-…`)."""
        where = os.path.abspath(path)
        if self.key is None:
            return where
        directory, name = os.path.split(where)
        return os.path.join(Sanitizer(self.key).path(directory), name)
