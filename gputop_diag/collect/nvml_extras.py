"""The stateful NVML readers: Xid event set, GPM sample pairs, MIG instances."""

from __future__ import annotations

import ctypes
from dataclasses import replace
from typing import Any

from ..model import GpmMetrics, MigInstance, XidEvent
from .nvml_query import GpuLost, Query, text

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
