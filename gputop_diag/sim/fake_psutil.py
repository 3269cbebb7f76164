"""A stand-in for the `psutil` module over the simulated machine.

Results are namedtuples with psutil's field names; failures raise psutil's own exception classes.
`cpu_percent` keeps psutil's semantics: the module-level call averages since the previous call,
and `Process.cpu_percent()` returns 0.0 on its first call on a new object and then the average
since the previous call on that object, so a collector must keep its `Process` objects.
Another user's process shows its name, CPU, memory and start time, but not its command line,
environment or threads (a hardened /proc), like the real module raising AccessDenied.
"""

from __future__ import annotations

import contextlib
from collections import namedtuple

import psutil as _real

from .machine import HOST_CPUS, SimMachine
from .population import SimProc

scputimes = namedtuple(
    "scputimes", "user nice system idle iowait irq softirq steal guest guest_nice"
)
svmem = namedtuple(
    "svmem", "total available percent used free active inactive buffers cached shared slab"
)
sswap = namedtuple("sswap", "total used free percent sin sout")
sdiskio = namedtuple(
    "sdiskio",
    "read_count write_count read_bytes write_bytes read_time "
    "write_time read_merged_count write_merged_count busy_time",
)
pmem = namedtuple("pmem", "rss vms shared text lib data dirty")
pthread = namedtuple("pthread", "id user_time system_time")
puids = namedtuple("puids", "real effective saved")
pcputimes = namedtuple("pcputimes", "user system children_user children_system iowait")

GIB = 1024**3
HOST_MEM = 2015 * GIB
_RSS_GIB = {"rank": 11.5, "worker": 3.2, "cotenant": 4.1, "launcher": 0.2}
_USER_SHARE = 0.85  # of a process's CPU time spent in user mode


class FakeProcess:
    def __init__(self, machine: SimMachine, pid: int) -> None:
        self._m = machine
        self.pid = pid
        self._last: tuple[float, float] | None = None  # (time, cpu seconds) at the last call
        self._p = self._proc()

    def __repr__(self) -> str:
        return f"psutil.Process(pid={self.pid}, name={self._p.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeProcess) and other.pid == self.pid

    def __hash__(self) -> int:
        return hash(self.pid)

    def _proc(self) -> SimProc:
        p = self._m.alive(self.pid)
        if p is None:
            raise _real.NoSuchProcess(self.pid)
        return p

    def _private(self) -> SimProc:
        p = self._proc()
        if p.denied:
            raise _real.AccessDenied(self.pid, p.name)
        return p

    def oneshot(self):
        return contextlib.nullcontext()  # nothing to cache: every read is already one lookup

    def name(self) -> str:
        return self._proc().name

    def username(self) -> str:
        return self._proc().user

    def cmdline(self) -> list[str]:
        return list(self._private().cmdline)

    def environ(self) -> dict[str, str]:
        return dict(self._private().environ)

    def exe(self) -> str:
        self._private()
        return "/opt/conda/envs/train/bin/python3.11"

    def cwd(self) -> str:
        return f"/home/{self._private().user}/llm"

    def ppid(self) -> int:
        return self._proc().ppid

    def uids(self):
        uid = self._m.uid_of(self._proc().user)
        return puids(uid, uid, uid)

    def parent(self):
        pp = self._proc().ppid
        return FakeProcess(self._m, pp) if self._m.alive(pp) else None

    def create_time(self) -> float:
        return self._proc().create_time

    def _cpu_s(self) -> float:
        p = self._proc()
        with self._m.lock:
            self._m.state()  # integrate up to now
            return p.cpu_s

    def cpu_percent(self, interval=None) -> float:
        now, cum = self._m.clock.now(), self._cpu_s()
        if interval:  # psutil blocks for `interval`; here: the rate at this moment
            return round(sum(self._m.state()["cpu"].get(self.pid, {}).values()), 1)
        last, self._last = self._last, (now, cum)
        if last is None or now <= last[0]:
            return 0.0
        return round(100.0 * (cum - last[1]) / (now - last[0]), 1)

    def cpu_times(self):
        total = self._cpu_s()
        return pcputimes(total * _USER_SHARE, total * (1 - _USER_SHARE), 0.0, 0.0, 0.0)

    def memory_info(self):
        p = self._proc()
        rss = int(_RSS_GIB.get(p.role, 0.6) * GIB)
        return pmem(rss, rss * 3, rss // 10, 4 << 20, 0, int(rss * 0.9), 0)

    def memory_percent(self) -> float:
        return 100.0 * self.memory_info().rss / HOST_MEM

    def num_threads(self) -> int:
        return len(self._proc().threads)

    def threads(self):
        p = self._private()
        self._m.state()
        return [
            pthread(th.tid, th.cum_s * _USER_SHARE, th.cum_s * (1 - _USER_SHARE))
            for th in p.threads
        ]

    def children(self, recursive: bool = False):
        p = self._proc()
        out, todo = [], list(p.children)
        while todo:
            pid = todo.pop(0)
            c = self._m.alive(pid)
            if c is None:
                continue
            out.append(FakeProcess(self._m, pid))
            if recursive:
                todo.extend(c.children)
        return out

    def status(self) -> str:
        rate = sum(self._m.state()["cpu"].get(self._proc().pid, {}).values())
        return _real.STATUS_RUNNING if rate > 50 else _real.STATUS_SLEEPING

    def is_running(self) -> bool:
        return self._m.alive(self.pid) is not None

    def as_dict(self, attrs=None, ad_value=None) -> dict:
        names = attrs or ("pid", "name", "username", "cmdline", "create_time", "num_threads")
        out = {}
        for n in names:
            try:
                v = getattr(self, n)
                out[n] = v() if callable(v) else v
            except _real.AccessDenied:
                out[n] = ad_value
        return out


class FakePsutil:
    NoSuchProcess = _real.NoSuchProcess
    AccessDenied = _real.AccessDenied
    ZombieProcess = _real.ZombieProcess
    TimeoutExpired = _real.TimeoutExpired
    Error = _real.Error
    STATUS_RUNNING = _real.STATUS_RUNNING
    STATUS_SLEEPING = _real.STATUS_SLEEPING
    STATUS_ZOMBIE = _real.STATUS_ZOMBIE
    LINUX = True
    version_info = _real.version_info
    __version__ = _real.__version__

    def __init__(self, machine: SimMachine) -> None:
        self._m = machine
        self._last: dict[str, tuple[float, float, float]] = {}  # per caller kind

    def _since_last(self, kind: str) -> tuple[float, float]:
        """Host busy and iowait %, averaged since the previous call of this kind."""
        with self._m.lock:  # collectors may run in several threads
            st = self._m.state()
            now = st["t"]
            cum = (self._m.host_busy_pct_s, self._m.host_iowait_pct_s)
            last = self._last.get(kind)
            self._last[kind] = (now, *cum)
        if last is None or now <= last[0]:
            return st["host_cpu"], st["iowait"]
        dt = now - last[0]
        return (cum[0] - last[1]) / dt, (cum[1] - last[2]) / dt

    def cpu_count(self, logical: bool = True) -> int:
        return HOST_CPUS if logical else HOST_CPUS // 2

    def cpu_percent(self, interval=None, percpu: bool = False):
        busy, _ = self._since_last("percpu" if percpu else "cpu")
        if not percpu:
            return round(busy, 1)
        spread = self._m.noise_series("cpu", range(200, 200 + HOST_CPUS), self._m.state()["t"])
        mean = sum(spread) / HOST_CPUS
        return [round(min(100.0, max(0.0, busy + d - mean)), 1) for d in spread]

    def cpu_times_percent(self, interval=None, percpu: bool = False):
        busy, iow = self._since_last("times")
        iow = min(iow, 100.0 - busy)
        row = scputimes(
            busy * 0.8,
            0.0,
            busy * 0.19,
            max(0.0, 100 - busy - iow),
            iow,
            0.0,
            busy * 0.01,
            0.0,
            0.0,
            0.0,
        )
        return [row] * HOST_CPUS if percpu else row

    def getloadavg(self):
        st = self._m.state()
        running = (st["host_cpu"] + st["iowait"]) / 100 * HOST_CPUS
        return (round(running, 2), round(running * 0.96, 2), round(running * 0.9, 2))

    def boot_time(self) -> float:
        return self._m.boot_time

    def virtual_memory(self):
        rss = sum(
            int(_RSS_GIB.get(p.role, 0.6) * GIB)
            for p in self._m.procs.values()
            if self._m.alive(p.pid)
        )
        used = min(180 * GIB + rss, HOST_MEM - GIB)
        avail = HOST_MEM - used
        return svmem(
            HOST_MEM,
            avail,
            round(100 * used / HOST_MEM, 1),
            used,
            avail // 2,
            used,
            avail // 2,
            2 * GIB,
            avail // 2,
            GIB,
            4 * GIB,
        )

    def swap_memory(self):
        return sswap(8 * GIB, 0, 8 * GIB, 0.0, 0, 0)

    def disk_io_counters(self, perdisk: bool = False, nowrap: bool = True):
        r, w = self._m.disk_bytes()
        row = sdiskio(r // 131072, w // 131072, r, w, r // 10**6, w // 10**6, 0, 0, r // 10**6)
        return {"nvme0n1": row} if perdisk else row

    def pids(self) -> list[int]:
        return sorted([1, *(p for p in self._m.procs if self._m.alive(p))])

    def pid_exists(self, pid: int) -> bool:
        return pid == 1 or self._m.alive(pid) is not None

    def Process(self, pid: int | None = None) -> FakeProcess:  # noqa: N802 - psutil's name
        if pid is None:
            raise _real.AccessDenied(msg="the simulator has no process of its own")
        return FakeProcess(self._m, pid)

    def process_iter(self, attrs=None, ad_value=None):
        for pid in self.pids():
            if pid == 1:
                continue
            try:
                p = FakeProcess(self._m, pid)
            except _real.NoSuchProcess:
                continue
            if attrs is not None:
                p.info = p.as_dict(attrs, ad_value)
            yield p
