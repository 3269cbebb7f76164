"""/proc, /sys and /dev of the simulated machine, in the kernel's own formats.

`read_text` raises the OSErrors real files raise: FileNotFoundError for what does not exist,
PermissionError for another user's private files, IsADirectoryError for directories. It also
serves the `torch/version.py` of the processes' Python environment, which says which CUDA the
framework was built for.

Each process has its threads under /proc/<pid>/task/<tid>/ (`stat`, `comm`, and `children`: the
children that thread started, as a kernel with CONFIG_PROC_CHILDREN lists them). A child is
listed under its parent's main thread unless `forked_by` names another thread; with
`children_files` False the `children` files are missing, as on a kernel built without them.
Who each process runs for (its `cgroup`, the `NSpid:` of its `status`, the kubelet's and
Docker's files of its pod or container) comes from `owners.py`.
"""

from __future__ import annotations

import errno
import io
import os

from ..sources import CLOCK_TICKS
from .machine import HOST_CPUS, SimMachine
from .owners import SimOwners
from .population import SITE, SimProc, SimThread

# Where a distribution installs the driver's user-space libraries (collect/cuda_libs.py reads
# the same list).
LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
)

_PSI = ("cpu", "io", "memory")


def _missing(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


def _denied(path: str) -> PermissionError:
    return PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)


def _directory(path: str) -> IsADirectoryError:
    return IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)


_USER_SHARE = 0.85  # of a process's CPU time spent in user mode (as `fake_psutil` says)
_PATHS_MAX = 8192


def _parse(path: str) -> tuple[list[str], int | None, list[str]]:
    """A path's parts; for /proc/<pid>/..., the pid and the parts after it (else None and []).
    The readers ask for the same paths every tick: `FakeProcFS.read_text` keeps each parse."""
    if path.startswith("/proc/") and "//" not in path:  # the most read: one process's
        parts = path[1:].split("/")
    else:
        parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "proc" and parts[1].isdigit():
        return parts, int(parts[1]), parts[2:]
    return parts, None, []


class FakeProcFS:
    def __init__(self, machine: SimMachine, children_files: bool = True) -> None:
        self._m = machine
        self.children_files = children_files  # False: a kernel without CONFIG_PROC_CHILDREN
        self.forked_by: dict[int, int] = {}  # child pid -> the parent's thread that started it
        self._tids: dict[int, dict[str, SimThread]] = {}  # pid -> its threads by tid
        self._paths: dict[str, tuple] = {}  # path -> `_parse(path)`
        self.owners = SimOwners(machine)  # cgroups, PID namespaces, pods' and containers' files

    def exists(self, path: str) -> bool:
        try:
            self.read_text(path)
        except OSError as e:  # a private file, a directory or a device node still exists
            return e.errno != errno.ENOENT
        return True

    def _health(self):
        """The machine's health surface (sim/health.py): the PCI tree, InfiniBand, modules,
        processes in D state; None on a machine built without one."""
        return getattr(self._m, "health", None)

    def listdir(self, path: str) -> list[str]:
        m = self._m
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["var"]:
            names = self.owners.listdir(path)
            if names is not None:
                return names
        health = self._health()
        if health is not None:
            if len(parts) == 3 and parts[0] == "proc" and parts[1].isdigit():
                p = m.alive(int(parts[1]))
                if p is None:
                    raise _missing(path)
                names = health.pid_listdir(p, parts[2:], path)
                if names is not None:
                    return names
            names = health.listdir(path)
            if names is not None:
                return names
        if parts == ["proc"]:
            live = [str(pid) for pid in m.procs if m.alive(pid)]
            return [*live, "pressure", "driver", "loadavg"]
        if parts == ["proc", "driver", "nvidia", "gpus"] and m.module_version is not None:
            return [g.proc_bus_id for g in m.gpus]
        if len(parts) == 3 and parts[0] == "proc" and parts[1].isdigit() and parts[2] == "task":
            p = m.alive(int(parts[1]))
            if p is None:
                raise _missing(path)
            if p.denied:  # a hardened /proc: another user's threads are not listed
                raise _denied(path)
            return [str(th.tid) for th in p.threads]
        if "/" + "/".join(parts) in LIB_DIRS:
            return self._libs("/" + "/".join(parts))
        if "/" + "/".join(parts) == SITE:
            return self._site()
        try:
            self.read_text(path)
        except IsADirectoryError:
            return []
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)

    def read_text(self, path: str) -> str:
        m = self._m
        parsed = self._paths.get(path)
        if parsed is None:
            if len(self._paths) >= _PATHS_MAX:
                self._paths.clear()
            parsed = self._paths[path] = _parse(path)
        parts, pid, rest = parsed
        if pid is not None:
            p = m.alive(pid)
            if p is None:
                text = self.owners.read(path)  # the kernel's kthreadd, PID 2
                if text is not None:
                    return text
                raise _missing(path)
            if len(rest) == 3 and rest[0] == "task":
                th = self._thread(p, rest[1])
                if th is None:
                    raise _missing(path)
                return self._task_file(p, th, rest[2], path)
            if not rest:
                raise _directory(path)
            return self._pid_file(p, list(rest), path)
        health = self._health()
        if health is not None and parts[:1] in (["sys"], ["proc"]):
            text = health.read(path)
            if text is not None:
                return text
        if parts in (["proc"], ["proc", "pressure"], ["proc", "driver"], ["sys"], ["dev"]):
            raise _directory(path)
        if parts[:2] == ["proc", "pressure"] and len(parts) == 3 and parts[2] in _PSI:
            return self._pressure(parts[2])
        if parts[:3] == ["proc", "driver", "nvidia"] or parts[:3] == ["sys", "module", "nvidia"]:
            return self._driver(parts, path)
        if parts[:1] == ["dev"]:
            return self._dev(parts, path)
        if parts[:4] == ["sys", "bus", "pci", "devices"]:
            return self._pci(parts[4:], path)
        if parts == ["proc", "loadavg"]:
            st = m.state()
            la = (st["host_cpu"] + st["iowait"]) / 100 * HOST_CPUS
            return f"{la:.2f} {la * 0.96:.2f} {la * 0.9:.2f} 3/2101 {max(m.procs, default=1)}\n"
        if path.startswith(SITE + "/torch/version.py"):
            return self._torch_version()
        text = self.owners.read(path)  # /proc/self/status, Docker's config.v2.json
        if text is not None:
            return text
        raise _missing(path)

    # -- pressure stall information ----------------------------------------------------------
    def _pressure(self, res: str) -> str:
        self._m.state()
        a = self._m.psi[res]
        lines = []
        for kind, avgs, total in (
            ("some", a["some"], a["total"][0]),
            ("full", a["full"], a["total"][1]),
        ):
            lines.append(
                f"{kind} avg10={avgs[0]:.2f} avg60={avgs[1]:.2f} avg300={avgs[2]:.2f} "
                f"total={int(total)}"
            )
        return "\n".join(lines) + "\n"

    # -- processes ---------------------------------------------------------------------------
    def _pid_file(self, p: SimProc, rest: list[str], path: str) -> str:
        if rest == ["stat"]:
            return self._stat(p)
        if rest == ["comm"]:
            return p.name[:15] + "\n"
        if rest == ["cmdline"]:
            return "\0".join(p.cmdline) + "\0"
        if rest == ["status"]:
            return self._status(p)
        if rest == ["cgroup"]:  # world-readable, as the kernel makes it
            return self.owners.cgroup(p)
        if rest[0] == "task":
            if len(rest) <= 2 and (len(rest) == 1 or self._thread(p, rest[1]) is not None):
                raise _directory(path)
            raise _missing(path)
        if rest == ["environ"]:
            if p.denied:
                raise _denied(path)
            return "".join(f"{k}={v}\0" for k, v in p.environ.items())
        if rest == ["maps"]:
            if p.denied:
                raise _denied(path)
            return self._maps(p)
        health = self._health()
        if health is not None:
            text = health.pid_file(p, rest, path)
            if text is not None:
                return text
        raise _missing(path)

    def _task_file(self, p: SimProc, th: SimThread, name: str, path: str) -> str:
        """/proc/<pid>/task/<tid>/<name>: a thread's comm, stat and children."""
        if name == "children":
            if p.denied:
                raise _denied(path)
            if self.children_files:
                return self._children(p, th) if p.children else ""
        elif name == "stat":
            if p.denied:
                raise _denied(path)
            return self._stat(p, th)
        elif name == "comm":
            return th.name[:15] + "\n"
        raise _missing(path)

    def _status(self, p: SimProc) -> str:
        uid = 1001 if p.user == "alice" else 1002
        ns = "\t".join(str(n) for n in self.owners.ns_pids(p))
        return (
            f"Name:\t{p.name[:15]}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{p.pid}\n"
            f"Ngid:\t0\nPid:\t{p.pid}\nPPid:\t{p.ppid}\nTracerPid:\t0\n"
            f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
            f"NStgid:\t{ns}\nNSpid:\t{ns}\nThreads:\t{len(p.threads)}\n"
        )

    def _stat(self, p: SimProc, th: SimThread | None = None) -> str:
        """/proc/<pid>/stat (proc(5)), or a thread's task/<tid>/stat: comm in parentheses (it may
        hold spaces and ')'), then state, ppid, pgrp, session, ..., utime and stime (fields 14
        and 15, clock ticks), ..., num_threads (20), starttime (22, clock ticks)."""
        m = self._m
        with m.lock:
            m.state()  # CPU time integrated up to now
            cpu_s = p.cpu_s if th is None else th.cum_s
        user = int(cpu_s * _USER_SHARE * CLOCK_TICKS)
        system = int(cpu_s * CLOCK_TICKS) - user
        start = int((p.create_time - m.boot_time) * CLOCK_TICKS)
        tid, name = (p.pid, p.name) if th is None else (th.tid, th.name)
        health = getattr(m, "health", None)
        state = "S" if health is None else health.state(tid)
        return (
            f"{tid} ({name[:15]}) {state} {p.ppid} {p.pid} {p.pid} 0 -1 4194560 0 0 0 0 {user} "
            f"{system} 0 0 20 0 {len(p.threads)} 0 {start} 0 0\n"
        )

    def _thread(self, p: SimProc, tid: str) -> SimThread | None:
        by_tid = self._tids.get(p.pid)
        if by_tid is None or len(by_tid) != len(p.threads):
            by_tid = self._tids[p.pid] = {str(th.tid): th for th in p.threads}
        return by_tid.get(tid)

    def _children(self, p: SimProc, th: SimThread) -> str:
        """task/<tid>/children: the live children this thread started, each followed by a
        space, as the kernel writes them."""
        if not p.children:
            return ""
        main = p.threads[0].tid if p.threads else p.pid
        by, alive = self.forked_by, self._m.alive
        if not by and th.tid != main:  # every child was started by the main thread
            return ""
        return "".join(
            [f"{c} " for c in p.children if by.get(c, main) == th.tid and alive(c) is not None]
        )

    def _maps(self, p: SimProc) -> str:
        rt = p.cuda_runtime or "12"
        libs = [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            f"{SITE}/torch/lib/libtorch_cpu.so",
            f"{SITE}/torch/lib/libtorch_cuda.so",
            f"{SITE}/nvidia/cuda_runtime/lib/libcudart.so.{rt}",
            f"{SITE}/nvidia/cublas/lib/libcublas.so.{rt}",
            f"{SITE}/nvidia/nccl/lib/libnccl.so.2",
        ]
        if p.role in ("rank", "small", "cotenant"):
            mod = self._m.module_version
            if mod is not None and mod != self._m.driver_version:
                # started before the driver packages were upgraded: the old libcuda, gone on disk
                libs.append(f"/usr/lib/x86_64-linux-gnu/libcuda.so.{mod} (deleted)")
            else:
                libs.append(f"/usr/lib/x86_64-linux-gnu/libcuda.so.{self._m.driver_version}")
        out = []
        for k, lib in enumerate(libs):
            base = 0x7F3A00000000 + k * 0x1000000
            for off, perms in ((0, "r--p"), (0x200000, "r-xp")):
                lo = base + off
                out.append(
                    f"{lo:012x}-{lo + 0x200000:012x} {perms} {off:08x} 103:02 {9000 + k:<10}"
                    f"               {lib}"
                )
        return "\n".join(out) + "\n"

    def _libs(self, d: str) -> list[str]:
        """A library directory: the driver's user-space libraries (libnvidia-ml, libcuda) where
        the driver is installed, in /usr/lib/x86_64-linux-gnu."""
        names = ["libc.so.6", "libm.so.6"]
        if d == LIB_DIRS[0] and not self._m.no_driver:
            v = self._m.driver_version
            names += ["libnvidia-ml.so.1", f"libnvidia-ml.so.{v}"]
            names += ["libcuda.so.1", f"libcuda.so.{v}"]
        return names

    def open_binary(self, path: str):
        """The simulated libtorch_cuda.so's bytes (its .nv_fatbin: `SimFaults.torch_arch_list`);
        any other binary file is missing."""
        if path == f"{SITE}/torch/lib/libtorch_cuda.so":
            return io.BytesIO(self._m.torch_cuda_image(self._torch_cuda()))
        raise _missing(path)

    def _torch_cuda(self) -> str:
        return next((p.torch_cuda for p in self._m.procs.values() if p.cuda_runtime), "12.8")

    def _site(self) -> list[str]:
        """The jobs' site-packages: pip's CUDA wheels of the framework's CUDA."""
        cuda = self._torch_cuda()
        major = cuda.split(".")[0]
        runtime = {"12.8": "12.8.90", "13.0": "13.0.96"}.get(cuda, f"{cuda}.0")
        tag = "cu" + cuda.replace(".", "")
        return [
            "torch",
            "nvidia",
            f"torch-2.9.0+{tag}.dist-info",
            f"nvidia_cuda_runtime_cu{major}-{runtime}.dist-info",
            f"nvidia_nccl_cu{major}-2.27.3.dist-info",
            f"nvidia_cublas_cu{major}-{cuda}.1.3.dist-info",
            "numpy",
        ]

    def _torch_version(self) -> str:
        cuda = self._torch_cuda()
        tag = "cu" + cuda.replace(".", "")
        return (
            "from typing import Optional\n\n"
            "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']\n"
            f"__version__ = '2.9.0+{tag}'\n"
            "debug = False\n"
            f"cuda: Optional[str] = '{cuda}'\n"
            "git_version = '0fabc3ba44823f257e70ce397d989c8de5e362c1'\n"
            "hip: Optional[str] = None\n"
            "xpu: Optional[str] = None\n"
        )

    # -- driver ------------------------------------------------------------------------------
    def _driver(self, parts: list[str], path: str) -> str:
        m = self._m
        if m.no_driver or m.module_version is None:  # no module loaded: no /proc/driver/nvidia
            raise _missing(path)
        if parts[:3] == ["sys", "module", "nvidia"]:
            if parts[3:] == ["version"]:
                return m.module_version + "\n"
            raise _directory(path) if len(parts) == 3 else _missing(path)
        rest = parts[3:]
        if rest in ([], ["gpus"]):
            raise _directory(path)
        if rest == ["version"]:
            return (
                f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                f"{m.module_version}  Release Build  (dvs-builder@U16-I3-B03-4-3)  "
                f"Tue Nov 26 01:14:39 UTC 2024\n"
                f"GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
            )
        if len(rest) >= 2 and rest[0] == "gpus":
            g = next((g for g in m.gpus if g.proc_bus_id == rest[1]), None)
            if g is None:
                raise _missing(path)
            if len(rest) == 2:
                raise _directory(path)
            if rest[2:] == ["information"]:
                return (
                    f"Model: \t\t {g.model['name']}\nIRQ:   \t\t {140 + g.index}\n"
                    f"GPU UUID: \t {g.uuid}\nVideo BIOS: \t {g.model['vbios']}\n"
                    f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\n"
                    f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {g.proc_bus_id}\n"
                    f"Device Minor: \t {g.minor}\nGPU Firmware: \t {m.module_version}\n"
                    f"GPU Excluded:\t No\n"
                )
        raise _missing(path)

    def _pci(self, rest: list[str], path: str) -> str:
        """/sys/bus/pci/devices/<bus>/: a two-socket host, the first half of the GPUs on node 0
        and its CPUs, the second half on node 1."""
        m = self._m
        g = next((g for g in m.gpus if rest and g.proc_bus_id == rest[0]), None)
        if g is None:
            raise _missing(path)
        if len(rest) == 1:
            raise _directory(path)
        node = 0 if g.index < max(1, len(m.gpus) // 2) else 1
        half = HOST_CPUS // 2
        if rest[1:] == ["numa_node"]:
            return f"{node}\n"
        if rest[1:] == ["local_cpulist"]:
            lo = node * half
            return f"{lo}-{lo + half - 1}\n"
        raise _missing(path)

    def _dev(self, parts: list[str], path: str) -> str:
        m = self._m
        names = set() if m.no_driver else {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
        names |= {f"nvidia{g.minor}" for g in m.gpus}
        if len(parts) == 2 and parts[1] in names:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), path)  # a character device
        raise _missing(path)
