"""The host's view of GPU processes, through `psutil` and /proc/<pid>/task/<tid>/comm.

psutil's `cpu_percent()` averages since the previous call on the same `Process` object, so the
objects are cached between ticks. A process that vanished between NVML listing it and us reading
it is skipped silently; another user's process shows what can be read.

Children (dataloader workers, compile workers) come from one parent map per tick, built from
/proc/<pid>/stat of every process, and shared by all GPU processes: psutil's
`children(recursive=True)` scans all of /proc on each call (~30-140 ms at 2,000 processes), once
per GPU process per tick.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..model import ChildInfo, ProcessInfo, ThreadInfo

BUSIEST_THREADS = 5
MAX_CHILDREN = 64


class _Tracked:
    __slots__ = ("proc", "children", "thread_cpu", "thread_names", "last_t")

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.children: dict[int, Any] = {}
        self.thread_cpu: dict[int, float] = {}
        self.thread_names: dict[int, str] = {}
        self.last_t: float | None = None


class ProcessCollector:
    def __init__(self, psutil: Any, procfs: Any, clock: Any) -> None:
        self.psutil, self.procfs, self.clock = psutil, procfs, clock
        self._gone = (psutil.NoSuchProcess, psutil.ZombieProcess)
        self._denied = psutil.AccessDenied
        self._tracked: dict[int, _Tracked] = {}
        self._kids: dict[int, list[int]] = {}  # this tick's parent map

    def collect(self, pids: Iterable[int]) -> tuple[ProcessInfo, ...]:
        wanted = sorted(set(pids))
        for pid in list(self._tracked):
            if pid not in wanted:
                del self._tracked[pid]
        now = self.clock.now()
        self._kids = self.children_map() if wanted else {}
        out = []
        for pid in wanted:
            info = self._read(pid, now)
            if info is not None:
                out.append(info)
        return tuple(out)

    def _read(self, pid: int, now: float) -> ProcessInfo | None:
        t = self._tracked.get(pid)
        try:
            if t is None:
                t = self._tracked[pid] = _Tracked(self.psutil.Process(pid))
            return self._read_tracked(pid, t, now)
        except self._gone:
            self._tracked.pop(pid, None)
            return None

    def _read_tracked(self, pid: int, t: _Tracked, now: float) -> ProcessInfo:
        p = t.proc
        denied = False

        def get(fn, *args):
            nonlocal denied
            try:
                return fn(*args)
            except self._denied:
                denied = True
                return None

        with p.oneshot():
            name = get(p.name)
            user = get(p.username)
            cmdline = get(p.cmdline)
            cpu = get(p.cpu_percent, None)
            mem = get(p.memory_info)
            nthreads = get(p.num_threads)
            started = get(p.create_time)
            threads = get(p.threads)
        env = get(p.environ)
        dt = None if t.last_t is None else now - t.last_t
        t.last_t = now
        return ProcessInfo(
            pid=pid,
            name=name,
            user=user,
            cmdline=tuple(cmdline) if cmdline is not None else None,
            cpu_pct=cpu,
            rss_bytes=mem.rss if mem is not None else None,
            num_threads=nthreads,
            busiest_threads=self._busiest(pid, t, threads, dt),
            children=self._children(t),
            start_time=started,
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES") if env is not None else None,
            environ_readable=env is not None,
            access_denied=denied,
        )

    def _busiest(self, pid: int, t: _Tracked, threads: Any, dt: float | None) -> tuple:
        if not threads:
            return ()
        cpu_now = {th.id: th.user_time + th.system_time for th in threads}
        prev, t.thread_cpu = t.thread_cpu, cpu_now
        if not dt or dt <= 0:
            return ()
        rates = []
        for tid, c in cpu_now.items():
            if tid in prev:
                rates.append((100.0 * max(0.0, c - prev[tid]) / dt, tid))
        rates.sort(reverse=True)
        out = []
        for pct, tid in rates[:BUSIEST_THREADS]:
            out.append(ThreadInfo(tid=tid, name=self._thread_name(pid, t, tid), cpu_pct=pct))
        for tid in list(t.thread_names):
            if tid not in cpu_now:
                del t.thread_names[tid]
        return tuple(out)

    def _thread_name(self, pid: int, t: _Tracked, tid: int) -> str:
        name = t.thread_names.get(tid)
        if name is None:
            try:
                name = self.procfs.read_text(f"/proc/{pid}/task/{tid}/comm").strip()
            except OSError:
                name = "?"
            t.thread_names[tid] = name
        return name

    def children_map(self) -> dict[int, list[int]]:
        """Child pids by parent pid, from /proc/<pid>/stat of every process (one scan)."""
        kids: dict[int, list[int]] = {}
        try:
            pids = self.psutil.pids()
        except (OSError, self.psutil.Error):
            return kids
        for pid in pids:
            try:
                ppid = parse_ppid(self.procfs.read_text(f"/proc/{pid}/stat"))
            except (OSError, ValueError):  # gone, or not ours to read
                continue
            kids.setdefault(ppid, []).append(pid)
        return kids

    def _descendants(self, pid: int) -> list[int]:
        """Children, grandchildren, ... of pid in breadth-first order, at most MAX_CHILDREN."""
        out: list[int] = []
        todo = list(self._kids.get(pid, ()))
        seen = {pid}
        while todo and len(out) < MAX_CHILDREN:
            c = todo.pop(0)
            if c in seen:
                continue
            seen.add(c)
            out.append(c)
            todo.extend(self._kids.get(c, ()))
        return out

    def _children(self, t: _Tracked) -> tuple[ChildInfo, ...]:
        seen: dict[int, Any] = {}
        out = []
        for pid in self._descendants(t.proc.pid):
            c = t.children.get(pid)  # keep the object so cpu_percent averages per tick
            try:
                if c is None:
                    c = self.psutil.Process(pid)
                with c.oneshot():
                    info = ChildInfo(pid=pid, name=c.name(), cpu_pct=c.cpu_percent(None))
            except self._gone:
                continue
            except self._denied:
                info = ChildInfo(pid=pid, name="?", cpu_pct=None)
            if c is not None:
                seen[pid] = c
            out.append(info)
        t.children = seen
        return tuple(out)


def parse_ppid(stat: str) -> int:
    """The parent pid in /proc/<pid>/stat: the field after the state, after the command name in
    parentheses (which may itself hold spaces and parentheses). ValueError when malformed."""
    rest = stat[stat.rindex(")") + 1 :].split(None, 2)
    return int(rest[1])
