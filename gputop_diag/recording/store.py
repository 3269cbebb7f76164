"""Recordings: snapshots as JSON lines, for `gputop-diag --replay FILE` (docs/recording.md).

A recording is a text file of JSON objects, one a line (gzip-compressed when its name ends in
`.gz`; the reader goes by content, not name). Line 1 is a header (`schema`
`gputop-diag.recording/1`, the tool version, interval, start, GPU models and count, whether it is
sanitized, the host name unless it is); every further line is one `Snapshot`, every field of
every dataclass in `model/__init__.py` by its own name, including the slow-source evidence the
diagnosis read. The codec (`model.codec.jsonable` / `from_jsonable`) round-trips the model exactly:
tuples stay tuples, `None` stays apart from `()`, ints stay ints and floats floats (`repr` of a
float reads back to the same float).

Each line goes to the OS as it is written (for gzip, after a sync flush), and the file only ever
grows by final bytes, so a recording stopped by any signal at any moment (SIGINT, SIGTERM,
SIGHUP, SIGKILL) or a crash is readable up to its last whole line (`writer.py` says how). The
reader reads a gzip file member by member and stops, with a warning, where the data is cut off
or damaged at its end; a damaged last line is skipped with a warning. Each warning says the file
is damaged and how many snapshots were read before the damage; "empty" is only a file that holds
nothing. Anything else a reader cannot use raises `RecordingError`, whose text is one line for
the user.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from .. import __version__
from ..model import Snapshot
from ..model.codec import field_names, from_jsonable, iso_time, jsonable
from ..model.formats import count
from ..sanitize.sanitizer import Sanitizer, leak_note, strings_of
from .gzip_stream import WHOLE, GzipMembers

RECORDING_SCHEMA = "gputop-diag.recording/1"
SCHEMA_PREFIX = "gputop-diag.recording/"
MAX_LINE_BYTES = 64 * 1024 * 1024  # a 64-GPU snapshot with hundreds of processes is < 2 MiB
GZIP_MAGIC = b"\x1f\x8b"
_HINT = "record one with `gputop-diag record -o FILE`"


class RecordingError(Exception):
    """A recording that cannot be read or written; the text is one line for the user."""


class RecordingWriteError(RecordingError):
    """Writing failed part way (a full disk, a lost mount, a reader that closed the pipe):
    `errno` says which."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class UnsafeLine(ValueError):
    """A sanitized line in which something still looks like an identifier: not written."""


def snapshot_line(snap: Snapshot, sanitizer: Sanitizer | None = None) -> str:
    """One recording line (no newline). With a `sanitizer`, every identifier is its pseudonym
    (the same on every line it writes) and the line is checked once more: UnsafeLine when
    something in it still looks like an identifier."""
    doc = jsonable(snap)
    if sanitizer is None:
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    sanitizer.learn_document(doc)
    clean = sanitizer.document(doc)
    found = sanitizer.leaks("\n".join(strings_of(clean)))
    if found:
        raise UnsafeLine(leak_note(found))
    return json.dumps(clean, ensure_ascii=False, separators=(",", ":"))


def snapshot_from_line(text: str | bytes) -> Snapshot:
    """The snapshot of one recording line; ValueError when it is not one."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("not UTF-8 text") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e.msg})") from None
    snap = from_jsonable(Snapshot, doc)
    if not (EARLIEST_TS <= snap.timestamp <= LATEST_TS):  # also NaN and infinities
        raise ValueError(f"its timestamp {snap.timestamp!r} is not a time this century")
    return snap


EARLIEST_TS, LATEST_TS = 946_684_800.0, 4_102_444_800.0  # 2000-01-01 .. 2100-01-01 UTC


# -- the header ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordingHeader:
    interval_s: float
    started: float | None = None
    gpu_count: int = 0
    gpu_models: tuple[str, ...] = ()
    sanitized: bool = False
    hostname: str | None = None  # absent from a sanitized recording
    version: str | None = None  # of the gputop-diag that wrote it
    schema: str = RECORDING_SCHEMA

    @classmethod
    def first(cls, snap: Snapshot, interval_s: float, sanitized: bool = False) -> RecordingHeader:
        """The header of a recording whose first snapshot is `snap`."""
        models: list[str] = []
        for g in snap.gpus:
            if g.static.name and g.static.name not in models:
                models.append(g.static.name)
        return cls(
            interval_s=interval_s,
            started=snap.timestamp,
            gpu_count=len(snap.gpus),
            gpu_models=tuple(models),
            sanitized=sanitized,
            hostname=None if sanitized else snap.system.hostname,
            version=__version__,
        )

    def to_json(self) -> dict[str, Any]:
        doc = {
            "schema": self.schema,
            "tool": "gputop-diag",
            "version": self.version,
            "interval_s": self.interval_s,
            "started": self.started,
            "started_time": None if self.started is None else iso_time(self.started),
            "gpu_count": self.gpu_count,
            "gpu_models": list(self.gpu_models),
            "sanitized": self.sanitized,
        }
        if not self.sanitized:
            doc["hostname"] = self.hostname
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RecordingHeader:
        """Raises ValueError naming the field of the wrong shape."""
        interval = doc.get("interval_s")
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or interval <= 0:
            raise ValueError("the header's interval_s is not a positive number")
        known = {k: doc[k] for k in field_names(cls) if k in doc and k != "interval_s"}
        return from_jsonable(cls, {"interval_s": float(interval), **known})


# -- reading ---------------------------------------------------------------------------------


def _stderr_warning(text: str) -> None:
    print(f"gputop-diag: warning: {text}", file=sys.stderr)


class _CutOff:
    """The recording ends early: a gzip stream without its end (the writer was stopped), or
    damaged gzip data at its end (`why`). `whole` lines came before it, all read; `partial`:
    the data ends inside the next one."""

    def __init__(self, whole: int, partial: bool, why: str | None = None) -> None:
        self.whole, self.partial, self.why = whole, partial, why

    @property
    def note(self) -> str:
        """What is wrong, after "FILE is damaged: "."""
        if self.whole == 0:
            where = "inside its first line, the header" if self.partial else "before its first line"
        else:
            where = f"inside line {self.whole + 1}" if self.partial else f"after line {self.whole}"
        if self.why is None:
            return f"its gzip data ends early, {where} (cut off while recording)"
        return f"its gzip data is damaged {where} ({self.why})"


def _kept(n: int) -> str:
    """How much of a damaged recording was read, for its warning."""
    return f"{count(n, 'snapshot')} read before it" if n else "no snapshot before it"


class Recording:
    """A recording opened for reading: `Recording.open(path)` checks the header;
    `snapshots()` streams the snapshots (each call reads the file again)."""

    def __init__(self, path: str, header: RecordingHeader, shown: str | None = None) -> None:
        self.path = path
        # what messages and the live view's header name it by: `path`, or under --sanitize its
        # pseudonym (`commands.common.shown_path`), one for the whole run
        self.shown = shown or path
        self.header = header
        self.name = os.path.basename(self.shown)
        self.warnings: list[str] = []
        self.on_warning: Callable[[str], None] = _stderr_warning

    @classmethod
    def open(cls, path: str, shown: str | None = None) -> Recording:
        """Raises RecordingError (one line) for a missing, unreadable or foreign file; its
        messages name the file as `shown` (its pseudonym under --sanitize), else as `path`."""
        rec = cls(path, RecordingHeader(interval_s=1.0), shown)
        path = rec.shown
        lines = rec._raw_lines()
        try:
            first = next(lines, None)
            second = next(lines, None) if isinstance(first, tuple) else None
        finally:
            lines.close()
        if first is None:  # no byte, or a gzip stream of nothing
            raise RecordingError(f"{path} is empty: not a gputop-diag recording; {_HINT}")
        if isinstance(first, _CutOff):  # the gzip data ends, or is damaged, in the header
            raise RecordingError(f"{path} is damaged: {first.note}; nothing in it to replay")
        raw = first[1]
        started = raw.startswith(b'{"schema"') or b'{"schema"'.startswith(raw)  # as written
        if started and not raw.endswith(b"\n") and not _is_json(raw):
            raise RecordingError(  # stopped while writing its first line: nothing whole in it
                f"{path} is damaged: its first line (the header) is cut off after "
                f"{len(raw)} bytes; nothing in it to replay"
            )
        rec.header = _header(path, raw)  # `path` as shown: only its messages name it
        if isinstance(second, _CutOff):  # cut before a whole snapshot: one message, not two
            raise RecordingError(f"{path} is damaged: {second.note}; nothing in it to replay")
        return rec

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        self.on_warning(text)

    def _open(self) -> tuple[IO[bytes], IO[bytes], GzipMembers | None]:
        """(the file, the stream to read: the file itself or its gzip text, the gzip reader)."""
        try:
            raw = open(self.path, "rb")  # noqa: SIM115 - closed by the caller
        except OSError as e:
            raise RecordingError(f"cannot read {self.shown}: {e.strerror or e}") from None
        try:
            magic = raw.peek(2)[:2]
        except OSError as e:  # a directory opens on some systems and fails here
            raw.close()
            raise RecordingError(f"cannot read {self.shown}: {e.strerror or e}") from None
        if magic in (GZIP_MAGIC, GZIP_MAGIC[:1]):  # (one byte: a gzip file cut after it)
            members = GzipMembers(raw)
            return raw, io.BufferedReader(members, 256 * 1024), members
        return raw, raw, None

    def _raw_lines(self) -> Iterator[tuple[int, bytes] | _CutOff]:
        """(line number, bytes) for every non-blank line; a `_CutOff` last when the gzip data
        ends early (cut off, or damaged at its end: the cut line is not given). Damage before
        the first whole line, or with readable data after it, raises RecordingError."""
        raw_file, f, gz = self._open()
        try:
            n = 0
            while True:
                try:
                    raw = f.readline(MAX_LINE_BYTES + 1)
                except OSError as e:
                    where = "its start" if n == 0 else f"line {n}"
                    raise RecordingError(
                        f"{self.shown} is damaged after {where} ({e}); not a readable recording"
                    ) from None
                if len(raw) <= MAX_LINE_BYTES and not raw.endswith(b"\n") and gz is not None:
                    end = gz.end
                    if end is not None and end is not WHOLE:  # ends early: the cut line goes
                        if end.kind == "damaged" and n > 0 and not end.at_end:
                            raise RecordingError(
                                f"{self.shown} is damaged after line {n} ({end.why}); "
                                "not a readable recording"
                            )
                        why = end.why if end.kind == "damaged" else None
                        yield _CutOff(n, bool(raw.strip()), why)
                        return
                if not raw:
                    return
                n += 1
                if len(raw) > MAX_LINE_BYTES:
                    if n == 1:
                        raise RecordingError(
                            f"{self.shown} is not a gputop-diag recording (no header line); "
                            + _HINT
                        )
                    raise RecordingError(
                        f"{self.shown}: line {n} is longer than "
                        f"{MAX_LINE_BYTES // 2**20} MiB; not a snapshot"
                    )
                if raw.strip():
                    yield n, raw
        finally:
            f.close()
            raw_file.close()

    def snapshots(self) -> Iterator[Snapshot]:
        """Every snapshot, oldest first. A damaged last line is skipped with a warning; a
        damaged line before the last raises RecordingError."""
        damaged: tuple[int, str] | None = None
        header_seen = False
        previous: float | None = None
        kept = 0
        for item in self._raw_lines():
            if isinstance(item, _CutOff):
                self._warn_cut(item, kept, damaged)
                return
            n, raw = item
            if not header_seen:
                header_seen = True
                continue
            if damaged is not None:
                n_bad, why = damaged
                raise RecordingError(f"{self.shown}: line {n_bad} is not a snapshot: {why}")
            try:
                snap = snapshot_from_line(raw)
            except ValueError as e:
                damaged = (n, str(e))
                continue
            if previous is not None and snap.timestamp < previous:
                raise RecordingError(
                    f"{self.shown}: line {n} goes back in time ({snap.timestamp:.3f} after "
                    f"{previous:.3f}); the recording is damaged"
                )
            previous = snap.timestamp
            kept += 1
            yield snap
        if damaged is not None:
            self._warn_last_line(damaged, kept)

    def _warn_cut(self, cut: _CutOff, kept: int, damaged: tuple[int, str] | None = None) -> None:
        extra = f" (and line {damaged[0]} is damaged)" if damaged else ""
        self._warn(f"{self.shown} is damaged: {cut.note}{extra}; {_kept(kept)}")

    def _warn_last_line(self, damaged: tuple[int, str], kept: int) -> None:
        self._warn(
            f"{self.shown}: the last line ({damaged[0]}) is cut off or damaged "
            f"({damaged[1]}); skipped, {_kept(kept)}"
        )

    def last(self) -> Snapshot | None:
        """The last whole snapshot (only it is decoded)."""
        lines: list[tuple[int, bytes]] = []
        cut: _CutOff | None = None
        seen = 0  # snapshot lines, whole or not
        for item in self._raw_lines():
            if isinstance(item, _CutOff):
                cut = item
                break
            lines = [*lines[-1:], item]  # the last two
            seen += item[0] != 1
        candidates = [x for x in lines if x[0] != 1]  # not the header
        damaged = None
        for n, raw in reversed(candidates):
            try:
                snap = snapshot_from_line(raw)
            except ValueError as e:
                if damaged is not None:  # the last two lines: not a cut-off tail
                    raise RecordingError(f"{self.shown}: line {n} is not a snapshot: {e}") from None
                damaged = (n, str(e))
                continue
            kept = seen - (damaged is not None)
            if damaged is not None:
                self._warn_last_line(damaged, kept)
            if cut is not None:
                self._warn_cut(cut, kept)
            return snap
        if damaged is not None:  # the only snapshot line is cut off: none, as snapshots() says
            self._warn_last_line(damaged, 0)
        if cut is not None:
            self._warn_cut(cut, 0)
        return None

    def extent(
        self, cancel: threading.Event | None = None
    ) -> tuple[int, float | None, float | None]:
        """(snapshot lines, first timestamp, last timestamp) without decoding the snapshots;
        never raises for a damaged file; stops early when `cancel` is set."""
        count, first, last = 0, None, None
        try:
            for item in self._raw_lines():
                if isinstance(item, _CutOff) or (cancel is not None and cancel.is_set()):
                    break
                n, raw = item
                if n == 1:
                    continue
                count += 1
                ts = _timestamp(raw)
                if ts is not None:
                    if first is None:
                        first = ts
                    last = ts
        except RecordingError:
            pass
        return count, first, last


def _timestamp(raw: bytes) -> float | None:
    # The encoder writes "timestamp" first: read it without parsing the whole line.
    head = raw[:64]
    prefix = b'{"timestamp":'
    if head.startswith(prefix):
        text = head[len(prefix) :].split(b",", 1)[0]
        try:
            return float(text)
        except ValueError:
            return None
    return None


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return True


def _header(path: str, raw: bytes) -> RecordingHeader:
    not_rec = f"{path} is not a gputop-diag recording"
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RecordingError(f"{not_rec} (line 1 is not a JSON object); {_HINT}") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema, str):
        raise RecordingError(f"{not_rec} (line 1 has no schema); {_HINT}")
    if schema != RECORDING_SCHEMA:
        if schema.startswith(SCHEMA_PREFIX):
            raise RecordingError(
                f"{path} is a {schema} recording; this gputop-diag reads {RECORDING_SCHEMA} "
                "(a newer gputop-diag may read it)"
            )
        raise RecordingError(f"{not_rec} (its schema is {schema}); {_HINT}")
    try:
        return RecordingHeader.from_json(doc)
    except ValueError as e:
        raise RecordingError(f"{path}: the header is damaged ({e})") from None


def read_recording(path: str) -> tuple[RecordingHeader, list[Snapshot]]:
    """The header and every snapshot of `path` (warnings go to stderr)."""
    rec = Recording.open(path)
    return rec.header, list(rec.snapshots())
