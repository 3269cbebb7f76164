"""NVML failures turned into what a user can do about them."""

from __future__ import annotations

from ..model import CollectorError

DEMO_HINT = "run `gputop-diag --demo` to see the tool on a simulated GPU machine"

# NVML return code -> (what it means, the next step). Codes are pynvml's NVML_ERROR_* values.
_INIT_FAILURES: dict[str, tuple[str, str]] = {
    "LIBRARY_NOT_FOUND": (
        "no NVIDIA driver: the NVML library libnvidia-ml.so.1 was not found",
        "install the NVIDIA driver (check `ls /usr/lib/x86_64-linux-gnu/libnvidia-ml.so*`), "
        "or " + DEMO_HINT,
    ),
    "DRIVER_NOT_LOADED": (
        "the NVIDIA kernel module is not loaded",
        "check `lsmod | grep nvidia` and `journalctl -k | grep -i nvrm`; load it with "
        "`sudo modprobe nvidia`",
    ),
    "LIB_RM_VERSION_MISMATCH": (
        "driver/library version mismatch: the user-space NVML library was upgraded while the "
        "old kernel module is still loaded",
        "reboot, or reload the nvidia kernel modules once the GPUs are idle; compare "
        "/proc/driver/nvidia/version with the libnvidia-ml.so version",
    ),
    "NO_PERMISSION": (
        "permission denied opening the NVIDIA devices",
        "check the permissions of /dev/nvidia* (`ls -l /dev/nvidia*`) and your groups",
    ),
    "INSUFFICIENT_POWER": (
        "a GPU's external power cables are not connected properly",
        "check the auxiliary power connectors of the GPUs",
    ),
    "IRQ_ISSUE": (
        "the NVIDIA driver has an interrupt problem",
        "check `journalctl -k | grep -i nvrm` for the failing GPU",
    ),
}


def _code_name(nvml, code: int) -> str:
    for name in _INIT_FAILURES:
        if getattr(nvml, "NVML_ERROR_" + name, None) == code:
            return name
    return "UNKNOWN"


def init_failure(nvml, exc: BaseException) -> CollectorError:
    """The collector error for an `nvmlInit` that failed."""
    code = getattr(exc, "value", None)
    name = _code_name(nvml, code) if isinstance(code, int) else "UNKNOWN"
    if name in _INIT_FAILURES:
        message, step = _INIT_FAILURES[name]
    else:
        message = f"NVML could not be initialised: {exc}"
        step = "check `nvidia-smi`; if it fails too, check the driver installation"
    return CollectorError(source="nvml", message=message, next_step=step, code=type(exc).__name__)


def gpu_lost(index: int) -> CollectorError:
    return CollectorError(
        source="nvml",
        gpu_index=index,
        code="NVMLError_GpuIsLost",
        message=f"GPU {index} is lost: it stopped answering on the PCIe bus",
        next_step=(
            "look for Xid 79 in the kernel log (`journalctl -k | grep -i xid`); drain the node "
            "and reboot; if it repeats, check temperatures, power and the GPU's seating"
        ),
    )
