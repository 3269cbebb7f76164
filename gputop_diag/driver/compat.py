"""Driver -> CUDA runtime -> framework compatibility: the minimum-driver table and the verdict.

The model (CUDA Toolkit release notes, "CUDA Compatibility"):

- the *driver* (kernel module + user-space libcuda/libnvidia-ml) has a maximum CUDA version
  (`nvidia-smi`'s "CUDA Version", `nvmlSystemGetCudaDriverVersion`); it is not the toolkit;
- a *runtime* (libcudart, shipped with the application or the framework) of major X runs on any
  driver at or above that major's floor (minor-version compatibility), without the newer
  driver's features and without JIT of newer PTX;
- a newer-major runtime needs a newer driver, or the forward-compatibility package
  (`cuda-compat-X-Y`: `/usr/local/cuda-X.Y/compat/libcuda.so.*`) on data-centre GPUs;
- the kernel module and the user-space library must be the same version: after a package
  upgrade without a reboot, NVML fails with "Driver/library version mismatch".

Pure functions; `collect/cuda_libs.py` reads the machine.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import Snapshot
from ..model.health import Finding

# Minimum Linux x86_64 driver per CUDA toolkit release: "Toolkit driver version", the driver
# bundled with each toolkit. Source: NVIDIA CUDA Toolkit Release Notes, Table 3 "CUDA Toolkit
# and Corresponding Driver Versions",
# https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html (there is no CUDA 12.7).
TABLE_SOURCE = (
    "NVIDIA CUDA Toolkit Release Notes, Table 3 (CUDA Toolkit and Corresponding Driver "
    "Versions, Linux x86_64): https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/"
)
TOOLKIT_MIN_DRIVER: tuple[tuple[str, str], ...] = (
    ("13.2 Update 2", "595.71.05"),
    ("13.2 Update 1", "595.58.03"),
    ("13.2 GA", "595.45.04"),
    ("13.1 Update 1", "590.48.01"),
    ("13.1 GA", "590.44.01"),
    ("13.0 Update 2", "580.95.05"),
    ("13.0 Update 1", "580.82.07"),
    ("13.0 GA", "580.65.06"),
    ("12.9 Update 1", "575.57.08"),
    ("12.9 GA", "575.51.03"),
    ("12.8 Update 1", "570.124.06"),
    ("12.8 GA", "570.26"),
    ("12.6 Update 3", "560.35.05"),
    ("12.6 Update 2", "560.35.03"),
    ("12.6 GA", "560.28.03"),
    ("12.5 Update 1", "555.42.06"),
    ("12.5 GA", "555.42.02"),
    ("12.4 Update 1", "550.54.15"),
    ("12.4 GA", "550.54.14"),
    ("12.3 Update 1", "545.23.08"),
    ("12.3 GA", "545.23.06"),
    ("12.2 Update 2", "535.104.05"),
    ("12.2 Update 1", "535.86.09"),
    ("12.2 GA", "535.54.03"),
    ("12.1 Update 1", "530.30.02"),
    ("12.1 GA", "530.30.02"),
    ("12.0 Update 1", "525.85.12"),
    ("12.0 GA", "525.60.13"),
    ("11.8 GA", "520.61.05"),
    ("11.7 Update 1", "515.48.07"),
    ("11.7 GA", "515.43.04"),
    ("11.6 Update 2", "510.47.03"),
    ("11.6 GA", "510.39.01"),
    ("11.5 GA", "495.29.05"),
    ("11.4 Update 4", "470.82.01"),
    ("11.4 Update 2", "470.57.02"),
    ("11.4 GA", "470.42.01"),
    ("11.3 GA", "465.19.01"),
    ("11.2 Update 2", "460.32.03"),
    ("11.2 GA", "460.27.03"),
    ("11.1 Update 1", "455.32"),
    ("11.1 GA", "455.23"),
    ("11.0.3", "450.51.06"),
    ("11.0.2 GA", "450.51.05"),
)
# Minor-version compatibility: the lowest driver a runtime of each major runs on.
MVC_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580"}

# The texts users see (CUDA runtime API, PyTorch's c10/cuda/CUDAFunctions.cpp, nvidia-smi).
ERR_INSUFFICIENT = "CUDA driver version is insufficient for CUDA runtime version"
ERR_TORCH_TOO_OLD = (
    "The NVIDIA driver on your system is too old (found version {found}). Please update your "
    "GPU driver by downloading and installing a new version from the URL: "
    "http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to "
    "install a PyTorch version that has been compiled with your version of the CUDA driver."
)
ERR_NO_DRIVER_TORCH = (
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
    "installed a driver from http://www.nvidia.com/Download/index.aspx"
)
ERR_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"
ERR_SMI_NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
    "that the latest NVIDIA driver is installed and running."
)
ERR_NVML_MISSING = "NVML Shared Library Not Found"
ERR_COMPAT_HW = "forward compatibility was attempted on non supported HW"  # 804
ERR_SYSTEM_MISMATCH = "system has unsupported display driver / cuda driver combination"  # 803
ERR_PTX = "the provided PTX was compiled with an unsupported toolchain"  # 222
# On an NVSwitch system before the fabric manager has configured the switches and registered the
# GPUs (CUDA Runtime API, cudaErrorSystemNotReady = 802; NVIDIA Fabric Manager User Guide,
# https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html).
ERR_SYSTEM_NOT_READY = (
    "CUDA error 802: system not yet initialized (cudaErrorSystemNotReady, "
    "CUDA_ERROR_SYSTEM_NOT_READY)"
)


def version_tuple(v: str | None) -> tuple[int, ...] | None:
    """ "570.124.06" -> (570, 124, 6); None when not a version."""
    if not v:
        return None
    m = re.match(r"^\s*(\d+(?:\.\d+)*)", v)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def cuda_tuple(v: str | int | None) -> tuple[int, int] | None:
    """ "12.8" / "12.8.90" / 12080 (NVML's form) -> (12, 8); "12" -> None (minor unknown)."""
    if v is None:
        return None
    if isinstance(v, int):
        return (v // 1000, (v % 1000) // 10) if v > 0 else None
    t = version_tuple(v)
    return (t[0], t[1]) if t and len(t) >= 2 else None


def ga_min_driver() -> dict[tuple[int, int], str]:
    """(major, minor) -> the minimum driver of its GA release."""
    out: dict[tuple[int, int], str] = {}
    for release, driver in TOOLKIT_MIN_DRIVER:
        c = cuda_tuple(release.split()[0])
        if c is not None and ("GA" in release or c not in out):
            out[c] = driver
    return out


def min_driver_for(cuda: tuple[int, int]) -> str | None:
    """The minimum driver of toolkit `cuda` (its GA release); None when not in the table."""
    return ga_min_driver().get(cuda)


def max_cuda_for_driver(driver: str | None) -> tuple[int, int] | None:
    """The newest CUDA whose toolkit driver is at or below `driver` (for when NVML cannot say)."""
    d = version_tuple(driver)
    if d is None:
        return None
    fits = [c for c, need in ga_min_driver().items() if version_tuple(need) <= d]
    return max(fits) if fits else None


def mvc_ok(runtime_major: int, driver: str | None) -> bool | None:
    """Whether minor-version compatibility lets a runtime of this major run on `driver`."""
    floor, d = MVC_FLOOR.get(runtime_major), version_tuple(driver)
    if floor is None or d is None:
        return None
    return d >= version_tuple(floor)


@dataclass(frozen=True, slots=True)
class RuntimeVerdict:
    status: str  # "ok", "mvc" (runs under minor-version compatibility), "compat", "too_new"
    text: str


def runtime_verdict(
    runtime: str | None,
    driver_max: tuple[int, int] | None,
    driver: str | None,
    forward_compat: bool = False,
) -> RuntimeVerdict | None:
    """Can a runtime of version `runtime` ("12.8" or just "13") create a context on a driver
    `driver` whose maximum CUDA is `driver_max`? None when either side is unknown."""
    rt = version_tuple(runtime)
    if rt is None or driver_max is None:
        return None
    major = rt[0]
    minor = rt[1] if len(rt) >= 2 else None
    dmax = f"{driver_max[0]}.{driver_max[1]}"
    shown = f"{major}.{minor}" if minor is not None else f"{major}.x"
    if major < driver_max[0] or (major == driver_max[0] and (minor or 0) <= driver_max[1]):
        return RuntimeVerdict("ok", f"runtime {shown} <= driver's CUDA {dmax}")
    if forward_compat:
        return RuntimeVerdict(
            "compat",
            f"runtime {shown} > driver's CUDA {dmax}, through the forward-compatibility package",
        )
    if major == driver_max[0] and mvc_ok(major, driver):
        return RuntimeVerdict(
            "mvc",
            f"runtime {shown} > driver's CUDA {dmax}, same major: runs under minor-version "
            f'compatibility (no newer-driver features; newer PTX fails: "{ERR_PTX}")',
        )
    return RuntimeVerdict("too_new", f"runtime {shown} > driver's CUDA {dmax}")


# -- the chain's verdict ------------------------------------------------------------------------
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


DRIVER_DOWNLOAD = "https://www.nvidia.com/Download/index.aspx"


# -- the fabric manager layer (NVSwitch systems only) ---------------------------------------------
FABRIC_LAYER = "fabric_manager"  # the `layer` of the health findings that feed it
# The layer's state in words, as `gputop-diag driver` and the Driver pane say it
FABRIC_STATE_WORDS = {
    "ok": "ok",
    "broken": "BROKEN (error 802)",
    "warning": "WARNING",
    "unknown": "not fully checked",
}


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


def fabric_problem(fabric: FabricFacts | None) -> Problem | None:
    if fabric is None or fabric.state in ("ok", "unknown"):
        return None
    broken = fabric.state == "broken"
    return Problem(
        "fabric manager",
        "critical" if broken else "warning",
        fabric.text,
        ERR_SYSTEM_NOT_READY,
        fabric.next_step or "systemctl status nvidia-fabricmanager",
        code="fabric_manager",
        brief=f"{fabric.text.split('; ')[0]}: {fabric.next_step}"
        if fabric.next_step
        else fabric.text,
    )


def judge_chain(f: ChainFacts, fabric: FabricFacts | None = None) -> tuple[Problem, ...]:
    """The problems of the chain, from the host layer upward (debugging starts at the host).
    `fabric`: the fabric manager of an NVSwitch system (`fabric_facts`), judged between the
    kernel module and NVML; None where there is no NVSwitch or it was not read."""
    out = list(_judge_chain(f))
    problem = fabric_problem(fabric)
    if problem is None or any(p.code in _NO_FABRIC_BELOW for p in out):
        return tuple(out)
    # host layer first: the kernel module's problems, the fabric manager's, the layers above
    below = [p for p in out if p.layer == "kernel module"]
    return (*below, problem, *(p for p in out if p.layer != "kernel module"))


# No driver, or no module: nothing above the host layer is judged (the fabric manager needs it).
_NO_FABRIC_BELOW = ("no_driver", "module_not_loaded")


def _judge_chain(f: ChainFacts) -> tuple[Problem, ...]:
    out: list[Problem] = []
    if f.library_found is False and not f.module_loaded and not f.nvml_answered:
        out.append(
            Problem(
                "NVML library",
                "critical",
                "no NVIDIA driver: neither the kernel module (/proc/driver/nvidia) nor the "
                "user-space library libnvidia-ml.so.1 is present",
                f"{ERR_NVML_MISSING} (pynvml); {ERR_NO_DRIVER_TORCH} (PyTorch)",
                "make sure this machine has an NVIDIA GPU (`lspci | grep -i nvidia`), "
                f"then install the driver ({DRIVER_DOWNLOAD} or the distribution's packages); "
                "in a container, run it with the NVIDIA container toolkit (`--gpus all`)",
                code="no_driver",
            )
        )
        return tuple(out)
    if (f.module_loaded is False and not f.nvml_answered) or f.nvml_error == "DRIVER_NOT_LOADED":
        out.append(
            Problem(
                "kernel module",
                "critical",
                "the NVIDIA kernel module is not loaded"
                + (
                    f" (user-space library {f.library_version} installed)"
                    if f.library_version
                    else ""
                ),
                ERR_SMI_NO_DRIVER,
                "`sudo modprobe nvidia`; if it fails, `journalctl -k | grep -i nvrm` says why "
                "(a kernel updated without the module rebuilt by DKMS, Secure Boot refusing an "
                "unsigned module, nouveau holding the GPU)",
                code="module_not_loaded",
                brief="the NVIDIA kernel module is not loaded: `sudo modprobe nvidia`, then the "
                "kernel log says why it was not",
            )
        )
        return tuple(out)
    if f.library_found is False:
        out.append(
            Problem(
                "NVML library",
                "critical",
                f"the kernel module {f.module_version or ''} is loaded but the user-space "
                "library libnvidia-ml.so.1 is missing",
                ERR_NVML_MISSING,
                "reinstall the driver's user-space packages of the same version as the module "
                "(e.g. libnvidia-compute / nvidia-utils); in a container, the NVIDIA container "
                "toolkit mounts them",
                code="nvml_missing",
                brief="the kernel module is loaded but libnvidia-ml.so.1 is missing: reinstall "
                "the driver's user-space packages",
            )
        )
    mismatch = (
        f.module_version is not None
        and f.library_version is not None
        and version_tuple(f.module_version) != version_tuple(f.library_version)
    )
    if mismatch or f.nvml_error == "LIB_RM_VERSION_MISMATCH":
        first_step = ""
        if not mismatch:
            versions = "the kernel module and the user-space library differ"
            cause = "the driver packages changed while another module stayed loaded"
        elif version_tuple(f.module_version) < version_tuple(f.library_version):
            versions = (
                f"kernel module {f.module_version} is older than the user-space library "
                f"{f.library_version}"
            )
            cause = "the driver packages were upgraded while the old module stayed loaded"
        else:
            versions = (
                f"kernel module {f.module_version} is newer than the user-space library "
                f"{f.library_version}"
            )
            cause = (
                "an older user-space library runs under a newer module (packages downgraded, "
                "or a container bringing its own driver libraries)"
            )
            first_step = (
                f"install the user-space packages of {f.module_version} (in a container: "
                "use the host's libraries through the NVIDIA container toolkit), or "
            )
        out.append(
            Problem(
                "kernel module",
                "critical",
                f"{versions}: {cause}; no CUDA program can start until both are one version",
                f"{ERR_MISMATCH}"
                + (f" / NVML library version: {f.library_version}" if f.library_version else ""),
                first_step
                + "reboot, or when the GPUs are idle reload the modules (`sudo rmmod nvidia_uvm "
                "nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia`); the kernel log "
                "shows `NVRM: API mismatch`; pin the driver packages so unattended upgrades "
                "cannot do it again",
                code="mismatch",
                brief=f"{versions}: {first_step}reboot (or reload the modules when the GPUs are "
                "idle)",
            )
        )
    broken_pair = mismatch or f.nvml_error == "LIB_RM_VERSION_MISMATCH"
    # One version for the runtimes: the driver's maximum CUDA is the user-space library's
    # (libcuda answers it), so under a mismatch they are judged against the library.
    driver = (f.library_version or f.module_version) if broken_pair else f.module_version
    driver = driver or f.library_version
    found = f"{f.driver_max[0] * 1000 + f.driver_max[1] * 10}" if f.driver_max else "?"
    too_new: list[LoadedRuntime] = []
    for p in f.processes:
        rt = p.runtime or p.framework_cuda
        if (
            p.runtime
            and p.framework_cuda
            and version_tuple(p.runtime)
            and len(version_tuple(p.runtime)) < 2
        ):
            rt = p.framework_cuda  # the framework says the minor the soname does not
        v = runtime_verdict(rt, f.driver_max, driver, p.libcuda_compat)
        if v is None:
            continue
        if v.status == "too_new":
            too_new.append(p)
        elif v.status == "compat" and f.datacenter_gpu is False:
            out.append(
                Problem(
                    "CUDA runtime",
                    "critical",
                    f"pid {p.pid} ({p.name or '?'}) uses the forward-compatibility libcuda "
                    f"{p.libcuda or ''} on a GPU that does not support it",
                    f"{ERR_COMPAT_HW} (CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, 804)",
                    "forward compatibility works only on data-centre GPUs: upgrade the driver "
                    "instead, or use a framework build for the driver's CUDA",
                    (p.pid,),
                    "compat_hw",
                    f"pid {p.pid} uses the forward-compatibility package on a GPU without it: "
                    "upgrade the driver instead",
                )
            )
        elif v.status == "mvc":
            out.append(
                Problem(
                    "CUDA runtime",
                    "info",
                    f"pid {p.pid} ({p.name or '?'}): {v.text}",
                    ERR_PTX,
                    "works for most programs; upgrade the driver to get the newer features",
                    (p.pid,),
                    "mvc",
                )
            )
        if (
            p.libcuda
            and not p.libcuda_compat
            and f.module_version
            and version_tuple(p.libcuda) != version_tuple(f.module_version)
        ):
            out.append(
                Problem(
                    "CUDA runtime",
                    "critical" if not p.libcuda_deleted else "warning",
                    f"pid {p.pid} ({p.name or '?'}) mapped libcuda {p.libcuda}"
                    + (" (since replaced on disk)" if p.libcuda_deleted else "")
                    + f" but the kernel module is {f.module_version}",
                    f"{ERR_SYSTEM_MISMATCH} (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, 803)",
                    "restart the process after the reboot or module reload that makes both the "
                    "same version; in a container, do not bake libcuda into the image",
                    (p.pid,),
                    "libcuda_mismatch",
                    f"pid {p.pid} mapped libcuda {p.libcuda}, the kernel module is "
                    f"{f.module_version}: restart it once both are one version",
                )
            )
    if too_new:
        need = _needed(too_new)
        pids = tuple(p.pid for p in too_new)
        who = ", ".join(
            f"pid {p.pid} ({p.name or '?'}) runtime {p.framework_cuda or p.runtime}"
            for p in too_new[:3]
        )
        dmax = f"{f.driver_max[0]}.{f.driver_max[1]}" if f.driver_max else "?"
        what = f"the driver library {driver}" if broken_pair and driver else "the driver"
        if not broken_pair:
            what += f" {driver or '?'}"
        until = (
            " (and until the module/library mismatch above is fixed no runtime starts at all)"
            if broken_pair
            else ""
        )
        out.append(
            Problem(
                "CUDA runtime",
                "critical",
                f"{who}: newer than {what} supports (CUDA {dmax}){until}; "
                "minor-version compatibility does not cross a major version, so it cannot "
                "create a CUDA context and never appears on a GPU",
                f"{ERR_INSUFFICIENT} (cudaErrorInsufficientDriver, 35); PyTorch: "
                + ERR_TORCH_TOO_OLD.format(found=found).split(". Please")[0],
                f"upgrade the driver to {need} or newer, or install a framework build for CUDA "
                f"{dmax} or older (e.g. `pip install torch --index-url "
                f"https://download.pytorch.org/whl/cu{dmax.replace('.', '')}`), or on a "
                "data-centre GPU the forward-compatibility package (cuda-compat)",
                pids,
                "runtime_too_new",
                f"{who} is newer than {what} supports (CUDA {dmax}): it "
                f"cannot create a CUDA context; next: a driver >= {need}, or a framework build "
                f"for CUDA <= {dmax}",
            )
        )
    if f.toolkit and f.driver_max:
        tk = cuda_tuple(f.toolkit)
        if tk is not None and tk > f.driver_max:
            out.append(
                Problem(
                    "toolkit",
                    "warning" if tk[0] > f.driver_max[0] else "info",
                    f"the host toolkit (nvcc {f.toolkit}) is newer than the driver's CUDA "
                    f"{f.driver_max[0]}.{f.driver_max[1]}: programs built with it "
                    + ("fail to start" if tk[0] > f.driver_max[0] else "run under MVC"),
                    ERR_INSUFFICIENT,
                    "frameworks bring their own runtime; for code built here, upgrade the "
                    "driver or use the toolkit matching it",
                    code="toolkit_too_new",
                )
            )
    return tuple(out)


def _needed(procs: Sequence[LoadedRuntime]) -> str:
    """The minimum driver for the newest runtime among `procs` (the table, GA release)."""
    best: tuple[int, int] | None = None
    major_only: int | None = None
    for p in procs:
        c = cuda_tuple(p.framework_cuda) or cuda_tuple(p.runtime)
        if c is not None:
            best = max(best, c) if best else c
        else:
            t = version_tuple(p.runtime)
            if t:
                major_only = max(major_only or 0, t[0])
    if best is None and major_only is not None:
        best = (major_only, 0)
    need = min_driver_for(best) if best else None
    if need is None and best is not None:
        floor = MVC_FLOOR.get(best[0])
        return f"the {floor} branch" if floor else f"a driver supporting CUDA {best[0]}"
    return need or "a newer driver"


def status_of(problems: Sequence[Problem]) -> str:
    """ "broken" (something cannot work), "warnings", or "ok"."""
    if any(p.severity == "critical" for p in problems):
        return "broken"
    if any(p.severity == "warning" for p in problems):
        return "warnings"
    return "ok"


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


def current_chain(snap: Snapshot):
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
    )
