"""Recordings: snapshots as JSON lines, for `gputop-diag --replay FILE` (docs/recording.md).

A recording is a text file of JSON objects, one a line (gzip-compressed when its name ends in
`.gz`; the reader goes by content, not name). Line 1 is a header (`schema`
`gputop-diag.recording/1`, the tool version, interval, start, GPU models and count, whether it is
sanitized, the host name unless it is); every further line is one `Snapshot`, every field of
every dataclass in `model.py` by its own name, including the slow-source evidence the diagnosis
read. `encode`/`decode` round-trip the model exactly: tuples stay tuples, `None` stays apart
from `()`, ints stay ints and floats floats (`repr` of a float reads back to the same float).

Each line is flushed as it is written (a gzip sync flush), so a recording cut off by Ctrl-C, a
hang-up or a crash is readable up to its last whole line; a damaged last line is skipped with
a warning. Anything else a reader cannot use raises `RecordingError`, whose text is one line
for the user.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import sys
import threading
import types
import typing
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import IO, Any

from . import __version__
from .export import Redactor, iso_time
from .model import Snapshot

RECORDING_SCHEMA = "gputop-diag.recording/1"
SCHEMA_PREFIX = "gputop-diag.recording/"
MAX_LINE_BYTES = 64 * 1024 * 1024  # a 64-GPU snapshot with hundreds of processes is < 2 MiB
GZIP_MAGIC = b"\x1f\x8b"
_HINT = "record one with `gputop-diag record -o FILE`"


class RecordingError(Exception):
    """A recording that cannot be read or written; the text is one line for the user."""


class RecordingWriteError(RecordingError):
    """Writing failed part way (a full disk, a lost mount)."""


# -- the codec: model dataclasses <-> JSON values ---------------------------------------------


def encode(obj: Any) -> Any:
    """A model object as JSON values: a dataclass is an object of all its fields by name."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: encode(getattr(obj, name)) for name in _field_names(type(obj))}
    if isinstance(obj, (tuple, list)):
        return [encode(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): encode(v) for k, v in obj.items()}
    return obj


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


class _Bad(ValueError):
    """A value of the wrong shape; `path` says where (`gpus[3].static.uuid`)."""

    def __init__(self, what: str, path: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.path = path

    def under(self, prefix: str) -> _Bad:
        if not self.path or self.path.startswith("["):
            return _Bad(self.what, prefix + self.path)
        return _Bad(self.what, f"{prefix}.{self.path}")


def decode(hint: Any, data: Any) -> Any:
    """`data` (JSON values) as an object of type `hint` (a model dataclass, or a type hint of
    one); raises ValueError naming the first field of the wrong shape."""
    try:
        return _decoder(hint)(data)
    except _Bad as e:
        where = f" at {e.path}" if e.path else ""
        raise ValueError(f"{e.what}{where}") from None


def _kind(data: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "true/false"}.get(
        type(data), "null" if data is None else "a number"
    )


@cache
def _decoder(hint: Any) -> Callable[[Any], Any]:
    """A function that decodes JSON values of type `hint` (built once per type)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"no decoder for {hint}")
        inner = _decoder(rest[0])
        return lambda d: None if d is None else inner(d)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _decoder(args[0])

            def many(d):
                if not isinstance(d, list):
                    raise _Bad(f"expected an array, found {_kind(d)}")
                out = []
                for i, v in enumerate(d):
                    try:
                        out.append(item(v))
                    except _Bad as e:
                        raise e.under(f"[{i}]") from None
                return tuple(out)

            return many
        items = [_decoder(a) for a in args]

        def fixed(d):
            if not isinstance(d, list) or len(d) != len(items):
                raise _Bad(f"expected an array of {len(items)}, found {_kind(d)}")
            return tuple(f(v) for f, v in zip(items, d, strict=True))

        return fixed
    if origin is dict:
        value = _decoder(args[1])

        def mapping(d):
            if not isinstance(d, dict):
                raise _Bad(f"expected an object, found {_kind(d)}")
            out = {}
            for k, v in d.items():
                try:
                    out[k] = value(v)
                except _Bad as e:
                    raise e.under(f"[{k!r}]") from None
            return out

        return mapping
    if dataclasses.is_dataclass(hint):
        return _dataclass_decoder(hint)
    if hint is float:
        return _checked(lambda d: isinstance(d, (int, float)) and not isinstance(d, bool), "number")
    if hint is int:
        return _checked(lambda d: isinstance(d, int) and not isinstance(d, bool), "integer")
    if hint is bool:
        return _checked(lambda d: isinstance(d, bool), "true/false")
    if hint is str:
        return _checked(lambda d: isinstance(d, str), "string")
    if hint is Any:
        return lambda d: d
    raise TypeError(f"no decoder for {hint}")


def _checked(ok: Callable[[Any], bool], what: str) -> Callable[[Any], Any]:
    def check(d):
        if not ok(d):
            raise _Bad(f"expected a {what}, found {_kind(d)}")
        return d

    return check


def _dataclass_decoder(cls: type) -> Callable[[Any], Any]:
    hints = typing.get_type_hints(cls)
    fields = [(f.name, _decoder(hints[f.name])) for f in dataclasses.fields(cls)]
    required = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }

    def build(d):
        if not isinstance(d, dict):
            raise _Bad(f"expected an object ({cls.__name__}), found {_kind(d)}")
        kwargs = {}
        for name, dec in fields:
            if name in d:  # a field added after the recording was made takes its default
                try:
                    kwargs[name] = dec(d[name])
                except _Bad as e:
                    raise e.under(name) from None
            elif name in required:
                raise _Bad(f"{cls.__name__} lacks its field {name!r}")
        return cls(**kwargs)

    return build


def snapshot_line(snap: Snapshot, redactor: Redactor | None = None) -> str:
    """One recording line (no newline)."""
    doc = encode(snap)
    if redactor is not None:
        doc = redactor.snapshot_doc(doc)
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


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
    return decode(Snapshot, doc)


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
        known = {k: doc[k] for k in _field_names(cls) if k in doc and k != "interval_s"}
        return decode(cls, {"interval_s": float(interval), **known})


# -- writing ---------------------------------------------------------------------------------


class RecordingWriter:
    """Writes a recording line by line, each flushed at once. The header goes out with the
    first snapshot (it names the GPUs). A context manager; `close()` ends the gzip stream."""

    def __init__(self, path: str, *, interval_s: float, sanitize: bool = False) -> None:
        self.path = path
        self.interval_s = interval_s
        self.sanitize = sanitize
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self.header: RecordingHeader | None = None
        self._redactor = Redactor() if sanitize else None
        try:
            raw = open(path, "wb")  # noqa: SIM115 - closed in close()
        except OSError as e:
            raise RecordingError(f"cannot write {path}: {e.strerror or e}") from None
        self._raw = raw
        gz = path.endswith(".gz")
        self._out: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="wb") if gz else raw

    def write(self, snap: Snapshot) -> None:
        if self.header is None:
            self.header = RecordingHeader.first(snap, self.interval_s, self.sanitize)
            self._line(json.dumps(self.header.to_json(), ensure_ascii=False))
        self._line(snapshot_line(snap, self._redactor))
        self.count += 1
        if self.first is None:
            self.first = snap.timestamp
        self.last = snap.timestamp

    def _line(self, text: str) -> None:
        try:
            self._out.write(text.encode("utf-8") + b"\n")
            self._out.flush()  # gzip: a sync flush, so every whole line can be read back
        except OSError as e:
            raise RecordingWriteError(f"cannot write {self.path}: {e.strerror or e}") from None

    def close(self) -> None:
        try:
            if self._out is not self._raw:
                self._out.close()
            self._raw.close()
        except OSError as e:
            raise RecordingWriteError(f"cannot write {self.path}: {e.strerror or e}") from None

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
    """The gzip stream ends without its end marker (the writer was interrupted)."""


_CUT = _CutOff()


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
        if first is None or first is _CUT:
            raise RecordingError(f"{path} is empty: not a gputop-diag recording; {_HINT}")
        rec.header = _header(path, first[1])
        return rec

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        self.on_warning(text)

    def _open(self) -> tuple[IO[bytes], IO[bytes]]:
        """(the file, the stream to read: the file itself or a gzip reader over it)."""
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
            return raw, gzip.GzipFile(fileobj=raw, mode="rb")
        return raw, raw

    def _raw_lines(self) -> Iterator[tuple[int, bytes] | _CutOff]:
        """(line number, bytes) for every non-blank line; `_CUT` last when the gzip stream
        was cut off."""
        raw_file, f = self._open()
        try:
            n = 0
            while True:
                try:
                    raw = f.readline(MAX_LINE_BYTES + 1)
                except EOFError:
                    yield _CUT
                    return
                except (OSError, zlib.error) as e:  # BadGzipFile is an OSError
                    where = "its start" if n == 0 else f"line {n}"
                    raise RecordingError(
                        f"{self.path} is damaged after {where} ({e}); not a readable recording"
                    ) from None
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
        for item in self._raw_lines():
            if item is _CUT:
                extra = f" (and line {damaged[0]} is damaged)" if damaged else ""
                self._warn(f"{self.path} was cut off while recording{extra}; read what it holds")
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
            yield snap
        if damaged is not None:
            self._warn(
                f"{self.path}: the last line ({damaged[0]}) is cut off or damaged "
                f"({damaged[1]}); skipped"
            )

    def last(self) -> Snapshot | None:
        """The last whole snapshot (only it is decoded)."""
        lines: list[tuple[int, bytes]] = []
        cut = False
        for item in self._raw_lines():
            if item is _CUT:
                cut = True
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
            if cut:
                self._warn(f"{self.path} was cut off while recording; read what it holds")
            return snap
        if damaged is not None:
            raise RecordingError(f"{self.path}: line {damaged[0]} is not a snapshot: {damaged[1]}")
        return None

    def extent(
        self, cancel: threading.Event | None = None
    ) -> tuple[int, float | None, float | None]:
        """(snapshot lines, first timestamp, last timestamp) without decoding the snapshots;
        never raises for a damaged file; stops early when `cancel` is set."""
        count, first, last = 0, None, None
        try:
            for item in self._raw_lines():
                if item is _CUT or (cancel is not None and cancel.is_set()):
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
