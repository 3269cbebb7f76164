"""Reading one side of a comparison: a recording (`record -o`, `watch --record`; plain or gzip)
or a `watch --json` document, told apart by content, never by name. A recording is replayed
through the Monitor as `--replay FILE diagnose` replays it (`monitor.core.run`), so each tick's
class is the one that command would give at that point of the file. Anything that cannot be
read is a `CompareError`, one line for the user."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

from ..monitor.core import run as run_monitor
from ..monitor.run import Ending
from ..recording.store import GZIP_MAGIC, SCHEMA_PREFIX, Recording, RecordingError
from .replayed import ReplayedRun
from .runs import RunFigures
from .watch_doc import WATCH_SCHEMA, DocumentError, watch_figures

HEAD_BYTES = 64 * 1024  # enough for a recording's header line
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024  # a watch --json of a 256-process job is < 4 MiB
WHAT = "a gputop-diag recording or watch --json document"
HINT = "compare reads `record -o FILE`, `watch --record FILE` and `watch --json` output"


class CompareError(Exception):
    """A file that cannot be compared; the text is one line for the user."""


@dataclass(frozen=True, slots=True)
class Loaded:
    run: RunFigures
    ending: Ending | None = None  # how the replay of a recording ended (a stop signal: early)


def load(path: str, shown: str) -> Loaded:
    """One side of the comparison; `shown` names the file in messages and in the output."""
    head = _head(path, shown)
    first = head.split(b"\n", 1)[0].strip()
    schema = _schema(first)
    if schema is not None and schema.startswith(SCHEMA_PREFIX):
        return _recording(path, shown)
    if head.startswith(GZIP_MAGIC) or not head.strip():
        # gzip data that would not open: the recording reader says how it is damaged
        if head.startswith(GZIP_MAGIC):
            return _recording(path, shown)
        raise CompareError(f"{shown} is empty: not {WHAT}; {HINT}")
    if not head.lstrip().startswith(b"{"):
        raise CompareError(f"{shown} is not {WHAT} (not a JSON object); {HINT}")
    return Loaded(_document(path, shown))


def _head(path: str, shown: str) -> bytes:
    """The file's first bytes, decompressed where it is gzip (as far as they decompress; the
    raw bytes where they do not)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEAD_BYTES)
    except OSError as e:
        raise CompareError(f"cannot read {shown}: {e.strerror or e}") from None
    if not raw.startswith(GZIP_MAGIC):
        return raw
    try:
        text = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, HEAD_BYTES)
    except zlib.error:
        return raw
    return text or raw


def _schema(line: bytes) -> str | None:
    try:
        doc = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    return schema if isinstance(schema, str) else None


def _recording(path: str, shown: str) -> Loaded:
    try:
        rec = Recording.open(path, shown=shown)
        built = ReplayedRun()
        monitor = run_monitor(
            rec,
            interval=rec.header.interval_s,
            seconds=None,
            on_tick=lambda t: built.add(t.snapshot, t.diagnosis.primary),
        )
    except RecordingError as e:
        raise CompareError(str(e)) from None
    if monitor.last is None:
        raise CompareError(f"{shown} holds no snapshots; nothing to compare")
    run = built.figures(shown, rec.header.interval_s, rec.header.sanitized)
    return Loaded(run, monitor.ending)


def _document(path: str, shown: str) -> RunFigures:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as e:
        raise CompareError(f"cannot read {shown}: {e.strerror or e}") from None
    if data.startswith(GZIP_MAGIC):
        try:
            data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, MAX_DOCUMENT_BYTES + 1)
        except zlib.error as e:
            raise CompareError(f"{shown} is damaged: its gzip data does not read ({e})") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise CompareError(
            f"{shown} is larger than {MAX_DOCUMENT_BYTES // 2**20} MiB: not a watch --json document"
        )
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise CompareError(f"{shown} is not {WHAT} (not UTF-8 text); {HINT}") from None
    except json.JSONDecodeError as e:
        raise CompareError(
            f"{shown} is not {WHAT} (not JSON: {e.msg} at line {e.lineno}); {HINT}"
        ) from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema, str):
        raise CompareError(f"{shown} is not {WHAT} (no schema); {HINT}")
    if schema != WATCH_SCHEMA:
        if schema.startswith("gputop-diag.watch/"):
            raise CompareError(
                f"{shown} is a {schema} document; this gputop-diag reads {WATCH_SCHEMA} "
                "(a newer gputop-diag may read it)"
            )
        raise CompareError(f"{shown} is a {schema} document, not {WHAT}; {HINT}")
    try:
        return watch_figures(doc, shown)
    except DocumentError as e:
        raise CompareError(f"{shown}: {e}") from None
