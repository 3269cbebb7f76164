"""NVML failures turned into what a user can do about them.

Each NVML return code has its own meaning and next step (NVML API reference, "Error reporting";
the driver's `nvml.h`). Where a failure happened decides what it costs:

- `nvmlInit` or `nvmlDeviceGetCount`: NVML is unusable (`source="nvml"`, no GPU index: the views
  and commands read that as "no usable driver");
- a GPU's handle look-up: that GPU is *unavailable* (`source="nvml"`, its index), retried, and
  only GPU_IS_LOST makes it *lost*;
- a machine-wide query that only some figures need (`nvmlSystemGet*`: `source="nvml-system"`;
  the Xid event set: `source="nvml-events"`): those figures are missing, the GPUs are still read.
"""

from __future__ import annotations

from typing import Any

from ...model import CollectorError

DEMO_HINT = "run `gputop-diag --demo` to see the tool on a simulated GPU machine"
KERNEL_LOG = "`journalctl -k | grep -iE 'nvrm|xid'`"

# NVML_ERROR_<NAME> -> (what it means, the next step).
MEANINGS: dict[str, tuple[str, str]] = {
    "UNINITIALIZED": (
        "NVML was not initialised",
        "this is a bug in gputop-diag; run `nvidia-smi` to check the driver meanwhile",
    ),
    "INVALID_ARGUMENT": (
        "the driver rejected the request as invalid",
        "check `nvidia-smi`; if it works, the driver and nvidia-ml-py disagree: update "
        "nvidia-ml-py (`pip install -U nvidia-ml-py`)",
    ),
    "NOT_SUPPORTED": (
        "the driver or this GPU does not support the request",
        "nothing to fix; the figures that need it show n/a",
    ),
    "NO_PERMISSION": (
        "permission denied opening the NVIDIA devices",
        "check the permissions of /dev/nvidia* (`ls -l /dev/nvidia*`), your groups, and the "
        "container's or job's device access (a Slurm cgroup hides the GPUs not allocated to it)",
    ),
    "ALREADY_INITIALIZED": (
        "NVML was already initialised",
        "nothing to fix",
    ),
    "NOT_FOUND": (
        "the driver found no such device",
        "check `nvidia-smi -L`; the GPU may have been removed or hidden from this container",
    ),
    "INSUFFICIENT_SIZE": (
        "the driver answered with more data than expected",
        "update nvidia-ml-py (`pip install -U nvidia-ml-py`)",
    ),
    "INSUFFICIENT_POWER": (
        "a GPU's external power cables are not connected properly",
        "check the auxiliary power connectors of the GPUs",
    ),
    "DRIVER_NOT_LOADED": (
        "the NVIDIA kernel module is not loaded",
        "check `lsmod | grep nvidia` and `journalctl -k | grep -i nvrm`; load it with "
        "`sudo modprobe nvidia`",
    ),
    "TIMEOUT": (
        "the driver timed out answering",
        f"check {KERNEL_LOG} for a GPU that stopped responding",
    ),
    "IRQ_ISSUE": (
        "the NVIDIA driver has an interrupt problem",
        "check `journalctl -k | grep -i nvrm` for the failing GPU",
    ),
    "LIBRARY_NOT_FOUND": (
        "no NVIDIA driver: the NVML library libnvidia-ml.so.1 was not found",
        "install the NVIDIA driver (check `ls /usr/lib/x86_64-linux-gnu/libnvidia-ml.so*`), "
        "or " + DEMO_HINT,
    ),
    "FUNCTION_NOT_FOUND": (
        "the driver's NVML library lacks a function the binding calls (driver older than "
        "nvidia-ml-py)",
        "the figures that need it show n/a; a newer driver provides them",
    ),
    "CORRUPTED_INFOROM": (
        "the GPU's InfoROM is corrupted",
        "run `nvidia-smi -q` to confirm, then contact your vendor (an RMA criterion)",
    ),
    "GPU_IS_LOST": (
        "the GPU stopped answering on the PCIe bus (fell off the bus)",
        "look for Xid 79 in the kernel log (`journalctl -k | grep -i xid`); drain the node and "
        "reboot; if it repeats, check temperatures, power and the GPU's seating",
    ),
    "RESET_REQUIRED": (
        "the GPU needs a reset before it can be used again",
        "drain it and reset it (`sudo nvidia-smi -r -i <index>`) or reboot the node",
    ),
    "OPERATING_SYSTEM": (
        "the operating system refused the driver's request",
        f"check {KERNEL_LOG} and `dmesg` for the cause",
    ),
    "LIB_RM_VERSION_MISMATCH": (
        "driver/library version mismatch: the user-space NVML library was upgraded while the "
        "old kernel module is still loaded",
        "reboot, or reload the nvidia kernel modules once the GPUs are idle; compare "
        "/proc/driver/nvidia/version with the libnvidia-ml.so version",
    ),
    "IN_USE": (
        "the GPU is in use by another operation",
        "try again in a moment",
    ),
    "MEMORY": (
        "the driver ran out of host memory",
        "check the host's free memory (`free -h`) and the kernel log for OOM kills",
    ),
    "NO_DATA": (
        "the driver has no data for the request yet",
        "nothing to fix; the figure appears once the driver has sampled it",
    ),
    "VGPU_ECC_NOT_SUPPORTED": (
        "ECC is not supported on this vGPU",
        "nothing to fix",
    ),
    "INSUFFICIENT_RESOURCES": (
        "the driver lacks the resources to answer",
        "check the host's free memory and the number of processes using the GPUs",
    ),
    "FREQ_NOT_SUPPORTED": (
        "the requested clock is not supported",
        "nothing to fix",
    ),
    "ARGUMENT_VERSION_MISMATCH": (
        "the driver does not know the struct version the binding sent (driver older than "
        "nvidia-ml-py)",
        "the figures that need it show n/a; a newer driver provides them",
    ),
    "DEPRECATED": (
        "the driver no longer provides this request",
        "update gputop-diag and nvidia-ml-py",
    ),
    "NOT_READY": (
        "the GPU is not ready yet (initialising or recovering)",
        "wait a few seconds; if it persists, check " + KERNEL_LOG,
    ),
    "GPU_NOT_FOUND": (
        "the driver could not find the GPU",
        f"check `nvidia-smi -L`, `lspci | grep -i nvidia` and {KERNEL_LOG}",
    ),
    "INVALID_STATE": (
        "the GPU is in a state that does not allow the request",
        f"check {KERNEL_LOG}; a GPU reset may be needed",
    ),
    "RESET_TYPE_NOT_SUPPORTED": (
        "the requested reset type is not supported",
        "nothing to fix",
    ),
    "UNKNOWN": (
        "the driver reported an unknown error",
        f"check `nvidia-smi` and {KERNEL_LOG} for the GPU's state",
    ),
}


def code_name(nvml: Any, code: Any) -> str:
    """NVML_ERROR_<NAME> of a return code, without the prefix ("UNKNOWN" if none)."""
    if isinstance(code, int):
        for name in MEANINGS:
            if getattr(nvml, "NVML_ERROR_" + name, None) == code:
                return name
    return "UNKNOWN"


def meaning(nvml: Any, exc: BaseException) -> tuple[str, str, str]:
    """(what it means, next step, error class name) of an NVMLError."""
    name = code_name(nvml, getattr(exc, "value", None))
    message, step = MEANINGS[name]
    if name == "UNKNOWN" and str(exc) and "Unknown" not in str(exc):
        message = f"{message} ({exc})"
    return message, step, type(exc).__name__


# Codes whose meaning already says why NVML cannot start.
_SAYS_WHY = {
    "LIBRARY_NOT_FOUND",
    "DRIVER_NOT_LOADED",
    "LIB_RM_VERSION_MISMATCH",
    "NO_PERMISSION",
    "INSUFFICIENT_POWER",
    "IRQ_ISSUE",
}


def init_failure(nvml: Any, exc: BaseException) -> CollectorError:
    """The collector error for an `nvmlInit` that failed."""
    message, step, cls = meaning(nvml, exc)
    name = code_name(nvml, getattr(exc, "value", None))
    if name not in _SAYS_WHY:
        message = f"NVML could not be initialised: {message}"
    if name == "UNKNOWN":
        step = "check `nvidia-smi`; if it fails too, check the driver installation"
    return CollectorError(source="nvml", message=message, next_step=step, code=cls)


def count_failure(nvml: Any, exc: BaseException) -> CollectorError:
    """`nvmlDeviceGetCount` failed: no GPU can be read."""
    message, step, cls = meaning(nvml, exc)
    return CollectorError(
        source="nvml",
        message=f"NVML could not count the GPUs: {message}",
        next_step=step,
        code=cls,
    )


def no_gpus() -> CollectorError:
    return CollectorError(
        source="nvml",
        message="the NVIDIA driver is loaded but reports no GPU",
        next_step="check `nvidia-smi -L` and `lspci | grep -i nvidia`; in a container or a "
        "Slurm job, check that GPUs were allocated to it (`echo $CUDA_VISIBLE_DEVICES`)",
        code="NoGpu",
    )


def gpu_unavailable(
    nvml: Any, index: int, exc: BaseException, name: str | None = None, bus: str | None = None
) -> CollectorError:
    """A GPU whose handle NVML would not give (not lost: tried again)."""
    message, step, cls = meaning(nvml, exc)
    what = ", ".join(x for x in (name, bus) if x)
    where = f" ({what})" if what else ""
    return CollectorError(
        source="nvml",
        gpu_index=index,
        code=cls,
        message=f"GPU {index}{where} is unavailable: {message}",
        next_step=f"{step}; gputop-diag tries it again every few seconds",
    )


def gpu_lost(index: int, name: str | None = None, bus: str | None = None) -> CollectorError:
    what = ", ".join(x for x in (name, bus) if x)
    where = f" ({what})" if what else ""
    message, step = MEANINGS["GPU_IS_LOST"]
    return CollectorError(
        source="nvml",
        gpu_index=index,
        code="NVMLError_GpuIsLost",
        message=f"GPU {index}{where} is lost: it stopped answering on the PCIe bus",
        next_step=step,
    )


def system_failure(nvml: Any, what: str, exc: BaseException) -> CollectorError:
    """A machine-wide query that some figures need failed; the GPUs are still read."""
    message, step, cls = meaning(nvml, exc)
    if cls == "NVMLError_GpuIsLost":
        message = "a GPU fell off the bus (GPU_IS_LOST on a machine-wide call)"
        step = "the per-GPU figures show which one; " + MEANINGS["GPU_IS_LOST"][1]
    return CollectorError(
        source="nvml-system",
        message=f"NVML could not report {what}: {message}",
        next_step=step,
        code=cls,
    )


def events_failure(
    nvml: Any, what: str, exc: BaseException, index: int | None = None
) -> CollectorError:
    """The NVML Xid event stream is off (for one GPU or all); the kernel log still has them."""
    message, step, cls = meaning(nvml, exc)
    return CollectorError(
        source="nvml-events",
        gpu_index=index,
        message=f"Xid events from NVML are off ({what}: {message})",
        next_step=f"{step}; Xids still reach the kernel log ({KERNEL_LOG})",
        code=cls,
    )
