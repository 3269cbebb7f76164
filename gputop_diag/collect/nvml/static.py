"""Per-GPU facts read once: identity first, so a GPU lost half-way keeps what was read."""

from __future__ import annotations

from typing import Any

from ...model import GpuStatic
from .query import GpuLost, Query, text

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
ALL_LINKS = 0xFFFFFFFF  # scopeId asking NVML for the NVLink counter summed over every link


def read_static(q: Query, nvml: Any, i: int, h: Any) -> tuple[GpuStatic, bool]:
    """(facts, lost): the facts read before the GPU stopped answering, if it did."""
    facts: dict[str, Any] = {"index": i}
    n = nvml
    try:
        # identity first: the board a user must find when it fails
        facts["name"] = text(q(i, "nvmlDeviceGetName", h))
        facts["uuid"] = text(q(i, "nvmlDeviceGetUUID", h))
        pci = q(i, "nvmlDeviceGetPciInfo", h)
        facts["pci_bus_id"] = text(pci.busId) if pci is not None else None
        facts["minor_number"] = q(i, "nvmlDeviceGetMinorNumber", h)
        facts["serial"] = text(q(i, "nvmlDeviceGetSerial", h))
        mem = q(i, "nvmlDeviceGetMemoryInfo", h)
        facts["memory_total_bytes"] = mem.total if mem is not None else None
        limit_mw = q(i, "nvmlDeviceGetEnforcedPowerLimit", h)
        facts["power_limit_w"] = limit_mw / 1000.0 if limit_mw is not None else None
        facts["max_sm_clock_mhz"] = q(
            i, "nvmlDeviceGetMaxClockInfo", h, n.NVML_CLOCK_SM, key="max_clock_sm"
        )
        facts["max_mem_clock_mhz"] = q(
            i, "nvmlDeviceGetMaxClockInfo", h, n.NVML_CLOCK_MEM, key="max_clock_mem"
        )
        cc = q(i, "nvmlDeviceGetCudaComputeCapability", h)
        facts["compute_capability"] = tuple(cc) if cc is not None else None
        mig = q(i, "nvmlDeviceGetMigMode", h)
        facts["mig_mode"] = bool(mig[0]) if mig is not None else None
        pers = q(i, "nvmlDeviceGetPersistenceMode", h)
        facts["persistence_mode"] = bool(pers) if pers is not None else None
        cmode = q(i, "nvmlDeviceGetComputeMode", h)
        facts["compute_mode"] = COMPUTE_MODES.get(cmode) if cmode is not None else None
        facts["pcie_max_gen"] = q(i, "nvmlDeviceGetMaxPcieLinkGeneration", h)
        facts["pcie_max_width"] = q(i, "nvmlDeviceGetMaxPcieLinkWidth", h)
        gpm = q(i, "nvmlGpmQueryDeviceSupport", h)
        facts["gpm_supported"] = bool(gpm is not None and gpm.isSupportedDevice)
        facts["nvlink_supported"] = _has_nvlink(q, n, i, h)
    except GpuLost:
        return GpuStatic(**facts), True
    return GpuStatic(**facts), False


def _has_nvlink(q: Query, n: Any, i: int, h: Any) -> bool:
    field = getattr(n, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
    if field is None:
        return False
    vals = q(i, "nvmlDeviceGetFieldValues", h, [(field, ALL_LINKS)], key="nvlink_probe")
    return bool(vals) and vals[0].nvmlReturn == n.NVML_SUCCESS


def mig_handles(q: Query, i: int, h: Any) -> list[Any]:
    count = q(i, "nvmlDeviceGetMaxMigDeviceCount", h) or 0
    out = []
    for k in range(count):
        m = q(i, "nvmlDeviceGetMigDeviceHandleByIndex", h, k, key=f"mig_handle_{k}")
        if m is not None:
            out.append(m)
    return out
