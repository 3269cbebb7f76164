"""The minimum-driver table and what it answers: which driver a CUDA release needs, which CUDA
a driver supports, and whether a runtime of one version runs on a driver (the CUDA Toolkit
release notes, "CUDA Compatibility"). Pure functions over version strings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .wording import ERR_PTX

# Minimum Linux x86_64 driver per CUDA toolkit release: "Toolkit driver version", the driver
# bundled with each toolkit. Source: NVIDIA CUDA Toolkit Release Notes, Table 3 "CUDA Toolkit
# and Corresponding Driver Versions",
# https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html (there is no CUDA 12.7).
TABLE_SOURCE = (
    "NVIDIA CUDA Toolkit Release Notes, Table 3 (CUDA Toolkit and Corresponding Driver "
    "Versions, Linux x86_64): https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/"
)
TOOLKIT_MIN_DRIVER: tuple[tuple[str, str], ...] = (
    ("13.2 Update 2", "595.71.05"),
    ("13.2 Update 1", "595.58.03"),
    ("13.2 GA", "595.45.04"),
    ("13.1 Update 1", "590.48.01"),
    ("13.1 GA", "590.44.01"),
    ("13.0 Update 2", "580.95.05"),
    ("13.0 Update 1", "580.82.07"),
    ("13.0 GA", "580.65.06"),
    ("12.9 Update 1", "575.57.08"),
    ("12.9 GA", "575.51.03"),
    ("12.8 Update 1", "570.124.06"),
    ("12.8 GA", "570.26"),
    ("12.6 Update 3", "560.35.05"),
    ("12.6 Update 2", "560.35.03"),
    ("12.6 GA", "560.28.03"),
    ("12.5 Update 1", "555.42.06"),
    ("12.5 GA", "555.42.02"),
    ("12.4 Update 1", "550.54.15"),
    ("12.4 GA", "550.54.14"),
    ("12.3 Update 1", "545.23.08"),
    ("12.3 GA", "545.23.06"),
    ("12.2 Update 2", "535.104.05"),
    ("12.2 Update 1", "535.86.09"),
    ("12.2 GA", "535.54.03"),
    ("12.1 Update 1", "530.30.02"),
    ("12.1 GA", "530.30.02"),
    ("12.0 Update 1", "525.85.12"),
    ("12.0 GA", "525.60.13"),
    ("11.8 GA", "520.61.05"),
    ("11.7 Update 1", "515.48.07"),
    ("11.7 GA", "515.43.04"),
    ("11.6 Update 2", "510.47.03"),
    ("11.6 GA", "510.39.01"),
    ("11.5 GA", "495.29.05"),
    ("11.4 Update 4", "470.82.01"),
    ("11.4 Update 2", "470.57.02"),
    ("11.4 GA", "470.42.01"),
    ("11.3 GA", "465.19.01"),
    ("11.2 Update 2", "460.32.03"),
    ("11.2 GA", "460.27.03"),
    ("11.1 Update 1", "455.32"),
    ("11.1 GA", "455.23"),
    ("11.0.3", "450.51.06"),
    ("11.0.2 GA", "450.51.05"),
)
# Minor-version compatibility: the lowest driver a runtime of each major runs on.
MVC_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580"}


@lru_cache(maxsize=1024)  # the same few versions, judged at every tick of a live view
def version_tuple(v: str | None) -> tuple[int, ...] | None:
    """ "570.124.06" -> (570, 124, 6); None when not a version."""
    if not v:
        return None
    m = re.match(r"^\s*(\d+(?:\.\d+)*)", v)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def cuda_tuple(v: str | int | None) -> tuple[int, int] | None:
    """ "12.8" / "12.8.90" / 12080 (NVML's form) -> (12, 8); "12" -> None (minor unknown)."""
    if v is None:
        return None
    if isinstance(v, int):
        return (v // 1000, (v % 1000) // 10) if v > 0 else None
    t = version_tuple(v)
    return (t[0], t[1]) if t and len(t) >= 2 else None


def ga_min_driver() -> dict[tuple[int, int], str]:
    """(major, minor) -> the minimum driver of its GA release."""
    out: dict[tuple[int, int], str] = {}
    for release, driver in TOOLKIT_MIN_DRIVER:
        c = cuda_tuple(release.split()[0])
        if c is not None and ("GA" in release or c not in out):
            out[c] = driver
    return out


def min_driver_for(cuda: tuple[int, int]) -> str | None:
    """The minimum driver of toolkit `cuda` (its GA release); None when not in the table."""
    return ga_min_driver().get(cuda)


def max_cuda_for_driver(driver: str | None) -> tuple[int, int] | None:
    """The newest CUDA whose toolkit driver is at or below `driver` (for when NVML cannot say)."""
    d = version_tuple(driver)
    if d is None:
        return None
    fits = [c for c, need in ga_min_driver().items() if version_tuple(need) <= d]
    return max(fits) if fits else None


def mvc_ok(runtime_major: int, driver: str | None) -> bool | None:
    """Whether minor-version compatibility lets a runtime of this major run on `driver`."""
    floor, d = MVC_FLOOR.get(runtime_major), version_tuple(driver)
    if floor is None or d is None:
        return None
    return d >= version_tuple(floor)


@dataclass(frozen=True, slots=True)
class RuntimeVerdict:
    status: str  # "ok", "mvc" (runs under minor-version compatibility), "compat", "too_new"
    text: str


def runtime_verdict(
    runtime: str | None,
    driver_max: tuple[int, int] | None,
    driver: str | None,
    forward_compat: bool = False,
) -> RuntimeVerdict | None:
    """Can a runtime of version `runtime` ("12.8" or just "13") create a context on a driver
    `driver` whose maximum CUDA is `driver_max`? None when either side is unknown."""
    rt = version_tuple(runtime)
    if rt is None or driver_max is None:
        return None
    major = rt[0]
    minor = rt[1] if len(rt) >= 2 else None
    dmax = f"{driver_max[0]}.{driver_max[1]}"
    shown = f"{major}.{minor}" if minor is not None else f"{major}.x"
    if major < driver_max[0] or (major == driver_max[0] and (minor or 0) <= driver_max[1]):
        return RuntimeVerdict("ok", f"runtime {shown} <= driver's CUDA {dmax}")
    if forward_compat:
        return RuntimeVerdict(
            "compat",
            f"runtime {shown} > driver's CUDA {dmax}, through the forward-compatibility package",
        )
    if major == driver_max[0] and mvc_ok(major, driver):
        return RuntimeVerdict(
            "mvc",
            f"runtime {shown} > driver's CUDA {dmax}, same major: runs under minor-version "
            f'compatibility (no newer-driver features; newer PTX fails: "{ERR_PTX}")',
        )
    return RuntimeVerdict("too_new", f"runtime {shown} > driver's CUDA {dmax}")
