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

This module is the package's public face; the parts live beside it: `versions.py` (the table
and version arithmetic), `facts.py` (what the verdict reads and says, the fabric manager layer
of NVSwitch systems, the facts from a snapshot), `wording.py` (each problem's words, as data),
`judge.py` (which problems the facts show), `render.py` (`gputop-diag driver`'s document and
text). Pure functions; `collect/cuda_libs.py` reads the machine.
"""

from __future__ import annotations

from .facts import (
    FABRIC_LAYER,
    MODULE_NOT_VISIBLE,
    MODULE_NOT_VISIBLE_WHY,
    ChainFacts,
    FabricFacts,
    LoadedRuntime,
    Problem,
    current_chain,
    datacenter,
    fabric_facts,
    fabric_from_snapshot,
    facts_from_snapshot,
    module_state,
    nvml_error_name,
)
from .judge import fabric_problem, judge_chain, status_of
from .versions import (
    MVC_FLOOR,
    TABLE_SOURCE,
    TOOLKIT_MIN_DRIVER,
    RuntimeVerdict,
    cuda_tuple,
    ga_min_driver,
    max_cuda_for_driver,
    min_driver_for,
    mvc_ok,
    runtime_verdict,
    version_tuple,
)
from .wording import (
    DRIVER_DOWNLOAD,
    ERR_COMPAT_HW,
    ERR_INSUFFICIENT,
    ERR_MISMATCH,
    ERR_NO_DRIVER_TORCH,
    ERR_NVML_MISSING,
    ERR_PTX,
    ERR_SMI_NO_DRIVER,
    ERR_SYSTEM_MISMATCH,
    ERR_SYSTEM_NOT_READY,
    ERR_TORCH_TOO_OLD,
    FABRIC_STATE_WORDS,
)

__all__ = [
    "DRIVER_DOWNLOAD",
    "ERR_COMPAT_HW",
    "ERR_INSUFFICIENT",
    "ERR_MISMATCH",
    "ERR_NO_DRIVER_TORCH",
    "ERR_NVML_MISSING",
    "ERR_PTX",
    "ERR_SMI_NO_DRIVER",
    "ERR_SYSTEM_MISMATCH",
    "ERR_SYSTEM_NOT_READY",
    "ERR_TORCH_TOO_OLD",
    "FABRIC_LAYER",
    "FABRIC_STATE_WORDS",
    "MODULE_NOT_VISIBLE",
    "MODULE_NOT_VISIBLE_WHY",
    "MVC_FLOOR",
    "TABLE_SOURCE",
    "TOOLKIT_MIN_DRIVER",
    "ChainFacts",
    "FabricFacts",
    "LoadedRuntime",
    "Problem",
    "RuntimeVerdict",
    "cuda_tuple",
    "current_chain",
    "datacenter",
    "fabric_facts",
    "fabric_from_snapshot",
    "fabric_problem",
    "facts_from_snapshot",
    "ga_min_driver",
    "judge_chain",
    "max_cuda_for_driver",
    "min_driver_for",
    "module_state",
    "mvc_ok",
    "nvml_error_name",
    "runtime_verdict",
    "status_of",
    "version_tuple",
]
