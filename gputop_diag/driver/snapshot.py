"""The chain's facts as a snapshot holds them: the driver chain the Monitor read, NVML's
machine-wide error, the GPUs' names (forward compatibility works on data-centre boards only)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..model import DriverChain, Snapshot
from .facts import ChainFacts, LoadedRuntime
from .versions import cuda_tuple, max_cuda_for_driver

_NVML_CODES = {
    "LibRmVersionMismatch": "LIB_RM_VERSION_MISMATCH",
    "DriverNotLoaded": "DRIVER_NOT_LOADED",
    "LibraryNotFound": "LIBRARY_NOT_FOUND",
}
_DATACENTER = re.compile(r"\b([ABHL]\d{1,3}|GH\d{3}|GB\d{3}|B\d{3}|V100|T4|P100|A[1-9]0)\b")
_CONSUMER = re.compile(r"GeForce|TITAN|Quadro", re.IGNORECASE)


def nvml_error_name(snap: Snapshot) -> str | None:
    """NVML_ERROR_<NAME> of the snapshot's machine-wide NVML failure, when it names one."""
    for e in snap.errors:
        if e.source == "nvml" and e.gpu_index is None and e.code:
            for part, name in _NVML_CODES.items():
                if part in e.code:
                    return name
            return e.code
    return None


def datacenter(names: Sequence[str | None]) -> bool | None:
    """Whether the GPUs are data-centre boards (forward compatibility works there only)."""
    known = [n for n in names if n]
    if not known:
        return None
    if any(_CONSUMER.search(n) for n in known):
        return False
    return True if all(_DATACENTER.search(n) for n in known) else None


def current_chain(snap: Snapshot) -> DriverChain | None:
    """The snapshot's driver chain, unless NVML answered this tick with another driver than the
    library the chain found (read up to a slow-source period ago: the driver changed since, so
    its processes' libraries are not this driver's either)."""
    chain = snap.driver_chain
    if chain is None:
        return None
    live = snap.system.driver_version
    if snap.nvml_available and live and chain.library_version and live != chain.library_version:
        return None
    return chain


def facts_from_snapshot(
    snap: Snapshot, toolkit: str | None = None, extra: Sequence[LoadedRuntime] = ()
) -> ChainFacts | None:
    """The chain's facts as a snapshot holds them; None before the chain was read (or while it
    is out of date: `current_chain`)."""
    chain = current_chain(snap)
    if chain is None:
        return None
    s = snap.system
    err = nvml_error_name(snap)
    library = chain.library_version or s.driver_version
    # On disk, or NVML answered; NVML failing for another reason leaves it open.
    found = True if library else (False if err in (None, "LIBRARY_NOT_FOUND") else None)
    driver_max = cuda_tuple(s.cuda_driver_version) or max_cuda_for_driver(library)
    procs = []
    for p in chain.processes:
        rt = p.library("cudart")
        cu = p.library("cuda")
        procs.append(
            LoadedRuntime(
                p.pid,
                p.name,
                rt.version if rt else None,
                p.framework_cuda,
                cu.version if cu else None,
                cu is not None and cu.origin == "compat",
                cu is not None and cu.deleted,
            )
        )
    return ChainFacts(
        module_loaded=chain.module_loaded,
        module_version=chain.module_version,
        library_version=library,
        library_found=found,
        nvml_error=err,
        driver_max=driver_max,
        processes=(*procs, *extra),
        datacenter_gpu=datacenter([g.static.name for g in snap.gpus]),
        toolkit=toolkit,
        nvml_answered=err is None and snap.nvml_available and bool(s.driver_version),
    )
