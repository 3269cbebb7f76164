"""The stateful NVML readers: Xid event set, GPM sample pairs, the driver's busy-time samples,
MIG instances."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...model import CollectorError, GpmMetrics, MigInstance, XidEvent
from . import errors as nvml_errors
from .compat import NA, NvmlCompat
from .head import GPM_MIN_INTERVAL_S
from .memory import Forms, read_memory
from .query import GpuLost, Query, text, union_value

MAX_EVENTS_PER_TICK = 256  # a storm of events must not stall the tick


def handle_key(handle: Any) -> Any:
    """A hashable identity for an NVML handle (ctypes pointers do not compare by value)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


class EventWatcher:
    """Xid events from an NVML event set, polled without blocking (timeout 0).

    A failure to create the set or to wait on it is a collector error (`nvml-events`), never an
    exception: the Xid stream is off and the kernel log still has the events. An event whose
    device handle is not one the collector looked up is attributed by its PCI bus id.
    """

    def __init__(
        self, nvml: Any, q: Query, compat: NvmlCompat, index_of_bus: Callable[[str], int | None]
    ) -> None:
        self.nvml, self.q, self.compat = nvml, q, compat
        self._index_of_bus = index_of_bus
        self._by_handle: dict[Any, int] = {}
        self._bus: dict[int, str | None] = {}
        self.lost: set[int] = set()  # GPUs found lost while registering
        self.errors: dict[int | None, CollectorError] = {}  # lasting: the set, or one GPU
        self._set = None
        try:
            self._set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as e:
            self.errors[None] = nvml_errors.events_failure(nvml, "nvmlEventSetCreate", e)

    def add(self, i: int, h: Any, bus: str | None) -> None:
        """Register GPU i for Xid events."""
        n = self.nvml
        if self._set is None:
            return
        self._bus[i] = bus
        want = n.nvmlEventTypeXidCriticalError
        try:
            supported = self.q(i, "nvmlDeviceGetSupportedEventTypes", h)
            if supported is not None and not supported & want:
                return
            n.nvmlDeviceRegisterEvents(h, want, self._set)
        except GpuLost:
            self.lost.add(i)
            return
        except n.NVMLError as e:
            if e.value == n.NVML_ERROR_GPU_IS_LOST:
                self.lost.add(i)
            elif e.value not in (n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_FUNCTION_NOT_FOUND):
                self.errors[i] = nvml_errors.events_failure(n, f"registering GPU {i}", e, index=i)
            return
        self._by_handle[handle_key(h)] = i

    def poll(self, now: float) -> tuple[tuple[XidEvent, ...], tuple[CollectorError, ...]]:
        """The events that arrived since the last poll, and this poll's failure if any."""
        if self._set is None or not self._by_handle:
            return (), ()
        n = self.nvml
        out: list[XidEvent] = []
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                data = self.compat.event_wait(self._set, 0)
            except n.NVMLError as e:
                if e.value == n.NVML_ERROR_TIMEOUT:
                    break
                return tuple(out), (nvml_errors.events_failure(n, "waiting for events", e),)
            if not data.eventType & n.nvmlEventTypeXidCriticalError:
                continue
            gi = getattr(data, "gpuInstanceId", NA)
            msg = "" if gi in (None, NA) else f"GPU instance {gi}"
            index, bus = self._attribute(data.device)
            out.append(
                XidEvent(
                    timestamp=now,
                    xid=int(data.eventData),
                    gpu_index=index,
                    source="nvml",
                    pci_bus_id=bus,
                    message=msg,
                )
            )
        return tuple(out), ()

    def _attribute(self, device: Any) -> tuple[int | None, str | None]:
        """(GPU index, bus id) of an event's device: by handle, else by asking its bus id."""
        i = self._by_handle.get(handle_key(device))
        if i is not None:
            return i, self._bus.get(i)
        try:
            pci = self.nvml.nvmlDeviceGetPciInfo(device)
        except (self.nvml.NVMLError, TypeError, ctypes.ArgumentError):
            return None, None
        bus = text(pci.busId)
        return self._index_of_bus(bus), bus

    def close(self) -> None:
        if self._set is not None:
            try:
                self.nvml.nvmlEventSetFree(self._set)
            except self.nvml.NVMLError:
                pass
            self._set = None


# GpmMetrics field -> NVML_GPM_METRIC_* constant name.
GPM_METRICS = (
    ("sm_util_pct", "NVML_GPM_METRIC_SM_UTIL"),
    ("sm_occupancy_pct", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("dram_bw_util_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
    ("tensor_util_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("fp16_util_pct", "NVML_GPM_METRIC_FP16_UTIL"),
    ("fp32_util_pct", "NVML_GPM_METRIC_FP32_UTIL"),
    ("fp64_util_pct", "NVML_GPM_METRIC_FP64_UTIL"),
    # any graphics or compute engine busy: DCGM_FI_PROF_GR_ENGINE_ACTIVE
    ("graphics_util_pct", "NVML_GPM_METRIC_GRAPHICS_UTIL"),
)


_field = object.__getattribute__  # a ctypes field's value, without pynvml's wrapper


class GpmSampler:
    """Keeps one GPM sample per GPU and turns each new one into metrics over the interval.

    Each GPU has two sample buffers, allocated once (`nvmlGpmSampleAlloc`) and freed when it is
    forgotten or at `close()`: a tick reads into the one not holding the previous sample, as
    NVIDIA's GPM sample does (`nvmlGpmSampleGet` fills the buffer it is given:
    https://docs.nvidia.com/deploy/nvml-api/group__nvmlGpmFunctions.html)."""

    def __init__(self, nvml: Any, q: Query, gpus: list[tuple[int, Any]]) -> None:
        self.nvml, self.q = nvml, q
        self._gpus = dict(gpus)
        self._bufs: dict[int, list[Any]] = {}  # GPU -> its sample buffers (two at most)
        self._prev: dict[int, tuple[float, Any]] = {}  # GPU -> (when, the buffer holding it)
        self.lost: set[int] = set()  # GPUs found lost while sampling
        self._ids = [(f, getattr(nvml, c)) for f, c in GPM_METRICS if hasattr(nvml, c)]
        self._req: Any = None  # the metrics request, built on first use (_request)

    def add(self, index: int, handle: Any) -> None:
        self._gpus[index] = handle

    def forget(self, index: int) -> None:
        self._gpus.pop(index, None)
        self._prev.pop(index, None)
        for s in self._bufs.pop(index, ()):
            self._free(index, s)

    def seed(self, index: int, when: float, sample: Any) -> bool:
        """Take GPU `index`'s first sample from elsewhere (`head.GpmHeadStart`): its buffer is
        this sampler's from now on. False (and the buffer freed) for a GPU not sampled here."""
        if index not in self._gpus or index in self._prev:
            self._free(index, sample)
            return False
        self._bufs.setdefault(index, []).append(sample)
        self._prev[index] = (when, sample)
        return True

    def _free(self, index: int, sample: Any) -> None:
        try:
            self.q(index, "nvmlGpmSampleFree", sample)
        except GpuLost:
            self.lost.add(index)

    def _spare(self, index: int, prev: tuple[float, Any] | None) -> Any:
        """GPU `index`'s buffer that does not hold its previous sample; allocated the first time
        it is needed. None where NVML cannot allocate one. Raises GpuLost."""
        bufs = self._bufs.setdefault(index, [])
        for s in bufs:
            if prev is None or s is not prev[1]:
                return s
        s = self.q(index, "nvmlGpmSampleAlloc")
        if s is not None:
            bufs.append(s)
        return s

    def sample(self, now: float) -> dict[int, GpmMetrics]:
        out: dict[int, GpmMetrics] = {}
        for i, h in list(self._gpus.items()):
            prev = self._prev.get(i)
            if prev is not None and now - prev[0] < GPM_MIN_INTERVAL_S:
                continue
            try:
                s = self._spare(i, prev)
                if s is None or self.q(i, "nvmlGpmSampleGet", h, s) is None:
                    continue  # the previous sample, if any, is kept
            except GpuLost:
                self.lost.add(i)
                continue
            self._prev[i] = (now, s)
            if prev is None:
                continue
            try:
                metrics = self._metrics(i, prev[1], s)
            except GpuLost:
                self.lost.add(i)
                continue
            if metrics is not None:
                out[i] = metrics
        return out

    def _request(self) -> Any:
        """The one nvmlGpmMetricsGet_t this sampler asks with, its metric ids set once: they are
        IN only, NVML fills each metric's nvmlReturn, value and metricInfo
        (https://docs.nvidia.com/deploy/nvml-api/structnvmlGpmMetric__t.html)."""
        if self._req is None:
            mg = self.nvml.c_nvmlGpmMetricsGet_t()
            metrics = mg.metrics
            for k, (_, mid) in enumerate(self._ids):
                metrics[k].metricId = mid
            self._req = mg
        return self._req

    def _metrics(self, i: int, s1: Any, s2: Any) -> GpmMetrics | None:
        n = self.nvml
        mg = self._request()
        mg.version = n.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(self._ids)
        mg.sample1, mg.sample2 = s1, s2
        if self.q(i, "nvmlGpmMetricsGet", mg) is None:
            return None
        # the ctypes fields read as they are: pynvml's structures wrap every attribute read in
        # Python (`_PrintableStructure.__getattribute__`, for char arrays), 24 reads a GPU here
        ok, metrics = n.NVML_SUCCESS, _field(mg, "metrics")
        vals = {}
        for k, (fld, _) in enumerate(self._ids):
            m = metrics[k]
            vals[fld] = float(_field(m, "value")) if _field(m, "nvmlReturn") == ok else None
        return GpmMetrics(**vals)

    def close(self) -> None:
        for i, bufs in list(self._bufs.items()):
            for s in bufs:
                self._free(i, s)
        self._bufs.clear()
        self._prev.clear()


# The driver keeps ~100 busy-time samples (~16 s at one per ~1/6 s); a tick keeps at most this
# many of the newest, so a long pause (a suspended live view) cannot blow up one snapshot.
MAX_BUSY_SAMPLES_PER_TICK = 64
# On the first tick, keep the samples of the last second: the span NVML's utilization figure
# covers on these products, measured in the driver's own timestamps.
FIRST_TICK_SPAN_US = 1_000_000


class BusySampleReader:
    """The driver's ~1/6 s GPU busy-time samples since the previous tick, per GPU
    (`nvmlDeviceGetSamples` with NVML_GPU_UTILIZATION_SAMPLES).

    Each GPU keeps the newest timestamp it has seen and asks only for newer samples. The first
    call asks with 0 (everything the ring buffer holds) and keeps the last second of it by the
    driver's own clock: a timestamp from our clock could be from another clock domain, and then
    every later call would find nothing, while the whole buffer would put ~16 s of samples taken
    before the tool started into the first tick.
    """

    def __init__(self, nvml: Any, q: Query) -> None:
        self.nvml, self.q = nvml, q
        self._last_seen: dict[int, int] = {}

    def forget(self, index: int) -> None:
        self._last_seen.pop(index, None)

    def read(self, index: int, handle: Any) -> tuple[float, ...]:
        """Percent busy per sample, oldest first; () when the driver has none. Raises GpuLost."""
        n = self.nvml
        kind = getattr(n, "NVML_GPU_UTILIZATION_SAMPLES", None)
        if kind is None:
            return ()
        prev = self._last_seen.get(index)
        got = self.q(
            index,
            "nvmlDeviceGetSamples",
            handle,
            kind,
            prev or 0,
            absent=(n.NVML_ERROR_NOT_FOUND,),  # nothing new since the last tick
        )
        if not got:
            return ()
        value_type, samples = got
        stamped = sorted((int(s.timeStamp), s) for s in samples)
        if not stamped:
            return ()
        newest = stamped[-1][0]
        since = newest - FIRST_TICK_SPAN_US if prev is None else prev
        self._last_seen[index] = max(newest, prev or 0)
        values = []
        for ts, s in stamped:
            v = union_value(s.sampleValue, value_type)
            if ts > since and v is not None and 0 <= v <= 100:  # drop the driver's odd values
                values.append(float(v))
        return tuple(values[-MAX_BUSY_SAMPLES_PER_TICK:])


def is_vgpu_guest(q: Query, nvml: Any, i: int, h: Any) -> bool | None:
    """Whether GPU i is a vGPU inside a virtual machine (NVML_GPU_VIRTUALIZATION_MODE_VGPU), the
    one place a license is held; None where NVML cannot say (no such call, an error). Read once.
    Raises GpuLost."""
    mode = q(i, "nvmlDeviceGetVirtualizationMode", h)
    vgpu = getattr(nvml, "NVML_GPU_VIRTUALIZATION_MODE_VGPU", None)
    if mode is None or vgpu is None:
        return None
    return mode == vgpu


def read_vgpu_license(q: Query, i: int, h: Any) -> bool | None:
    """Whether a vGPU guest holds its license: a feature the guest enabled is licensed
    (`nvmlDeviceGetGridLicensableFeatures_v4`, featureEnabled and featureState non-zero: NVML API
    reference, nvmlGridLicensableFeature_t). None where the driver cannot say. Raises GpuLost."""
    got = q(i, "nvmlDeviceGetGridLicensableFeatures_v4", h)
    if got is None:
        return None
    if not got.isGridLicenseSupported:
        return None
    count = min(int(got.licensableFeaturesCount), len(got.gridLicensableFeatures))
    feats = [got.gridLicensableFeatures[k] for k in range(count)]
    return any(f.featureEnabled and f.featureState for f in feats)


def read_mig_static(q: Query, parent: int, handles: list[Any]) -> list[tuple[Any, MigInstance]]:
    """The fixed facts of each MIG instance, read once."""
    out = []
    for k, m in enumerate(handles):
        key = f"mig{k}"
        out.append(
            (
                m,
                MigInstance(
                    parent_index=parent,
                    mig_index=k,
                    uuid=text(q(parent, "nvmlDeviceGetUUID", m, key=key + "_uuid")),
                    name=text(q(parent, "nvmlDeviceGetName", m, key=key + "_name")),
                    gpu_instance_id=q(parent, "nvmlDeviceGetGpuInstanceId", m, key=key + "_gi"),
                    compute_instance_id=q(
                        parent, "nvmlDeviceGetComputeInstanceId", m, key=key + "_ci"
                    ),
                ),
            )
        )
    return out


def read_mig_instances(
    q: Query, parent: int, migs: list[tuple[Any, MigInstance]], forms: Forms
) -> tuple[MigInstance, ...]:
    """Each MIG instance with its memory this tick, in the GPU's definition (memory.py): its
    `used` without the instance's reserve where the driver tells it apart (v2)."""
    out = []
    for m, static in migs:
        mem = read_memory(q, parent, m, forms, prefix=f"mig{static.mig_index}_")
        if mem is None:
            out.append(static)
        else:
            out.append(replace(static, memory_total_bytes=mem.total, memory_used_bytes=mem.used))
    return tuple(out)
