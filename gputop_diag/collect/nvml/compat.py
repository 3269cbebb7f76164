"""Driver skew: the NVML calls whose newest form an older (or newer) driver lacks.

`pynvml`'s plain wrappers call the newest C symbols: `nvmlDeviceGetComputeRunningProcesses` →
`…_v3` (and raises `NVMLLibraryMismatchError`, not an `NVMLError`, when it is missing),
`nvmlEventSetWait` → `…_v2`, `nvmlDeviceGetMemoryInfo(h, version)` → `…_v2`. The struct a symbol
fills changed too: the process entries of `…_v3` carry `usedGpuCcProtectedMemory` (32 bytes) on
535.54-535.98 and not before or after (24 bytes), so reading them with the binding's struct shows
wrong pids and memory from the second entry on.

`NvmlCompat` probes the loaded library's symbols once (`pynvml._nvmlGetFunctionPointer`, as
nvitop's `api/libnvml.py` does) and calls the newest form the driver has, with the struct that
form writes:

- process lists: `_v3` (24 or 32-byte entries) → `_v2` (24) → v1 (16, no MIG ids);
- event waits: `_v2` → v1 (no MIG ids);
- memory: v2 (with `reserved`) → v1 (in `NvmlCollector`, through `Query.first`);
- clock event reasons: `…ClocksEventReasons` → `…ClocksThrottleReasons` (same bits, the names
  before CUDA 12.2; through `Query.first`).

A binding without `_nvmlGetFunctionPointer` (it is private) gets the binding's own wrappers.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

NA = 0xFFFFFFFF  # NVML's "not applicable" MIG ids
NOT_AVAILABLE_BYTES = 0xFFFFFFFFFFFFFFFF  # usedGpuMemory the driver cannot tell (WDDM)


class ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class ProcessInfoV2(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class ProcessInfoV3CC(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
        ("usedGpuCcProtectedMemory", ctypes.c_ulonglong),
    ]


@dataclass(frozen=True, slots=True)
class ProcessEntry:
    """One process of a process list, whatever struct it came in."""

    pid: int
    usedGpuMemory: int | None  # noqa: N815 - NVML's field names, as pynvml's objects have
    gpuInstanceId: int = NA  # noqa: N815
    computeInstanceId: int = NA  # noqa: N815


@dataclass(frozen=True, slots=True)
class EventEntry:
    device: Any
    eventType: int  # noqa: N815
    eventData: int  # noqa: N815
    gpuInstanceId: int = NA  # noqa: N815
    computeInstanceId: int = NA  # noqa: N815


_KINDS = {
    "compute": "nvmlDeviceGetComputeRunningProcesses",
    "graphics": "nvmlDeviceGetGraphicsRunningProcesses",
}


class NvmlCompat:
    """The newest form of each skew-prone call that the loaded driver has. Make it after
    `nvmlInit` (symbol look-ups need the library loaded)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._lookup = getattr(nvml, "_nvmlGetFunctionPointer", None)
        self._symbols: dict[str, bool] = {}
        self._process_form: tuple[str, type[ctypes.Structure]] | None = None
        self._wait_v2: bool | None = None
        self._event_v1: type[ctypes.Structure] | None = None  # nvmlEventData_t before R450

    # -- probing -----------------------------------------------------------------------------
    @property
    def can_probe(self) -> bool:
        return callable(self._lookup)

    def has_symbol(self, symbol: str) -> bool | None:
        """Whether the loaded library exports `symbol`; None when the binding cannot tell."""
        if not self.can_probe:
            return None
        hit = self._symbols.get(symbol)
        if hit is not None:
            return hit
        n = self.nvml
        try:
            self._lookup(symbol)
            hit = True
        except n.NVMLError as e:
            if e.value != n.NVML_ERROR_FUNCTION_NOT_FOUND:
                return None  # not loaded (yet): ask again later
            hit = False
        self._symbols[symbol] = hit
        return hit

    def process_form(self) -> tuple[str, type[ctypes.Structure]]:
        """(symbol suffix, entry struct) for the process lists of this driver. nvitop's rule:
        `_v3` entries carry the confidential-computing figure only where the library has
        `nvmlDeviceGetConfComputeMemSizeInfo` and not yet
        `nvmlDeviceGetRunningProcessDetailList`."""
        if self._process_form is None:
            base = _KINDS["compute"]
            if self.has_symbol(base + "_v3"):
                cc = self.has_symbol("nvmlDeviceGetConfComputeMemSizeInfo") and not self.has_symbol(
                    "nvmlDeviceGetRunningProcessDetailList"
                )
                self._process_form = ("_v3", ProcessInfoV3CC if cc else ProcessInfoV2)
            elif self.has_symbol(base + "_v2"):
                self._process_form = ("_v2", ProcessInfoV2)
            else:
                self._process_form = ("", ProcessInfoV1)
        return self._process_form

    # -- calls -------------------------------------------------------------------------------
    def running_processes(self, kind: str, handle: Any) -> list[ProcessEntry]:
        """The compute or graphics processes on `handle`. Raises NVMLError like pynvml."""
        if not self.can_probe:
            return [_entry(p) for p in getattr(self.nvml, _KINDS[kind])(handle)]
        suffix, struct = self.process_form()
        n = self.nvml
        fn = self._lookup(_KINDS[kind] + suffix)
        count = ctypes.c_uint(0)
        ret = fn(handle, ctypes.byref(count), None)
        if ret == n.NVML_SUCCESS:
            return []
        for _ in range(3):  # the list can grow between the sizing call and the reading one
            if ret != n.NVML_ERROR_INSUFFICIENT_SIZE:
                raise n.NVMLError(ret)
            count.value = count.value * 2 + 5
            entries = (struct * count.value)()
            ret = fn(handle, ctypes.byref(count), entries)
            if ret == n.NVML_SUCCESS:
                return [_entry(entries[k]) for k in range(count.value)]
        raise n.NVMLError(ret)

    def event_wait(self, event_set: Any, timeout_ms: int) -> Any:
        """The next event of `event_set` (raises NVMLError_Timeout when none came)."""
        n = self.nvml
        if self._wait_v2 is None:
            self._wait_v2 = self.has_symbol("nvmlEventSetWait_v2") is not False
        if self._wait_v2:
            wait = getattr(n, "nvmlEventSetWait_v2", None) or n.nvmlEventSetWait
            return wait(event_set, timeout_ms)
        if self._event_v1 is None:
            self._event_v1 = type(
                "EventDataV1",
                (ctypes.Structure,),
                {
                    "_fields_": [
                        ("device", n.c_nvmlDevice_t),
                        ("eventType", ctypes.c_ulonglong),
                        ("eventData", ctypes.c_ulonglong),
                    ]
                },
            )
        data = self._event_v1()
        wait = self._lookup("nvmlEventSetWait")
        ret = wait(event_set, ctypes.byref(data), ctypes.c_uint(timeout_ms))
        if ret != n.NVML_SUCCESS:
            raise n.NVMLError(ret)
        return EventEntry(data.device, data.eventType, data.eventData)

    def describe(self) -> dict[str, str]:
        """Which form each call took (for `docs/nvml.md` and tests)."""
        suffix, struct = self.process_form() if self.can_probe else ("?", ProcessInfoV2)
        wait = "nvmlEventSetWait_v2" if self._wait_v2 is not False else "nvmlEventSetWait"
        return {
            "processes": f"{_KINDS['compute']}{suffix} ({ctypes.sizeof(struct)}-byte entries)",
            "event_wait": wait,
        }


def _entry(p: Any) -> ProcessEntry:
    used = getattr(p, "usedGpuMemory", None)
    if used == NOT_AVAILABLE_BYTES:
        used = None
    return ProcessEntry(
        pid=int(p.pid),
        usedGpuMemory=used,
        gpuInstanceId=getattr(p, "gpuInstanceId", NA),
        computeInstanceId=getattr(p, "computeInstanceId", NA),
    )
