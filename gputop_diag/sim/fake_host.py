"""Stand-ins for the `psutil` module and for /proc, over the simulated machine.

Results are namedtuples with psutil's field names; failures raise psutil's own exception
classes and the OSErrors real files raise, so the host collector runs its real code here.
"""

from __future__ import annotations

import contextlib
from collections import namedtuple

import psutil as _real

from .machine import HOST_CPUS, SimMachine, SimProc

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
pcputimes = namedtuple("pcputimes", "user system children_user children_system iowait")

GIB = 1024**3
HOST_MEM = 2015 * GIB


class FakeProcess:
    def __init__(self, machine: SimMachine, pid: int) -> None:
        self._m = machine
        self.pid = pid
        self._last: float | None = None
        self._proc()

    def _proc(self) -> SimProc:
        p = self._m.procs.get(self.pid)
        if p is None or self.pid in self._m.vanished:
            raise _real.NoSuchProcess(self.pid)
        return p

    def _private(self) -> SimProc:
        p = self._proc()
        if p.denied:
            raise _real.AccessDenied(self.pid, p.name)
        return p

    @contextlib.contextmanager
    def oneshot(self):
        yield

    def name(self) -> str:
        return self._proc().name

    def username(self) -> str:
        return self._proc().user

    def cmdline(self) -> list[str]:
        return list(self._private().cmdline)

    def environ(self) -> dict[str, str]:
        return dict(self._private().environ)

    def _cpu_now(self) -> float:
        st = self._m.state()
        return sum(st["cpu"][self.pid].values())

    def cpu_percent(self, interval=None) -> float:
        self._proc()
        now = self._m.clock.now()
        first = self._last is None
        self._last = now
        return 0.0 if first else round(self._cpu_now(), 1)

    def memory_info(self):
        p = self._proc()
        rss = {"rank": 11.5, "worker": 3.2, "cotenant": 4.1}.get(p.role, 0.6) * GIB
        return pmem(int(rss), int(rss * 3), int(rss * 0.1), 4 << 20, 0, int(rss * 0.9), 0)

    def num_threads(self) -> int:
        p = self._proc()
        return {"rank": 73, "worker": 9}.get(p.role, len(p.threads))

    def threads(self):
        p = self._private()
        self._m.state()
        return [pthread(th.tid, th.cum_s * 0.85, th.cum_s * 0.15) for th in p.threads]

    def cpu_times(self):
        p = self._proc()
        self._m.state()
        total = sum(th.cum_s for th in p.threads)
        return pcputimes(total * 0.85, total * 0.15, 0.0, 0.0, 0.0)

    def children(self, recursive: bool = False):
        p = self._proc()
        return [
            FakeProcess(self._m, c)
            for c in p.children
            if c in self._m.procs and c not in self._m.vanished
        ]

    def create_time(self) -> float:
        return self._proc().create_time

    def status(self) -> str:
        return "running" if self._cpu_now() > 50 else "sleeping"

    def is_running(self) -> bool:
        return self.pid in self._m.procs and self.pid not in self._m.vanished

    def ppid(self) -> int:
        return self._proc().ppid


class FakePsutil:
    NoSuchProcess = _real.NoSuchProcess
    AccessDenied = _real.AccessDenied
    ZombieProcess = _real.ZombieProcess
    TimeoutExpired = _real.TimeoutExpired
    Error = _real.Error

    def __init__(self, machine: SimMachine) -> None:
        self._m = machine

    def cpu_count(self, logical: bool = True) -> int:
        return HOST_CPUS if logical else HOST_CPUS // 2

    def cpu_percent(self, interval=None, percpu: bool = False):
        st = self._m.state()
        total = st["host_cpu"]
        if not percpu:
            return round(total, 1)
        t = st["t"]
        out = []
        for k in range(HOST_CPUS):
            v = total + self._m.n("cpu", 200 + k, t)
            out.append(round(min(100.0, max(0.0, v)), 1))
        return out

    def cpu_times_percent(self, interval=None, percpu: bool = False):
        st = self._m.state()
        busy = st["host_cpu"]
        iow = min(st["iowait"], 100 - busy)
        return scputimes(
            busy * 0.8, 0.0, busy * 0.2, max(0.0, 100 - busy - iow), iow, 0.0, 0.1, 0.0, 0.0, 0.0
        )

    def getloadavg(self):
        st = self._m.state()
        running = st["host_cpu"] / 100 * HOST_CPUS + st["iowait"] / 100 * HOST_CPUS
        return (round(running, 2), round(running * 0.96, 2), round(running * 0.9, 2))

    def virtual_memory(self):
        used = 180 * GIB + sum(
            FakeProcess(self._m, p).memory_info().rss
            for p in self._m.procs
            if p not in self._m.vanished
        )
        used = min(used, HOST_MEM - GIB)
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

    def disk_io_counters(self, perdisk: bool = False):
        self._m.state()
        r, w = int(self._m.disk_read), int(self._m.disk_write)
        return sdiskio(r // 131072, w // 131072, r, w, r // 10**6, w // 10**6, 0, 0, 0)

    def pids(self) -> list[int]:
        return sorted([1] + [p for p in self._m.procs if p not in self._m.vanished])

    def pid_exists(self, pid: int) -> bool:
        return pid == 1 or (pid in self._m.procs and pid not in self._m.vanished)

    def Process(self, pid: int) -> FakeProcess:  # noqa: N802 - psutil's name
        return FakeProcess(self._m, pid)


class FakeProcFS:
    """/proc and /sys files of the simulated machine, in the kernel's formats."""

    def __init__(self, machine: SimMachine) -> None:
        self._m = machine

    def exists(self, path: str) -> bool:
        try:
            self.read_text(path)
        except PermissionError:
            return True
        except OSError:
            return False
        return True

    def read_text(self, path: str) -> str:
        m = self._m
        parts = path.strip("/").split("/")
        if parts[:2] == ["proc", "pressure"] and len(parts) == 3:
            return self._pressure(parts[2], path)
        if parts[:3] == ["proc", "driver", "nvidia"]:
            return self._driver(parts[3:], path)
        if parts[0] == "proc" and len(parts) >= 3 and parts[1].isdigit():
            pid = int(parts[1])
            p = m.procs.get(pid)
            if p is None or pid in m.vanished:
                raise FileNotFoundError(2, "No such file or directory", path)
            return self._pid_file(p, parts[2:], path)
        raise FileNotFoundError(2, "No such file or directory", path)

    def _pressure(self, res: str, path: str) -> str:
        if res not in ("cpu", "io", "memory"):
            raise FileNotFoundError(2, "No such file or directory", path)
        st = self._m.state()
        host = st["prof"]["host"]
        if res == "io":
            some = max(0.0, host.get("io_psi", 0.0) + self._m.n("iowait", 7, st["t"]))
        elif res == "cpu":
            some = max(0.0, (st["host_cpu"] - 70) * 0.8)
        else:
            some = 0.0
        full = some * 0.55
        lines = [
            f"some avg10={some:.2f} avg60={some * 0.9:.2f} avg300={some * 0.7:.2f} "
            f"total={int(some * 1e6)}"
        ]
        lines.append(
            f"full avg10={full:.2f} avg60={full * 0.9:.2f} avg300={full * 0.7:.2f} "
            f"total={int(full * 1e6)}"
        )
        return "\n".join(lines) + "\n"

    def _pid_file(self, p: SimProc, rest: list[str], path: str) -> str:
        if rest == ["comm"]:
            return p.name[:15] + "\n"
        if rest[0] == "task" and len(rest) == 3 and rest[2] == "comm":
            for th in p.threads:
                if str(th.tid) == rest[1]:
                    return th.name[:15] + "\n"
            raise FileNotFoundError(2, "No such file or directory", path)
        if rest == ["environ"]:
            if p.denied:
                raise PermissionError(13, "Permission denied", path)
            return "".join(f"{k}={v}\0" for k, v in p.environ.items())
        if rest == ["maps"]:
            if p.denied:
                raise PermissionError(13, "Permission denied", path)
            return self._maps(p)
        if rest == ["cmdline"]:
            return "\0".join(p.cmdline) + "\0"
        raise FileNotFoundError(2, "No such file or directory", path)

    def _maps(self, p: SimProc) -> str:
        site = "/opt/conda/envs/train/lib/python3.11/site-packages"
        rt = p.cuda_runtime or "12"
        libs = [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            f"{site}/torch/lib/libtorch_cuda.so",
            f"{site}/nvidia/cuda_runtime/lib/libcudart.so.{rt}",
            f"{site}/nvidia/cublas/lib/libcublas.so.{rt}",
        ]
        if p.cuda_runtime is None and p.role == "rank":
            libs.append(f"/usr/lib/x86_64-linux-gnu/libcuda.so.{self._m.driver_version}")
        out = []
        for k, lib in enumerate(libs):
            base = 0x7F0000000000 + k * 0x1000000
            out.append(
                f"{base:x}-{base + 0x200000:x} r-xp 00000000 103:02 {9000 + k}          {lib}"
            )
        return "\n".join(out) + "\n"

    def _driver(self, rest: list[str], path: str) -> str:
        m = self._m
        if m.no_driver:
            raise FileNotFoundError(2, "No such file or directory", path)
        if rest == ["version"]:
            return (
                f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                f"{m.driver_version}  Release Build  (dvs-builder@U16-I3-B03-4-3)  "
                f"Tue Nov 26 01:14:39 UTC 2024\n"
                f"GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
            )
        if len(rest) == 3 and rest[0] == "gpus" and rest[2] == "information":
            for g in m.gpus:
                d, b, dev = g.bus
                if rest[1] == f"{d:04x}:{b:02x}:{dev:02x}.0":
                    return (
                        f"Model: \t\t {g.model['name']}\nIRQ:   \t\t {140 + g.index}\n"
                        f"GPU UUID: \t {g.uuid}\nVideo BIOS: \t {g.model['vbios']}\n"
                        f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\n"
                        f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {rest[1]}\n"
                        f"Device Minor: \t {g.minor}\nGPU Firmware: \t {m.driver_version}\n"
                        f"GPU Excluded:\t No\n"
                    )
        raise FileNotFoundError(2, "No such file or directory", path)
