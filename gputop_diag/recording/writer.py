"""Writing a recording: one snapshot a line, each line final in the file as soon as it is written.

The file format is `store.py`'s (docs/recording.md); this module only writes it."""

from __future__ import annotations

import json
import os
import select
import stat
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..model import Snapshot
from ..sanitize.sanitizer import Sanitizer
from .store import (
    RecordingError,
    RecordingHeader,
    RecordingWriteError,
    UnsafeLine,
    snapshot_line,
)

# -- writing ---------------------------------------------------------------------------------
#
# Why the writer looks like this (a recording must stay readable whatever ends the process):
#
# A signal can end a recording at any moment. SIGKILL (the OOM killer, `kill -9`) ends the
# process between two instructions. SIGINT, SIGHUP and SIGTERM are answered by the paced loop
# (`monitor/run.py`), which only takes note during a tick; but a Ctrl-C that lands before its
# handlers are in place, or in a program that embeds the writer, raises KeyboardInterrupt
# between any two bytecodes of the writing code, and the caller then closes the file, or, under
# `watch` after a Ctrl-C, goes on writing. The gzip module's
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

    def __init__(
        self,
        path: str,
        *,
        interval_s: float,
        sanitize: bool = False,
        sanitizer: Sanitizer | None = None,
        option: str = "",
    ) -> None:
        """`sanitizer`: one seeded with what the machine names (`commands.common.
        seeded_sanitizer`); by default a fresh one, which learns each snapshot's names only.
        `option`: the one that named `path` (`-o`), which a file that cannot be opened names,
        as every command's output check does (`-o PATH: cannot write: why`)."""
        self.path = path
        self.interval_s = interval_s
        self.sanitize = sanitize or sanitizer is not None
        self.withheld = 0  # sanitized snapshots not written: not safe with confidence
        if self.sanitize and sanitizer is None:
            sanitizer = Sanitizer()
        self._sanitizer = sanitizer  # one key: one pseudonym per name
        self._gzip = path.endswith(".gz")
        self._fd = -1
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o666)
        except OSError as e:
            named = f"{option} {path}" if option else path
            raise RecordingError(f"{named}: cannot write: {e.strerror or e}") from None
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
            raise RecordingWriteError(
                f"cannot write {self.path}: {e.strerror or e}", e.errno
            ) from None

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
