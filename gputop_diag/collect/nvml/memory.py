"""A GPU's memory in one definition, whichever struct the driver filled.

The definition is NVML v2's and nvidia-smi's: **total = reserved + used + free**, where
`reserved` is what the driver and firmware keep for themselves, `used` what the processes'
contexts allocated (nvidia-smi's "Used", without the reserve) and `free` what is left.

- `nvmlDeviceGetMemoryInfo_v2` fills `nvmlMemory_v2_t` (total, reserved, free, used; "used:
  allocated device memory"): https://docs.nvidia.com/deploy/nvml-api/structnvmlMemory__v2__t.html.
  Real drivers leave the reserve out of `used` (an idle A100: v1 used 912 MB, v2 used 7.8 MB,
  as nvidia-smi shows: https://github.com/rust-nvml/nvml-wrapper/issues/57), and so does
  NVIDIA's mock NVML (k8s-test-infra, `pkg/gpu/mocknvml`: v2 used 0 with a 1 GiB reserve on its
  idle H100). The R525 reference said the opposite ("used also includes reserved":
  https://docs.nvidia.com/deploy/archive/R525/nvml-api/structnvmlMemory__v2__t.html, a note
  later releases dropped), so a driver whose figures add up that way (used + free = total) has
  its reserve taken out of `used` here.
- Before R510 only `nvmlDeviceGetMemoryInfo` exists: `nvmlMemory_t` has no `reserved`, and its
  `used` is the "sum of reserved and allocated device memory"
  (https://docs.nvidia.com/deploy/nvml-api/structnvmlMemory__t.html). The reserve is then
  unknown (`reserved` None) and `used` includes it: a snapshot says so
  (`mem_used_includes_reserved`).
- DCGM exports the same parts (DCGM_FI_DEV_FB_USED, _FB_RESERVED, _FB_FREE; FB_USED_PERCENT is
  Used / (Total - Reserved)): https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from .query import Query

# NVIDIA's mock NVML, H100 profile (k8s-test-infra pkg/gpu/mocknvml/configs/
# mock-nvml-config-h100.yaml, read through this collector with LD_LIBRARY_PATH at its library):
# v2 total 85899345920, reserved 1073741824, used 0, free 84825604096 (total = reserved + used +
# free); v1 total 85899345920, used 0, free 84825604096 (its v1 leaves the reserve out of both,
# where a real driver counts it in `used`). tests/test_nvml_memory.py builds the same GPU.
Forms = list[tuple[str, str, tuple]]


@dataclass(frozen=True, slots=True)
class Memory:
    """One reading: `reserved` None where the driver cannot tell it apart (v1), and then
    `used` includes it."""

    total: int
    reserved: int | None
    used: int
    free: int


def memory_forms(nvml: Any) -> Forms:
    """(key, function, extra arguments), newest first: v2 where the binding takes a `version`
    (nvidia-ml-py 11.515 and later), else v1 alone."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    try:
        params = inspect.signature(nvml.nvmlDeviceGetMemoryInfo).parameters
    except (TypeError, ValueError, AttributeError):
        params = {}
    v2 = version is not None and "version" in params
    return [("memory_v2", "nvmlDeviceGetMemoryInfo", (version,))] * v2 + [
        ("memory_v1", "nvmlDeviceGetMemoryInfo", ())
    ]


def split_memory(mem: Any) -> Memory:
    """A struct from either call, in the one definition."""
    total, used, free = int(mem.total), int(mem.used), int(mem.free)
    reserved = getattr(mem, "reserved", None)
    if reserved is None:
        return Memory(total, None, used, free)
    reserved = int(reserved)
    apart = abs(reserved + used + free - total)
    within = abs(used + free - total)
    if reserved and used >= reserved and within < apart:  # the R525 reading: used holds it
        used -= reserved
    return Memory(total, reserved, used, free)


def read_memory(q: Query, gpu: int, handle: Any, forms: Forms, prefix: str = "") -> Memory | None:
    """The first form this driver answers, split; None where none does. `prefix` keeps the
    forms of a MIG instance apart from its parent's in `Query`'s skip list."""
    mem = q.first(gpu, [(prefix + k, f, (handle, *a)) for k, f, a in forms])
    return None if mem is None else split_memory(mem)
