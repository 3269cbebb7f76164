"""A stand-in for the `pynvml` module: same names, same error classes, same return shapes.

Constants, error classes and ctypes structs are the real `pynvml`'s own objects; handles are real
`c_nvmlDevice_t` pointers; results are the real structs filled in. Every function defined here
exists in `pynvml` with the same parameters (a test checks), so the collector cannot tell it
from a driver and every code path it takes here is the one it takes on a GPU machine.
"""

from __future__ import annotations

import ctypes
import inspect

import pynvml as _real

from .fake_nvml_base import CONSTANTS, ERR, NA, nvml_api
from .fake_nvml_extras import NvmlExtras
from .population import MIB

_REASON_BITS = {
    "gpu_idle": _real.nvmlClocksEventReasonGpuIdle,
    "sw_power_cap": _real.nvmlClocksEventReasonSwPowerCap,
    "hw_slowdown": _real.nvmlClocksEventReasonHwSlowdown,
    "sw_thermal": _real.nvmlClocksEventReasonSwThermalSlowdown,
    "hw_thermal": _real.nvmlClocksEventReasonHwThermalSlowdown,
}
_SUPPORTED_REASONS = 0x1FF
_CODEC_PERIOD_US = 167000


class FakeNvml(NvmlExtras):
    """Module-like: `nvml.NVML_CLOCK_SM`, `nvml.NVMLError_GpuIsLost`, `nvml.nvmlInit()`."""

    # -- system ------------------------------------------------------------------------------
    @nvml_api
    def nvmlInit(self):
        self._check_driver()
        self._init += 1

    @nvml_api
    def nvmlInitWithFlags(self, flags):
        self._check_driver()
        self._init += 1

    def _check_driver(self) -> None:
        """No library; a library without its kernel module; a library of another version than
        the loaded module (packages upgraded without a reboot)."""
        m = self._m
        if m.no_driver:
            raise ERR(_real.NVML_ERROR_LIBRARY_NOT_FOUND)
        if m.module_version is None:
            raise ERR(_real.NVML_ERROR_DRIVER_NOT_LOADED)
        if m.module_version != m.driver_version:
            raise ERR(_real.NVML_ERROR_LIB_RM_VERSION_MISMATCH)

    @nvml_api
    def nvmlShutdown(self):
        self._init = max(0, self._init - 1)

    @nvml_api
    def nvmlSystemGetDriverVersion(self):
        return self._m.driver_version

    @nvml_api
    def nvmlSystemGetNVMLVersion(self):
        return f"{self._m.cuda_version // 1000}.{self._m.driver_version}"

    @nvml_api
    def nvmlSystemGetCudaDriverVersion(self):
        return self._m.cuda_version

    @nvml_api
    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self._m.cuda_version

    @nvml_api
    def nvmlDeviceGetCount(self):
        return len(self._handles)

    @nvml_api
    def nvmlDeviceGetHandleByIndex(self, index):
        if not isinstance(index, int) or not 0 <= index < len(self._handles):
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        return self._handles[index]

    def _by(self, match):
        for g in self._m.gpus:
            if match(g):
                if self._m.is_lost(g.index):
                    raise ERR(_real.NVML_ERROR_GPU_IS_LOST)
                return self._handles[g.index]
        raise ERR(_real.NVML_ERROR_NOT_FOUND)

    @nvml_api
    def nvmlDeviceGetHandleByUUID(self, uuid):
        u = uuid.decode() if isinstance(uuid, bytes) else uuid
        for g in self._m.gpus:
            for k, mig in enumerate(g.mig):
                if mig.uuid == u:
                    return self._migs[g.index][k]
        return self._by(lambda g: g.uuid == u)

    @nvml_api
    def nvmlDeviceGetHandleByPciBusId(self, pciBusId):
        b = (pciBusId.decode() if isinstance(pciBusId, bytes) else pciBusId).upper()
        return self._by(lambda g: b in (g.bus_id, g.bus_id[4:]))

    # -- static ------------------------------------------------------------------------------
    @nvml_api
    def nvmlDeviceGetIndex(self, handle):
        self._no_mig_handle(handle)
        return self._index(handle)

    @nvml_api
    def nvmlDeviceGetName(self, handle):
        k = self._mig_of(handle)
        g = self._sim(handle)
        return g.model["name"] if k is None else f"{g.model['name']} MIG {g.mig[k].profile}"

    @nvml_api
    def nvmlDeviceGetUUID(self, handle):
        k = self._mig_of(handle)
        g = self._sim(handle)
        return g.uuid if k is None else g.mig[k].uuid

    @nvml_api
    def nvmlDeviceGetSerial(self, handle):
        return self._sim(handle).serial

    @nvml_api
    def nvmlDeviceGetArchitecture(self, device):
        return self._sim(device).model["arch"]

    def _pci(self, handle):
        g = self._sim(handle)
        p = _real.nvmlPciInfo_t()
        p.domain, p.bus, p.device = g.bus
        p.busId = g.bus_id.encode()
        p.busIdLegacy = g.bus_id[4:].encode()
        p.pciDeviceId = g.model["pci_device_id"]
        p.pciSubSystemId = 0x16C110DE
        return p

    @nvml_api
    def nvmlDeviceGetPciInfo(self, handle):
        return self._pci(handle)

    @nvml_api
    def nvmlDeviceGetPciInfo_v3(self, handle):
        return self._pci(handle)

    @nvml_api
    def nvmlDeviceGetMinorNumber(self, handle):
        self._no_mig_handle(handle)
        return self._sim(handle).minor

    @nvml_api
    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return int(self._sim(handle).model["power_limit_w"] * 1000)

    @nvml_api
    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return int(self._sim(handle).model["power_limit_w"] * 1000)

    @nvml_api
    def nvmlDeviceGetMaxClockInfo(self, handle, type):
        m = self._sim(handle).model
        if type in (_real.NVML_CLOCK_SM, _real.NVML_CLOCK_GRAPHICS):
            return m["sm_max"]
        if type == _real.NVML_CLOCK_MEM:
            return m["mem_max"]
        if type == _real.NVML_CLOCK_VIDEO:
            return 1965 if m["sm_max"] > 1500 else 1290
        raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)

    @nvml_api
    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return tuple(self._sim(handle).model["cc"])

    @nvml_api
    def nvmlDeviceGetPersistenceMode(self, handle):
        return _real.NVML_FEATURE_ENABLED

    @nvml_api
    def nvmlDeviceGetComputeMode(self, handle):
        return _real.NVML_COMPUTEMODE_DEFAULT

    @nvml_api
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._sim(handle).model["pcie"][0]

    @nvml_api
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._sim(handle).model["pcie"][1]

    @nvml_api
    def nvmlDeviceGetTemperatureThreshold(self, handle, threshold):
        m = self._sim(handle).model
        if threshold == _real.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return m["shutdown_c"]
        if threshold == _real.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return m["slowdown_c"]
        if threshold == _real.NVML_TEMPERATURE_THRESHOLD_GPU_MAX:
            return m["slowdown_c"] - 2
        raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)

    # -- memory ------------------------------------------------------------------------------
    @nvml_api
    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        """As a real driver fills either struct for the same GPU: v1 (`nvmlMemory_t`) `used` is
        the "sum of reserved and allocated" and total = used + free; v2 (`nvmlMemory_v2_t`)
        `used` is the allocated alone and total = reserved + used + free; `free` is the same in
        both (https://docs.nvidia.com/deploy/nvml-api/structnvmlMemory__t.html,
        https://docs.nvidia.com/deploy/nvml-api/structnvmlMemory__v2__t.html; an idle A100: v1
        used 912 MB, v2 7.8 MB: https://github.com/rust-nvml/nvml-wrapper/issues/57)."""
        st = self._m.state()
        gi = self._index(handle)
        g = self._m.gpus[gi]
        k = self._mig_of(handle)
        if k is not None:
            total = g.mig[k].mib * MIB
            procs = sum(b for p, b in self._m.gpu_procs(gi, st) if p.mig == k)
            reserved = 12 * MIB
            taken = min(total - MIB, reserved + procs)
        else:
            total, reserved = g.total_bytes, g.model["reserved_mib"] * MIB
            taken = self._m.used_bytes(gi, st)  # the reserve and every process's allocations
        if not version:
            mem = _real.c_nvmlMemory_t()
            mem.total, mem.used, mem.free = total, taken, total - taken
            return mem
        mem = _real.c_nvmlMemory_v2_t()
        mem.version = version
        mem.total, mem.reserved, mem.free = total, reserved, total - taken
        mem.used = taken - reserved
        return mem

    @nvml_api
    def nvmlDeviceGetBAR1MemoryInfo(self, handle):
        self._no_mig_handle(handle)
        n = len(self._m.gpu_procs(self._index(handle), self._m.state()))
        b = _real.c_nvmlBAR1Memory_t()
        b.bar1Total = self._sim(handle).model["bar1_mib"] * MIB
        b.bar1Used = (5 + 32 * n) * MIB
        b.bar1Free = b.bar1Total - b.bar1Used
        return b

    # -- utilization, power, clocks ----------------------------------------------------------
    @nvml_api
    def nvmlDeviceGetUtilizationRates(self, handle):
        """Percent of the past sample period (1 s on these products; NVML allows 1/6 s to 1 s)
        the GPU was busy: the mean of the driver's samples (`nvmlDeviceGetSamples`) of it."""
        g = self._g(handle)
        if self._mig_enabled(handle) or g["util"] is None:
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        u = _real.c_nvmlUtilization_t()
        u.gpu, u.memory = round(g["util"]), round(g["memctl"])
        return u

    @nvml_api
    def nvmlDeviceGetEncoderUtilization(self, handle):
        self._no_mig_handle(handle)
        return [0, _CODEC_PERIOD_US]

    @nvml_api
    def nvmlDeviceGetDecoderUtilization(self, handle):
        self._no_mig_handle(handle)
        return [0, _CODEC_PERIOD_US]

    @nvml_api
    def nvmlDeviceGetPowerUsage(self, handle):
        self._no_mig_handle(handle)
        return int(self._g(handle)["power_w"] * 1000)

    @nvml_api
    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        """Millijoules since the driver loaded (Volta and newer): the first call counts the
        time since boot at the current draw, each later one adds the draw times the simulated
        time since the previous call, so the counter never goes back."""
        self._no_mig_handle(handle)
        if tuple(self._sim(handle).model["cc"]) < (7, 0):
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        gi, now = self._index(handle), self._m.clock.now()
        watts = self._g(handle)["power_w"]
        last = self._energy.get(gi)
        if last is None:
            mj = watts * (now - self._m.boot_time) * 1000
        else:
            mj = last[1] + watts * max(0.0, now - last[0]) * 1000
        self._energy[gi] = (max(now, last[0]) if last else now, mj)
        return int(mj)

    @nvml_api
    def nvmlDeviceGetFanSpeed(self, handle):
        """Percent of the fans' top speed, following the temperature. The simulated boards
        (H100 and A100 SXM) have no fans: NOT_SUPPORTED, as the driver answers for them,
        unless a test gives the model fans."""
        self._no_mig_handle(handle)
        if not self._sim(handle).model.get("fans"):
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        return int(max(30, min(100, 30 + (self._g(handle)["temp"] - 30) * 1.4)))

    @nvml_api
    def nvmlDeviceGetTemperature(self, handle, sensor):
        if sensor != _real.NVML_TEMPERATURE_GPU:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        return round(self._g(handle)["temp"])

    @nvml_api
    def nvmlDeviceGetClockInfo(self, handle, type):
        g = self._g(handle)
        if type in (_real.NVML_CLOCK_SM, _real.NVML_CLOCK_GRAPHICS):
            return g["sm_mhz"]
        if type == _real.NVML_CLOCK_MEM:
            return g["mem_mhz"]
        if type == _real.NVML_CLOCK_VIDEO:
            return int(g["sm_mhz"] * 0.9)
        raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)

    @nvml_api
    def nvmlDeviceGetPerformanceState(self, handle):
        return self._g(handle)["pstate"]

    def _reasons(self, handle) -> int:
        mask = 0
        for r in self._g(handle)["reasons"]:
            mask |= _REASON_BITS.get(r, 0)
        return mask

    @nvml_api
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._reasons(handle)

    @nvml_api
    def nvmlDeviceGetSupportedClocksEventReasons(self, handle):
        return _SUPPORTED_REASONS

    @nvml_api
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._reasons(handle)

    @nvml_api
    def nvmlDeviceGetSupportedClocksThrottleReasons(self, handle):
        return _SUPPORTED_REASONS

    # -- PCIe --------------------------------------------------------------------------------
    @nvml_api
    def nvmlDeviceGetPcieThroughput(self, device, counter):
        v = self._g(device)["pcie"]
        if counter == _real.NVML_PCIE_UTIL_TX_BYTES:
            return int(v)
        if counter == _real.NVML_PCIE_UTIL_RX_BYTES:
            return int(v * 0.6)
        raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)

    @nvml_api
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._sim(handle).model["pcie"][0]

    @nvml_api
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._sim(handle).model["pcie"][1]

    @nvml_api
    def nvmlDeviceGetPcieReplayCounter(self, handle):
        self._no_mig_handle(handle)
        return self._pcie_replays(self._index(handle))

    def _pcie_replays(self, gi: int) -> int:
        """The link's replays so far: none, unless a test or fault set some (`pcie_replays`)."""
        return int(getattr(self._m, "pcie_replays", {}).get(gi, 0))

    # -- virtualization ----------------------------------------------------------------------
    def _vgpu(self) -> str | None:
        """ "licensed" or "unlicensed" where the machine is a virtual machine with vGPUs (the
        `vgpu:` fault), else None: bare metal."""
        return getattr(self._m, "vgpu", None)

    @nvml_api
    def nvmlDeviceGetVirtualizationMode(self, handle):
        self._index(handle)
        if self._vgpu() is None:
            return _real.NVML_GPU_VIRTUALIZATION_MODE_NONE
        return _real.NVML_GPU_VIRTUALIZATION_MODE_VGPU

    @nvml_api
    def nvmlDeviceGetGridLicensableFeatures_v4(self, handle):
        """A vGPU guest's one licensable feature (NVIDIA Virtual Compute Server), licensed or
        not; NOT_SUPPORTED outside a vGPU guest."""
        self._index(handle)
        state = self._vgpu()
        if state is None:
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        got = _real.c_nvmlGridLicensableFeatures_v4_t()
        got.isGridLicenseSupported = 1
        got.licensableFeaturesCount = 1
        f = got.gridLicensableFeatures[0]
        f.featureCode = _real.NVML_GRID_LICENSE_FEATURE_CODE_COMPUTE
        f.featureEnabled = 1
        f.featureState = int(state == "licensed")
        f.productName = b"NVIDIA Virtual Compute Server"
        f.licenseInfo = b"NVIDIA-Virtual-Compute-Server,8.0" if state == "licensed" else b""
        return got

    # -- processes ---------------------------------------------------------------------------
    def _process_rows(self, handle, graphics: bool) -> list[tuple[int, int, int, int]]:
        """(pid, used bytes, GPU instance id, compute instance id) of each process on the GPU
        (or MIG instance) of `handle`, as the driver lists them."""
        if graphics:
            return []
        gi = self._index(handle)
        k = self._mig_of(handle)
        migs = self._m.gpus[gi].mig
        out = []
        for p, used in self._m.gpu_procs(gi, self._m.state()):
            if k is not None and p.mig != k:
                continue
            gid = NA if p.mig is None else migs[p.mig].gi_id
            cid = NA if p.mig is None else migs[p.mig].ci_id
            out.append((p.pid, used, gid, cid))
        return out

    def _running_processes(self, symbol: str, struct):
        """pynvml's `nvmlDeviceGet*RunningProcesses_v2/_v3` body over the simulated library:
        size the list, read it into `struct` entries (pynvml's choice, whatever the driver
        writes), and make friendly objects."""

        def read(handle):
            fn = self._nvmlGetFunctionPointer(symbol)
            c_count = ctypes.c_uint(0)
            ret = fn(handle, ctypes.byref(c_count), None)
            if ret == _real.NVML_SUCCESS:
                return []
            if ret != _real.NVML_ERROR_INSUFFICIENT_SIZE:
                raise ERR(ret)
            c_count.value = c_count.value * 2 + 5
            c_procs = (struct * c_count.value)()
            ret = fn(handle, ctypes.byref(c_count), c_procs)
            if ret != _real.NVML_SUCCESS:
                raise ERR(ret)
            procs = []
            for i in range(c_count.value):
                obj = _real.nvmlStructToFriendlyObject(c_procs[i])
                if obj.usedGpuMemory == _real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                    obj.usedGpuMemory = None
                procs.append(obj)
            return procs

        return read

    @nvml_api
    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._running_processes(
            "nvmlDeviceGetComputeRunningProcesses_v3", _real.c_nvmlProcessInfo_v3_t
        )(handle)

    @nvml_api
    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):
        return self._running_processes(
            "nvmlDeviceGetComputeRunningProcesses_v2", _real.c_nvmlProcessInfo_v2_t
        )(handle)

    @nvml_api
    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
        return self._running_processes(
            "nvmlDeviceGetComputeRunningProcesses_v3", _real.c_nvmlProcessInfo_v3_t
        )(handle)

    @nvml_api
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return self._running_processes(
            "nvmlDeviceGetGraphicsRunningProcesses_v3", _real.c_nvmlProcessInfo_v3_t
        )(handle)

    @nvml_api
    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle):
        return self._running_processes(
            "nvmlDeviceGetGraphicsRunningProcesses_v2", _real.c_nvmlProcessInfo_v2_t
        )(handle)

    @nvml_api
    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle):
        return self._running_processes(
            "nvmlDeviceGetGraphicsRunningProcesses_v3", _real.c_nvmlProcessInfo_v3_t
        )(handle)

    @nvml_api
    def nvmlDeviceGetProcessUtilization(self, handle, timeStamp):
        if self._mig_enabled(handle):
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        st = self._m.state()
        gi = self._index(handle)
        now_us = int(st["t"] * 1e6)
        procs = [p for p, _ in self._m.gpu_procs(gi, st)]
        if now_us <= timeStamp or not procs:
            raise ERR(_real.NVML_ERROR_NOT_FOUND)
        g = st["gpus"][gi]
        arr = (_real.c_nvmlProcessUtilizationSample_t * len(procs))()
        for k, p in enumerate(procs):
            s = arr[k]
            s.pid, s.timeStamp = p.pid, now_us
            busy = p.role != "cotenant"
            s.smUtil = round(g["sm"] if busy and g["sm"] is not None else 0)
            s.memUtil = round(g["memctl"] if busy and g["memctl"] is not None else 0)
        return arr[0 : len(procs)]


# The real module's constants, error classes, structs and helpers, as class attributes.
for _name, _value in CONSTANTS.items():
    if not hasattr(FakeNvml, _name):
        setattr(FakeNvml, _name, staticmethod(_value) if inspect.isfunction(_value) else _value)
