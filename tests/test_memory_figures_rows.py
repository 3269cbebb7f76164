"""Memory growth over a window reads each snapshot's GPUs once (`diagnose/memory_figures.py`,
`_used_mib`): the same figures whether a snapshot's are read fresh or remembered, including a
GPU lost midway and one whose figure is missing, and the memory of them bounded."""

from __future__ import annotations

import random

import pytest

from gputop_diag.diagnose import memory_figures as M
from gputop_diag.model import MIB, GpuState, GpuStatic, Snapshot, SystemInfo


def _snapshots(seed: int, n: int = 40) -> list[Snapshot]:
    rnd = random.Random(seed)
    statics = [GpuStatic(index=i, memory_total_bytes=80_000 * MIB) for i in range(3)]
    rate = [rnd.uniform(5, 40) for _ in statics]  # MiB a tick
    out = []
    for k in range(n):
        gpus = []
        for i, st in enumerate(statics):
            if i == 1 and 15 <= k < 18:
                gpus.append(GpuState(index=i, static=st, lost=True))
                continue
            used = None if (i == 2 and k % 7 == 3) else int((10_000 + rate[i] * k) * MIB)
            free = None if used is None else 80_000 * MIB - used
            gpus.append(GpuState(index=i, static=st, mem_total_bytes=80_000 * MIB,
                                 mem_used_bytes=used, mem_free_bytes=free))  # fmt: skip
        out.append(Snapshot(timestamp=float(k), system=SystemInfo("n"), gpus=tuple(gpus)))
    return out


@pytest.mark.parametrize("seed", [5, 6])
def test_remembered_figures_equal_the_figures_read_fresh(seed):
    snaps = _snapshots(seed)
    windows = [snaps[max(0, k - 29) : k + 1] for k in range(len(snaps))]
    fresh = []
    for w in windows:
        M.forget()
        fresh.append(M.memory_figures(w[-1], w))
    M.forget()
    warm = [M.memory_figures(w[-1], w) for w in windows]
    assert warm == fresh
    assert any(f["mem_growth_mib_per_min"] for f in warm)  # the growth is seen


def test_the_figures_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(M._used_mib, "most", 4)
    M.forget()
    snaps = _snapshots(7)
    for k in range(len(snaps)):
        M.memory_figures(snaps[k], snaps[max(0, k - 9) : k + 1])
        assert len(M._used_mib) <= 4
