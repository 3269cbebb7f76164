"""What NVML says of each GPU's health settings, each call guarded on its own: a driver without
the symbol (NVMLError_FunctionNotFound, or NVMLLibraryMismatchError from the versioned wrappers)
reads as "not available from this driver", a GPU that cannot answer as not supported, never a
crash. Calls and their return shapes: NVIDIA's NVML API reference
(https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html) and nvidia-ml-py's
pynvml.py.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ...model import Snapshot
from ...model.health import (
    DENIED,
    NO_SYMBOL,
    NOT_SUPPORTED,
    FabricState,
    NvmlFacts,
    NvmlGpu,
    Reading,
)

_FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}


class _Caller:
    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.err = nvml.NVMLError
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        self.mismatch: tuple = (mismatch,) if mismatch else ()  # the driver lacks the symbol
        self.missing: set[str] = set()  # functions this driver lacks: asked once

    def problem(self, e: BaseException) -> str:
        n = self.nvml
        code = getattr(e, "value", None)
        if isinstance(e, self.mismatch) or code == n.NVML_ERROR_FUNCTION_NOT_FOUND:
            return NO_SYMBOL
        if code == n.NVML_ERROR_NOT_SUPPORTED:
            return NOT_SUPPORTED
        if code == n.NVML_ERROR_NO_PERMISSION:
            return DENIED
        if code == n.NVML_ERROR_GPU_IS_LOST:
            return "the GPU is lost"
        return f"{type(e).__name__}: {e}"

    def __call__(self, name: str, *args: Any) -> Reading:
        source = name
        fn = getattr(self.nvml, name, None)
        if fn is None:
            return Reading(None, source, "not in this pynvml binding")
        if name in self.missing:
            return Reading(None, source, NO_SYMBOL)
        try:
            return Reading(fn(*args), source)
        except Exception as e:  # noqa: BLE001 - every failure of one call is that call's
            if not isinstance(e, (self.err, *self.mismatch)):
                return Reading(None, source, f"{type(e).__name__}: {e}")
            problem = self.problem(e)
            if problem == NO_SYMBOL:
                self.missing.add(name)
            return Reading(None, source, problem)


def read_nvml(nvml: Any, snap: Snapshot, *, opened: bool = False) -> NvmlFacts:
    """Persistence mode, GSP firmware mode, PCIe link and fabric state of every GPU of `snap`.
    `opened`: the caller holds NVML open (the Monitor's sampler does, for its whole run): no
    nvmlInit/nvmlShutdown pair of its own, so a shutdown never runs beside a call in flight."""
    if opened:
        return _read(nvml, snap)
    try:
        nvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - no driver, no library: a state, said as such
        return NvmlFacts(problem=f"NVML could not be opened: {type(e).__name__}: {e}")
    try:
        return _read(nvml, snap)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001, S110 - nothing to do about a failed shutdown
            pass


def _read(nvml: Any, snap: Snapshot) -> NvmlFacts:
    call = _Caller(nvml)
    driver = call("nvmlSystemGetDriverVersion")
    gpus = tuple(_gpu(call, g) for g in snap.gpus)
    version = driver.value.decode() if isinstance(driver.value, bytes) else driver.value
    return NvmlFacts(gpus, version)


def _gpu(call: _Caller, g) -> NvmlGpu:
    bus = g.static.pci_bus_id
    if g.lost:
        return NvmlGpu(g.index, bus, g.static.name, lost=True)
    h = call("nvmlDeviceGetHandleByIndex", g.index)
    if not h.ok:
        gone = Reading(None, h.source, h.problem)
        return NvmlGpu(g.index, bus, g.static.name, g.util_gpu_pct, gone, gone, lost=True)
    handle = h.value
    pm = call("nvmlDeviceGetPersistenceMode", handle)
    if pm.ok:
        pm = Reading(bool(pm.value), pm.source)
    gsp = call("nvmlDeviceGetGspFirmwareMode", handle)
    if gsp.ok:
        enabled, default = gsp.value
        gsp = Reading((bool(enabled), bool(default)), gsp.source)
    return NvmlGpu(
        g.index,
        bus,
        g.static.name,
        g.util_gpu_pct,
        pm,
        gsp,
        call("nvmlDeviceGetCurrPcieLinkGeneration", handle),
        call("nvmlDeviceGetMaxPcieLinkGeneration", handle),
        call("nvmlDeviceGetCurrPcieLinkWidth", handle),
        call("nvmlDeviceGetMaxPcieLinkWidth", handle),
        _fabric(call, handle),
    )


def _fabric(call: _Caller, handle: Any) -> Reading:
    """nvmlDeviceGetGpuFabricInfoV (R550 and later), else nvmlDeviceGetGpuFabricInfo (R525)."""
    n = call.nvml
    first = None
    for name, struct in (
        ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
        ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
    ):
        cls = getattr(n, struct, None)
        if cls is None:
            continue
        info = cls()
        r = call(name, handle, ctypes.byref(info))
        if r.ok:
            state = FabricState(_FABRIC_STATES.get(info.state, str(info.state)), info.status, name)
            return Reading(state, name)
        if r.problem != NO_SYMBOL:
            return r
        first = first or r
    return first or Reading(None, "nvmlDeviceGetGpuFabricInfo", "not in this pynvml binding")
