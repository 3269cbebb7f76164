"""The host window's figures read each snapshot's processes once (`diagnose/host_figures.py`,
`_rows`): the same figures whether a snapshot's rows are read fresh or remembered, whatever the
GPU processes of the window, and the memory of them bounded."""

from __future__ import annotations

import random

import pytest

from gputop_diag.diagnose import host_figures as H
from gputop_diag.model import (
    ChildInfo,
    GpuProcess,
    HostState,
    ProcessInfo,
    Snapshot,
    SystemInfo,
    ThreadInfo,
)


def _snapshots(seed: int, n: int = 12) -> list[Snapshot]:
    rnd = random.Random(seed)
    out = []
    for k in range(n):
        procs = []
        for pid in (100, 200):
            threads = [ThreadInfo(pid, H.MAIN_THREAD, rnd.uniform(50, 100))]
            threads += [
                ThreadInfo(pid + t, rnd.choice(["pt_data_worker", "NCCL Progress 0", "w"]),
                           rnd.choice([None, rnd.uniform(0, 90)]))
                for t in range(1, 5)
            ]  # fmt: skip
            children = [ChildInfo(pid + 50 + c, "pt_data_worker", rnd.uniform(0, 99))
                        for c in range(rnd.randint(0, 3))]  # fmt: skip
            if pid == 100 and k % 3 == 0:
                children.append(ChildInfo(200, "python", 40.0))  # a GPU process as a child
            procs.append(
                ProcessInfo(pid, cpu_pct=rnd.uniform(100, 300), busiest_threads=tuple(threads),
                            children=tuple(children))
            )  # fmt: skip
        out.append(
            Snapshot(
                timestamp=float(k),
                system=SystemInfo("node"),
                host=HostState(cpu_count=16, cpu_pct=rnd.uniform(10, 90)) if k % 5 else None,
                gpu_processes=(GpuProcess(100, 0, "compute", 1), GpuProcess(200, 1, "compute", 1)),
                processes=tuple(procs),
            )
        )
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_remembered_rows_give_the_figures_read_fresh(seed):
    snaps = _snapshots(seed)
    H.forget()
    windows = [snaps[max(0, k - 7) : k + 1] for k in range(len(snaps))]
    fresh = []
    for w in windows:
        H.forget()
        fresh.append([H.host_figures(w, pids) for pids in ({100, 200}, {100})])
    H.forget()
    warm = [[H.host_figures(w, pids) for pids in ({100, 200}, {100})] for w in windows]
    assert warm == fresh
    # the GPU processes of the window decide after the rows are read: pid 200 as pid 100's
    # child is a helper only where it holds no GPU memory
    assert any(a[0]["helper_count"] != a[1]["helper_count"] for a in warm)


def test_the_rows_remembered_are_bounded(monkeypatch):
    monkeypatch.setattr(H._rows, "most", 5)
    H.forget()
    snaps = _snapshots(4, n=20)
    for k in range(len(snaps)):
        H.host_figures(snaps[max(0, k - 7) : k + 1], {100, 200})
        assert len(H._rows) <= 5
    assert H._rows.held() == snaps[-5:]  # the newest kept
