"""The pynvml stand-in's field values, driver samples, health counters, GPM, Xid events and MIG
calls."""

from __future__ import annotations

import ctypes
import inspect
import time

import pynvml as _real

from .fake_nvml_base import ERR, NA, NvmlBase, nvml_api
from .machine import last_sample, sample_time_us

_FI = _real
_NVLINK_DATA = {
    _FI.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: 0,
    _FI.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: 1,
}
_NVLINK_RAW = {
    _FI.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX: 0,
    _FI.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX: 1,
}
_ZERO_FIELDS = {
    _FI.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
    _FI.NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
    _FI.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
    _FI.NVML_FI_DEV_ECC_SBE_AGG_TOTAL,
    _FI.NVML_FI_DEV_ECC_DBE_AGG_TOTAL,
    _FI.NVML_FI_DEV_REMAPPED_COR,
    _FI.NVML_FI_DEV_REMAPPED_UNC,
    _FI.NVML_FI_DEV_REMAPPED_PENDING,
    _FI.NVML_FI_DEV_REMAPPED_FAILURE,
}
_ALL_LINKS = 0xFFFFFFFF
# NVML_GPM_METRIC_* id -> the machine's figure (None: supported, always 0 in these workloads).
_GPM_KEYS = {
    _real.NVML_GPM_METRIC_GRAPHICS_UTIL: "util",
    _real.NVML_GPM_METRIC_SM_UTIL: "sm",
    _real.NVML_GPM_METRIC_SM_OCCUPANCY: "occ",
    _real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor",
    _real.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram",
    _real.NVML_GPM_METRIC_FP64_UTIL: None,
    _real.NVML_GPM_METRIC_FP32_UTIL: "fp32",
    _real.NVML_GPM_METRIC_FP16_UTIL: "fp16",
}
# nvmlDeviceGetSamples: sampling type -> the machine's figure, and how many samples the driver's
# ring buffer keeps (its first, sizing call answers 100 for utilization and 120 for power).
_SAMPLED = {
    _real.NVML_GPU_UTILIZATION_SAMPLES: "util",
    _real.NVML_MEMORY_UTILIZATION_SAMPLES: "memctl",
    _real.NVML_TOTAL_POWER_SAMPLES: "power_w",
    _real.NVML_PROCESSOR_CLK_SAMPLES: "sm_mhz",
    _real.NVML_MEMORY_CLK_SAMPLES: "mem_mhz",
    _real.NVML_ENC_UTILIZATION_SAMPLES: "codec",
    _real.NVML_DEC_UTILIZATION_SAMPLES: "codec",
}
_RING = {_real.NVML_TOTAL_POWER_SAMPLES: 120}
RING_SAMPLES = 100
_SAMPLING_COUNT = _real.NVML_SAMPLINGTYPE_COUNT
_EVENT_TYPES = (
    _real.nvmlEventTypeXidCriticalError
    | _real.nvmlEventTypeSingleBitEccError
    | _real.nvmlEventTypeDoubleBitEccError
    | _real.nvmlEventTypePState
    | _real.nvmlEventTypeClock
)


# The health calls and the driver branch whose libnvidia-ml.so first exports them (nvml.h of each
# CUDA toolkit: GSP firmware mode in CUDA 11.6 / R510, GPU fabric info in CUDA 12.0 / R525, its
# versioned form in CUDA 12.4 / R550); an older driver raises FUNCTION_NOT_FOUND.
HEALTH_SYMBOL_SINCE = {
    "nvmlDeviceGetGspFirmwareMode": 510,
    "nvmlDeviceGetGpuFabricInfo": 525,
    "nvmlDeviceGetGpuFabricInfoV": 550,
}
# pynvml's own default arguments (shared c_uint objects): the stand-in's signature is the real's.
_GSP_ARGS = inspect.signature(_real.nvmlDeviceGetGspFirmwareMode).parameters
_FABRIC_STATES = {
    "not_supported": _real.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED,
    "not_started": _real.NVML_GPU_FABRIC_STATE_NOT_STARTED,
    "in_progress": _real.NVML_GPU_FABRIC_STATE_IN_PROGRESS,
    "completed": _real.NVML_GPU_FABRIC_STATE_COMPLETED,
}


# The same layouts as pynvml's structs without `_PrintableStructure`'s Python attribute hooks, which
# cost a Python call per field read or written: the fakes fill these and hand back (or write into
# the caller's memory) the very bytes the pynvml struct would hold.
class _FieldValue(ctypes.Structure):
    _fields_ = _real.c_nvmlFieldValue_t._fields_


class _GpmMetric(ctypes.Structure):
    _fields_ = _real.c_nvmlGpmMetric_t._fields_


class _UintValue(ctypes.Union):
    """c_nvmlValue_t's members with `uiVal` first, so that `(v,)` fills `uiVal` (the rest zero,
    as `c_nvmlValue_t(uiVal=v)` leaves it)."""

    _fields_ = sorted(_real.c_nvmlValue_t._fields_, key=lambda f: f[0] != "uiVal")


class _UintSample(ctypes.Structure):
    _fields_ = [
        (name, _UintValue if kind is _real.c_nvmlValue_t else kind)
        for name, kind in _real.c_nvmlSample_t._fields_
    ]


_METRICS_AT = _real.c_nvmlGpmMetricsGet_t.metrics.offset
_METRICS_LEN = _real.c_nvmlGpmMetricsGet_t.metrics.size // ctypes.sizeof(_GpmMetric)


def _deref(arg):
    """The struct behind `byref(x)` (or `x` itself)."""
    return getattr(arg, "_obj", arg)


class NvmlExtras(NvmlBase):
    # -- field values ------------------------------------------------------------------------
    @nvml_api
    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        st = self._m.state()
        gi = self._index(handle)
        g, gs = self._m.gpus[gi], st["gpus"][gi]
        links = g.model["nvlinks"]
        out = (_FieldValue * len(fieldIds))()
        stamp = int(st["t"] * 1e6)
        for k, fid in enumerate(fieldIds):
            v = out[k]
            try:
                v.fieldId, v.scopeId = fid
            except TypeError:
                v.fieldId = fid
            fid, scope = v.fieldId, v.scopeId
            v.timestamp = stamp
            v.latencyUsec = 0
            v.nvmlReturn = _real.NVML_SUCCESS
            if fid in _NVLINK_DATA or fid in _NVLINK_RAW:
                if not links:
                    v.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
                    continue
                if scope != _ALL_LINKS and scope >= links:
                    v.nvmlReturn = _real.NVML_ERROR_INVALID_ARGUMENT
                    continue
                side = _NVLINK_DATA.get(fid, _NVLINK_RAW.get(fid))
                kib = self._m.nvlink[gi][side] * (1.0 if fid in _NVLINK_DATA else 1.06)
                v.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                v.value.ullVal = int(kib if scope == _ALL_LINKS else kib / links)
            elif fid == _real.NVML_FI_DEV_NVLINK_LINK_COUNT and links:
                v.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = links
            elif fid == _real.NVML_FI_DEV_MEMORY_TEMP:
                v.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = round(gs["temp"] + 4)
            elif fid in (_real.NVML_FI_DEV_POWER_INSTANT, _real.NVML_FI_DEV_POWER_AVERAGE):
                v.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = int(gs["power_w"] * 1000)
            elif fid in _ZERO_FIELDS:
                v.valueType = _real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                v.value.ullVal = 0
            else:
                v.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
        return (_real.c_nvmlFieldValue_t * len(fieldIds)).from_buffer_copy(out)

    # -- driver samples ----------------------------------------------------------------------
    @nvml_api
    def nvmlDeviceGetSamples(self, device, sampling_type, timeStamp):
        """(NVML_VALUE_TYPE_UNSIGNED_INT, [c_nvmlSample_t]) as pynvml returns them: the samples
        newer than `timeStamp` (CPU time, epoch us) that the ring buffer still holds, oldest
        first; NotFound when there is none."""
        if not isinstance(sampling_type, int) or not 0 <= sampling_type < _SAMPLING_COUNT:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        figure = _SAMPLED.get(sampling_type)
        gi = self._index(device)
        if figure is None or self._mig_of(device) is not None or self._mig_enabled(device):
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)  # utilization is per GPU instance in MIG
        m = self._m
        newest = last_sample(m.clock.now())
        # The samples newer than timeStamp are the newest ones (sample times increase with k):
        # walk back from the newest rather than test the whole ring.
        oldest = newest - _RING.get(sampling_type, RING_SAMPLES) + 1
        first = newest + 1
        while first > oldest and sample_time_us(first - 1) > timeStamp:
            first -= 1
        ks = range(first, newest + 1)
        if not ks:
            raise ERR(_real.NVML_ERROR_NOT_FOUND)
        if figure == "mem_mhz":
            fixed = float(self._sim(device).model["mem_max"])
        elif figure == "codec":
            fixed = 0.0
        else:
            fixed = None
        scale = 1000 if figure == "power_w" else 1
        rows = []
        for k in ks:
            v = fixed
            if v is None:
                v = m.driver_sample(gi, k, figure)
                if v is None:
                    raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
            rows.append((sample_time_us(k), (round(v * scale),)))
        # Built whole, without pynvml's attribute hooks (`_UintSample`), then copied.
        raw = (_UintSample * len(ks))(*rows)
        arr = (_real.c_nvmlSample_t * len(ks)).from_buffer_copy(raw)
        return (_real.NVML_VALUE_TYPE_UNSIGNED_INT, arr[0 : len(ks)])

    # -- health ------------------------------------------------------------------------------
    @nvml_api
    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        self._no_mig_handle(handle)
        return 0

    @nvml_api
    def nvmlDeviceGetEccMode(self, handle):
        return [1, 1]

    @nvml_api
    def nvmlDeviceGetRetiredPages(self, device, sourceFilter):
        if self._sim(device).model["cc"] >= (8, 0):
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)  # Ampere and newer remap rows instead
        return []

    @nvml_api
    def nvmlDeviceGetRetiredPagesPendingStatus(self, device):
        if self._sim(device).model["cc"] >= (8, 0):
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        return 0

    @nvml_api
    def nvmlDeviceGetRemappedRows(self, device):
        if self._mig_enabled(device):
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)  # not in MIG mode with instances
        return (0, 0, 0, 0)

    @nvml_api
    def nvmlDeviceGetNvLinkState(self, device, link):
        if link >= self._sim(device).model["nvlinks"]:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        return _real.NVML_FEATURE_ENABLED

    # -- node health -------------------------------------------------------------------------
    def _since(self, name: str) -> None:
        if self._m.driver.branch < HEALTH_SYMBOL_SINCE[name]:
            raise ERR(_real.NVML_ERROR_FUNCTION_NOT_FOUND)

    @nvml_api
    def nvmlDeviceGetGspFirmwareMode(
        self,
        handle,
        isEnabled=_GSP_ARGS["isEnabled"].default,
        defaultMode=_GSP_ARGS["defaultMode"].default,
    ):
        """[isEnabled, defaultMode] as pynvml returns them, or NVML_SUCCESS with the two filled
        in when the caller passes its own references. GSP runs by default on Turing and newer
        from R535 on (NVIDIA driver README, "GSP Firmware")."""
        self._since("nvmlDeviceGetGspFirmwareMode")
        self._no_mig_handle(handle)
        health = getattr(self._m, "health", None)
        on = int(self._m.driver.branch >= 535 and tuple(self._sim(handle).model["cc"]) >= (7, 5))
        enabled, default = health.cfg.get("gsp", (on, on)) if health else (on, on)
        if type(isEnabled) is not ctypes.c_uint:  # references: filled in place
            _deref(isEnabled).value, _deref(defaultMode).value = enabled, default
            return _real.NVML_SUCCESS
        return [enabled, default]

    def _fabric(self, device, info) -> int:
        health = getattr(self._m, "health", None)
        state = health.fabric_state(self._index(device)) if health else "not_supported"
        if state == "not_supported":
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        s = _deref(info)
        s.state = _FABRIC_STATES[state]
        s.status = _real.NVML_SUCCESS if state == "completed" else _real.NVML_ERROR_NOT_READY
        s.cliqueId = 1 if state == "completed" else 0
        return _real.NVML_SUCCESS

    @nvml_api
    def nvmlDeviceGetGpuFabricInfo(self, device, gpuFabricInfo):
        """Fills the caller's c_nvmlGpuFabricInfo_t (passed by reference)."""
        self._since("nvmlDeviceGetGpuFabricInfo")
        return self._fabric(device, gpuFabricInfo)

    @nvml_api
    def nvmlDeviceGetGpuFabricInfoV(self, device, gpuFabricInfo):
        """Fills the caller's c_nvmlGpuFabricInfoV_t, whose `version` must be set."""
        self._since("nvmlDeviceGetGpuFabricInfoV")
        if _deref(gpuFabricInfo).version != _real.nvmlGpuFabricInfo_v2:
            raise ERR(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return self._fabric(device, gpuFabricInfo)

    # -- GPM ---------------------------------------------------------------------------------
    @nvml_api
    def nvmlGpmQueryDeviceSupport(self, device):
        s = _real.c_nvmlGpmSupport_t()
        s.version = _real.NVML_GPM_SUPPORT_VERSION
        s.isSupportedDevice = int(self._sim(device).model["gpm"])
        return s

    @nvml_api
    def nvmlGpmSampleAlloc(self):
        return ctypes.pointer(_real.struct_c_nvmlGpmSample_t())

    @nvml_api
    def nvmlGpmSampleFree(self, gpmSample):
        self._gpm.pop(self._addr(gpmSample), None)

    @nvml_api
    def nvmlGpmSampleGet(self, device, gpmSample):
        if not self._sim(device).model["gpm"] or self._mig_of(device) is not None:
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        self._gpm[self._addr(gpmSample)] = (self._index(device), self._m.clock.now())
        return gpmSample

    @nvml_api
    def nvmlGpmMetricsGet(self, metricsGet):
        if metricsGet.version != _real.NVML_GPM_METRICS_GET_VERSION:
            raise ERR(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        a = self._gpm.get(self._addr(metricsGet.sample1))
        b = self._gpm.get(self._addr(metricsGet.sample2))
        if a is None or b is None or a[0] != b[0]:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        avg = self._m.gpu_average(b[0], min(a[1], b[1]), max(a[1], b[1]))
        # The caller's metrics array, read and written without pynvml's attribute hooks.
        address = ctypes.addressof(metricsGet) + _METRICS_AT
        metrics = (_GpmMetric * _METRICS_LEN).from_address(address)
        for k in range(metricsGet.numMetrics):
            m = metrics[k]
            if m.metricId not in _GPM_KEYS:
                m.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
                continue
            key = _GPM_KEYS[m.metricId]
            m.nvmlReturn = _real.NVML_SUCCESS
            m.value = float(avg[key]) if key and avg[key] is not None else 0.0
        return metricsGet

    # -- events ------------------------------------------------------------------------------
    @nvml_api
    def nvmlEventSetCreate(self):
        es = ctypes.pointer(_real.struct_c_nvmlEventSet_t())
        self._event_sets[self._addr(es)] = dict(since={}, sent=set())
        return es

    @nvml_api
    def nvmlDeviceGetSupportedEventTypes(self, handle):
        self._no_mig_handle(handle)
        return _EVENT_TYPES

    @nvml_api
    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        self._no_mig_handle(handle)
        es = self._event_sets.get(self._addr(eventSet))
        if es is None:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        if eventTypes & _real.nvmlEventTypeXidCriticalError:
            es["since"].setdefault(self._index(handle), self._m.clock.now())

    @nvml_api
    def nvmlEventSetWait_v2(self, eventSet, timeoutms):
        return self._event_data(eventSet, timeoutms)

    @nvml_api
    def nvmlEventSetWait(self, eventSet, timeoutms):
        return self._event_data(eventSet, timeoutms)

    def _event_data(self, eventSet, timeoutms):
        device, event_type, event_data, gi, ci = self._wait_event(eventSet, timeoutms)
        d = _real.c_nvmlEventData_t()
        d.device, d.eventType, d.eventData = device, event_type, event_data
        d.gpuInstanceId, d.computeInstanceId = gi, ci
        return d

    def _pending(self, es: dict, now: float):
        for k, x in enumerate(self._m.xids):
            if x[0] > now:
                break
            since = es["since"].get(x[1])
            if since is not None and x[0] > since and k not in es["sent"]:
                return k, x
        return None

    def _wait_event(self, eventSet, timeoutms):
        """The next event of the set as (device, eventType, eventData, gi, ci), waiting up to
        `timeoutms` of wall time under a real-time clock; TIMEOUT when there is none."""
        es = self._event_sets.get(self._addr(eventSet))
        if es is None:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        clock = self._m.clock
        hit = self._pending(es, clock.now())
        if hit is None and clock.realtime and timeoutms > 0:
            deadline = time.monotonic() + timeoutms / 1000.0
            while hit is None and time.monotonic() < deadline:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                hit = self._pending(es, clock.now())
        if hit is None:
            raise ERR(_real.NVML_ERROR_TIMEOUT)
        k, (_, gi, xid, *_rest) = hit
        es["sent"].add(k)
        device = self._handles[gi]
        if self._m.foreign_event_handles:  # a handle value the caller never looked up
            device = ctypes.pointer(_real.struct_c_nvmlDevice_t())
            self._by_addr[self._addr(device)] = (gi, None)
        return device, _real.nvmlEventTypeXidCriticalError, xid, NA, NA

    @nvml_api
    def nvmlEventSetFree(self, eventSet):
        self._event_sets.pop(self._addr(eventSet), None)

    # -- MIG ---------------------------------------------------------------------------------
    @nvml_api
    def nvmlDeviceGetMigMode(self, device):
        g = self._sim(device)
        if not g.model["mig_capable"]:
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        on = int(bool(g.mig))
        return [on, on]

    @nvml_api
    def nvmlDeviceGetMaxMigDeviceCount(self, device):
        g = self._sim(device)
        if not g.model["mig_capable"]:
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
        return 7 if g.mig else 0

    @nvml_api
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device, index):
        gi = self._index(device)
        if not self._m.gpus[gi].mig:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= index < 7:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(self._migs[gi]):
            raise ERR(_real.NVML_ERROR_NOT_FOUND)
        return self._migs[gi][index]

    @nvml_api
    def nvmlDeviceIsMigDeviceHandle(self, device):
        return ctypes.c_uint(int(self._mig_of(device) is not None))

    @nvml_api
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice):
        if self._mig_of(migDevice) is None:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        return self._handles[self._index(migDevice)]

    @nvml_api
    def nvmlDeviceGetGpuInstanceId(self, device):
        k = self._mig_of(device)
        if k is None:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        return self._sim(device).mig[k].gi_id

    @nvml_api
    def nvmlDeviceGetComputeInstanceId(self, device):
        k = self._mig_of(device)
        if k is None:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        return self._sim(device).mig[k].ci_id
