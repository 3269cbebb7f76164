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
SIGHUP, SIGKILL) or a crash is readable up to its last whole line (see "writing" below). The
reader reads a gzip file member by member and stops, with a warning, where the data is cut off
or damaged at its end; a damaged last line is skipped with a warning. Anything else a reader
cannot use raises `RecordingError`, whose text is one line for the user.
"""

from __future__ import annotations

import io
import json
import os
import select
import stat
import sys
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from .. import __version__
from ..model import Snapshot
from ..model.codec import field_names, from_jsonable, iso_time, jsonable
from ..sanitize.sanitizer import Sanitizer, leak_note, strings_of

RECORDING_SCHEMA = "gputop-diag.recording/1"
SCHEMA_PREFIX = "gputop-diag.recording/"
MAX_LINE_BYTES = 64 * 1024 * 1024  # a 64-GPU snapshot with hundreds of processes is < 2 MiB
GZIP_MAGIC = b"\x1f\x8b"
_HINT = "record one with `gputop-diag record -o FILE`"


class RecordingError(Exception):
    """A recording that cannot be read or written; the text is one line for the user."""


class RecordingWriteError(RecordingError):
    """Writing failed part way (a full disk, a lost mount)."""


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


# -- writing ---------------------------------------------------------------------------------
#
# Why the writer looks like this (a recording must stay readable whatever ends the process):
#
# A signal can end a recording at any moment. SIGKILL (the OOM killer, `kill -9`) ends the
# process between two instructions; SIGINT, SIGHUP and SIGTERM raise KeyboardInterrupt (see
# `commands/record.py` and `commands/watch.py`) between any two bytecodes of the writing code,
# and the caller then closes the file, or, under `watch`, goes on writing. The gzip module's
# GzipFile cannot be interrupted like that: its `write()` advances the compressor, hands the
# bytes to the file, then updates its CRC and length, in separate steps, and `flush()` advances
# the compressor before it writes. An interruption between two steps left a stream whose next
# bytes (or whose end marker, written by `close()`) no longer fitted what was already in the
# file: a bad CRC, or damage in the middle. That is the cause of the bad-CRC file that a SIGHUP
# once left (tests/test_recording_signals.py interrupts the writer at every bytecode).
#
# So the file is only ever extended with bytes that are final, and every change to the
# writer's state is one assignment (`self._state = …`), which an exception cannot split:
#   - a line is compressed on a copy of the compressor, in memory, with a sync flush at its end
#     (so every whole line can be decoded from what is in the file); then the new compressor,
#     the bytes still to write, the offset they go to and the counts become the state at once.
#     An interruption before that assignment leaves the state as it was (the line is dropped,
#     nothing reached the file); one after it leaves bytes to write, which the next write or
#     `close()` writes first.
#   - those bytes are written with `os.pwrite` at their offset: writing them again after an
#     interruption writes the same bytes to the same place, so it cannot double or misplace
#     anything. A pipe or a terminal cannot seek: there `os.write` of at most PIPE_BUF bytes,
#     which a pipe takes whole or not at all (a signal while it waits for room writes nothing),
#     and the state advances after each; only an interruption in the instant between a write
#     that went through and that assignment can repeat a piece.
#   - `close()` writes what is left and then the gzip end marker (CRC and length, computed by
#     zlib over exactly the bytes it compressed).
# At every moment the file therefore holds the beginning of the final file. A process killed
# at any point leaves a gzip stream without its end (or a plain file whose last line is cut);
# the reader reads such a file up to its last whole line, with a warning (`was cut off`).
#
# Writing each line as its own gzip member was the other way considered: a kill between two
# writes then leaves only whole members. It was not taken: a member per line compresses each
# snapshot alone, which made a recording of the demo about 7 times larger (a snapshot is close
# to the one before it; one stream compresses the repetition away), and a killed recording
# would no longer say that it was cut off. The reader still reads a file of several members
# (`cat a.gz b.gz`), as zcat does.

GZIP_LEVEL = 9  # as GzipFile's default: a recording is written once and may be kept for long
_PIPE_BUF = getattr(select, "PIPE_BUF", 512)


@dataclass(frozen=True, slots=True)
class _WriterState:
    """All the writer knows, replaced whole (one assignment) at each step."""

    offset: int = 0  # bytes of the file that are written and final
    pending: bytes = b""  # the file's next bytes, from `offset`: written at the next chance
    pending_lines: int = 0  # snapshot lines in `pending`
    deflate: Any = None  # the zlib compressor after `pending` (gzip; None: plain or ended)
    count: int = 0  # snapshot lines, those in `pending` included
    first: float | None = None
    last: float | None = None
    header: RecordingHeader | None = None


class RecordingWriter:
    """Writes a recording line by line, each handed to the OS at once. The header goes out with
    the first snapshot (it names the GPUs). A context manager; `close()` ends the gzip stream.
    An interruption (KeyboardInterrupt from a signal) anywhere in `write()` or `close()` leaves
    a readable file; the writer stays usable after one (see the comment above)."""

    def __init__(self, path: str, *, interval_s: float, sanitize: bool = False) -> None:
        self.path = path
        self.interval_s = interval_s
        self.sanitize = sanitize
        self.withheld = 0  # sanitized snapshots not written: not safe with confidence
        self._sanitizer = Sanitizer() if sanitize else None  # one key: one pseudonym per name
        self._gzip = path.endswith(".gz")
        self._fd = -1
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o666)
        except OSError as e:
            raise RecordingError(f"cannot write {path}: {e.strerror or e}") from None
        self._fd = fd
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            regular = False
        self._positional = regular and hasattr(os, "pwrite")  # else: a pipe, a terminal
        deflate = None
        if self._gzip:
            deflate = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        self._state = _WriterState(deflate=deflate)

    # What the callers read. `count`: snapshots handed to the OS (a full disk keeps the rest).
    @property
    def count(self) -> int:
        s = self._state
        return s.count - s.pending_lines

    @property
    def first(self) -> float | None:
        return self._state.first

    @property
    def last(self) -> float | None:
        return self._state.last

    @property
    def header(self) -> RecordingHeader | None:
        return self._state.header

    def write(self, snap: Snapshot) -> None:
        try:
            line = snapshot_line(snap, self._sanitizer)
        except UnsafeLine:  # fail closed: a gap in the recording, never a leak
            self.withheld += 1
            return
        self._settle()  # what an interruption or a failed write left, first
        s = self._state
        if self._fd < 0:
            raise RecordingWriteError(f"cannot write {self.path}: it is closed")
        header, text = s.header, ""
        if header is None:
            header = RecordingHeader.first(snap, self.interval_s, self.sanitize)
            text = json.dumps(header.to_json(), ensure_ascii=False) + "\n"
        data, deflate = self._encode(s, (text + line + "\n").encode("utf-8"))
        self._state = _WriterState(  # the commit: the line is the file's from here on
            offset=s.offset,
            pending=data,
            pending_lines=1,
            deflate=deflate,
            count=s.count + 1,
            first=snap.timestamp if s.first is None else s.first,
            last=snap.timestamp,
            header=header,
        )
        self._settle()

    def _encode(self, s: _WriterState, data: bytes) -> tuple[bytes, Any]:
        """The bytes that put `data` in the file, and the compressor after them. The state's
        compressor is not touched: the copy becomes the state's only with the commit."""
        if s.deflate is None:
            return data, None
        deflate = s.deflate.copy()
        return deflate.compress(data) + deflate.flush(zlib.Z_SYNC_FLUSH), deflate

    def _settle(self) -> None:
        """Write the pending bytes; raises RecordingWriteError (they stay pending)."""
        s = self._state
        if not s.pending or self._fd < 0:
            return
        try:
            if self._positional:
                done = 0
                while done < len(s.pending):  # the same bytes at the same place: repeatable
                    done += os.pwrite(self._fd, s.pending[done:], s.offset + done)
                self._state = _WriterState(
                    offset=s.offset + len(s.pending),
                    deflate=s.deflate,
                    count=s.count,
                    first=s.first,
                    last=s.last,
                    header=s.header,
                )
                return
            while s.pending:  # pieces a pipe takes whole or not at all (never a part)
                n = os.write(self._fd, s.pending[:_PIPE_BUF])
                rest = s.pending[n:]
                s = _WriterState(
                    offset=s.offset + n,
                    pending=rest,
                    pending_lines=s.pending_lines if rest else 0,
                    deflate=s.deflate,
                    count=s.count,
                    first=s.first,
                    last=s.last,
                    header=s.header,
                )
                self._state = s
        except OSError as e:
            raise RecordingWriteError(f"cannot write {self.path}: {e.strerror or e}") from None

    def close(self) -> None:
        """Write what is pending and the gzip end marker, and close the file. A second call
        does nothing; a failed write raises RecordingWriteError (the file is closed)."""
        if self._fd < 0:
            return
        try:
            self._settle()
            s = self._state
            if s.deflate is not None:
                end = s.deflate.copy().flush(zlib.Z_FINISH)  # the CRC and length: the trailer
                self._state = _WriterState(
                    offset=s.offset,
                    pending=end,
                    count=s.count,
                    first=s.first,
                    last=s.last,
                    header=s.header,
                )
                self._settle()
        finally:
            fd, self._fd = self._fd, -1  # before os.close: never closed twice
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError as e:
                    raise RecordingWriteError(
                        f"cannot write {self.path}: {e.strerror or e}"
                    ) from None

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_recording(
    path: str, snapshots: Iterable[Snapshot], *, interval_s: float = 1.0, sanitize: bool = False
) -> int:
    """Write `snapshots` to `path`; the number written."""
    with RecordingWriter(path, interval_s=interval_s, sanitize=sanitize) as w:
        for s in snapshots:
            w.write(s)
        return w.count


# -- reading ---------------------------------------------------------------------------------


def _stderr_warning(text: str) -> None:
    print(f"gputop-diag: warning: {text}", file=sys.stderr)


class _CutOff:
    """The recording ends early: a gzip stream without its end (the writer was stopped), or,
    with `note`, damaged gzip data at its end. Every whole line before it was read."""

    def __init__(self, note: str = "was cut off while recording") -> None:
        self.note = note


_CUT = _CutOff()
_READ_CHUNK = 64 * 1024


class _GzipEnd:
    """How a gzip file ended: whole, cut off, or damaged (`why`; `at_end`: nothing readable
    follows the damage, so it is the file's last member that is damaged)."""

    def __init__(self, kind: str, why: str = "", at_end: bool = True) -> None:
        self.kind, self.why, self.at_end = kind, why, at_end


_WHOLE = _GzipEnd("whole")


class _GzipMembers(io.RawIOBase):
    """The text of a gzip file, member after member (as zcat reads `cat a.gz b.gz`), with zlib.

    Unlike GzipFile it never raises part way: where the data ends early or is damaged it
    returns what decoded before that point and then EOF, and `end` says how it ended. A member
    cut off (the writer was killed) is read up to its last byte; a damaged one (a bad CRC, a bit
    flip) up to the byte that is wrong."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__()
        self._raw = raw
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # one gzip member, header checked
        self._in = b""  # compressed bytes read, not yet decoded
        self._at = 0  # the file offset of self._in[0]
        self._member_at = 0  # where the member being read starts
        self._raw_eof = False
        self._boundary = True  # between members: zero padding is skipped
        self._out = b""  # decoded, not yet returned
        self.end: _GzipEnd | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._out and self.end is None:
            self._step(len(b))
        n = min(len(b), len(self._out))
        b[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _step(self, limit: int) -> None:
        if not self._in and not self._raw_eof:
            chunk = self._raw.read(_READ_CHUNK)
            if chunk:
                self._in = chunk
            else:
                self._raw_eof = True
        if self._boundary:
            rest = self._in.lstrip(b"\0")  # padding after a member, as gzip allows
            self._at += len(self._in) - len(rest)
            self._in = rest
            if not self._in:
                if self._raw_eof:
                    self.end = _WHOLE
                return
            self._boundary, self._member_at = False, self._at
        d = self._d
        before = d.copy()
        try:
            out = d.decompress(self._in, limit)
        except zlib.error as e:
            self._damaged(before, e)
            return
        if d.eof:  # the member's end: its CRC and length matched
            rest = d.unused_data
            self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            self._boundary = True
        else:
            rest = d.unconsumed_tail
        self._at += len(self._in) - len(rest)
        self._in = rest
        self._out = out
        if not out and not self._in and self._raw_eof and not self._boundary:
            self.end = _GzipEnd("cut")  # the file ends inside a member

    def _damaged(self, d, e: zlib.error) -> None:
        """Decode what precedes the bad byte (one byte at a time, from the state before the
        failing call), and end there."""
        out = []
        for i in range(len(self._in)):
            try:
                out.append(d.decompress(self._in[i : i + 1]))
            except zlib.error:
                break
        self._out = b"".join(out)
        why = str(e).removeprefix("Error -3 while decompressing data: ")
        self.end = _GzipEnd("damaged", why, not _gzip_member_after(self._raw, self._member_at))


def _gzip_member_after(raw: IO[bytes], start: int) -> bool:
    """Whether a gzip member that decodes begins after `start` (so damage at `start` is not at
    the end of the file). Candidates are the gzip magic bytes; each must decode (to a line or to
    its end) before it counts."""
    at, tried = start + 1, 0
    while tried < 256:
        raw.seek(at)
        data = raw.read(1024 * 1024)
        i = data.find(b"\x1f\x8b\x08")
        if i < 0:
            if len(data) < 1024 * 1024:
                return False
            at += len(data) - 2
            continue
        tried += 1
        raw.seek(at + i)
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out = d.decompress(raw.read(256 * 1024), 1024 * 1024)
        except zlib.error:
            out = None
        if out is not None and (d.eof or b"\n" in out):
            return True
        at += i + 1
    return False


class Recording:
    """A recording opened for reading: `Recording.open(path)` checks the header;
    `snapshots()` streams the snapshots (each call reads the file again)."""

    def __init__(self, path: str, header: RecordingHeader) -> None:
        self.path = path
        self.header = header
        self.name = os.path.basename(path)
        self.warnings: list[str] = []
        self.on_warning: Callable[[str], None] = _stderr_warning

    @classmethod
    def open(cls, path: str) -> Recording:
        """Raises RecordingError (one line) for a missing, unreadable or foreign file."""
        rec = cls(path, RecordingHeader(interval_s=1.0))
        lines = rec._raw_lines()
        try:
            first = next(lines, None)
        finally:
            lines.close()
        if first is None or isinstance(first, _CutOff):
            raise RecordingError(f"{path} is empty: not a gputop-diag recording; {_HINT}")
        raw = first[1]
        started = raw.startswith(b'{"schema"') or b'{"schema"'.startswith(raw)  # as written
        if started and not raw.endswith(b"\n") and not _is_json(raw):
            raise RecordingError(  # stopped while writing its first line: nothing whole in it
                f"{path} is empty: not a gputop-diag recording (its only line is cut off); {_HINT}"
            )
        rec.header = _header(path, raw)
        return rec

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        self.on_warning(text)

    def _open(self) -> tuple[IO[bytes], IO[bytes], _GzipMembers | None]:
        """(the file, the stream to read: the file itself or its gzip text, the gzip reader)."""
        try:
            raw = open(self.path, "rb")  # noqa: SIM115 - closed by the caller
        except OSError as e:
            raise RecordingError(f"cannot read {self.path}: {e.strerror or e}") from None
        try:
            magic = raw.peek(2)[:2]
        except OSError as e:  # a directory opens on some systems and fails here
            raw.close()
            raise RecordingError(f"cannot read {self.path}: {e.strerror or e}") from None
        if magic == GZIP_MAGIC:
            members = _GzipMembers(raw)
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
                        f"{self.path} is damaged after {where} ({e}); not a readable recording"
                    ) from None
                if len(raw) <= MAX_LINE_BYTES and not raw.endswith(b"\n") and gz is not None:
                    end = gz.end
                    if end is not None and end is not _WHOLE:  # ends early: the cut line goes
                        if end.kind == "damaged" and (n == 0 or not end.at_end):
                            where = "its start" if n == 0 else f"line {n}"
                            raise RecordingError(
                                f"{self.path} is damaged after {where} ({end.why}); "
                                "not a readable recording"
                            )
                        if end.kind == "damaged":
                            yield _CutOff(f"ends in damaged gzip data ({end.why})")
                        else:
                            yield _CUT
                        return
                if not raw:
                    return
                n += 1
                if len(raw) > MAX_LINE_BYTES:
                    if n == 1:
                        raise RecordingError(
                            f"{self.path} is not a gputop-diag recording (no header line); " + _HINT
                        )
                    raise RecordingError(
                        f"{self.path}: line {n} is longer than "
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
        for item in self._raw_lines():
            if isinstance(item, _CutOff):
                extra = f" (and line {damaged[0]} is damaged)" if damaged else ""
                self._warn(f"{self.path} {item.note}{extra}; read what it holds")
                return
            n, raw = item
            if not header_seen:
                header_seen = True
                continue
            if damaged is not None:
                n_bad, why = damaged
                raise RecordingError(f"{self.path}: line {n_bad} is not a snapshot: {why}")
            try:
                snap = snapshot_from_line(raw)
            except ValueError as e:
                damaged = (n, str(e))
                continue
            if previous is not None and snap.timestamp < previous:
                raise RecordingError(
                    f"{self.path}: line {n} goes back in time ({snap.timestamp:.3f} after "
                    f"{previous:.3f}); the recording is damaged"
                )
            previous = snap.timestamp
            yield snap
        if damaged is not None:
            self._warn(
                f"{self.path}: the last line ({damaged[0]}) is cut off or damaged "
                f"({damaged[1]}); skipped"
            )

    def last(self) -> Snapshot | None:
        """The last whole snapshot (only it is decoded)."""
        lines: list[tuple[int, bytes]] = []
        cut: _CutOff | None = None
        for item in self._raw_lines():
            if isinstance(item, _CutOff):
                cut = item
                break
            lines = [*lines[-1:], item]  # the last two
        candidates = [x for x in lines if x[0] != 1]  # not the header
        damaged = None
        for n, raw in reversed(candidates):
            try:
                snap = snapshot_from_line(raw)
            except ValueError as e:
                if damaged is not None:  # the last two lines: not a cut-off tail
                    raise RecordingError(f"{self.path}: line {n} is not a snapshot: {e}") from None
                damaged = (n, str(e))
                continue
            if damaged is not None:
                self._warn(
                    f"{self.path}: the last line ({damaged[0]}) is cut off or damaged "
                    f"({damaged[1]}); skipped"
                )
            if cut is not None:
                self._warn(f"{self.path} {cut.note}; read what it holds")
            return snap
        if damaged is not None:  # the only snapshot line is cut off: none, as snapshots() says
            self._warn(
                f"{self.path}: the last line ({damaged[0]}) is cut off or damaged "
                f"({damaged[1]}); skipped"
            )
        if cut is not None:
            self._warn(f"{self.path} {cut.note}; read what it holds")
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
