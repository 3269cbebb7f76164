"""The driver -> CUDA runtime -> framework chain as this machine shows it, each layer with where
it was read:

- kernel module: `/proc/driver/nvidia/version` (version, open or proprietary), else
  `/sys/module/nvidia/version`;
- user-space library: `libnvidia-ml.so.<version>` where the loader finds it (`LD_LIBRARY_PATH`
  first, then the system's library directories);
- CUDA runtimes: `/proc/<pid>/maps` of every process we may read (all of them as root), for
  libcudart, libcuda, libtorch_cuda, libnccl and libcudnn, with versions from the file names,
  pip's `nvidia_*_cu1X-<version>.dist-info` and the framework's own `torch/version.py` (read as
  a file, never imported);
- the host toolkit: `nvcc --version`; a chosen interpreter: `--probe-python` runs it.

A process whose runtime is too new never gets a context, so NVML never lists it: that is why
every process is scanned, not only NVML's GPU processes.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..driver.fatbin import FatbinArchs, read_archs
from ..model import CudaLibrary, DriverChain, ProcessCuda
from ..sources import Sources

LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
)
MARKERS = ("libcudart", "libcuda.so", "libtorch_cuda", "libnccl", "libcudnn")
NVCC_PATHS = ("nvcc", "/usr/local/cuda/bin/nvcc")
NVCC_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 60.0

_LIB = re.compile(
    r"/(?P<base>libcudart|libcuda|libnccl|libcudnn|libtorch_cuda)(?:-[0-9a-f]{8})?"
    r"\.so(?:\.(?P<ver>\d+(?:\.\d+)*))?(?P<deleted> \(deleted\))?$"
)
_KIND = {
    "libcudart": "cudart",
    "libcuda": "cuda",
    "libnccl": "nccl",
    "libcudnn": "cudnn",
    "libtorch_cuda": "torch_cuda",
}
_DIST_PKG = {"cudart": "cuda_runtime", "nccl": "nccl", "cudnn": "cudnn"}


@dataclass(frozen=True)
class FoundLib:
    kind: str  # cudart, cuda, nccl, cudnn, torch_cuda
    path: str
    version: str | None
    origin: str  # pip, conda, system, torch-bundled, compat, other
    deleted: bool = False
    arch_list: tuple[str, ...] | None = None  # its .nv_fatbin's architectures; None: not read

    def model(self) -> CudaLibrary:
        return CudaLibrary(self.kind, self.version, self.origin, self.deleted, self.arch_list)


@dataclass(frozen=True)
class FoundProcess:
    pid: int
    name: str | None
    user: str | None
    libs: tuple[FoundLib, ...]
    framework: str | None = None  # "torch 2.9.0+cu130"
    framework_cuda: str | None = None  # torch.version.cuda
    framework_file: str | None = None  # where that was read
    # the GPU architectures of the mapped libtorch_cuda.so (its .nv_fatbin), when asked for
    arch_list: tuple[str, ...] = ()
    arch_source: str | None = None  # where they were read, and how much of it

    def model(self) -> ProcessCuda:
        return ProcessCuda(
            self.pid,
            self.name,
            self.user,
            tuple(lib.model() for lib in self.libs),
            self.framework,
            self.framework_cuda,
        )


@dataclass
class ChainScan:
    """What one read of the machine found (paths included: for the `driver` command, never
    for a snapshot, which carries `chain()` only)."""

    module_version: str | None = None
    module_flavour: str | None = None  # "open", "proprietary"
    module_loaded: bool | None = None
    module_source: str | None = None
    module_text: str | None = None  # the NVRM line
    library_version: str | None = None
    library_path: str | None = None
    processes: list[FoundProcess] = field(default_factory=list)
    scanned: int = 0
    unreadable: int = 0

    def chain(self) -> DriverChain:
        return DriverChain(
            module_version=self.module_version,
            module_flavour=self.module_flavour,
            module_loaded=self.module_loaded,
            library_version=self.library_version,
            processes=tuple(p.model() for p in self.processes),
            scanned=self.scanned,
            unreadable=self.unreadable,
        )


# -- kernel module -------------------------------------------------------------------------------
_NVRM = re.compile(
    r"NVRM version: NVIDIA UNIX (?P<open>Open )?(?:[\w-]+ )?Kernel Module(?: for [\w-]+)?\s+"
    r"(?P<ver>\d+(?:\.\d+)+)"
)


def parse_module_version(text: str) -> tuple[str | None, str | None]:
    """(version, "open"/"proprietary") from /proc/driver/nvidia/version."""
    m = _NVRM.search(text)
    if not m:
        return None, None
    return m.group("ver"), "open" if m.group("open") else "proprietary"


def read_module(sources: Sources, scan: ChainScan) -> None:
    try:
        text = sources.procfs.read_text("/proc/driver/nvidia/version")
    except OSError:
        text = None
    if text is not None:
        ver, flavour = parse_module_version(text)
        scan.module_version, scan.module_flavour = ver, flavour
        scan.module_loaded = True
        scan.module_source = "/proc/driver/nvidia/version"
        scan.module_text = text.splitlines()[0].strip() if text.strip() else None
        return
    try:
        ver = sources.procfs.read_text("/sys/module/nvidia/version").strip()
    except OSError:
        scan.module_loaded = False
        return
    scan.module_version, scan.module_loaded = ver or None, True
    scan.module_source = "/sys/module/nvidia/version"


_NVML_LIB = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)*)")


def read_library(sources: Sources, scan: ChainScan) -> None:
    """The `libnvidia-ml.so.<version>` NVML is loaded from: the first `LD_LIBRARY_PATH`
    directory that holds `libnvidia-ml.so.1` (the dynamic loader looks there before its cache:
    a container's /usr/local/nvidia/lib64, a mock or a copy of the library), else the newest in
    the system's library directories."""
    for d in _ld_library_path(sources):
        found = _nvml_files(sources, d, loadable=True)
        if found:
            _, scan.library_version, scan.library_path = max(found)
            return
    found = [f for d in LIB_DIRS for f in _nvml_files(sources, d)]
    if found:
        _, scan.library_version, scan.library_path = max(found)


def _ld_library_path(sources: Sources) -> list[str]:
    """The absolute directories of this process's LD_LIBRARY_PATH, in order (an empty or
    relative entry means the working directory: not read)."""
    value = sources.environ.get("LD_LIBRARY_PATH", "")
    # colons or semicolons (ld.so(8), LD_LIBRARY_PATH)
    return [d.rstrip("/") or "/" for d in re.split("[:;]", value) if d.startswith("/")]


def _nvml_files(sources: Sources, d: str, loadable: bool = False) -> list[tuple[tuple, str, str]]:
    """(version as numbers, version, path) of each `libnvidia-ml.so.<version>` in `d`;
    `loadable`: none unless `libnvidia-ml.so.1`, the name the loader asks for, is there too."""
    try:
        names = sources.procfs.listdir(d)
    except OSError:
        return []
    found = []
    for n in names:  # a system library directory holds thousands of names: few are NVML's
        m = _NVML_LIB.fullmatch(n) if n.startswith("libnvidia-ml.so.") else None
        if m:
            ver = m.group(1)
            found.append((tuple(int(x) for x in ver.split(".")), ver, f"{d}/{n}"))
    if loadable and "libnvidia-ml.so.1" not in names:
        return []
    return found


# -- processes -----------------------------------------------------------------------------------
def origin_of(path: str) -> str:
    if "/compat/" in path:
        return "compat"
    if "/torch/lib/" in path:
        return "torch-bundled"
    if re.search(r"/(site|dist)-packages/nvidia/", path):
        return "pip"
    if re.search(r"/(ana|mini)?conda\d?/|/mambaforge/|/miniforge\d?/|/envs/[^/]+/lib/", path):
        return "conda"
    if path.startswith(("/usr/", "/lib", "/opt/nvidia/")):
        return "system"
    return "other"


def parse_maps(text: str) -> list[tuple[str, str, str | None, bool]]:
    """(kind, path, version from the file name, deleted) of the CUDA libraries a maps file
    shows, each once, in the order mapped."""
    seen: dict[str, tuple[str, str, str | None, bool]] = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5].strip()
        m = _LIB.search(path)
        if m is None:
            continue
        deleted = bool(m.group("deleted"))
        if deleted:
            path = path[: -len(" (deleted)")]
        seen.setdefault(path, (_KIND[m.group("base")], path, m.group("ver"), deleted))
    return list(seen.values())


def _soname_version(kind: str, ver: str | None, path: str) -> str | None:
    """A file name's version: libcudart.so.12.4.127 -> 12.4.127, libcudart.so.12 -> 12 (major
    only), libcudart.so.11.0 -> 11 (11.x's soname, not its minor), bundled -> major only."""
    if ver is None:
        return None
    parts = ver.split(".")
    if kind == "cudart" and (len(parts) == 2 or "/torch/lib/" in path):
        return parts[0]
    return ver


class _SiteCache:
    """site-packages listings and torch/version.py files, read once per scan."""

    def __init__(self, sources: Sources, archs: bool = False, files: dict | None = None) -> None:
        self.sources = sources
        self.listing: dict[str, list[str]] = {}
        self.torch: dict[str, tuple[str | None, str | None]] = {}
        self.archs: dict[str, FatbinArchs] | None = {} if archs else None
        # (path, size, mtime) -> what its .nv_fatbin held: kept across scans by a `ChainMemo`
        self.files: dict[tuple, FatbinArchs] = {} if files is None else files

    def dist_version(self, path: str, kind: str) -> str | None:
        m = re.search(r"^(.*/(?:site|dist)-packages)/", path)
        pkg = _DIST_PKG.get(kind)
        if not m or pkg is None:
            return None
        site = m.group(1)
        if site not in self.listing:
            try:
                self.listing[site] = self.sources.procfs.listdir(site)
            except OSError:
                self.listing[site] = []
        rx = re.compile(rf"nvidia_{pkg}_cu\d+-(\d+(?:\.\d+)*)\.dist-info")
        for n in self.listing[site]:
            hit = rx.fullmatch(n)
            if hit:
                return hit.group(1)
        return None

    def torch_version(self, torch_lib_path: str) -> tuple[str | None, str | None, str | None]:
        """(torch.__version__, torch.version.cuda, file) from the torch/version.py next to the
        mapped libtorch_cuda.so."""
        m = re.search(r"^(.*/torch)/lib/", torch_lib_path)
        if not m:
            return None, None, None
        f = f"{m.group(1)}/version.py"
        if f not in self.torch:
            try:
                text = self.sources.procfs.read_text(f)
            except OSError:
                text = ""
            ver = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
            cuda = re.search(r"^cuda(?:\s*:\s*[\w\[\]]+)?\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
            self.torch[f] = (ver.group(1) if ver else None, cuda.group(1) if cuda else None)
        v, c = self.torch[f]
        return v, c, f if (v or c) else None

    def torch_archs(self, path: str) -> FatbinArchs | None:
        """The architectures in the .nv_fatbin of the library at `path` (`fatbin.py`: headers
        only), once per path and scan, and once per (path, size, mtime) in `files` (a 1 GB
        library's headers cost some 0.05 s of CPU); None when not asked for."""
        if self.archs is None:
            return None
        if path not in self.archs:
            opener = getattr(self.sources.procfs, "open_binary", None)
            try:
                if opener is None:
                    raise OSError("this source reads no binary files")
                with opener(path) as f:
                    key = (path, *_size_and_mtime(f))
                    if key not in self.files:
                        self.files[key] = read_archs(f)
                    self.archs[path] = self.files[key]
            except OSError as e:
                self.archs[path] = FatbinArchs((), 0, 0, False, f"not readable: {e.strerror or e}")
        return self.archs[path]


def _size_and_mtime(f) -> tuple[int, int | None]:
    """An open file's size and modification time (ns; None where it has no descriptor): a
    library replaced in place is read again."""
    try:
        st = os.fstat(f.fileno())
    except (AttributeError, OSError, io.UnsupportedOperation):
        size = f.seek(0, io.SEEK_END)
        f.seek(0)
        return size, None
    return st.st_size, st.st_mtime_ns


def arch_source(path: str, found: FatbinArchs) -> str:
    """Where a build's architectures were read, in words."""
    name = path.rsplit("/", 1)[-1]
    partial = "" if found.complete else f"; read in part: {found.note}"
    return f"{name} .nv_fatbin, {found.fatbins} fat binaries{partial}"


def _pids(sources: Sources) -> list[int]:
    try:
        names = sources.procfs.listdir("/proc")
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def _who(sources: Sources, pid: int) -> tuple[str | None, str | None]:
    try:
        p = sources.psutil.Process(pid)
        return p.name(), p.username()
    except Exception:  # noqa: BLE001 - gone or hidden: the pid still tells
        return None, None


def scan_processes(
    sources: Sources,
    scan: ChainScan,
    skip: Sequence[int] = (),
    memo: ChainMemo | None = None,
    archs: bool = False,
) -> None:
    """Every readable process whose maps hold a CUDA library. With `memo`, a process read less
    than `memo.rescan_s` ago is not read again (a new process always is). `archs`: also read
    the GPU architectures of each mapped libtorch_cuda.so (`gputop-diag driver`)."""
    cache = _SiteCache(sources, archs, memo.archs if memo is not None else None)
    own = {os.getpid(), *skip} if not sources.simulated else set(skip)
    now = sources.clock.now()
    alive = set()
    for pid in _pids(sources):
        if pid in own:
            continue
        alive.add(pid)
        if memo is not None:
            seen = memo.seen.get(pid)
            if seen is not None and not 0 <= now - seen[0] < memo.rescan_s:
                seen = _unchanged(sources, pid, seen, now)
                if seen is not None:
                    memo.seen[pid] = seen
            if seen is not None and 0 <= now - seen[0] < memo.rescan_s:
                _, state, found, _ = seen
                if state == "unreadable":
                    scan.unreadable += 1
                    continue
                scan.scanned += 1
                if found is not None:
                    scan.processes.append(found)
                continue
        size = _vm_size(sources, pid) if memo is not None else None  # before its maps
        state, found = _read_process(sources, pid, cache)
        if memo is not None and state != "gone":
            memo.seen[pid] = (now, state, found, size)
        if state == "unreadable":
            scan.unreadable += 1
        elif state == "read":
            scan.scanned += 1
            if found is not None:
                scan.processes.append(found)
    if memo is not None:
        for pid in list(memo.seen):
            if pid not in alive:
                del memo.seen[pid]


def _vm_size(sources: Sources, pid: int) -> str | None:
    """The process's virtual memory size, /proc/<pid>/statm's first field (proc(5)); None
    where it cannot be read."""
    try:
        return sources.procfs.read_text(f"/proc/{pid}/statm").split(" ", 1)[0] or None
    except (OSError, ValueError):
        return None


def _unchanged(sources: Sources, pid: int, seen: tuple, now: float) -> tuple | None:
    """A process read without a CUDA library, due to be read again: `seen` renewed at `now`
    when its virtual memory size is the one it had then (mapping a library grows it, so its
    maps cannot hold a new one; statm is a fraction of the cost of its maps, which a process
    with hundreds of libraries has by the hundred KB); else None (its maps are read again).
    A process with CUDA libraries is always read again: an upgrade marks them deleted."""
    _, state, found, size = seen
    if state != "read" or found is not None or size is None:
        return None
    return (now, state, found, size) if _vm_size(sources, pid) == size else None


def unreadable_why(euid: int | None) -> str:
    """Why some processes' /proc/<pid>/maps were refused, for who runs this (`Sources.euid()`;
    None: not known, as for a recording read back). As root, reading another process's maps
    needs ptrace access (proc(5), "/proc/pid/maps"): a container without CAP_SYS_PTRACE, or
    Yama's ptrace_scope 3, refuses it even then."""
    if euid == 0:
        return "not readable (refused even as root: a container without CAP_SYS_PTRACE?)"
    return "not readable (other users': run as root)"


def _read_process(sources: Sources, pid: int, cache: _SiteCache):
    """("read", FoundProcess or None) / ("unreadable", None) / ("gone", None)."""
    try:
        text = sources.procfs.read_text(f"/proc/{pid}/maps")
    except PermissionError:
        return "unreadable", None
    except OSError:
        return "gone", None
    if not any(mk in text for mk in MARKERS):
        return "read", None
    libs = []
    framework = framework_cuda = framework_file = source = None
    arch_list: tuple[str, ...] = ()
    for kind, path, ver, deleted in parse_maps(text):
        version = cache.dist_version(path, kind) or _soname_version(kind, ver, path)
        archs: tuple[str, ...] | None = None  # the library's own, for the snapshot
        if kind == "torch_cuda":
            tv, tc, tf = cache.torch_version(path)
            if tv or tc:
                framework, framework_cuda, framework_file = f"torch {tv or '?'}", tc, tf
            version = tv
            found = None if deleted else cache.torch_archs(path)
            if found is not None:
                arch_list, source = found.arch_list, arch_source(path, found)
                if not found.arch_list:
                    source = f"{path.rsplit('/', 1)[-1]}: {found.note}"
                else:
                    archs = found.arch_list
        if kind == "cudart" and version and "." not in version:
            hint = re.search(r"/cuda-(\d+\.\d+)/", path)
            version = hint.group(1) if hint else version
        libs.append(FoundLib(kind, path, version, origin_of(path), deleted, archs))
    if not libs:
        return "read", None
    name, user = _who(sources, pid)
    return "read", FoundProcess(
        pid, name, user, tuple(libs), framework, framework_cuda, framework_file, arch_list, source
    )


@dataclass
class ChainMemo:
    """What the last scans found per pid, for a reader that scans again every few seconds (the
    Monitor): each process's maps are read when it is new, then every `rescan_s` (a framework
    loads its CUDA libraries after the process starts; an upgrade marks them deleted), or,
    for a process without any, only its statm while its virtual memory size stays the same."""

    rescan_s: float = 60.0
    # pid -> (when, state, FoundProcess, virtual memory size when its maps were read)
    seen: dict[int, tuple] = field(default_factory=dict)
    # (path, size, mtime) -> a libtorch_cuda.so's architectures, read once per file version
    archs: dict[tuple, FatbinArchs] = field(default_factory=dict)


def read_chain(
    sources: Sources, processes: bool = True, memo: ChainMemo | None = None, archs: bool = False
) -> ChainScan:
    """The chain as this machine shows it; `archs`: with each mapped libtorch_cuda.so's GPU
    architectures (headers of its .nv_fatbin: for `gputop-diag driver`, not every tick)."""
    scan = ChainScan()
    read_module(sources, scan)
    read_library(sources, scan)
    if processes:
        scan_processes(sources, scan, memo=memo, archs=archs)
    return scan


# -- the host toolkit and an interpreter ---------------------------------------------------------
def parse_nvcc(text: str) -> str | None:
    """ "Cuda compilation tools, release 12.4, V12.4.131" -> "12.4.131" (or "12.4")."""
    m = re.search(r"release (\d+\.\d+), V(\d+(?:\.\d+)+)", text)
    if m:
        return m.group(2)
    m = re.search(r"release (\d+\.\d+)", text)
    return m.group(1) if m else None


def read_nvcc(sources: Sources) -> tuple[str | None, str | None]:
    """(version, the program that answered) of the host toolkit; (None, None) without one."""
    for prog in NVCC_PATHS:
        try:
            r = sources.run_command([prog, "--version"], NVCC_TIMEOUT_S)
        except (OSError, ValueError):
            continue
        except Exception:  # noqa: BLE001 - a hung nvcc: no toolkit to report
            continue
        if r.returncode == 0:
            v = parse_nvcc(r.stdout)
            if v:
                return v, prog
    return None, None


PROBE = r"""
import json, sys, warnings
out = {"python": sys.version.split()[0], "executable": sys.executable}
try:
    import torch
except Exception as e:
    out["error"] = "import torch: %s: %s" % (type(e).__name__, e)
else:
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:
        out["cudnn"] = None
    try:  # get_arch_list() is [] until CUDA initialises: the build's flags, read without it
        flags = getattr(torch._C, "_cuda_getArchFlags", None)
        out["arch_list"] = (flags() or "").split() if flags is not None else []
    except Exception:
        out["arch_list"] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out["cuda_available"] = bool(torch.cuda.is_available())
            out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
            out["capabilities"] = [
                list(torch.cuda.get_device_capability(i)) for i in range(out["device_count"])
            ]
        except Exception as e:
            out["cuda_available"] = False
            out["error"] = "%s: %s" % (type(e).__name__, e)
    out["warnings"] = [str(w.message) for w in caught]
print("GPUTOP_DIAG_PROBE " + json.dumps(out))
"""


@dataclass(frozen=True)
class Probe:
    interpreter: str
    ok: bool
    result: dict
    error: str | None = None


def probe_python(sources: Sources, interpreter: str, timeout: float = PROBE_TIMEOUT_S) -> Probe:
    """Run `interpreter` in a subprocess: its torch, torch.version.cuda, cuDNN and whether it
    initialises CUDA (with the warning text it gives when it cannot). Never imported here."""
    try:
        r = sources.run_command([interpreter, "-c", PROBE], timeout)
    except FileNotFoundError:
        return Probe(interpreter, False, {}, f"{interpreter}: no such program")
    except PermissionError:
        return Probe(interpreter, False, {}, f"{interpreter}: not executable")
    except Exception as e:  # noqa: BLE001 - a timeout is the answer, said plainly
        if type(e).__name__ == "TimeoutExpired":
            return Probe(interpreter, False, {}, f"{interpreter} did not answer in {timeout:g} s")
        return Probe(interpreter, False, {}, f"{interpreter}: {type(e).__name__}: {e}")
    line = next((x for x in r.stdout.splitlines() if x.startswith("GPUTOP_DIAG_PROBE ")), None)
    if line is None:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        return Probe(interpreter, False, {}, f"{interpreter} exited {r.returncode}: {tail[0]}")
    try:
        doc = json.loads(line.split(" ", 1)[1])
    except ValueError:
        return Probe(interpreter, False, {}, f"{interpreter} printed an unreadable answer")
    return Probe(interpreter, "torch" in doc, doc, doc.get("error"))
