"""What the chain's verdict reads and says: the facts of each layer, what one process loaded,
the fabric manager of an NVSwitch system, and a problem found (frozen data; `judge.py` judges,
`wording.py` words); the facts as a snapshot holds them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import DriverChain, ProcessCuda, Snapshot
from ..model.health import Finding
from .kernel_images import BuildArchs, BuildOnGpus, GpuCapability, judge_builds
from .versions import cuda_tuple, max_cuda_for_driver


@dataclass(frozen=True, slots=True)
class Problem:
    layer: str  # "kernel module", "NVML library", "CUDA runtime", "framework", "toolkit"
    severity: str  # "critical" (broken), "warning", "info"
    text: str  # what is wrong, with the evidence
    error_text: str  # the exact text users see
    next_step: str
    pids: tuple[int, ...] = ()
    code: str = ""  # short id: module_missing, mismatch, nvml_missing, runtime_too_new, ...
    brief: str = ""  # what and what to do, in one sentence (the side panel's alert)

    @property
    def first_error(self) -> str:
        """The first text users see, without the codes and alternatives after it."""
        return self.error_text.split(" (")[0].split(" / ")[0].split("; ")[0]


@dataclass(frozen=True, slots=True)
class LoadedRuntime:
    """What one process loaded, as the verdict needs it."""

    pid: int
    name: str | None
    runtime: str | None  # libcudart's version ("12.8", "13")
    framework_cuda: str | None = None  # torch.version.cuda
    libcuda: str | None = None  # the driver library version it mapped
    libcuda_compat: bool = False  # ... from a forward-compatibility directory
    libcuda_deleted: bool = False  # ... replaced on disk since (an upgrade)


@dataclass(frozen=True, slots=True)
class ChainFacts:
    module_loaded: bool | None  # None: cannot tell
    module_version: str | None
    library_version: str | None  # libnvidia-ml.so.<ver> / NVML's driver version
    library_found: bool | None
    nvml_error: str | None  # the NVML error class name when init failed
    driver_max: tuple[int, int] | None
    processes: tuple[LoadedRuntime, ...] = ()
    datacenter_gpu: bool | None = None
    toolkit: str | None = None  # nvcc's release
    # NVML initialised and named the driver: the kernel side answers, whatever /proc shows
    nvml_answered: bool = False
    # the last layer: each framework build's GPU architectures against the GPUs
    kernels: tuple[BuildOnGpus, ...] = ()
    # whether the mapped libtorch_cuda.so's architectures were read: None where none is mapped,
    # False where one is and they were not (a recording made before they were, a file refused)
    kernels_read: bool | None = None


# Where NVML answers but /proc/driver/nvidia and /sys/module/nvidia are absent, the driver is
# there and not visible from here: WSL2 (the GPU is the Windows host's, reached through
# /dev/dxg, https://docs.nvidia.com/cuda/wsl-user-guide/), a container that does not mount
# /proc/driver, or a mock NVML library.
MODULE_NOT_VISIBLE = "not visible here"
MODULE_NOT_VISIBLE_WHY = (
    "no /proc/driver/nvidia or /sys/module/nvidia, but NVML answers: WSL2, a container or a "
    "mock library; nothing to fix"
)


def module_state(f: ChainFacts) -> str | None:
    """The kernel module layer in words: its version, 'not loaded', 'not visible here', None."""
    if f.module_loaded:
        return f.module_version or "loaded"
    if f.module_loaded is False:
        return MODULE_NOT_VISIBLE if f.nvml_answered else "not loaded"
    return None


# -- the fabric manager layer (NVSwitch systems only) ---------------------------------------------
# A layer of the chain between the kernel module and NVML, judged by the health checks' fabric
# findings (NVIDIA Fabric Manager User Guide,
# https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html).
FABRIC_LAYER = "fabric_manager"  # the `layer` of the health findings that feed it


@dataclass(frozen=True, slots=True)
class FabricFacts:
    """The fabric manager of an NVSwitch system, as the health checks judged it: a layer of the
    chain between the kernel module and NVML. Where there is no NVSwitch there is no such layer
    (None, never "missing")."""

    state: str  # "ok", "broken" (CUDA cannot start: error 802), "warning", "unknown"
    text: str  # the findings' titles, or what was found to be well
    next_step: str = ""
    evidence: tuple[tuple[str, str], ...] = ()  # (text, where it was read)
    gpus: tuple[int, ...] = ()
    ids: tuple[str, ...] = ()  # the health findings behind it


def fabric_facts(findings: Sequence[Finding]) -> FabricFacts | None:
    """The layer from the health findings whose layer is the fabric manager's; None when there
    are none (no NVSwitch: the health checks then give the layer no finding)."""
    mine = [f for f in findings if f.layer == FABRIC_LAYER]
    if not mine:
        return None
    bad = [f for f in mine if f.severity in ("critical", "warning")]
    shown = bad or mine
    state = (
        "broken"
        if any(f.severity == "critical" for f in bad)
        else "warning"
        if bad
        else "ok"
        if all(f.severity == "ok" for f in mine)
        else "unknown"
    )
    return FabricFacts(
        state,
        "; ".join(f.title for f in shown),
        next((f.next_step for f in shown if f.next_step), ""),
        tuple((e.text, e.source) for f in shown for e in f.evidence),
        tuple(sorted({g for f in shown for g in f.gpus})),
        tuple(f.id for f in shown),
    )


def fabric_from_snapshot(snap: Snapshot) -> FabricFacts | None:
    """The layer from the health report a snapshot carries (`Snapshot.health`, the Monitor's
    slow source); None before it was read, in older recordings, and without NVSwitches."""
    health = getattr(snap, "health", None)  # a field of snapshots since health joined the Monitor
    return fabric_facts(health.findings) if health is not None else None


# -- from a snapshot ----------------------------------------------------------------------------
_NVML_CODES = {
    "LibRmVersionMismatch": "LIB_RM_VERSION_MISMATCH",
    "DriverNotLoaded": "DRIVER_NOT_LOADED",
    "LibraryNotFound": "LIBRARY_NOT_FOUND",
}
_DATACENTER = re.compile(r"\b([ABHL]\d{1,3}|GH\d{3}|GB\d{3}|B\d{3}|V100|T4|P100|A[1-9]0)\b")
_CONSUMER = re.compile(r"GeForce|TITAN|Quadro", re.IGNORECASE)


def nvml_error_name(snap: Snapshot) -> str | None:
    """NVML_ERROR_<NAME> of the snapshot's machine-wide NVML failure, when it names one."""
    for e in snap.errors:
        if e.source == "nvml" and e.gpu_index is None and e.code:
            for part, name in _NVML_CODES.items():
                if part in e.code:
                    return name
            return e.code
    return None


def datacenter(names: Sequence[str | None]) -> bool | None:
    """Whether the GPUs are data-centre boards (forward compatibility works there only)."""
    known = [n for n in names if n]
    if not known:
        return None
    if any(_CONSUMER.search(n) for n in known):
        return False
    return True if all(_DATACENTER.search(n) for n in known) else None


def current_chain(snap: Snapshot) -> DriverChain | None:
    """The snapshot's driver chain, unless NVML answered this tick with another driver than the
    library the chain found (read up to a slow-source period ago: the driver changed since, so
    its processes' libraries are not this driver's either)."""
    chain = snap.driver_chain
    if chain is None:
        return None
    live = snap.system.driver_version
    if snap.nvml_available and live and chain.library_version and live != chain.library_version:
        return None
    return chain


# Where the architectures of a mapped build were read (`collect/cuda_libs.py`, `fatbin.py`).
MAPPED_ARCH_SOURCE = "libtorch_cuda.so .nv_fatbin"


def processes_named(pids: Sequence[int], name: str | None) -> str:
    """ "pid 4242 (python)" / "12 processes (pid 1, 2, 3, 4 ...)": who runs one build."""
    shown = ", ".join(str(p) for p in pids[:4]) + (" ..." if len(pids) > 4 else "")
    return (
        f"pid {shown} ({name or '?'})" if len(pids) == 1 else f"{len(pids)} processes (pid {shown})"
    )


def mapped_builds(
    processes: Sequence[ProcessCuda], skip: Sequence[int | tuple[str, ...]] = ()
) -> tuple[tuple[BuildArchs, ...], bool | None]:
    """Each build of the mapped libtorch_cuda.so's whose architectures were read (the
    processes of one build as one), those in `skip` left out (builds a probe in the job said:
    its own list is judged by every view), and whether they were read (None: no process maps
    one). `skip`: the probed processes' pids and arch lists."""
    by_build: dict[tuple, list[ProcessCuda]] = {}
    mapped = unread = 0
    for p in processes:
        lib = p.library("torch_cuda")
        if lib is None or lib.deleted:
            continue
        mapped += 1
        if lib.arch_list is None:
            unread += 1
        elif p.pid not in skip and lib.arch_list not in skip:
            by_build.setdefault((lib.arch_list, p.framework_cuda), []).append(p)
    read = None if not mapped else unread < mapped
    builds = tuple(
        BuildArchs(
            processes_named([p.pid for p in procs], procs[0].name),
            archs,
            MAPPED_ARCH_SOURCE,
            tuple(p.pid for p in procs),
            cuda,
        )
        for (archs, cuda), procs in by_build.items()
    )
    return builds, read


def gpu_capabilities(snap: Snapshot) -> tuple[GpuCapability, ...]:
    """Each GPU whose compute capability NVML said (`nvmlDeviceGetCudaComputeCapability`)."""
    return tuple(
        GpuCapability(g.index, g.static.name, g.static.compute_capability)
        for g in snap.gpus
        if g.static.compute_capability
    )


def facts_from_snapshot(
    snap: Snapshot, toolkit: str | None = None, extra: Sequence[LoadedRuntime] = ()
) -> ChainFacts | None:
    """The chain's facts as a snapshot holds them; None before the chain was read (or while it
    is out of date: `current_chain`)."""
    chain = current_chain(snap)
    if chain is None:
        return None
    s = snap.system
    err = nvml_error_name(snap)
    library = chain.library_version or s.driver_version
    # On disk, or NVML answered; NVML failing for another reason leaves it open.
    found = True if library else (False if err in (None, "LIBRARY_NOT_FOUND") else None)
    driver_max = cuda_tuple(s.cuda_driver_version) or max_cuda_for_driver(library)
    procs = []
    for p in chain.processes:
        rt = p.library("cudart")
        cu = p.library("cuda")
        procs.append(
            LoadedRuntime(
                p.pid,
                p.name,
                rt.version if rt else None,
                p.framework_cuda,
                cu.version if cu else None,
                cu is not None and cu.origin == "compat",
                cu is not None and cu.deleted,
            )
        )
    probed = [x for p in snap.probes or () if p.arch_list for x in (p.pid, p.arch_list)]
    builds, read = mapped_builds(chain.processes, probed)
    return ChainFacts(
        module_loaded=chain.module_loaded,
        module_version=chain.module_version,
        library_version=library,
        library_found=found,
        nvml_error=err,
        driver_max=driver_max,
        processes=(*procs, *extra),
        datacenter_gpu=datacenter([g.static.name for g in snap.gpus]),
        toolkit=toolkit,
        nvml_answered=err is None and snap.nvml_available and bool(s.driver_version),
        kernels=judge_builds(builds, gpu_capabilities(snap)),
        kernels_read=read,
    )
