"""Which processes descend from which, read as cheaply as the kernel allows.

Linux lists the direct children of every task in /proc/<pid>/task/<tid>/children (proc(5); the
kernel needs CONFIG_PROC_CHILDREN, which the common distributions' kernels set). A child started
by a thread other than the main one is listed under that thread, so every thread's file is read.
Where the files exist, the descendants of a process come from them, recursively: the cost follows
the tree asked about, not the machine.

Where the kernel lacks them, a parent map of every process (/proc/*/stat) stands in. It is built
at most every `RESCAN_S` seconds, and at once when a tick starts from a process it has not been
asked about since the last map (a new GPU process, a job just started); in between, a child
started since the map was built waits for the next one, and one that ended or changed parent
(its /proc/<pid>/stat says so) is dropped.

A process's threads come from its own /proc/<pid>/task/<tid>/stat: CPU time and name in one read.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

RESCAN_S = 10.0  # the fallback's parent map is rebuilt at most this often
MAX_HOPS = 64  # ancestors followed up from a process


@dataclass(frozen=True, slots=True)
class ProcStat:
    """What the collectors use of /proc/<pid>/stat (or of a thread's task/<tid>/stat)."""

    name: str  # the kernel's comm: at most 15 characters
    ppid: int
    session: int
    cpu_ticks: int  # utime + stime, in `sources.CLOCK_TICKS`
    num_threads: int
    start_ticks: int  # since boot: with the pid, which process this is


def parse_stat(text: str) -> ProcStat:
    """/proc/<pid>/stat (proc(5)): the command name in parentheses (it may hold spaces and
    parentheses itself), then state, ppid, pgrp, session, ...; ValueError when malformed."""
    try:
        lo, hi = text.index("("), text.rindex(")")
        f = text[hi + 2 :].split()
        return ProcStat(
            name=text[lo + 1 : hi],
            ppid=int(f[1]),
            session=int(f[3]),
            cpu_ticks=int(f[11]) + int(f[12]),
            num_threads=int(f[17]),
            start_ticks=int(f[19]),
        )
    except IndexError as e:
        raise ValueError(f"not a /proc stat line: {text[:60]!r}") from e


def parse_ppid(stat: str) -> int:
    """The parent pid in /proc/<pid>/stat: the field after the state, after the command name in
    parentheses. ValueError when malformed."""
    rest = stat[stat.rindex(")") + 1 :].split(None, 2)
    return int(rest[1])


def parse_children(text: str) -> list[int]:
    """/proc/<pid>/task/<tid>/children: pids separated by spaces."""
    return [int(x) for x in text.split()]


@dataclass(frozen=True, slots=True)
class Member:
    """A process of a walked tree (`depth` 0: a root), with its threads where asked for."""

    pid: int
    depth: int
    stat: ProcStat
    threads: tuple[tuple[int, ProcStat], ...] | None = None  # (tid, its stat); None: not read
    threads_denied: bool = False  # its task directory is not ours to read


@dataclass(slots=True)
class _Node:
    stat: ProcStat
    kids: list[int]
    threads: tuple[tuple[int, ProcStat], ...] | None
    denied: bool


class ProcTree:
    """Children of processes, from the kernel's `children` files, else from a parent map of every
    process rebuilt at most every `rescan_s` (see the module's text). `refresh()` once per tick,
    then `walk()` and the readers below."""

    def __init__(self, procfs: Any, rescan_s: float = RESCAN_S) -> None:
        self.procfs = procfs
        self.rescan_s = rescan_s
        self.children_files: bool | None = None  # the kernel has them; None: not known yet
        self.scans = 0  # parent maps built (the fallback)
        self._kids: dict[int, list[int]] = {}  # the last parent map, as children by parent
        self._sessions: dict[int, int] = {}  # session id by pid, from the same scan
        self._scanned_at: float | None = None
        self._resolved: set[int] = set()  # processes asked about since the last map
        self._listed: dict[int, set[int]] = {}  # children seen by `new_children`, per process

    # -- the fallback's parent map -----------------------------------------------------------
    def refresh(self, pids: Iterable[int], now: float) -> None:
        """Called once per tick with the processes the tick starts from: finds out whether the
        kernel lists children and, where it does not, rebuilds the parent map when it is due or
        when one of `pids` is new to it."""
        pids = set(pids)
        if self.children_files is None:
            for pid in sorted(pids):
                self.children_files = self._probe(pid)
                if self.children_files is not None:
                    break
        if self.children_files is not False:
            return
        due = self._scanned_at is None or not 0 <= now - self._scanned_at < self.rescan_s
        if due or not pids <= self._resolved:
            self._scan(now)
            self._resolved = pids

    def _probe(self, pid: int) -> bool | None:
        """Whether the kernel has the `children` files (None: this process cannot tell)."""
        try:
            self.procfs.read_text(f"/proc/{pid}/task/{pid}/children")
            return True
        except FileNotFoundError:  # no file for a task that is there: the kernel lacks them
            return False if self.procfs.exists(f"/proc/{pid}/task/{pid}/stat") else None
        except OSError:
            return None

    def _scan(self, now: float) -> None:
        self.scans += 1
        kids: dict[int, list[int]] = {}
        sessions: dict[int, int] = {}
        try:
            names = self.procfs.listdir("/proc")
        except OSError:
            names = []
        for name in names:
            if not name.isdigit():
                continue
            try:
                text = self.procfs.read_text(f"/proc/{name}/stat")
                f = text[text.rindex(")") + 2 :].split(None, 4)
                ppid, sid = int(f[1]), int(f[3])
            except (OSError, ValueError, IndexError):  # gone, or not ours to read
                continue
            pid = int(name)
            kids.setdefault(ppid, []).append(pid)
            sessions[pid] = sid
        self._kids, self._sessions, self._scanned_at = kids, sessions, now

    def session_members(self, session: int) -> list[int]:
        """The processes of `session` in the last parent map (the fallback only)."""
        return sorted(pid for pid, sid in self._sessions.items() if sid == session)

    # -- reading -----------------------------------------------------------------------------
    def read_stat(self, pid: int) -> ProcStat | None:
        """/proc/<pid>/stat; None when the process is gone or hidden."""
        try:
            return parse_stat(self.procfs.read_text(f"/proc/{pid}/stat"))
        except (OSError, ValueError):
            return None

    def children(self, pid: int) -> list[int]:
        """The direct children of `pid` (every thread's), or the parent map's."""
        if self.children_files is False:
            return list(self._kids.get(pid, ()))
        try:
            tids = self.procfs.listdir(f"/proc/{pid}/task")
        except OSError:
            return []
        return self._task_children(pid, tids)

    def _task_children(self, pid: int, tids: Iterable[str]) -> list[int]:
        out: list[int] = []
        for tid in tids:
            try:
                out += parse_children(self.procfs.read_text(f"/proc/{pid}/task/{tid}/children"))
            except (OSError, ValueError):  # the thread ended
                continue
        return out

    def new_children(self, pid: int) -> list[int]:
        """The children listed under `pid`'s main thread that were not at the last call (all of
        them at the first): the processes an ancestor that reaps orphans has just adopted. The
        kernel hands an orphan to the reaper's first live thread, its main one while it lives
        (`find_new_reaper` in kernel/exit.c)."""
        if self.children_files is False:
            now = set(self._kids.get(pid, ()))
        else:
            try:
                text = self.procfs.read_text(f"/proc/{pid}/task/{pid}/children")
                now = set(parse_children(text))
            except (OSError, ValueError):
                now = set()
        before = self._listed.get(pid)
        self._listed[pid] = now
        return sorted(now if before is None else now - before)

    def ancestors(self, pid: int) -> list[int]:
        """The parent of `pid`, its parent, ... up to the first process (pid 1 included)."""
        out: list[int] = []
        st = self.read_stat(pid)
        while st is not None and st.ppid > 0 and len(out) < MAX_HOPS:
            out.append(st.ppid)
            if st.ppid == 1:
                break
            st = self.read_stat(st.ppid)
        return out

    def threads(self, pid: int) -> tuple[tuple[int, ProcStat], ...]:
        """(tid, its stat) of every thread of `pid`; OSError when the task directory cannot be
        read (PermissionError: not ours to read)."""
        return self._threads(pid, self.procfs.listdir(f"/proc/{pid}/task"))

    def _threads(self, pid: int, tids: Iterable[str]) -> tuple[tuple[int, ProcStat], ...]:
        out = []
        for tid in tids:
            try:
                text = self.procfs.read_text(f"/proc/{pid}/task/{tid}/stat")
                out.append((int(tid), parse_stat(text)))
            except (OSError, ValueError):  # the thread ended
                continue
        return tuple(out)

    def _node(self, pid: int, st: ProcStat, want_threads: bool) -> _Node:
        threads, denied = None, False
        if self.children_files is False:
            kids = list(self._kids.get(pid, ()))
            if want_threads:
                try:
                    threads = self.threads(pid)
                except PermissionError:
                    denied = True
                except OSError:
                    pass
            return _Node(st, kids, threads, denied)
        try:
            tids = self.procfs.listdir(f"/proc/{pid}/task")
        except PermissionError:
            return _Node(st, [], None, want_threads)
        except OSError:  # ended since its stat was read
            return _Node(st, [], None, False)
        kids = self._task_children(pid, tids)
        if want_threads:
            threads = self._threads(pid, tids)
        return _Node(st, kids, threads, denied)

    # -- trees -------------------------------------------------------------------------------
    def walk(
        self,
        roots: Sequence[int],
        limit: int,
        threads: str = "none",
        accept: Callable[[int, ProcStat], bool] | None = None,
    ) -> list[Member]:
        """`roots` and their descendants, at most `limit` processes found breadth-first, listed
        parents before children (depth-first, children in pid order). A root under another root
        is listed under it, once. `threads` ("none", "roots", "all"): whose threads to read.
        `accept(pid, stat)` may turn a root away (a remembered pid now another process's)."""
        found: dict[int, _Node] = {}
        under: dict[int, int] = {}  # pid -> the member it was found under
        order = list(dict.fromkeys(roots))
        rootset = set(order)
        queue: deque[tuple[int, int | None]] = deque((r, None) for r in order)
        while queue and len(found) < limit:
            pid, parent = queue.popleft()
            if pid in found:
                if parent is not None and pid in rootset and found[pid].stat.ppid == parent:
                    under[pid] = parent  # a root found under another one
                continue
            st = self.read_stat(pid)
            if st is None:
                continue
            if parent is None:
                if accept is not None and not accept(pid, st):
                    continue
            elif st.ppid != parent:  # an old parent map's entry: it moved on, or the pid is reused
                continue
            want = threads == "all" or threads == "roots" and parent is None
            node = found[pid] = self._node(pid, st, want)
            if parent is not None:
                under[pid] = parent
            queue.extend((c, pid) for c in node.kids if c not in found or c in rootset)
        if self.children_files is False:  # found through the map: not new to it
            self._resolved.update(found)
        kids: dict[int, list[int]] = {}
        for pid, parent in under.items():
            kids.setdefault(parent, []).append(pid)
        out: list[Member] = []
        seen: set[int] = set()
        for r in order:
            if r not in found or r in under:
                continue
            stack = [(r, 0)]
            while stack:
                pid, depth = stack.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                n = found[pid]
                out.append(Member(pid, depth, n.stat, n.threads, n.denied))
                stack.extend((c, depth + 1) for c in sorted(kids.get(pid, ()), reverse=True))
        return out
