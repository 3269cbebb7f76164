"""A watched job's output as it grows: the file a started command writes to, `--log FILE`, the
file a watched process's stdout is (`stdout_file`), or a Slurm job's StdOut=.

`OutputTail` reads whole lines (split on \\n and \\r, as tqdm redraws with \\r) into a ring
buffer of the last ones; a job writing faster than it is read has its backlog skipped, so the
view stays current.
"""

from __future__ import annotations

import os
import re
from collections import deque

TAIL_LINES = 200  # the ring buffer of output lines
# Most bytes of output read per tick (~17,000 tqdm lines, ~0.3 s of parsing on a slow core): a
# job writing faster than this has its backlog skipped, so the view stays current.
READ_CHUNK = 1024 * 1024
START_BACK = 64 * 1024  # a file watched from outside: read from this far before its end
MAX_LINE = 2000  # characters of one output line kept


class OutputTail:
    """Follows a file as it grows: whole lines (split on \\n and \\r, as tqdm redraws with \\r),
    a ring buffer of the last ones; a line redrawn with \\r replaces the one before it."""

    def __init__(self, path: str, from_start: bool, lines: int = TAIL_LINES) -> None:
        self.path = path
        self.lines: deque[str] = deque(maxlen=lines)
        self.count = 0
        self._offset: int | None = 0 if from_start else None
        self._partial = b""
        self._redraw = False  # the last line ended with \r: the next one replaces it
        self.problem: str | None = None
        self.skipped_bytes = 0  # output written faster than it was read, not read
        # the file's modification time at the last read that found new bytes: when its newest
        # line was written (the wall clock; None before any)
        self.written_at: float | None = None
        # the text after the last \r, not ended yet: a bar as it is drawn now (tqdm writes
        # "\r" + the whole bar and ends it only with the next one); None after a \n
        self.redraw: str | None = None
        self._after_cr = False

    def read(self) -> list[tuple[int, str]]:
        """The whole lines written since the last read (a line still being written waits),
        with their line numbers (a bar redrawn with \r keeps the number of the line it
        redraws)."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if self._offset is None:  # from outside: the end of the file, not all of it
                    self._offset = max(0, size - START_BACK)
                    if self._offset:
                        f.seek(self._offset)
                        skipped = f.readline()  # the first line read may be cut
                        self._offset += len(skipped)
                if size < self._offset:  # truncated or replaced
                    self._offset, self._partial = 0, b""
                if size - self._offset > READ_CHUNK:  # fallen behind: read the newest only
                    self.skipped_bytes += size - READ_CHUNK - self._offset
                    self._offset, self._partial = size - READ_CHUNK, b""
                    f.seek(self._offset)
                    self._offset += len(f.readline())  # a cut line is not a line
                f.seek(self._offset)
                data = f.read(READ_CHUNK)
                mtime = os.fstat(f.fileno()).st_mtime if data else None  # after the bytes read
        except FileNotFoundError:
            self.problem = f"the output file {self.path} does not exist (yet)"
            return []
        except OSError as e:
            self.problem = f"cannot read the output file {self.path}: {e.strerror}"
            return []
        self.problem = None
        if mtime is not None:
            self.written_at = mtime
        self._offset += len(data)
        data = self._partial + data
        out: list[tuple[int, str]] = []
        start = 0
        for m in re.finditer(rb"\r\n|\n|\r", data):
            raw = data[start : m.start()]
            start = m.end()
            line = raw.decode("utf-8", errors="replace")[:MAX_LINE]
            redraw = m.group() == b"\r"
            self._after_cr = redraw
            if not line.strip() and redraw:
                continue
            self._keep(line)
            self._redraw = redraw
            out.append((self.count, line))
        self._partial = data[start:][-MAX_LINE * 4 :]
        rest = self._partial.decode("utf-8", errors="replace")[:MAX_LINE]
        self.redraw = rest if self._after_cr and rest.strip() else None
        return out

    def _keep(self, line: str) -> None:
        if self._redraw and self.lines:
            self.lines[-1] = line
        else:
            self.count += 1
            self.lines.append(line)


def stdout_file(pid: int) -> str | None:
    """The regular file a process's stdout is redirected to, where we may read its fd link."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None
    if target.endswith(" (deleted)") or not target.startswith("/"):
        return None
    try:
        import stat

        if not stat.S_ISREG(os.stat(target).st_mode):
            return None
    except OSError:
        return None
    return target
