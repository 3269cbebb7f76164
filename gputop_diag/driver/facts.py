"""What the chain's verdict reads and says: the facts of each layer, what one process loaded,
and a problem found (frozen data; `judge.py` judges, `wording.py` words)."""

from __future__ import annotations

from dataclasses import dataclass


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
