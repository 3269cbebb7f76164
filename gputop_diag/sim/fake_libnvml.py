"""The C side of the pynvml stand-in: a simulated `libnvidia-ml.so` for the symbols whose struct
layout depends on the driver, with the C calling convention.

`pynvml._nvmlGetFunctionPointer(name)` is `getattr(nvmlLib, name)`; a symbol the driver does not
export raises AttributeError there, which pynvml turns into FUNCTION_NOT_FOUND. The functions here
take what pynvml's wrappers pass (`byref(c_uint)`, arrays of structs, `None`) and return NVML
return codes, and they write entries in the layout of the simulated driver — not the caller's. A
caller that picks the wrong struct for the driver misreads exactly as it would on the real one,
so `FakeLib` can also stand in for the real `pynvml.nvmlLib` (tests swap it in and call the real
module's wrappers).

Symbols the driver exports but this library does not emulate can be looked up (probed) but not
called.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml as _real

from .drivers import SYMBOL_SINCE

# pynvml wrapper -> the C symbol it calls, where the two names differ (pynvml 13.x; a test reads
# pynvml's source and checks this table). A callable picks the symbol from the call's arguments.
C_SYMBOLS: dict = {
    "nvmlInit": "nvmlInitWithFlags",
    "nvmlDeviceGetCount": "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex": "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetPciInfo": "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetHandleByPciBusId": "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetComputeRunningProcesses": "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses": "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlEventSetWait": "nvmlEventSetWait_v2",
    "nvmlDeviceGetMemoryInfo": lambda args, kwargs: (
        "nvmlDeviceGetMemoryInfo_v2"
        if (args[1] if len(args) > 1 else kwargs.get("version"))
        else "nvmlDeviceGetMemoryInfo"
    ),
}

NA = 0xFFFFFFFF

# NVML's process-list structs (nvml.h), written here apart from the collector's copy in
# collect/nvml/compat.py on purpose: a mistake there must not be mirrored by the stand-in it is
# tested against. tests/test_nvml_structs.py checks both against NVIDIA's bindings.


class ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: drivers before R450."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class ProcessInfoV2(ctypes.Structure):
    """nvmlProcessInfo_v2_t: what `_v2`, and `_v3` outside 535.54-535.98, write (24 bytes)."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class ProcessInfoV3CC(ctypes.Structure):
    """The entry `_v3` writes on 535.54-535.98: v2 plus usedGpuCcProtectedMemory (32 bytes)."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
        ("usedGpuCcProtectedMemory", ctypes.c_ulonglong),
    ]


class EventDataV1(ctypes.Structure):
    """nvmlEventData_t as `nvmlEventSetWait` (v1) writes it: no MIG ids."""

    _fields_ = [
        ("device", _real.c_nvmlDevice_t),
        ("eventType", ctypes.c_ulonglong),
        ("eventData", ctypes.c_ulonglong),
    ]


LAYOUTS = {"v1": ProcessInfoV1, "v2": ProcessInfoV2, "v3cc": ProcessInfoV3CC}
_PROCESS_SYMBOLS = {
    f"nvmlDevice{kind}RunningProcesses{suffix}": (kind == "GetGraphics", suffix)
    for kind in ("GetCompute", "GetGraphics")
    for suffix in ("", "_v2", "_v3")
}


def _wrapped_symbols() -> frozenset[str]:
    return frozenset(v for v in C_SYMBOLS.values() if isinstance(v, str)) | {
        "nvmlDeviceGetMemoryInfo_v2"
    }


_WRAPPED = _wrapped_symbols()


def _deref(arg: Any) -> Any:
    """The object behind `byref(x)` (or `x` itself)."""
    return getattr(arg, "_obj", arg)


class _Probe:
    """An exported symbol this simulated library does not emulate: it can be looked up, not
    called."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args: Any) -> int:
        raise NotImplementedError(
            f"the simulated libnvidia-ml does not emulate the C call {self.__name__}; "
            "call pynvml's wrapper instead"
        )


class FakeLib:
    """`getattr(lib, symbol)`: the C function, or AttributeError when the driver lacks it."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._symbols: dict[str, tuple[Any, Any]] = {}  # name -> (driver, C function)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or not name.startswith("nvml"):
            raise AttributeError(name)
        driver = self._nvml._m.driver
        hit = self._symbols.get(name)
        if hit is not None and hit[0] is driver:  # looked up before, from the same library
            return hit[1]
        fn = self._symbol(name, driver)
        self._symbols[name] = (driver, fn)
        return fn

    def _symbol(self, name: str, driver: Any) -> Any:
        if not driver.exports(name):
            raise AttributeError(name)
        if name in _PROCESS_SYMBOLS:
            graphics, suffix = _PROCESS_SYMBOLS[name]
            return lambda handle, count, infos: self._processes(
                name, graphics, suffix, handle, count, infos
            )
        if name in ("nvmlEventSetWait", "nvmlEventSetWait_v2"):
            return lambda event_set, data, timeout: self._event_wait(name, event_set, data, timeout)
        if name in SYMBOL_SINCE or callable(getattr(_real, name, None)) or name in _WRAPPED:
            return _Probe(name)
        raise AttributeError(name)

    def _layout(self, suffix: str) -> type[ctypes.Structure]:
        if suffix == "":
            return ProcessInfoV1
        if suffix == "_v2":
            return ProcessInfoV2
        return LAYOUTS[self._nvml._m.driver.process_layout]

    def _processes(self, name: str, graphics: bool, suffix: str, handle, count, infos) -> int:
        n = self._nvml
        try:
            n._gate(name, (handle,), {})
            rows = n._process_rows(handle, graphics)
        except _real.NVMLError as e:
            return e.value
        c_count = _deref(count)
        if not rows:
            c_count.value = 0
            return _real.NVML_SUCCESS
        if infos is None or c_count.value < len(rows):
            c_count.value = len(rows)
            return _real.NVML_ERROR_INSUFFICIENT_SIZE
        layout = self._layout(suffix)
        out = (layout * len(rows))()
        for entry, (pid, used, gi, ci) in zip(out, rows, strict=True):
            entry.pid, entry.usedGpuMemory = pid, used
            if hasattr(entry, "gpuInstanceId"):
                entry.gpuInstanceId, entry.computeInstanceId = gi, ci
        # The driver writes its own layout into the caller's memory; never past the caller's
        # buffer here (on a real machine a smaller caller struct is corrupted memory).
        size = min(ctypes.sizeof(out), ctypes.sizeof(infos))
        ctypes.memmove(infos, out, size)
        c_count.value = len(rows)
        return _real.NVML_SUCCESS

    def _event_wait(self, name: str, event_set, data, timeout) -> int:
        n = self._nvml
        ms = timeout.value if isinstance(timeout, ctypes.c_uint) else int(timeout)
        try:
            n._gate(name, (event_set,), {})
            device, event_type, event_data, gi, ci = n._wait_event(event_set, ms)
        except _real.NVMLError as e:
            return e.value
        written = EventDataV1() if name == "nvmlEventSetWait" else _real.c_nvmlEventData_t()
        written.device, written.eventType, written.eventData = device, event_type, event_data
        if name == "nvmlEventSetWait_v2":
            written.gpuInstanceId, written.computeInstanceId = gi, ci
        d = _deref(data)
        ctypes.memmove(
            ctypes.byref(d), ctypes.byref(written), min(ctypes.sizeof(written), ctypes.sizeof(d))
        )
        return _real.NVML_SUCCESS
