"""Driver profiles: what the simulated `libnvidia-ml.so` of each driver branch exports.

`pynvml`'s plain wrappers go straight to the newest C symbols
(`nvmlDeviceGetComputeRunningProcesses` → `…_v3`, `nvmlEventSetWait` → `…_v2`,
`nvmlDeviceGetMemoryInfo(h, version)` → `…_v2`). On a driver without a symbol, `pynvml` raises
`NVMLError_FunctionNotFound` (or `NVMLLibraryMismatchError` for the wrappers marked
`@throwOnVersionMismatch`). A profile lists the C symbols its branch lacks and the layout of the
process entries its `…_v3` symbol writes, so the simulator fails exactly where that driver would
and the collector's fallbacks are what gets tested.

Sources: the `nvml.h` of each CUDA toolkit (symbol first seen), nvitop's `api/libnvml.py` and its
history (the process-info struct of 535.54-535.98 carries `usedGpuCcProtectedMemory`, 32 bytes per
entry; 535.104 went back to 24 bytes and moved that figure to
`nvmlDeviceGetRunningProcessDetailList`), `nvidia-ml-py`'s `pynvml.py` (which symbol each wrapper
calls).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

# C symbol -> the first driver branch whose libnvidia-ml.so exports it. Only the symbols the
# collector calls or probes, whose absence changes what it must do.
SYMBOL_SINCE: dict[str, int] = {
    # per-process lists with MIG ids (nvml.h of CUDA 11.0); _v3 from CUDA 11.6
    "nvmlDeviceGetComputeRunningProcesses_v2": 450,
    "nvmlDeviceGetGraphicsRunningProcesses_v2": 450,
    "nvmlDeviceGetMPSComputeRunningProcesses_v2": 450,
    "nvmlDeviceGetComputeRunningProcesses_v3": 510,
    "nvmlDeviceGetGraphicsRunningProcesses_v3": 510,
    "nvmlDeviceGetMPSComputeRunningProcesses_v3": 510,
    # event data with gpuInstanceId/computeInstanceId (CUDA 11.0)
    "nvmlEventSetWait_v2": 450,
    # MIG (CUDA 11.0)
    "nvmlDeviceGetMigMode": 450,
    "nvmlDeviceGetMaxMigDeviceCount": 450,
    "nvmlDeviceGetMigDeviceHandleByIndex": 450,
    "nvmlDeviceIsMigDeviceHandle": 450,
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": 450,
    "nvmlDeviceGetGpuInstanceId": 450,
    "nvmlDeviceGetComputeInstanceId": 450,
    # row remapping (CUDA 11.1)
    "nvmlDeviceGetRemappedRows": 460,
    # memory with `reserved` (CUDA 11.6)
    "nvmlDeviceGetMemoryInfo_v2": 510,
    # vGPU licensable features with the license's expiry (CUDA 11.4)
    "nvmlDeviceGetGridLicensableFeatures_v4": 470,
    # GPU Performance Monitoring (CUDA 12.0)
    "nvmlGpmQueryDeviceSupport": 525,
    "nvmlGpmSampleAlloc": 525,
    "nvmlGpmSampleFree": 525,
    "nvmlGpmSampleGet": 525,
    "nvmlGpmMetricsGet": 525,
    "nvmlGpmMigSampleGet": 525,
    # "throttle reasons" renamed "clocks event reasons" (CUDA 12.2); the old names stay exported
    "nvmlDeviceGetCurrentClocksEventReasons": 535,
    "nvmlDeviceGetSupportedClocksEventReasons": 535,
    "nvmlDeviceGetConfComputeMemSizeInfo": 535,
    # process details with the confidential-computing figure (535.104 and later, see below)
    "nvmlDeviceGetRunningProcessDetailList": 535,
    "nvmlDeviceGetProcessesUtilizationInfo": 550,
    "nvmlDeviceGetTemperatureV": 555,
}


@dataclass(frozen=True)
class DriverProfile:
    """One driver release as NVML's user-space library shows it."""

    name: str  # "R535"
    version: str  # nvmlSystemGetDriverVersion
    cuda_version: int  # nvmlSystemGetCudaDriverVersion, e.g. 12020
    branch: int
    # Layout of the entries the newest process-list symbol writes: "v1" (pid, usedGpuMemory),
    # "v2" (+ gpuInstanceId, computeInstanceId: 24 bytes), "v3cc" (+ usedGpuCcProtectedMemory:
    # 32 bytes, 535.54-535.98 only).
    process_layout: str = "v2"
    extra_missing: frozenset[str] = field(default_factory=frozenset)

    @functools.cached_property
    def missing(self) -> frozenset[str]:
        """The C symbols this driver's library does not export."""
        late = {s for s, since in SYMBOL_SINCE.items() if since > self.branch}
        return frozenset(late) | self.extra_missing

    def exports(self, symbol: str) -> bool:
        return symbol not in self.missing


DRIVERS: dict[str, DriverProfile] = {
    p.name: p
    for p in (
        # CUDA 10.1: no _v2 process lists (v1 entries), no MIG, no event data v2
        DriverProfile("R418", "418.226.00", 10010, 418, process_layout="v1"),
        DriverProfile("R470", "470.256.02", 11040, 470),
        DriverProfile("R525", "525.147.05", 12000, 525),
        # the first R535 releases: _v3 writes 32-byte entries and there is no detail list yet
        DriverProfile(
            "R535.54",
            "535.54.03",
            12020,
            535,
            process_layout="v3cc",
            extra_missing=frozenset({"nvmlDeviceGetRunningProcessDetailList"}),
        ),
        DriverProfile("R535", "535.183.01", 12020, 535),
        DriverProfile("R550", "550.127.05", 12040, 550),
        DriverProfile("R570", "570.124.06", 12080, 570),
        DriverProfile("R580", "580.82.07", 13000, 580),
    )
}
DEFAULT_DRIVER = "R570"


def profile_for_version(version: str, cuda_version: int) -> DriverProfile:
    """The profile of the branch a driver version belongs to (a scenario's `driver`), with that
    version's own strings."""
    try:
        branch = int(version.split(".")[0])
    except ValueError:
        branch = DRIVERS[DEFAULT_DRIVER].branch
    fits = [p for p in DRIVERS.values() if p.branch <= branch and p.name != "R535.54"]
    best = max(fits, key=lambda p: p.branch) if fits else DRIVERS["R418"]
    return DriverProfile(
        best.name, version, cuda_version, best.branch, best.process_layout, best.extra_missing
    )


def driver_profile(name: str) -> DriverProfile:
    """A profile by name ("R470"); ValueError names the choices."""
    p = DRIVERS.get(name.upper())
    if p is None:
        raise ValueError(f"unknown driver profile {name!r}; choose one of: {', '.join(DRIVERS)}")
    return p
