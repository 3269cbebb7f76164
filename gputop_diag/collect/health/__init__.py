"""Every read of the health checks (docs/health.md), through `Sources` only.

`read_health(feed, snap)` takes one snapshot (the GPUs, their bus ids and utilization, the GPU
processes) and reads what the checks judge: the GPU processes' environments and states, the PCI
bus, NVML's health settings, InfiniBand ports and the fabric manager. `health/` judges it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from ...model import Snapshot
from ...model.health import HealthFacts
from ...sources import Sources
from .fabric import read_fabric_manager, read_interconnect
from .nvml import read_nvml
from .pci import read_pci
from .procs import read_processes

__all__ = ["read_health"]


def read_health(
    feed: Sources, snap: Snapshot, watched: Iterable[int] = (), with_acs: bool = True
) -> HealthFacts:
    """What the health checks need, read once. `watched`: a watched job's pids (their
    environments and trees are read beside the GPU processes'); `with_acs`: run `lspci` for the
    ACS control of the bridges above the GPUs."""
    started = time.perf_counter()
    gpu_pids: dict[int, tuple[int, ...]] = {}
    for p in snap.gpu_processes:
        gpu_pids[p.pid] = tuple(sorted({*gpu_pids.get(p.pid, ()), p.gpu_index}))
    procs = read_processes(feed.procfs, gpu_pids, watched, feed.clock.now())
    pci = read_pci(feed.procfs, feed.run_command, with_acs)
    nvml = read_nvml(feed.nvml, snap)
    inter = read_interconnect(feed.procfs)
    fm = read_fabric_manager(feed.procfs, feed.run_command, pci.nvswitches)
    return HealthFacts(
        timestamp=snap.timestamp,
        hostname=snap.system.hostname,
        processes=procs,
        pci=pci,
        nvml=nvml,
        interconnect=inter,
        fabric_manager=fm,
        read_s=time.perf_counter() - started,
    )
