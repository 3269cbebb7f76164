"""The probe's file: JSON lines buffered in memory, written by a background thread.

The step path only serializes a record and appends it to a list; a daemon thread writes the list
out at most every `FLUSH_S` seconds, so a slow or full filesystem never blocks a training step.
The directory is created 0700 and must be ours; the file is created 0600 without following a
symlink. Past `MAX_BYTES` the file is renamed to `<name>.1` and a new one begins with a fresh
"hello" (schema.py). Any I/O error turns the file off for good: the job goes on unprobed.
"""

from __future__ import annotations

import _thread
import json
import os
import stat
import threading
from collections.abc import Callable
from typing import Any

from .schema import MAX_BYTES, file_name

FLUSH_S = 0.5
# Lines held while the file cannot keep up (a stalled filesystem); beyond this they are dropped.
MAX_PENDING_LINES = 20_000


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode(record: dict) -> str:
    return _ENCODER.encode(record) + "\n"


def ensure_private_dir(path: str) -> None:
    """Create `path` mode 0700, or check that the one there is a directory of ours, closed to
    others (raises OSError otherwise: another user must not be able to read or plant files)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{path} is not a directory")
    if st.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to another user")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def open_private_file(path: str) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return fd


class ProbeFile:
    """One process's probe file, named by its pid and start time (schema.file_name).

    `hello` builds the hello record; it is called for the first line of every generation."""

    def __init__(
        self,
        directory: str,
        pid: int,
        start_ticks: int,
        hello: Callable[[], dict],
        max_bytes: int = MAX_BYTES,
        flush_s: float = FLUSH_S,
        render: Callable[[Any], dict] | None = None,
        idle: Callable[[], None] | None = None,
    ) -> None:
        self.directory = directory
        self.path = os.path.join(directory, file_name(pid, start_ticks))
        self.hello = hello
        self.render = render  # makes a record of what is queued when it is not one already
        self.idle = idle  # run by the thread before each flush (it may queue a record)
        self.max_bytes = max_bytes
        self.flush_s = flush_s
        self.lock = threading.Lock()  # guards `pending`
        self.io_lock = threading.Lock()  # one writer of the file at a time
        self.pending: list[Any] = []
        self.dropped = 0
        self.fd: int | None = None
        self.size = 0
        self.broken = False
        self.closed = False
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self.thread: int | None = None

    def write(self, record: Any) -> None:
        """Queue one record, or what `render` makes one of (cheap: no I/O, no JSON here)."""
        if self.broken or self.closed:
            return
        with self.lock:
            if len(self.pending) >= MAX_PENDING_LINES:
                self.dropped += 1
                return
            self.pending.append(record)
        if self.thread is None:
            self._start_thread()

    def _line(self, item: Any) -> str:
        try:
            return encode(item if isinstance(item, dict) else self.render(item))
        except Exception:  # a value JSON cannot hold, a figure of the wrong shape: dropped
            return ""

    def _start_thread(self) -> None:
        # `_thread` (https://docs.python.org/3/library/_thread.html), not `threading.Thread`:
        # `Thread.start()` waits until the new thread runs, milliseconds on a loaded machine,
        # and this runs inside the job's first step. Like a daemon thread it does not hold up
        # the interpreter's exit; `close()` stops it first.
        self.thread = _thread.start_new_thread(self._run, ())

    def _run(self) -> None:
        try:
            while not self.closed:
                self.wake.wait(self.flush_s)
                if self.closed:
                    return
                if self.idle is not None:
                    try:
                        self.idle()
                    except Exception:
                        self.idle = None
                self.flush()
        finally:
            self.stopped.set()

    def flush(self, timeout: float = -1) -> None:
        """Write what is queued (waiting at most `timeout` s for a flush already under way)."""
        if not self.io_lock.acquire(timeout=timeout):
            return
        try:
            with self.lock:
                items, self.pending = self.pending, []
            if not items or self.broken:
                return
            data = "".join(self._line(item) for item in items).encode()
            if not data:
                return
            if self.fd is None:
                self._open()
            elif self.size and self.size + len(data) > self.max_bytes:
                self._rotate()
            self._write_all(data)
        except Exception:  # OSError mostly; never a traceback from the probe's thread
            self._break()
        finally:
            self.io_lock.release()

    def _open(self) -> None:
        ensure_private_dir(self.directory)
        self.fd = open_private_file(self.path)
        self.size = 0

    def _rotate(self) -> None:
        assert self.fd is not None
        os.close(self.fd)
        self.fd = None
        os.replace(self.path, self.path + ".1")
        self._open()
        self._write_all(encode(self.hello()).encode())

    def _write_all(self, data: bytes) -> None:
        assert self.fd is not None
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.size += len(data)

    def _break(self) -> None:
        self.broken = True
        with self.lock:
            self.pending = []
        self._close_fd()

    def _close_fd(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def close(self, timeout: float = 1.0) -> None:
        """Stop the thread, write what is queued, close the file."""
        if self.closed:
            return
        self.closed = True
        self.wake.set()
        if self.thread is not None and self.thread != threading.get_ident():
            self.stopped.wait(timeout)
        self.flush(timeout)
        if self.io_lock.acquire(timeout=timeout):
            self._close_fd()
            self.io_lock.release()

    def abandon_after_fork(self) -> None:
        """In a forked child: never touch the parent's file (close our copy of its descriptor)."""
        self.closed = True
        self.broken = True
        self.pending = []
        self.thread = None
        self._close_fd()
