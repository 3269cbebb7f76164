"""PyTorch Flight Recorder dumps, read safely: each rank's last collectives, and where a job hangs.

The Flight Recorder keeps, in every rank of a `torch.distributed` job, a ring buffer of the
collectives that rank issued: sequence id, operation (`nccl:all_reduce`, `gloo:broadcast`),
state, input sizes, process group. When a job hangs, each rank's buffer (dumped to one file per
rank) says which collective the ranks wait in, and which rank never entered it.

What this module relies on (read from torch 2.13's sources and checked on a real gloo job):

* File name: `<prefix><rank>`, written by `DebugInfoWriter` (`filename_ = namePrefix + rank`):
  https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/FlightRecorder.hpp
  The prefix is TORCH_FR_DUMP_TEMP_FILE, else the deprecated TORCH_NCCL_DEBUG_INFO_TEMP_FILE,
  else `$XDG_CACHE_HOME/torch/comm_lib_trace_rank_` (`$HOME/.cache/...` without XDG; torch
  before the move to the cache folder used `/tmp/nccl_trace_rank_`): `DebugInfoWriter::getWriter`
  https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/FlightRecorder.cpp
* Content: a pickle of plain dicts, lists, tuples, strings, ints, floats, bools and None (torch's
  own `torch::jit::Pickler` over generic IValues: no class is ever named), format "version" 2.10:
  {"version", "pg_config", "pg_status", "comm_lib_version", "entries": [{"record_id", "pg_id",
  "process_group": (name, desc), "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
  "time_created_ns", "input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "state",
  "time_discovered_started_ns", "time_discovered_completed_ns", "retired", "timeout_ms",
  "is_p2p", "frames"?, ...}]}. The JSON form (`_dump_fr_trace_json`, the debug server's
  `fr_trace_json`) has the same keys, with lists for tuples and strings for pg_status numbers:
  https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/FlightRecorderDetail.hpp
* State: "completed" when the end event was seen, "started" for the start event, else
  "scheduled". Gloo records no events, so its entries stay "scheduled" for ever; its worker
  marks an entry "retired" once the collective has run (ProcessGroupGloo::runLoop), which this
  module reads as completed. Not for NCCL, where "retired" but not completed means timed out.
  pg_status's last_completed_collective is no help: gloo's worker threads set it out of order
  (seen: 2 after 3 had completed), and NCCL's watchdog writes p2p sequence ids into it too.
  https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/ProcessGroupGloo.cpp

torch's own analyzer opens dumps with plain `pickle.load` (torch/distributed/flight_recorder/
components/loader.py), which runs any code a crafted file names. Here a pickle that names any
class or function is refused before anything is called.
"""

from __future__ import annotations

import errno
import glob
import io
import itertools
import json
import os
import pickle
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

MAX_DUMP_BYTES = 16 * 1024 * 1024
MAX_DUMPS = 1024
# A pickle's memo lets one list appear in every entry; these bound the work per dump.
MAX_ENTRIES = 10_000  # the newest, per dump; torch's default ring buffer holds 2000
MAX_TENSORS = 64  # input shapes kept per entry
MAX_DIMS = 32  # dimensions per shape; a longer one is not a tensor's

# Earlier names win, as in torch's getCvarInt/getCvarString (c10d/Utils.hpp).
BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
DEFAULT_FILE_NAME = "comm_lib_trace_rank_"
LEGACY_DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"  # torch before the dump moved to ~/.cache
STATES = ("scheduled", "started", "completed")

_RANK_SUFFIX = re.compile(r"(\d{1,9})$")
_LEADING_INT = re.compile(r"\s*([+-]?\d+)")


@dataclass(frozen=True, slots=True)
class FlightEntry:
    """One recorded collective (or point-to-point op, `p2p`) of one rank.

    `seq` is the collective sequence id in its process group (the p2p sequence id for p2p ops);
    `sizes` the input tensors' shapes; `state` one of STATES ("unknown" for anything else),
    "completed" also for a retired gloo entry (gloo records no events).
    """

    seq: int | None
    op: str
    state: str
    process_group: str | None
    sizes: tuple
    created_ns: int | None
    p2p: bool = False


@dataclass(frozen=True, slots=True)
class FlightDump:
    """One rank's dump: its entries, oldest first, or why the file could not be read."""

    rank: int | None
    entries: tuple[FlightEntry, ...]
    error: str | None
    path: str


@dataclass(frozen=True, slots=True)
class FlightHang:
    """The collective some ranks wait in, and the ranks that never entered it."""

    seq: int
    op: str
    ranks_in: tuple[int, ...]
    ranks_missing: tuple[int, ...]
    sizes: tuple
    process_group: str | None = None


# --- where the dumps are ------------------------------------------------------------------------


def dump_prefix(environ: Mapping[str, str]) -> str | None:
    """The file prefix a job with this environment dumps to (files `<prefix><rank>`).

    None when the job turned the recorder off (buffer size 0) or set a size torch refuses, or
    set an empty prefix (files relative to the job's unknown working directory). In torch 2.13
    the recorder is on by default (2000 entries: FlightRecorder.hpp), so an environment without
    any of these variables still has a prefix; the files exist only once a rank dumped (NCCL's
    watchdog on a timeout, TORCH_NCCL_DUMP_ON_TIMEOUT, or a caller of `_dump_fr_trace`).
    """
    size = _cvar(environ, BUFFER_VARS)
    if size is not None and _stoi(size) in (None, 0):
        return None
    prefix = _cvar(environ, FILE_VARS)
    if prefix is None:
        prefix = _default_prefix(environ)
    return prefix or None


def _cvar(environ: Mapping[str, str], names: Iterable[str]) -> str | None:
    """The value of the first variable set, as torch's getCvar* read a list of aliases."""
    for name in names:
        if name in environ:
            return environ[name]
    return None


def _stoi(text: str) -> int | None:
    """The leading integer of `text`, as C++ std::stoi reads it; None where there is none."""
    m = _LEADING_INT.match(text)
    return int(m.group(1)) if m else None


def _default_prefix(environ: Mapping[str, str]) -> str:
    """torch's default: `$XDG_CACHE_HOME/torch/...`, else `$HOME/.cache/torch/...` (HOME /tmp).

    https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/FlightRecorder.cpp
    """
    if "XDG_CACHE_HOME" in environ:
        cache = environ["XDG_CACHE_HOME"]
    else:
        cache = environ.get("HOME", "/tmp") + "/.cache"
    return f"{cache}/torch/{DEFAULT_FILE_NAME}"


def read_dumps(prefix: str, limit: int = MAX_DUMPS) -> tuple[FlightDump, ...]:
    """Every rank's dump for `prefix` (the files `prefix*`), at most `limit`, by rank.

    The prefix is taken literally (glob characters in it are escaped).
    """
    paths = itertools.islice(glob.iglob(glob.escape(prefix) + "*"), max(limit, 0))
    dumps = [read_dump(p) for p in paths]
    return tuple(sorted(dumps, key=lambda d: (d.rank is None, d.rank or 0, d.path)))


# --- one file -----------------------------------------------------------------------------------


def read_dump(path: str, max_bytes: int = MAX_DUMP_BYTES) -> FlightDump:
    """One dump file, parsed without running anything in it; errors are on the result.

    The rank is the file name's trailing number (`<prefix><rank>`). `max_bytes` also bounds the
    memory a hostile pickle can take: at most about 60 bytes of objects per byte of file.
    """
    rank = _rank_of(path)
    data, error = _read_bounded(path, max_bytes)
    if error is None:
        doc, error = _decode(data)
    if error is None:
        entries, error = _entries_of(doc)
    if error is not None:
        return FlightDump(rank, (), f"{path}: {error}", path)
    return FlightDump(rank, entries, None, path)


def _rank_of(path: str) -> int | None:
    """The rank torch appended to the prefix; None for a name that does not end in digits."""
    m = _RANK_SUFFIX.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def _read_bounded(path: str, max_bytes: int) -> tuple[bytes, str | None]:
    """The file's bytes, if it is a regular file of ours, no link, and at most `max_bytes`.

    O_NOFOLLOW refuses a link planted at the dump's name (dumps sit in shared folders such as
    /tmp); O_NONBLOCK keeps a FIFO there from blocking the open.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        return b"", _open_error(e)
    try:
        error = _refusal(os.fstat(fd), max_bytes)
        return (b"", error) if error else _read_fd(fd, max_bytes)
    except OSError as e:
        return b"", f"cannot be read: {e.strerror or e}"
    finally:
        os.close(fd)


def _open_error(e: OSError) -> str:
    """Why the open failed, in words; ELOOP is how O_NOFOLLOW reports a symbolic link."""
    if e.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: the BSDs' answer to O_NOFOLLOW
        return "refused: it is a symbolic link"
    return f"cannot be opened: {e.strerror or e}"


def _refusal(st: os.stat_result, max_bytes: int) -> str | None:
    """Why an opened file is not read: not a regular file, someone else's, or too large."""
    if not stat.S_ISREG(st.st_mode):
        return "refused: not a regular file"
    if st.st_uid != os.geteuid():
        return f"refused: owned by uid {st.st_uid}, not by the current user ({os.geteuid()})"
    if st.st_size > max_bytes:
        return f"refused: {st.st_size} bytes, more than the limit of {max_bytes}"
    return None


def _read_fd(fd: int, max_bytes: int) -> tuple[bytes, str | None]:
    """At most `max_bytes` from `fd`; a file that grew past the limit while read is refused."""
    chunks, total = [], 0
    while chunk := os.read(fd, min(1 << 20, max_bytes + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            return b"", f"refused: grew past the limit of {max_bytes} bytes while read"
    return b"".join(chunks), None


class _RefusingUnpickler(pickle.Unpickler):
    """An unpickler that builds only plain containers and scalars.

    Every way a pickle calls code (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*, then REDUCE) needs a
    class or function from `find_class`, and persistent ids need `persistent_load`: both refuse.
    https://docs.python.org/3/library/pickle.html#restricting-globals
    """

    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(f"refused: the pickle names {module}.{name}")

    def persistent_load(self, pid: object) -> object:
        raise pickle.UnpicklingError("refused: the pickle holds a persistent id")


def _decode(data: bytes) -> tuple[object, str | None]:
    """The document in `data`: a pickle (starts with the PROTO opcode) or JSON (with `{`)."""
    if data[:1] == b"\x80":
        return _unpickle(data)
    if data.lstrip()[:1] == b"{":
        return _unjson(data)
    if not data:
        return None, "empty file"
    return None, "neither a pickle nor JSON: not a Flight Recorder dump"


def _unpickle(data: bytes) -> tuple[object, str | None]:
    """A pickle of plain data; one naming code is refused, a cut or damaged one reported."""
    try:
        return _RefusingUnpickler(io.BytesIO(data)).load(), None
    except pickle.UnpicklingError as e:
        if str(e).startswith("refused"):
            return None, f"{e}: a Flight Recorder dump names no code, nothing was run"
        return None, f"not a readable pickle (truncated or damaged): {e}"
    except EOFError:
        return None, "not a readable pickle: truncated"
    except Exception as e:  # any malformed opcode stream: the file is bad, not the program
        return None, f"not a readable pickle (truncated or damaged): {type(e).__name__}: {e}"


def _unjson(data: bytes) -> tuple[object, str | None]:
    """A JSON dump; a cut or damaged one is reported."""
    try:
        return json.loads(data), None
    except (ValueError, RecursionError) as e:
        return None, f"not readable JSON (truncated or damaged): {e}"


# --- the entries --------------------------------------------------------------------------------


def _entries_of(doc: object) -> tuple[tuple[FlightEntry, ...], str | None]:
    """The dump's entries, oldest first (the last MAX_ENTRIES where there are more)."""
    if not isinstance(doc, dict) or not ("entries" in doc or "version" in doc):
        return (), f"not a Flight Recorder dump (a {type(doc).__name__} without 'entries')"
    raw = doc.get("entries", [])
    if not isinstance(raw, list):
        return (), "not a Flight Recorder dump: 'entries' is not a list"
    return tuple(_entry(r) for r in raw[-MAX_ENTRIES:] if isinstance(r, dict)), None


def _entry(raw: dict) -> FlightEntry:
    """One entry of the dump, its fields checked for type (a bad field becomes None)."""
    p2p = raw.get("is_p2p") is True
    op = raw.get("profiling_name") if isinstance(raw.get("profiling_name"), str) else "?"
    return FlightEntry(
        seq=_as_int(raw.get("p2p_seq_id" if p2p else "collective_seq_id")),
        op=op,
        state=_state(raw, op),
        process_group=_group_name(raw.get("process_group")),
        sizes=_sizes(raw.get("input_sizes")),
        created_ns=_as_int(raw.get("time_created_ns")),
        p2p=p2p,
    )


def _state(raw: dict, op: str) -> str:
    """The entry's state; a gloo entry its worker retired has run (gloo records no events)."""
    state = raw.get("state") if raw.get("state") in STATES else "unknown"
    if op.startswith("gloo:") and raw.get("retired") is True:
        return "completed"
    return state


def _as_int(value: object) -> int | None:
    """An int, never a bool."""
    return value if type(value) is int else None


def _group_name(value: object) -> str | None:
    """(name, desc) as `name (desc)`: the name is the group's id, the same on every rank."""
    if not isinstance(value, (list, tuple)) or not value or not isinstance(value[0], str):
        return None
    desc = value[1] if len(value) > 1 and isinstance(value[1], str) else ""
    return f"{value[0]} ({desc})" if desc else value[0]


def _sizes(value: object) -> tuple:
    """[[4, 3], [8]] as ((4, 3), (8,)); anything else in the field gives ()."""
    if not isinstance(value, list):
        return ()
    shapes = []
    for shape in value[:MAX_TENSORS]:
        if not isinstance(shape, list) or len(shape) > MAX_DIMS:
            return ()
        if any(type(d) is not int for d in shape):
            return ()
        shapes.append(tuple(shape))
    return tuple(shapes)


# --- the hang -----------------------------------------------------------------------------------


def hang_from_dumps(dumps: Iterable[FlightDump]) -> FlightHang | None:
    """The collective the job waits in, the ranks in it and the ranks that never reached it.

    Per process group: the lowest collective seq some rank entered and has not completed (NCCL
    queues several collectives, and completes them in order, so the earliest open one is where
    the ranks wait); missing are the ranks whose buffer in that group stops below it. Across
    groups, one with missing ranks comes first, then the one opened earliest. None when no
    collective is open. Only readable dumps with a rank count; p2p ops are left out (they wait
    for one peer, not the group); a rank with no entry in a group is not counted in it.
    """
    groups: dict[str | None, dict[int, list[FlightEntry]]] = {}
    for dump in dumps:
        if dump.error is not None or dump.rank is None:
            continue
        for e in dump.entries:
            if not e.p2p and e.seq is not None:
                groups.setdefault(e.process_group, {}).setdefault(dump.rank, []).append(e)
    found = [h for pg, ranks in groups.items() if (h := _group_hang(pg, ranks))]
    return min(found, key=lambda h: (not h[0].ranks_missing, h[1], h[0].seq))[0] if found else None


def _group_hang(
    pg: str | None, ranks: Mapping[int, list[FlightEntry]]
) -> tuple[FlightHang, int] | None:
    """The open collective of one group, with when it was first created (for ordering groups)."""
    open_ = [(e.seq, r, e) for r, es in ranks.items() for e in es if e.state != "completed"]
    if not open_:
        return None
    seq = min(s for s, _, _ in open_)
    at_seq = sorted(((r, e) for s, r, e in open_ if s == seq), key=lambda t: t[0])
    reached = {r: max(e.seq for e in es) for r, es in ranks.items()}
    missing = tuple(sorted(r for r, top in reached.items() if top < seq))
    first = at_seq[0][1]
    created = min((e.created_ns for _, e in at_seq if e.created_ns is not None), default=2**63)
    ranks_in = tuple(sorted({r for r, _ in at_seq}))
    return FlightHang(seq, first.op, ranks_in, missing, first.sizes, pg), created
