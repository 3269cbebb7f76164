"""The stateful NVML readers: Xid event set, GPM sample pairs, the driver's busy-time samples,
MIG instances."""

from __future__ import annotations

import ctypes
from dataclasses import replace
from typing import Any

from ..model import GpmMetrics, MigInstance, XidEvent
from .nvml_query import GpuLost, Query, text, union_value

MAX_EVENTS_PER_TICK = 256  # a storm of events must not stall the tick


def handle_key(handle: Any) -> Any:
    """A hashable identity for an NVML handle (ctypes pointers do not compare by value)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


class EventWatcher:
    """Xid events from an NVML event set, polled without blocking (timeout 0)."""

    def __init__(self, nvml: Any, q: Query, gpus: list[tuple[int, Any]]) -> None:
        self.nvml, self.q = nvml, q
        self._by_handle: dict[Any, int] = {}
        self.lost: set[int] = set()  # GPUs found lost while registering
        self._set = q(None, "nvmlEventSetCreate")
        if self._set is None:
            return
        want = nvml.nvmlEventTypeXidCriticalError
        for i, h in gpus:
            try:
                supported = q(i, "nvmlDeviceGetSupportedEventTypes", h)
                if supported is not None and not supported & want:
                    continue
                self.q(i, "nvmlDeviceRegisterEvents", h, want, self._set)
            except GpuLost:
                self.lost.add(i)
                continue
            self._by_handle[handle_key(h)] = i

    def poll(self, now: float) -> tuple[XidEvent, ...]:
        if self._set is None or not self._by_handle:
            return ()
        wait = self.q.func("nvmlEventSetWait_v2") or self.q.func("nvmlEventSetWait")
        out: list[XidEvent] = []
        n = self.nvml
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                data = wait(self._set, 0)
            except n.NVMLError as e:
                if e.value != n.NVML_ERROR_TIMEOUT:
                    self.q.last_error[(None, "nvmlEventSetWait")] = type(e).__name__
                break
            if not data.eventType & n.nvmlEventTypeXidCriticalError:
                continue
            gi = getattr(data, "gpuInstanceId", 0xFFFFFFFF)
            msg = "" if gi in (None, 0xFFFFFFFF) else f"GPU instance {gi}"
            out.append(
                XidEvent(
                    timestamp=now,
                    xid=int(data.eventData),
                    gpu_index=self._by_handle.get(handle_key(data.device)),
                    source="nvml",
                    message=msg,
                )
            )
        return tuple(out)

    def close(self) -> None:
        if self._set is not None:
            self.q(None, "nvmlEventSetFree", self._set)
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
)
GPM_MIN_INTERVAL_S = 0.1  # NVML needs the two samples at least 100 ms apart


class GpmSampler:
    """Keeps one GPM sample per GPU and turns each new one into metrics over the interval."""

    def __init__(self, nvml: Any, q: Query, gpus: list[tuple[int, Any]]) -> None:
        self.nvml, self.q = nvml, q
        self._gpus = dict(gpus)
        self._prev: dict[int, tuple[float, Any]] = {}
        self.lost: set[int] = set()  # GPUs found lost while sampling
        self._ids = [(f, getattr(nvml, c)) for f, c in GPM_METRICS if hasattr(nvml, c)]

    def forget(self, index: int) -> None:
        self._gpus.pop(index, None)
        prev = self._prev.pop(index, None)
        if prev is not None:
            self._free(index, prev[1])

    def _free(self, index: int, sample: Any) -> None:
        try:
            self.q(index, "nvmlGpmSampleFree", sample)
        except GpuLost:
            self.lost.add(index)

    def sample(self, now: float) -> dict[int, GpmMetrics]:
        out: dict[int, GpmMetrics] = {}
        for i, h in list(self._gpus.items()):
            prev = self._prev.get(i)
            if prev is not None and now - prev[0] < GPM_MIN_INTERVAL_S:
                continue
            try:
                s = self.q(i, "nvmlGpmSampleAlloc")
                if s is None or self.q(i, "nvmlGpmSampleGet", h, s) is None:
                    if s is not None:
                        self._free(i, s)
                    continue
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
            self._free(i, prev[1])
            if metrics is not None:
                out[i] = metrics
        return out

    def _metrics(self, i: int, s1: Any, s2: Any) -> GpmMetrics | None:
        n = self.nvml
        mg = n.c_nvmlGpmMetricsGet_t()
        mg.version = n.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(self._ids)
        mg.sample1, mg.sample2 = s1, s2
        for k, (_, mid) in enumerate(self._ids):
            mg.metrics[k].metricId = mid
        if self.q(i, "nvmlGpmMetricsGet", mg) is None:
            return None
        vals = {}
        for k, (fld, _) in enumerate(self._ids):
            m = mg.metrics[k]
            vals[fld] = float(m.value) if m.nvmlReturn == n.NVML_SUCCESS else None
        return GpmMetrics(**vals)

    def close(self) -> None:
        for i, (_, s) in list(self._prev.items()):
            self._free(i, s)
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
    q: Query, parent: int, migs: list[tuple[Any, MigInstance]]
) -> tuple[MigInstance, ...]:
    """Each MIG instance with its memory this tick."""
    out = []
    for m, static in migs:
        mem = q(parent, "nvmlDeviceGetMemoryInfo", m, key=f"mig{static.mig_index}_mem")
        if mem is None:
            out.append(static)
        else:
            out.append(replace(static, memory_total_bytes=mem.total, memory_used_bytes=mem.used))
    return tuple(out)
