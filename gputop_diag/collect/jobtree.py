"""A watched job's processes, read once per tick from its roots down (`proctree.ProcTree`).

Each process's own figures come from `psutil` (objects cached between ticks), its CPU % and its
busiest threads from /proc/<pid>/stat and its threads' task/<tid>/stat. What a tick reads follows
the job's tree, not the machine.

A worker whose parent ended is reparented (to the first ancestor that reaps orphans, else to
the first process) and is no longer under the job's roots. It stays the job's:
- once seen, by its pid and start time (`known`), as long as it is the same process;
- for a started command (`session`: its session, which every process it starts shares unless
  one leaves it), a process adopted by one of the roots' ancestors or by the first process since
  the last tick is the job's when its session is the job's: the kernel hands orphans only to an
  ancestor that reaps them or to the first process (`find_new_reaper` in kernel/exit.c), so a
  worker started and orphaned between two ticks is still found. Where the kernel lacks the
  `children` files, the fallback's parent map gives the session's processes instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..model import JobProcess
from .procs import busiest, cpu_pct
from .proctree import RESCAN_S, Member, ProcStat, ProcTree

MAX_PROCESSES = 256  # processes of a tree read per tick
_CGROUP_JOB = re.compile(r"/job_(\d+)(?:/|$)")


class _Proc:
    __slots__ = ("proc", "start", "cpu_ticks", "thread_cpu", "last_t", "cvd", "cvd_read")

    def __init__(self, proc: Any, start: int) -> None:
        self.proc = proc
        self.start = start  # start ticks: the pid's process, not a later one
        self.cpu_ticks: int | None = None
        self.thread_cpu: dict[int, int] = {}
        self.last_t: float | None = None
        self.cvd: str | None = None
        self.cvd_read = False


class TreeReader:
    """The processes under some roots, read once per tick (psutil objects cached between
    ticks)."""

    def __init__(self, psutil: Any, procfs: Any, rescan_s: float = RESCAN_S) -> None:
        self.psutil, self.procfs = psutil, procfs
        self._gone = (psutil.NoSuchProcess, psutil.ZombieProcess)
        self._denied = psutil.AccessDenied
        self._cache: dict[int, _Proc] = {}
        self.proctree = ProcTree(procfs, rescan_s)
        self._reapers: list[int] = []  # the roots' ancestors: where their orphans go
        self._reapers_of: tuple[int, ...] = ()  # the roots they were read for

    def tree_of(
        self,
        roots: Sequence[int],
        now: float,
        known: Sequence[int] = (),
        session: int | None = None,
    ) -> list[Member]:
        """The members under `roots`; with them, the `known` ones (seen before, reparented since)
        that are still the same processes, and for `session` the orphans it left (see the
        module's text)."""
        roots = list(dict.fromkeys(roots))
        starts = {pid: c.start for pid, c in self._cache.items()}
        known = [pid for pid in known if pid in starts]
        self.proctree.refresh([*roots, *known], now)
        adopted = self._adopted(roots, session) if session is not None else []
        rootset = set(roots)

        def accept(pid: int, st: ProcStat) -> bool:
            if pid in rootset or starts.get(pid) == st.start_ticks:
                return True
            return session is not None and st.session == session

        return self.proctree.walk([*roots, *known, *adopted], MAX_PROCESSES, "all", accept)

    def tree(
        self,
        roots: Sequence[int],
        now: float,
        known: Sequence[int] = (),
        session: int | None = None,
    ) -> tuple[JobProcess, ...]:
        """`tree_of`, each member read into a `JobProcess`."""
        members = self.tree_of(roots, now, known, session)
        out = []
        for m in members:
            info = self._read(m, now)
            if info is not None:
                out.append(info)
        listed = {m.pid for m in members}
        for pid in list(self._cache):
            if pid not in listed:
                del self._cache[pid]
        return tuple(out)

    def _adopted(self, roots: list[int], session: int) -> list[int]:
        """Candidates for the session's orphans: where the kernel lists children, the ones the
        roots' ancestors (the first process among them) took in since the last tick; else the
        session's processes in the last parent map."""
        if self.proctree.children_files is False:
            return self.proctree.session_members(session)
        if not self._reapers or self._reapers_of != tuple(roots):
            for r in roots:
                chain = self.proctree.ancestors(r)
                if chain:
                    self._reapers, self._reapers_of = chain, tuple(roots)
                    break
        reapers = self._reapers or [1]
        out: list[int] = []
        for a in reapers:
            out += self.proctree.new_children(a)
        return out

    def _read(self, m: Member, now: float) -> JobProcess | None:
        pid, st = m.pid, m.stat
        c = self._cache.get(pid)
        try:
            if c is None or c.start != st.start_ticks:
                c = self._cache[pid] = _Proc(self.psutil.Process(pid), st.start_ticks)
            p = c.proc

            def get(fn):
                try:
                    return fn()
                except self._denied:
                    return None

            with p.oneshot():
                name = get(p.name)
                cmdline = get(p.cmdline)
                mem = get(p.memory_info)
            if not c.cvd_read:  # the initial environment does not change: read it once
                env = get(p.environ)
                c.cvd = env.get("CUDA_VISIBLE_DEVICES") if env else None
                c.cvd_read = True
        except self._gone:
            self._cache.pop(pid, None)
            return None
        dt = None if c.last_t is None else now - c.last_t
        cpu = None if c.cpu_ticks is None else cpu_pct(c.cpu_ticks, st.cpu_ticks, dt)
        c.last_t, c.cpu_ticks = now, st.cpu_ticks
        return JobProcess(
            pid=pid,
            ppid=st.ppid,
            depth=m.depth,
            name=name,
            cmdline=tuple(cmdline) if cmdline is not None else None,
            cpu_pct=cpu,  # the first reading measures nothing
            rss_bytes=mem.rss if mem is not None else None,
            num_threads=st.num_threads,
            busiest_threads=busiest(c.thread_cpu, m.threads, dt),
            cuda_visible_devices=c.cvd,
        )

    # -- a Slurm job's processes, where `scontrol listpids` does not say (every process) -----
    def pids_in_cgroup_of_job(self, job_id: str) -> list[int]:
        """The processes whose cgroup path names job_<id> (Slurm's proctrack/cgroup)."""
        out = []
        try:
            pids = self.psutil.pids()
        except (OSError, self.psutil.Error):
            return out
        for pid in pids:
            try:
                text = self.procfs.read_text(f"/proc/{pid}/cgroup")
            except OSError:
                continue
            if any(m.group(1) == job_id for m in _CGROUP_JOB.finditer(text)):
                out.append(pid)
        return out

    def pids_with_env(self, name: str, value: str) -> list[int]:
        """The processes whose initial environment sets name=value (readable ones only)."""
        out = []
        try:
            pids = self.psutil.pids()
        except (OSError, self.psutil.Error):
            return out
        needle = f"\0{name}={value}\0"
        for pid in pids:
            try:
                text = self.procfs.read_text(f"/proc/{pid}/environ")
            except OSError:
                continue
            if needle in "\0" + text + "\0":
                out.append(pid)
        return out
