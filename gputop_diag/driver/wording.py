"""The chain's problems in words: the texts users see, and for each problem the layer, the
severity, what is wrong, the next step and the side panel's one sentence, as data.

`judge.py` and `kernels.py` pick the problems and name their facts; `problem(key, pids,
**facts)` (`problem.py`) turns one into a `Problem` with this table's words. A template
names facts in braces (`str.format`); a fact that is None or empty shows as "?" unless its entry
says otherwise (`missing`); a part is a piece of text named in the templates, either a fixed
template or one that depends on whether a fact is there (`When`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

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

# Without a kernel image for the GPU (CUDA Runtime API cudaErrorNoKernelImageForDevice = 209;
# PyTorch's torch.cuda._check_capability warning,
# https://github.com/pytorch/pytorch/blob/main/torch/cuda/__init__.py).
ERR_NO_KERNEL_IMAGE = "CUDA error: no kernel image is available for execution on the device"
ERR_TORCH_CAPABILITY = (
    "{gpu_name} with CUDA capability sm_{sm} is not compatible with the current PyTorch "
    "installation"
)

DRIVER_DOWNLOAD = "https://www.nvidia.com/Download/index.aspx"


class When(NamedTuple):
    """A part whose words depend on whether `fact` is there (true: a version, a flag set)."""

    fact: str
    then: str
    otherwise: str = ""


class Wording(NamedTuple):
    layer: str
    severity: str
    text: str
    error_text: str
    next_step: str
    brief: str = ""
    code: str = ""  # the problem's code, when it is not the table's key (a variant's)
    parts: Mapping[str, str | When] = MappingProxyType({})
    missing: Mapping[str, str] = MappingProxyType({})  # a missing fact's words, not "?"


_MISMATCH = Wording(
    "kernel module",
    "critical",
    "{versions}: {cause}; no CUDA program can start until both are one version",
    ERR_MISMATCH + "{nvml_library}",
    "{first_step}reboot, or when the GPUs are idle reload the modules (`sudo rmmod nvidia_uvm "
    "nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia`); the kernel log shows "
    "`NVRM: API mismatch`; pin the driver packages so unattended upgrades cannot do it again",
    "{versions}: {first_step}reboot (or reload the modules when the GPUs are idle)",
    code="mismatch",
    parts={
        "versions": "the kernel module and the user-space library differ",
        "cause": "the driver packages changed while another module stayed loaded",
        "first_step": "",
        "nvml_library": When("library", " / NVML library version: {library}"),
    },
)
_LIBCUDA_MISMATCH = Wording(
    "CUDA runtime",
    "critical",
    "pid {pid} ({name}) mapped libcuda {libcuda}{replaced} but the kernel module is {module}",
    f"{ERR_SYSTEM_MISMATCH} (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, 803)",
    "restart the process after the reboot or module reload that makes both the same version; "
    "in a container, do not bake libcuda into the image",
    "pid {pid} mapped libcuda {libcuda}, the kernel module is {module}: restart it once both "
    "are one version",
    code="libcuda_mismatch",
    parts={"replaced": When("deleted", " (since replaced on disk)")},
)
_RUNTIME_TOO_NEW = Wording(
    "CUDA runtime",
    "critical",
    "{who}: newer than {what} supports (CUDA {dmax}){until}; minor-version compatibility does "
    "not cross a major version, so it cannot create a CUDA context and never appears on a GPU",
    f"{ERR_INSUFFICIENT} (cudaErrorInsufficientDriver, 35); PyTorch: "
    + ERR_TORCH_TOO_OLD.split(". Please")[0],
    "upgrade the driver to {need} or newer, or install a framework build for CUDA {dmax} or "
    "older (e.g. `pip install torch --index-url https://download.pytorch.org/whl/cu{cu}`), or "
    "on a data-centre GPU the forward-compatibility package (cuda-compat)",
    "{who} is newer than {what} supports (CUDA {dmax}): it cannot create a CUDA context; next: "
    "a driver >= {need}, or a framework build for CUDA <= {dmax}",
    code="runtime_too_new",
    parts={"what": "the driver {driver}", "until": ""},
)
_TOOLKIT_TOO_NEW = Wording(
    "toolkit",
    "info",
    "the host toolkit (nvcc {toolkit}) is newer than the driver's CUDA {dmax}: programs built "
    "with it run under MVC",
    ERR_INSUFFICIENT,
    "frameworks bring their own runtime; for code built here, upgrade the driver or use the "
    "toolkit matching it",
    code="toolkit_too_new",
)
_FABRIC = Wording(
    "fabric manager",
    "critical",
    "{text}",
    ERR_SYSTEM_NOT_READY,
    "{next}",
    "{brief}",
    code="fabric_manager",
    parts={
        "next": When("next_step", "{next_step}", "systemctl status nvidia-fabricmanager"),
        "brief": When("next_step", "{title}: {next_step}", "{text}"),
    },
    missing={"text": "", "title": ""},
)

# Each problem, host layer first, by its key: a variant of a problem (other words, another
# severity) has a key of its own and the problem's code.
WORDING: dict[str, Wording] = {
    "no_driver": Wording(
        "NVML library",
        "critical",
        "no NVIDIA driver: neither the kernel module (/proc/driver/nvidia) nor the user-space "
        "library libnvidia-ml.so.1 is present",
        f"{ERR_NVML_MISSING} (pynvml); {ERR_NO_DRIVER_TORCH} (PyTorch)",
        "make sure this machine has an NVIDIA GPU (`lspci | grep -i nvidia`), then install the "
        f"driver ({DRIVER_DOWNLOAD} or the distribution's packages); in a container, run it "
        "with the NVIDIA container toolkit (`--gpus all`)",
    ),
    "module_not_loaded": Wording(
        "kernel module",
        "critical",
        "the NVIDIA kernel module is not loaded{installed}",
        ERR_SMI_NO_DRIVER,
        "`sudo modprobe nvidia`; if it fails, `journalctl -k | grep -i nvrm` says why (a kernel "
        "updated without the module rebuilt by DKMS, Secure Boot refusing an unsigned module, "
        "nouveau holding the GPU)",
        "the NVIDIA kernel module is not loaded: `sudo modprobe nvidia`, then the kernel log "
        "says why it was not",
        parts={"installed": When("library", " (user-space library {library} installed)")},
    ),
    "fabric_broken": _FABRIC,
    "fabric_warning": _FABRIC._replace(severity="warning"),
    "nvml_missing": Wording(
        "NVML library",
        "critical",
        "the kernel module {module} is loaded but the user-space library libnvidia-ml.so.1 is "
        "missing",
        ERR_NVML_MISSING,
        "reinstall the driver's user-space packages of the same version as the module (e.g. "
        "libnvidia-compute / nvidia-utils); in a container, the NVIDIA container toolkit mounts "
        "them",
        "the kernel module is loaded but libnvidia-ml.so.1 is missing: reinstall the driver's "
        "user-space packages",
        missing={"module": ""},
    ),
    # NVML says the two differ, the versions do not say how
    "mismatch": _MISMATCH,
    "mismatch_module_older": _MISMATCH._replace(
        parts={
            **_MISMATCH.parts,
            "versions": "kernel module {module} is older than the user-space library {library}",
            "cause": "the driver packages were upgraded while the old module stayed loaded",
        },
    ),
    "mismatch_module_newer": _MISMATCH._replace(
        parts={
            **_MISMATCH.parts,
            "versions": "kernel module {module} is newer than the user-space library {library}",
            "cause": "an older user-space library runs under a newer module (packages "
            "downgraded, or a container bringing its own driver libraries)",
            "first_step": "install the user-space packages of {module} (in a container: use the "
            "host's libraries through the NVIDIA container toolkit), or ",
        },
    ),
    "compat_hw": Wording(
        "CUDA runtime",
        "critical",
        "pid {pid} ({name}) uses the forward-compatibility libcuda {libcuda} on a GPU that does "
        "not support it",
        f"{ERR_COMPAT_HW} (CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, 804)",
        "forward compatibility works only on data-centre GPUs: upgrade the driver instead, or "
        "use a framework build for the driver's CUDA",
        "pid {pid} uses the forward-compatibility package on a GPU without it: upgrade the "
        "driver instead",
        missing={"libcuda": ""},
    ),
    "mvc": Wording(
        "CUDA runtime",
        "info",
        "pid {pid} ({name}): {verdict}",
        ERR_PTX,
        "works for most programs; upgrade the driver to get the newer features",
    ),
    "libcuda_mismatch": _LIBCUDA_MISMATCH,
    # the library it mapped was replaced since: a restart picks up the new one
    "libcuda_replaced": _LIBCUDA_MISMATCH._replace(severity="warning"),
    "runtime_too_new": _RUNTIME_TOO_NEW,
    # judged against the user-space library, which no runtime reaches until the pair is one
    "runtime_too_new_mismatch": _RUNTIME_TOO_NEW._replace(
        parts={
            "what": When("driver", "the driver library {driver}", "the driver"),
            "until": " (and until the module/library mismatch above is fixed no runtime starts "
            "at all)",
        },
    ),
    # a newer minor runs under minor-version compatibility; a newer major does not start
    "toolkit_too_new": _TOOLKIT_TOO_NEW,
    "toolkit_major_too_new": _TOOLKIT_TOO_NEW._replace(
        severity="warning",
        text=_TOOLKIT_TOO_NEW.text.replace("run under MVC", "fail to start"),
    ),
}

WORDING["no_kernel_image"] = Wording(
    "application kernel",
    "critical",
    "{who}: torch is built for {built} ({source}); none of them runs on {gpus} (compute "
    "capability {cc}, sm_{sm}), so its first CUDA kernel there fails",
    f"{ERR_NO_KERNEL_IMAGE} (cudaErrorNoKernelImageForDevice, 209); PyTorch warns: "
    + ERR_TORCH_CAPABILITY,
    '{wheel}or build it (and any CUDA extension) with TORCH_CUDA_ARCH_LIST="{cc}"',
    "{who}: no kernel image for {gpus} (sm_{sm}): torch is built for {built}; next: "
    '{wheel}or TORCH_CUDA_ARCH_LIST="{cc}"',
    parts={
        "wheel": When(
            "index",
            "install a build that carries sm_{sm}: `pip install torch --index-url "
            "https://download.pytorch.org/whl/{index}` (its wheels carry {wheel_archs}), ",
            "no PyTorch wheel index carries sm_{sm}: build from source with a CUDA toolkit that "
            "supports it, ",
        )
    },
)
# A CPU-only PyTorch (its wheels "+cpu": torch.version.cuda is None) never reaches a GPU: its
# first CUDA call raises "Torch not compiled with CUDA enabled" (torch.cuda._lazy_init,
# https://github.com/pytorch/pytorch/blob/main/torch/cuda/__init__.py). The wheel indexes:
# https://pytorch.org/get-started/locally/.
ERR_TORCH_CPU_ONLY = "AssertionError: Torch not compiled with CUDA enabled"
WORDING["framework_cpu_only"] = Wording(
    "framework",
    "critical",
    "the framework is a CPU-only build (torch {torch}): it can never use the GPU; install a "
    "CUDA build ({wheel_why})",
    f"torch.cuda.is_available() is False; .cuda() raises: {ERR_TORCH_CPU_ONLY}",
    "{pip}",
    "the framework is a CPU-only build (torch {torch}): it never uses the GPU; next: {pip}",
    parts={
        "wheel_why": When(
            "index",
            "the wheel index for the driver's CUDA {dmax}: {index}",
            "its wheel index follows the driver's CUDA: https://pytorch.org/get-started/locally/",
        ),
        "pip": When(
            "index",
            "`{python} -m pip install --force-reinstall torch --index-url "
            "https://download.pytorch.org/whl/{index}`",
            "install a CUDA build of torch whose CUDA the driver runs "
            "(https://pytorch.org/get-started/locally/)",
        ),
    },
)
WORDING["ptx_only"] = Wording(
    "application kernel",
    "warning",
    "{who}: torch has no cubin for {gpus} (compute capability {cc}), only PTX ({ptx}): the "
    "driver compiles every kernel when the job starts (minutes the first time, cached in "
    "~/.nv/ComputeCache after)",
    "a slow first start; the driver must support the PTX's CUDA version: "
    + ERR_PTX
    + " (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222)",
    '{wheel}or build with TORCH_CUDA_ARCH_LIST="{cc}"',
    "{who}: only PTX for {gpus} (sm_{sm}): every kernel is compiled at start",
    parts={
        "wheel": When(
            "index",
            "for native kernels install a build that carries sm_{sm} (`--index-url "
            "https://download.pytorch.org/whl/{index}`), ",
        )
    },
)

# `driver --clean-env`: the CUDA initialisation probe in your environment and a clean one
# (`clean_env.py` words the verdict; these carry it into the problems)
WORDING["clean_env_environment"] = Wording(
    "environment",
    "critical",
    "{text}",
    "{said}",
    "{next_step}",
    "CUDA fails only in your environment, not in a clean one: {named}",
    missing={"named": "see `gputop-diag driver --clean-env`"},
)
WORDING["clean_env_host"] = Wording(
    "host",
    "critical",
    "{text}",
    "{said}",
    "{next_step}",
    "CUDA fails in a clean environment too: the host ({said})",
)
WORDING["clean_env_framework"] = Wording(
    "framework",
    "critical",
    "{text}",
    "{said}",
    "{next_step}",
    "the driver initialises, torch does not (in both environments): its build",
)

# The layer's state in words, as `gputop-diag driver` and the Driver pane say it
FABRIC_STATE_WORDS = {
    "ok": "ok",
    "broken": "BROKEN (error 802)",
    "warning": "WARNING",
    "unknown": "not fully checked",
}
# One process among those whose runtime is too new, and the driver they need.
RUNTIME_OF = "pid {pid} ({name}) runtime {runtime}"
NEED_BRANCH = "the {floor} branch"  # the minor-version compatibility floor of the major
NEED_MAJOR = "a driver supporting CUDA {major}"
NEED_ANY = "a newer driver"
