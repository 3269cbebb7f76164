"""The process-list structs are written twice on purpose: once in the collector
(collect/nvml/compat.py), once in the simulated libnvidia-ml (sim/fake_libnvml.py), so that a
mistake in the collector's copy is not mirrored by the stand-in it is tested against. Both must
match NVML's header as NVIDIA's own bindings (pynvml) spell it."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from gputop_diag.collect.nvml import compat
from gputop_diag.sim import fake_libnvml


def layout(cls) -> list[tuple[str, int, int]]:
    return [(name, getattr(cls, name).offset, ctypes.sizeof(kind)) for name, kind in cls._fields_]


@pytest.mark.parametrize("name", ["ProcessInfoV1", "ProcessInfoV2", "ProcessInfoV3CC"])
def test_collector_and_stand_in_agree(name):
    ours, theirs = getattr(compat, name), getattr(fake_libnvml, name)
    assert layout(ours) == layout(theirs)
    assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)


def test_v2_is_nvidias_v2_and_v3cc_adds_the_protected_memory():
    assert layout(compat.ProcessInfoV2) == layout(pynvml.c_nvmlProcessInfo_v2_t)
    assert ctypes.sizeof(compat.ProcessInfoV2) == ctypes.sizeof(pynvml.c_nvmlProcessInfo_v2_t)
    assert ctypes.sizeof(compat.ProcessInfoV2) == 24  # the size nvml.h gives v2
    assert ctypes.sizeof(compat.ProcessInfoV3CC) == 32
    assert layout(compat.ProcessInfoV3CC)[:4] == layout(compat.ProcessInfoV2)
    assert ctypes.sizeof(compat.ProcessInfoV1) == 16  # pid, padding, usedGpuMemory
