"""Reading big log files from the end: a byte search for the driver's tags picks the lines
that can matter, chunk by chunk from the end of the file, within a byte budget per file and a
deadline; gzipped rotations are read forward (gzip cannot seek back) keeping the newest lines.
Memory stays bounded whatever the file's size; binary junk and invalid UTF-8 are counted.
"""

from __future__ import annotations

import glob
import grp
import os
import pwd
import re
import stat
import time
import zlib
from collections import deque
from dataclasses import dataclass, field

from ...xid.kernlog import LogRecord, ParseStats, clean_line, split_prefix

MIB = 1024 * 1024
CHUNK_BYTES = 4 * MIB
MAX_CARRY_BYTES = 1 * MIB  # a "line" longer than this is binary junk
# A cheap test on raw bytes: only lines holding one of these can be events or OOM kills.
# (searched one by one with bytes.find: a regex alternation scans a hundred times slower, and a
# longer needle is found faster, so each is as long as every line it stands for allows:
# "Kill(ed) process", "Failed to initialize NVML"; xid/neighbours.py for the last three)
KEYWORDS = (
    b"NVRM",
    b"SXid",
    b"initialize NVML",
    b"nvml error",
    b"AER:",
    b"ill process",
    b"nvidia-peermem",
    b"in libnccl",
    b"mlx5_core",
)
# An mlx5_core line is kept only when it says one of these (xid/neighbours.py): the adapter's
# other lines, ACCESS_REG floods above all, would crowd the driver's out of the kept lines.
MLX5_KEYWORD = KEYWORDS.index(b"mlx5_core")
MLX5_SAYS = (b"Link down", b"Link up", b"Port module event", b"insufficient power", b"temperature")
_DIRTY = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")
# Every byte a text line may hold: what `bytes.translate` leaves after deleting these is dirty.
_TEXT_BYTES = bytes(b for b in range(256) if not _DIRTY.match(bytes([b])))


@dataclass(frozen=True)
class Budget:
    """How much one scan may read."""

    seconds: float = 20.0  # for all sources together
    bytes_per_file: int = 256 * MIB  # read from the end
    lines_per_source: int = 100_000  # candidate lines kept (the newest)
    journal_entries: int = 50_000  # journalctl -n


TUI_BUDGET = Budget(seconds=8.0, bytes_per_file=64 * MIB, lines_per_source=20_000)


@dataclass
class LogRead:
    """One source's lines (file order) or records, and what the reading met."""

    lines: list[bytes] = field(default_factory=list)
    records: list[LogRecord] = field(default_factory=list)
    bytes_read: int = 0
    size: int | None = None
    binary: int = 0
    invalid: int = 0
    cut_short: str = ""  # why the start of the source was not read
    damaged: bool = False  # the file itself is broken (a cut-off or corrupt gzip), not too long


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


# --- files --------------------------------------------------------------------------------------
def count_dirty(buf: bytes, kept: list[bytes], r: LogRead) -> None:
    """Count the binary and non-UTF-8 lines in `buf` that are not kept (those are counted when
    parsed)."""
    if not buf.translate(None, _TEXT_BYTES):
        try:
            buf.decode("utf-8")
            return
        except UnicodeDecodeError:
            pass
    kept_set = set(kept)
    for line in buf.split(b"\n"):
        if line in kept_set:
            continue
        if _DIRTY.search(line):
            r.binary += 1
        else:
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                r.invalid += 1


def _hits(buf: bytes) -> list[tuple[int, bool]]:
    """Where a keyword starts in `buf`, in order, each with whether it is mlx5_core's (its line
    is kept only if it says one of MLX5_SAYS)."""
    found = []
    for n, kw in enumerate(KEYWORDS):
        k = buf.find(kw)
        while k >= 0:
            found.append((k, n == MLX5_KEYWORD))
            k = buf.find(kw, k + 1)
    return sorted(found)


def candidates(buf: bytes) -> list[bytes]:
    """The lines of `buf` (whole lines, file order) that hold a keyword, each with the
    indented continuation lines after it."""
    out: list[bytes] = []
    end = -1
    n = len(buf)
    for at, mlx5 in _hits(buf):
        if at <= end:
            continue
        start = buf.rfind(b"\n", 0, at) + 1
        end = buf.find(b"\n", at)
        end = n if end < 0 else end
        line = buf[start:end]
        if mlx5 and not any(said in line for said in MLX5_SAYS):
            end = at  # a later keyword on the same line may still keep it
            continue
        out.append(line)
        while end + 1 < n and buf[end + 1 : end + 2] in (b" ", b"\t"):
            nxt = buf.find(b"\n", end + 1)
            nxt = n if nxt < 0 else nxt
            out.append(buf[end + 1 : nxt])
            end = nxt
    return out


def _older_than(lines: list[bytes], since: float | None, ref: float) -> bool:
    """The first datable line of a chunk is older than `since`."""
    if since is None:
        return False
    for line in lines[:5]:
        s = clean_line(line, ParseStats())
        split = split_prefix(s, ref) if s else None
        if split is not None and split[1] is not None:
            return split[1] < since
    return False


def read_tail(path: str, since: float | None, budget: Budget, deadline: float) -> LogRead:
    """The candidate lines of a plain file, newest first in chunks, within the budget."""
    r = LogRead()
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        r.size = size = st.st_size
        pos, carry, dropping = size, b"", False
        chunks: deque[list[bytes]] = deque()
        kept = 0
        while pos > 0:
            if r.bytes_read >= budget.bytes_per_file:
                r.cut_short = f"read the newest {human_bytes(r.bytes_read)} of {human_bytes(size)}"
                break
            if time.monotonic() > deadline:
                r.cut_short = (
                    f"time budget spent after the newest {human_bytes(r.bytes_read)} of "
                    f"{human_bytes(size)}"
                )
                break
            n = min(CHUNK_BYTES, pos)
            pos -= n
            f.seek(pos)
            buf = f.read(n) + carry
            r.bytes_read += n
            if dropping:  # the tail of an overlong line was dropped: drop its start too
                last = buf.rfind(b"\n")
                if last < 0:
                    carry = b""
                    continue
                buf, dropping = buf[: last + 1], False
            carry = b""
            if pos > 0:
                cut = buf.find(b"\n")
                if cut < 0:
                    if len(buf) > MAX_CARRY_BYTES:
                        r.binary += 1
                        dropping = True
                    else:
                        carry = buf
                    continue
                carry, buf = buf[:cut], buf[cut + 1 :]
            found = candidates(buf)
            count_dirty(buf, found, r)
            if found:
                chunks.appendleft(found)
                kept += len(found)
            if kept >= budget.lines_per_source:
                r.cut_short = (
                    f"kept the newest {kept} driver lines; older ones not read (narrow --since)"
                )
                break
            if found and _older_than(found, since, st.st_mtime):
                break
        r.lines = [line for c in chunks for line in c]
    return r


def _gunzip(f, deadline: float):
    """Decompressed pieces of a gzip stream (members one after another); stops quietly at a
    truncation and raises zlib.error at corrupt data, after yielding everything before it."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    while True:
        raw = f.read(CHUNK_BYTES // 4)
        if not raw:
            tail = d.flush()
            if tail:
                yield tail
            if not d.eof:
                raise EOFError("the file ends inside a compressed block (cut short)")
            return
        while raw:
            out = d.decompress(raw)
            if out:
                yield out
            if d.eof and d.unused_data:  # another gzip member follows
                raw = d.unused_data
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                raw = b""
        if time.monotonic() > deadline:
            raise TimeoutError


def read_gzip(path: str, budget: Budget, deadline: float) -> LogRead:
    """The candidate lines of a gzipped rotation, read forward (gzip cannot seek back), the
    newest kept when there are too many; a damaged file keeps what came before the damage."""
    r = LogRead()
    r.size = os.path.getsize(path)
    kept: deque[bytes] = deque(maxlen=budget.lines_per_source)
    carry = b""
    try:
        with open(path, "rb") as f:
            for data in _gunzip(f, deadline):
                r.bytes_read += len(data)
                buf = carry + data
                cut = buf.rfind(b"\n")
                if cut < 0:
                    carry = b"" if len(buf) > MAX_CARRY_BYTES else buf
                    r.binary += len(buf) > MAX_CARRY_BYTES
                    continue
                carry, buf = buf[cut + 1 :], buf[: cut + 1]
                found = candidates(buf)
                count_dirty(buf, found, r)
                kept.extend(found)
    except TimeoutError:
        r.cut_short = "time budget spent: the newest part of this file was not read"
    except (EOFError, zlib.error) as e:
        r.cut_short = f"damaged gzip ({e}); kept what came before the damage"
        r.damaged = True
    if carry:
        kept.extend(candidates(carry))
    r.lines = list(kept)
    return r


def access_hint(path: str) -> str:
    """How to get read access to `path` (or the directory that hides it)."""
    target = path
    while target and not os.access(target, os.R_OK | (os.X_OK if os.path.isdir(target) else 0)):
        parent = os.path.dirname(target)
        if parent == target or os.access(parent, os.R_OK | os.X_OK):
            break
        target = parent
    try:
        st = os.stat(target)
        group = grp.getgrgid(st.st_gid).gr_name
        owner = pwd.getpwuid(st.st_uid).pw_name
    except (OSError, KeyError):
        return "run with sudo"
    mode = stat.filemode(st.st_mode)
    if group != "root" and st.st_mode & stat.S_IRGRP:
        return (
            f"{target} is {owner}:{group} {mode}: add your user to the {group} group "
            f"(sudo usermod -aG {group} $USER, then log in again), or run with sudo"
        )
    return f"{target} is {owner}:{group} {mode}: run with sudo"


def rotated(base: str) -> list[str]:
    """`base` and its rotations (base.1, base.2.gz, base-20240101[.gz]), newest first."""
    paths = [p for p in glob.glob(glob.escape(base) + "*") if _is_rotation(base, p)]

    def mtime(p: str) -> float:
        try:
            return os.stat(p).st_mtime
        except OSError:
            return 0.0

    return sorted(paths, key=lambda p: (p != base, -mtime(p)))


def _is_rotation(base: str, path: str) -> bool:
    rest = path[len(base) :]
    return rest == "" or re.fullmatch(r"[.-](?:\d+|\d{8})(?:\.gz)?", rest) is not None


def read_stream(stream, budget: Budget, deadline: float) -> LogRead:
    """The candidate lines of a stream read forward (a pipe), the newest kept."""
    kept: deque[bytes] = deque(maxlen=budget.lines_per_source)
    r = LogRead()
    pending: list[bytes] = []

    def take() -> None:
        buf = b"".join(pending)
        found = candidates(buf)
        count_dirty(buf, found, r)
        kept.extend(found)
        pending.clear()

    for line in stream:
        r.bytes_read += len(line)
        pending.append(line)
        if len(pending) >= 4096:
            take()
            if time.monotonic() > deadline:
                r.cut_short = "time budget spent: the rest of the input was not read"
                break
    take()
    r.lines = list(kept)
    return r
