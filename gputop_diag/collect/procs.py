"""The host's view of GPU processes: `psutil` for each one's own figures, /proc for its threads
and descendants.

psutil's `cpu_percent()` averages since the previous call on the same `Process` object, so the
objects are cached between ticks. A process that vanished between NVML listing it and us reading
it is skipped silently; another user's process shows what can be read.

What a tick reads follows the GPU processes, not the machine (`collect/proctree.py`): each GPU
process's threads from its own /proc/<pid>/task/<tid>/stat (CPU time and name in one read), its
children (dataloader workers, compile workers) and theirs from the kernel's per-thread
`children` files, and each descendant's /proc/<pid>/stat (name, CPU time). Its environment is
read once (CUDA_VISIBLE_DEVICES is the one it started with), and so is its owner (its pod,
container or Slurm job: `owners.py`, from its cgroup and PID namespace). Where the kernel lacks
the `children` files, a parent map of every process stands in, rebuilt at most every
`proctree.RESCAN_S` and at once for a new GPU process.

Where this program runs in a container of its own PID namespace, NVML's pids are the host's (the
driver knows no PID namespace: https://github.com/NVIDIA/nvidia-docker/issues/1483): nothing is
read for them, and a process of this /proc that has the same number is never taken for one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ..model import ChildInfo, ProcessInfo, ThreadInfo
from ..sources import CLOCK_TICKS
from .owners import OwnerCollector, proc_is_the_hosts
from .proctree import Member, ProcStat, ProcTree

BUSIEST_THREADS = 5
MAX_CHILDREN = 64  # descendants listed per GPU process


class _Tracked:
    __slots__ = (
        "proc", "children", "thread_cpu", "last_t", "environ", "environ_denied", "parent"
    )  # fmt: skip

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        # pid -> (start ticks, CPU ticks, name) of each descendant at the last tick
        self.children: dict[int, tuple[int, int, str]] = {}
        self.thread_cpu: dict[int, int] = {}  # tid -> CPU ticks at the last tick
        self.last_t: float | None = None
        self.environ: dict[str, str] | None = None
        self.environ_denied: bool | None = None  # None: not read yet
        # (ppid, its name, its user), read once a ppid
        self.parent: tuple[int, str | None, str | None] | None = None


class ProcessCollector:
    def __init__(self, psutil: Any, procfs: Any, clock: Any) -> None:
        self.psutil, self.procfs, self.clock = psutil, procfs, clock
        self._gone = (psutil.NoSuchProcess, psutil.ZombieProcess)
        self._denied = psutil.AccessDenied
        self._tracked: dict[int, _Tracked] = {}
        self.tree = ProcTree(procfs)
        self.owners = OwnerCollector(procfs, clock)  # each process's, read when first seen
        # Whether this /proc is the host's, where NVML's pids are: read once, when NVML first
        # lists a process (a program's PID namespace and its /proc do not change while it runs)
        self.host_proc: bool | None = None
        self._host_proc_read = False

    def collect(self, pids: Iterable[int]) -> tuple[ProcessInfo, ...]:
        wanted = sorted(set(pids))
        for pid in list(self._tracked):
            if pid not in wanted:
                del self._tracked[pid]
        self.owners.retain(set(wanted))
        if not wanted or not self._nvml_pids_are_ours():
            return ()
        now = self.clock.now()
        self.tree.refresh(wanted, now)
        out = []
        for pid in wanted:
            info = self._read(pid, now)
            if info is not None:
                out.append(info)
        return tuple(out)

    def _nvml_pids_are_ours(self) -> bool:
        """False in a container's PID namespace: NVML's pids are the host's, and a process of
        this /proc with the same number is another process, never to be taken for it (the
        snapshot then carries NVML's figures of it only; `owners.foreign_pids_notice`)."""
        if not self._host_proc_read:
            self.host_proc, self._host_proc_read = proc_is_the_hosts(self.procfs), True
        return self.host_proc is not False

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
            # psutil's first call on a new object answers 0.0 for want of a window: unknown
            cpu = get(p.cpu_percent, None) if t.last_t is not None else get(_prime, p.cpu_percent)
            mem = get(p.memory_info)
            nthreads = get(p.num_threads)
            started = get(p.create_time)
            ppid = get(p.ppid)
            uids = get(p.uids)
        if t.environ_denied is None:  # the environment it started with: read once
            try:
                t.environ, t.environ_denied = p.environ(), False
            except self._denied:
                t.environ, t.environ_denied = None, True
        env = t.environ
        members = self.tree.walk([pid], MAX_CHILDREN + 1, threads="roots")
        root = members[0] if members and members[0].pid == pid else None
        threads = root.threads if root is not None else None
        denied = denied or bool(t.environ_denied) or (root is not None and root.threads_denied)
        dt = None if t.last_t is None else now - t.last_t
        t.last_t = now
        parent_name, parent_user = self._parent(t, ppid)
        return ProcessInfo(
            pid=pid,
            name=name,
            user=user,
            cmdline=tuple(cmdline) if cmdline is not None else None,
            cpu_pct=cpu,
            rss_bytes=mem.rss if mem is not None else None,
            num_threads=nthreads,
            busiest_threads=busiest(t.thread_cpu, threads, dt),
            children=self._children(t, members[1:] if root is not None else [], dt),
            start_time=started,
            cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES") if env is not None else None,
            environ_readable=env is not None,
            access_denied=denied,
            ppid=ppid,
            parent_name=parent_name,
            uid=uids.real if uids is not None else None,
            parent_user=parent_user,
            owner=self.owners.owner(pid, started),
        )

    def _parent(self, t: _Tracked, ppid: int | None) -> tuple[str | None, str | None]:
        """The parent's name and user (the tree view), read again only when the parent
        changed."""
        if not ppid:
            return None, None
        if t.parent is None or t.parent[0] != ppid:
            name = user = None
            try:
                parent = self.psutil.Process(ppid)
                name = parent.name()
                user = parent.username()
            except (*self._gone, self._denied):
                pass
            t.parent = (ppid, name, user)
        return t.parent[1], t.parent[2]

    def _children(self, t: _Tracked, members: list[Member], dt: float | None) -> tuple:
        before, t.children = t.children, {}
        out = []
        for m in members:
            st = m.stat
            prev = before.get(m.pid)
            same = prev is not None and prev[0] == st.start_ticks
            name = prev[2] if same else full_name(self.procfs, m.pid, st.name)
            cpu = cpu_pct(prev[1], st.cpu_ticks, dt) if same else None
            t.children[m.pid] = (st.start_ticks, st.cpu_ticks, name)
            out.append(ChildInfo(pid=m.pid, name=name, cpu_pct=cpu))
        return tuple(out)


def _prime(cpu_percent: Any) -> None:
    """Start psutil's CPU window on a process first seen (its next call averages from here):
    no figure yet."""
    cpu_percent(None)
    return None


def full_name(procfs: Any, pid: int, comm: str) -> str:
    """The process's name as psutil gives it: the kernel keeps 15 characters of it, so a name
    that long is completed from the command line where that starts the same."""
    if len(comm) < 15:
        return comm
    try:
        argv0 = procfs.read_text(f"/proc/{pid}/cmdline").split("\0", 1)[0]
    except OSError:
        return comm
    base = os.path.basename(argv0)
    return base if base.startswith(comm) else comm


def cpu_pct(ticks_before: int, ticks_now: int, dt: float | None) -> float | None:
    """Percent of one core between two readings of CPU ticks `dt` seconds apart."""
    if not dt or dt <= 0:
        return None
    return round(100.0 * max(0, ticks_now - ticks_before) / CLOCK_TICKS / dt, 1)


def busiest(
    prev: dict[int, int], threads: tuple[tuple[int, ProcStat], ...] | None, dt: float | None
) -> tuple[ThreadInfo, ...]:
    """The busiest threads since the last tick; `prev` (tid -> CPU ticks) is updated in place."""
    if not threads:
        return ()
    before = dict(prev)
    prev.clear()
    prev.update((tid, st.cpu_ticks) for tid, st in threads)
    if not dt or dt <= 0:
        return ()
    rates = sorted(
        (
            (max(0, st.cpu_ticks - before[tid]), tid, st.name)
            for tid, st in threads
            if tid in before
        ),
        key=lambda r: (r[0], r[1]),
        reverse=True,
    )
    return tuple(
        ThreadInfo(tid=tid, name=name, cpu_pct=cpu_pct(0, ticks, dt))
        for ticks, tid, name in rates[:BUSIEST_THREADS]
    )


# The variables a process detail shows: what decides which GPUs and how a job talks and runs.
DETAIL_ENV_PREFIXES = ("CUDA_", "NCCL_", "SLURM_", "TORCH_", "PYTORCH_")


def job_environment(psutil: Any, pid: int) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """The CUDA_*, NCCL_*, SLURM_*, TORCH_* and PYTORCH_* variables `pid` started with, sorted;
    or () and why they cannot be read ("permission denied: …", "the process has ended")."""
    try:
        env = psutil.Process(pid).environ()
    except psutil.AccessDenied:
        return (), "permission denied: another user's process (run as root or as its owner)"
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return (), "the process has ended"
    except OSError as e:
        return (), f"not readable: {e.strerror or e}"
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(DETAIL_ENV_PREFIXES))), None


def process_cwd(psutil: Any, pid: int) -> str | None:
    """The working directory of `pid`; None when it has ended or is another user's."""
    try:
        return psutil.Process(pid).cwd()
    except Exception:  # noqa: BLE001 - gone, another user's: no directory to name
        return None


def process_start_time(psutil: Any, pid: int) -> float | None:
    """When `pid` started (epoch s); None when it has ended or cannot be read."""
    try:
        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone or unreadable: said when it is signalled
        return None


def process_exists(psutil: Any, pid: int) -> bool:
    """A process with this pid runs now (it may be another than the one seen before)."""
    return bool(psutil.pid_exists(pid))
