"""Which board a GPU is, when NVML will not say: /proc/driver/nvidia/gpus/<bus>/information.

A GPU lost or unavailable at start-up gives NVML no handle to ask its name, UUID or bus id, yet
the user must know which board to pull. The driver's procfs entry still has them (no root needed,
and it works when NVML is broken; format from open-gpu-kernel-modules `nv-procfs.c`):

    Model: 		 NVIDIA H100 80GB HBM3
    GPU UUID: 	 GPU-xxxxxxxx-...
    Bus Location: 	 0000:3b:00.0
    Device Minor: 	 3

NVML numbers GPUs in PCI bus order, so the entries not taken by a GPU NVML did describe are
matched to the missing indices in bus order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ...model import GpuStatic

GPUS_DIR = "/proc/driver/nvidia/gpus"


def bus_key(bus_id: str | None) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) of any bus-id form: NVML `00000000:3B:00.0`, procfs
    `0000:3b:00.0`, Xid `PCI:0000:3b:00` (function 0)."""
    if not bus_id:
        return None
    b = bus_id.strip()
    if b.upper().startswith("PCI:"):
        b = b[4:]
    dev_fn = b.rsplit(":", 1)
    if len(dev_fn) != 2:
        return None
    head, tail = dev_fn
    dev, _, fn = tail.partition(".")
    dom, _, bus = head.rpartition(":")
    try:
        return int(dom or "0", 16), int(bus, 16), int(dev, 16), int(fn or "0", 16)
    except ValueError:
        return None


def nvml_bus_id(key: tuple[int, int, int, int]) -> str:
    """The NVML form of a bus id: 00000000:3B:00.0."""
    return f"{key[0]:08X}:{key[1]:02X}:{key[2]:02X}.{key[3]:X}"


def parse_information(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    return out


def read_procfs_gpus(procfs: Any) -> list[GpuStatic]:
    """Every GPU the driver's procfs lists, in bus order (index = position); [] when unreadable."""
    try:
        names = procfs.listdir(GPUS_DIR)
    except (OSError, AttributeError):
        return []
    found = []
    for name in names:
        key = bus_key(name)
        if key is None:
            continue
        try:
            info = parse_information(procfs.read_text(f"{GPUS_DIR}/{name}/information"))
        except OSError:
            info = {}
        uuid = info.get("GPU UUID")
        minor = info.get("Device Minor", "")
        found.append(
            (
                key,
                GpuStatic(
                    index=-1,
                    name=info.get("Model") or None,
                    uuid=uuid if uuid and "?" not in uuid else None,
                    pci_bus_id=nvml_bus_id(key),
                    minor_number=int(minor) if minor.isdigit() else None,
                ),
            )
        )
    return [s for _, s in sorted(found, key=lambda x: x[0])]


def fill_identities(statics: dict[int, GpuStatic], missing: Iterable[int], procfs: Any) -> None:
    """Complete, in place, the name, UUID, bus id and minor number of the GPUs in `missing`
    (indices NVML would not describe, fully or partly) from procfs."""
    missing = sorted(missing)
    if not missing:
        return
    entries = read_procfs_gpus(procfs)
    if not entries:
        return
    by_uuid = {e.uuid: e for e in entries if e.uuid}
    by_bus = {bus_key(e.pci_bus_id): e for e in entries}
    taken = set()
    for i, s in statics.items():  # GPUs NVML described, fully or in part
        hit = by_uuid.get(s.uuid) or by_bus.get(bus_key(s.pci_bus_id))
        if hit is not None:
            taken.add(hit.pci_bus_id)
            if i in missing:
                statics[i] = _merge(s, hit)
    free = [e for e in entries if e.pci_bus_id not in taken]
    unmatched = [i for i in missing if not (statics[i].uuid or statics[i].pci_bus_id)]
    if len(free) == len(unmatched) or len(entries) == len(statics):
        for i, e in zip(unmatched, free, strict=False):
            statics[i] = _merge(statics[i], e)


def _merge(s: GpuStatic, e: GpuStatic) -> GpuStatic:
    return dataclasses.replace(
        s,
        name=s.name or e.name,
        uuid=s.uuid or e.uuid,
        pci_bus_id=s.pci_bus_id or e.pci_bus_id,
        minor_number=s.minor_number if s.minor_number is not None else e.minor_number,
    )
