"""A stand-in for the `pynvml` module: same names, same error classes, same return shapes.

Constants, error classes and ctypes structs are taken from the real `pynvml`; handles are real
`c_nvmlDevice_t` pointers; results are the real structs filled in. So the collector cannot tell
it from a driver, and every code path it takes here is the one it takes on a GPU machine.
"""

from __future__ import annotations

import ctypes
import functools

import pynvml as _real

from .machine import MIB, RESERVED_MIB, SimMachine

_ERR = _real.NVMLError
_NA = 0xFFFFFFFF


def _nvml_api(fn):
    """Count the call, apply injected errors, and raise like NVML for lost GPUs."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        m = self._m
        m.call_counts[name] += 1
        if not self._init and name != "nvmlInit":
            raise _ERR(_real.NVML_ERROR_UNINITIALIZED)
        if name == "nvmlDeviceGetHandleByIndex":
            gpu = args[0]
        elif name == "nvmlGpmMetricsGet":
            gpu = self._gpm.get(self._addr(args[0].sample2), (None,))[0]
        elif name == "nvmlGpmSampleFree":
            gpu = self._gpm.get(self._addr(args[0]), (None,))[0]
        else:
            gpu = self._gpu_of(args[0]) if args else None
        code = m.take_error(name, gpu)
        if code is not None:
            raise _ERR(code)
        if gpu is not None and self._is_lost(gpu):
            raise _ERR(_real.NVML_ERROR_GPU_IS_LOST)
        return fn(self, *args, **kwargs)

    return wrapper


class FakeNvml:
    def __init__(self, machine: SimMachine) -> None:
        for k in dir(_real):
            v = getattr(_real, k)
            if k.startswith("_") or (k.startswith("nvml") and callable(v)):
                continue
            setattr(self, k, v)
        self.nvmlStructToFriendlyObject = _real.nvmlStructToFriendlyObject
        self.nvmlFriendlyObject = _real.nvmlFriendlyObject
        self._m = machine
        self._init = 0
        self._handles = [ctypes.pointer(_real.struct_c_nvmlDevice_t()) for _ in machine.gpus]
        self._migs = [
            [ctypes.pointer(_real.struct_c_nvmlDevice_t()) for _ in g.mig] for g in machine.gpus
        ]
        self._by_addr: dict[int, tuple[int, int | None]] = {}
        for i, h in enumerate(self._handles):
            self._by_addr[self._addr(h)] = (i, None)
            for k, mh in enumerate(self._migs[i]):
                self._by_addr[self._addr(mh)] = (i, k)
        self._gpm: dict[int, float] = {}
        self._event_sets: dict[int, dict] = {}

    # -- plumbing ----------------------------------------------------------------------------
    @staticmethod
    def _addr(h) -> int | None:
        try:
            return ctypes.cast(h, ctypes.c_void_p).value
        except (TypeError, ctypes.ArgumentError):
            return None

    def _gpu_of(self, h) -> int | None:
        if isinstance(h, int) or not isinstance(h, ctypes._Pointer):
            return None
        hit = self._by_addr.get(self._addr(h))
        return None if hit is None else hit[0]

    def _mig_of(self, h) -> int | None:
        hit = self._by_addr.get(self._addr(h))
        return None if hit is None else hit[1]

    def _is_lost(self, gi: int) -> bool:
        t = self._m.lost_at.get(gi)
        return t is not None and self._m.clock.now() >= t

    def _g(self, h) -> dict:
        return self._m.state()["gpus"][self._gpu_of(h)]

    def _sim(self, h):
        return self._m.gpus[self._gpu_of(h)]

    def _mig_enabled(self, h) -> bool:
        return bool(self._sim(h).mig)

    # -- system ------------------------------------------------------------------------------
    @_nvml_api
    def nvmlInit(self):
        if self._m.no_driver:
            raise _ERR(_real.NVML_ERROR_LIBRARY_NOT_FOUND)
        self._init += 1

    @_nvml_api
    def nvmlShutdown(self):
        self._init = max(0, self._init - 1)

    @_nvml_api
    def nvmlSystemGetDriverVersion(self):
        return self._m.driver_version

    @_nvml_api
    def nvmlSystemGetNVMLVersion(self):
        return "12." + self._m.driver_version

    @_nvml_api
    def nvmlSystemGetCudaDriverVersion(self):
        return self._m.cuda_version

    @_nvml_api
    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self._m.cuda_version

    @_nvml_api
    def nvmlDeviceGetCount(self):
        return len(self._handles)

    @_nvml_api
    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self._handles):
            raise _ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        if self._is_lost(index):
            raise _ERR(_real.NVML_ERROR_GPU_IS_LOST)
        return self._handles[index]

    @_nvml_api
    def nvmlDeviceGetHandleByUUID(self, uuid):
        u = uuid.decode() if isinstance(uuid, bytes) else uuid
        for g in self._m.gpus:
            if g.uuid == u:
                return self._handles[g.index]
        raise _ERR(_real.NVML_ERROR_NOT_FOUND)

    # -- static ------------------------------------------------------------------------------
    @_nvml_api
    def nvmlDeviceGetName(self, handle):
        k = self._mig_of(handle)
        g = self._sim(handle)
        return g.model["name"] if k is None else f"{g.model['name']} MIG {g.mig[k][0]}"

    @_nvml_api
    def nvmlDeviceGetUUID(self, handle):
        k = self._mig_of(handle)
        g = self._sim(handle)
        return g.uuid if k is None else g.mig[k][2]

    @_nvml_api
    def nvmlDeviceGetSerial(self, handle):
        return self._sim(handle).serial

    @_nvml_api
    def nvmlDeviceGetPciInfo(self, handle):
        return self._pci(handle)

    @_nvml_api
    def nvmlDeviceGetPciInfo_v3(self, handle):
        return self._pci(handle)

    def _pci(self, handle):
        g = self._sim(handle)
        p = _real.nvmlPciInfo_t()
        p.domain, p.bus, p.device = g.bus
        p.busId = g.bus_id.encode()
        p.busIdLegacy = g.bus_id[4:].encode()
        p.pciDeviceId = 0x233010DE
        return p

    @_nvml_api
    def nvmlDeviceGetMinorNumber(self, handle):
        return self._sim(handle).minor

    @_nvml_api
    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return int(self._sim(handle).model["power_limit_w"] * 1000)

    @_nvml_api
    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return int(self._sim(handle).model["power_limit_w"] * 1000)

    @_nvml_api
    def nvmlDeviceGetMaxClockInfo(self, handle, type):
        m = self._sim(handle).model
        return m["sm_max"] if type == _real.NVML_CLOCK_SM else m["mem_max"]

    @_nvml_api
    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return tuple(self._sim(handle).model["cc"])

    @_nvml_api
    def nvmlDeviceGetMigMode(self, device):
        on = int(self._mig_enabled(device))
        return [on, on]

    @_nvml_api
    def nvmlDeviceGetPersistenceMode(self, handle):
        return 1

    @_nvml_api
    def nvmlDeviceGetComputeMode(self, handle):
        return 0

    @_nvml_api
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._sim(handle).model["pcie"][0]

    @_nvml_api
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._sim(handle).model["pcie"][1]

    @_nvml_api
    def nvmlGpmQueryDeviceSupport(self, device):
        s = _real.c_nvmlGpmSupport_t()
        s.version = _real.NVML_GPM_SUPPORT_VERSION
        s.isSupportedDevice = int(self._sim(device).model["gpm"])
        return s

    # -- dynamic -----------------------------------------------------------------------------
    @_nvml_api
    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        st = self._m.state()
        gi = self._gpu_of(handle)
        g = self._m.gpus[gi]
        k = self._mig_of(handle)
        if k is not None:
            total = g.mig[k][1] * MIB
            used = sum(b for p, b in self._m.gpu_procs(gi, st) if p.mig == k) + 12 * MIB
            reserved = 0
        else:
            total, used, reserved = g.total_bytes, self._m.used_bytes(gi, st), RESERVED_MIB * MIB
        if not version:
            mem = _real.c_nvmlMemory_t()
            mem.total, mem.used, mem.free = total, used, total - used
            return mem
        mem = _real.c_nvmlMemory_v2_t()
        mem.version = version
        mem.total, mem.reserved, mem.used, mem.free = total, reserved, used, total - used
        return mem

    @_nvml_api
    def nvmlDeviceGetBAR1MemoryInfo(self, handle):
        b = _real.c_nvmlBAR1Memory_t()
        b.bar1Total = 128 * 1024 * MIB
        b.bar1Used = (40 + 3 * len(self._m.gpu_procs(self._gpu_of(handle), self._m.state()))) * MIB
        b.bar1Free = b.bar1Total - b.bar1Used
        return b

    @_nvml_api
    def nvmlDeviceGetUtilizationRates(self, handle):
        g = self._g(handle)
        if self._mig_enabled(handle) or g["util"] is None:
            raise _ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        u = _real.c_nvmlUtilization_t()
        u.gpu, u.memory = round(g["util"]), round(g["memctl"])
        return u

    @_nvml_api
    def nvmlDeviceGetEncoderUtilization(self, handle):
        return [0, 167000]

    @_nvml_api
    def nvmlDeviceGetDecoderUtilization(self, handle):
        return [0, 167000]

    @_nvml_api
    def nvmlDeviceGetPowerUsage(self, handle):
        return int(self._g(handle)["power_w"] * 1000)

    @_nvml_api
    def nvmlDeviceGetTemperature(self, handle, sensor):
        return round(self._g(handle)["temp"])

    @_nvml_api
    def nvmlDeviceGetClockInfo(self, handle, type):
        g = self._g(handle)
        return g["sm_mhz"] if type == _real.NVML_CLOCK_SM else g["mem_mhz"]

    @_nvml_api
    def nvmlDeviceGetPerformanceState(self, handle):
        return (
            8 if "gpu_idle" in self._g(handle)["reasons"] and not self._m.state()["job_on"] else 0
        )

    _REASON_BITS = {
        "gpu_idle": 0x1,
        "sw_power_cap": 0x4,
        "hw_slowdown": 0x8,
        "sw_thermal": 0x20,
        "hw_thermal": 0x40,
    }

    @_nvml_api
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        mask = 0
        for r in self._g(handle)["reasons"]:
            mask |= self._REASON_BITS.get(r, 0)
        return mask

    @_nvml_api
    def nvmlDeviceGetSupportedClocksEventReasons(self, handle):
        return 0x1FF

    @_nvml_api
    def nvmlDeviceGetPcieThroughput(self, device, counter):
        v = self._g(device)["pcie"]
        return int(v if counter == _real.NVML_PCIE_UTIL_TX_BYTES else v * 0.6)

    @_nvml_api
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._sim(handle).model["pcie"][0]

    @_nvml_api
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._sim(handle).model["pcie"][1]

    @_nvml_api
    def nvmlDeviceGetPcieReplayCounter(self, handle):
        return 0

    @_nvml_api
    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        st = self._m.state()
        gi = self._gpu_of(handle)
        g = self._m.gpus[gi]
        out = (_real.c_nvmlFieldValue_t * len(fieldIds))()
        for k, fid in enumerate(fieldIds):
            scope = 0
            if isinstance(fid, tuple):
                fid, scope = fid
            v = out[k]
            v.fieldId, v.scopeId = fid, scope
            v.timestamp = int(st["t"] * 1e6)
            v.nvmlReturn = _real.NVML_SUCCESS
            if (
                fid
                in (
                    _real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                    _real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
                )
                and g.model["nvlink"]
            ):
                v.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                tx, rx = self._m.nvlink[gi]
                v.value.ullVal = int(
                    tx if fid == _real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX else rx
                )
            elif fid == _real.NVML_FI_DEV_MEMORY_TEMP:
                v.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = round(st["gpus"][gi]["temp"] + 4)
            elif fid == _real.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
                v.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                v.value.ullVal = 0
            else:
                v.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
        return out

    @_nvml_api
    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        return 0

    @_nvml_api
    def nvmlDeviceGetRetiredPages(self, device, sourceFilter):
        if self._sim(device).model["cc"] >= (8, 0):
            raise _ERR(_real.NVML_ERROR_NOT_SUPPORTED)  # Ampere+ remaps rows instead
        return []

    @_nvml_api
    def nvmlDeviceGetRetiredPagesPendingStatus(self, device):
        if self._sim(device).model["cc"] >= (8, 0):
            raise _ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        return 0

    @_nvml_api
    def nvmlDeviceGetRemappedRows(self, device):
        if self._mig_enabled(device):
            raise _ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        return (0, 0, 0, 0)

    # -- processes ---------------------------------------------------------------------------
    def _procs(self, handle, graphics: bool):
        if graphics:
            return []
        gi = self._gpu_of(handle)
        out = []
        for p, used in self._m.gpu_procs(gi, self._m.state()):
            c = _real.c_nvmlProcessInfo_v3_t()
            c.pid, c.usedGpuMemory = p.pid, used
            c.gpuInstanceId = _NA if p.mig is None else p.mig + 1
            c.computeInstanceId = _NA if p.mig is None else 0
            out.append(_real.nvmlStructToFriendlyObject(c))
        return out

    @_nvml_api
    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._procs(handle, False)

    @_nvml_api
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return self._procs(handle, True)

    @_nvml_api
    def nvmlDeviceGetProcessUtilization(self, handle, timeStamp):
        if self._mig_enabled(handle):
            raise _ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        st = self._m.state()
        gi = self._gpu_of(handle)
        now_us = int(st["t"] * 1e6)
        procs = [p for p, _ in self._m.gpu_procs(gi, st)]
        if now_us <= timeStamp or not procs:
            raise _ERR(_real.NVML_ERROR_NOT_FOUND)
        g = st["gpus"][gi]
        arr = (_real.c_nvmlProcessUtilizationSample_t * len(procs))()
        for k, p in enumerate(procs):
            s = arr[k]
            s.pid, s.timeStamp = p.pid, now_us
            busy = p.role != "cotenant"
            s.smUtil = round(g["sm"] if busy and g["sm"] is not None else 0)
            s.memUtil = round(g["memctl"] if busy and g["memctl"] is not None else 0)
        return list(arr)

    # -- GPM ---------------------------------------------------------------------------------
    @_nvml_api
    def nvmlGpmSampleAlloc(self):
        return ctypes.pointer(_real.struct_c_nvmlGpmSample_t())

    @_nvml_api
    def nvmlGpmSampleFree(self, gpmSample):
        self._gpm.pop(self._addr(gpmSample), None)

    @_nvml_api
    def nvmlGpmSampleGet(self, device, gpmSample):
        if not self._sim(device).model["gpm"]:
            raise _ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        self._gpm[self._addr(gpmSample)] = (self._gpu_of(device), self._m.clock.now())
        return gpmSample

    _GPM_KEYS = {
        1: "util",
        2: "sm",
        3: "occ",
        5: "tensor",
        10: "dram",
        11: None,
        12: "fp32",
        13: "fp16",
    }

    @_nvml_api
    def nvmlGpmMetricsGet(self, metricsGet):
        a = self._gpm.get(self._addr(metricsGet.sample1))
        b = self._gpm.get(self._addr(metricsGet.sample2))
        if a is None or b is None or a[0] != b[0]:
            raise _ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        g = self._m.state()["gpus"][b[0]]
        for k in range(metricsGet.numMetrics):
            m = metricsGet.metrics[k]
            key = self._GPM_KEYS.get(m.metricId, "missing")
            if key == "missing":
                m.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
                continue
            m.nvmlReturn = _real.NVML_SUCCESS
            m.value = float(g[key]) if key and g[key] is not None else 0.0
        return metricsGet

    # -- events ------------------------------------------------------------------------------
    @_nvml_api
    def nvmlEventSetCreate(self):
        es = ctypes.pointer(_real.struct_c_nvmlEventSet_t())
        self._event_sets[self._addr(es)] = dict(gpus=set(), since=self._m.clock.now(), sent=0)
        return es

    @_nvml_api
    def nvmlDeviceGetSupportedEventTypes(self, handle):
        return (
            _real.nvmlEventTypeXidCriticalError
            | _real.nvmlEventTypeSingleBitEccError
            | _real.nvmlEventTypeDoubleBitEccError
            | _real.nvmlEventTypePState
        )

    @_nvml_api
    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        self._event_sets[self._addr(eventSet)]["gpus"].add(self._gpu_of(handle))

    @_nvml_api
    def nvmlEventSetWait_v2(self, eventSet, timeoutms):
        return self._next_event(eventSet)

    @_nvml_api
    def nvmlEventSetWait(self, eventSet, timeoutms):
        return self._next_event(eventSet)

    def _next_event(self, eventSet):
        es = self._event_sets.get(self._addr(eventSet))
        if es is None:
            raise _ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        now = self._m.clock.now()
        pending = [x for x in self._m.xids if es["since"] < x[0] <= now and x[1] in es["gpus"]]
        if es["sent"] >= len(pending):
            raise _ERR(_real.NVML_ERROR_TIMEOUT)
        t, gi, xid, *_ = pending[es["sent"]]
        es["sent"] += 1
        d = _real.c_nvmlEventData_t()
        d.device = self._handles[gi]
        d.eventType = _real.nvmlEventTypeXidCriticalError
        d.eventData = xid
        d.gpuInstanceId = d.computeInstanceId = _NA
        return d

    @_nvml_api
    def nvmlEventSetFree(self, eventSet):
        self._event_sets.pop(self._addr(eventSet), None)

    # -- MIG ---------------------------------------------------------------------------------
    @_nvml_api
    def nvmlDeviceGetMaxMigDeviceCount(self, device):
        if not self._sim(device).model["mig"]:
            raise _ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        return 7

    @_nvml_api
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device, index):
        migs = self._migs[self._gpu_of(device)]
        if index >= len(migs):
            raise _ERR(_real.NVML_ERROR_NOT_FOUND)
        return migs[index]

    @_nvml_api
    def nvmlDeviceIsMigDeviceHandle(self, device):
        return ctypes.c_uint(int(self._mig_of(device) is not None))

    @_nvml_api
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice):
        return self._handles[self._gpu_of(migDevice)]

    @_nvml_api
    def nvmlDeviceGetGpuInstanceId(self, device):
        k = self._mig_of(device)
        if k is None:
            raise _ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        return k + 1

    @_nvml_api
    def nvmlDeviceGetComputeInstanceId(self, device):
        if self._mig_of(device) is None:
            raise _ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        return 0
