"""Device memory over a window: the fullest GPU or MIG instance, who holds it, and steady
growth towards full."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import NamedTuple

from ..model import MIB, GpuState, Snapshot
from ..model.stats import slope_per_s
from . import thresholds as T
from .memo import SnapshotMemo


class _MemoryUnit(NamedTuple):
    """A GPU, or one MIG instance of it: the memory a job can fill."""

    pct: float
    gpu: int
    where: str
    reserved: int | None
    gi: int | None  # the MIG GPU instance id, None for a whole GPU


def _memory_units(g: GpuState) -> list[_MemoryUnit]:
    out = [_MemoryUnit(g.mem_used_pct, g.index, f"GPU {g.index}", g.mem_reserved_bytes, None)]
    # In MIG mode a job sees only its instance's memory: one full instance is full memory for
    # the job on it while the whole GPU reads mostly free.
    for m in g.mig_instances:
        if m.memory_used_bytes is None or not m.memory_total_bytes:
            continue
        kind = (m.name or "").rsplit(" MIG ", 1)[-1] if m.name and " MIG " in m.name else "MIG"
        where = f"GPU {g.index} MIG {kind} (instance {m.gpu_instance_id or m.mig_index})"
        pct = 100.0 * m.memory_used_bytes / m.memory_total_bytes
        out.append(_MemoryUnit(pct, g.index, where, None, m.gpu_instance_id))
    return out


def memory_figures(last: Snapshot, window: Sequence[Snapshot]) -> dict:
    live = [g for g in last.gpus if not g.lost and g.mem_used_pct is not None]
    units = [u for g in live for u in _memory_units(g)]
    fullest = max(units, key=lambda u: u.pct, default=None)
    holders = ()
    if fullest is not None:
        on_unit = (fullest.gpu, fullest.gi)
        procs = [
            p
            for p in last.gpu_processes
            if (p.gpu_index, p.gpu_instance_id if fullest.gi is not None else None) == on_unit
        ]
        biggest = max(procs, key=lambda p: p.used_memory_bytes or 0, default=None)
        owner = last.process(biggest.pid) if biggest else None
        holders = tuple(
            (p.pid, p.used_memory_bytes or 0, _foreign(last, p.pid, owner))
            for p in sorted(procs, key=lambda p: -(p.used_memory_bytes or 0))
        )
    growth = growth_gpu = to_full = growth_pct = None
    growing: list[int] = []
    if len(window) >= T.MIN_SAMPLES:
        times = [s.timestamp for s in window]
        used = [_used_mib(s) for s in window]
        for g in live:
            vals = [u.get(g.index) for u in used]
            slope = slope_per_s(times, vals) if _steady_rise(vals) else None
            if slope is not None and slope * 60.0 >= T.GROWTH_MIB_PER_MIN:
                growing.append(g.index)
            if slope is None or (growth is not None and slope * 60.0 <= growth):
                continue
            growth, growth_gpu, growth_pct = slope * 60.0, g.index, g.mem_used_pct
            free = (g.mem_free_bytes or 0) / MIB
            to_full = free / growth if growth > 0 else None
    return dict(
        mem_used_pct_max=fullest.pct if fullest else None,
        mem_used_pct_gpu=fullest.gpu if fullest else None,
        mem_used_where=fullest.where if fullest else None,
        mem_reserved_bytes=fullest.reserved if fullest else None,
        mem_near_full_gpus=tuple(sorted({u.gpu for u in units if u.pct >= T.CAPACITY_WARN_PCT})),
        mem_holders=holders,
        mem_growth_mib_per_min=growth,
        mem_growth_gpu=growth_gpu,
        mem_growth_gpu_pct=growth_pct,
        minutes_to_full=to_full,
        growing_gpus=tuple(growing),
    )


def _read_used_mib(s: Snapshot) -> dict[int, float | None]:
    """Each GPU's used memory in MiB (None where lost or not read), by index."""
    used: dict[int, float | None] = {}
    for x in s.gpus:
        if x.index not in used:  # the first of an index, as Snapshot.gpu() finds it
            ok = not x.lost and x.mem_used_bytes is not None
            used[x.index] = x.mem_used_bytes / MIB if ok else None
    return used


# each snapshot's figures, read once however many windows it stays in (`memo.py`)
_used_mib = SnapshotMemo(_read_used_mib)
forget = _used_mib.forget


def _steady_rise(vals: Sequence[float | None]) -> bool:
    """Memory that rises through the window, not in one step (a job starting, a phase change).

    Each quarter of the window must hold more than the one before, and no single tick may add
    more than GROWTH_MAX_STEP_SHARE of the whole rise.
    """
    v = [x for x in vals if x is not None]
    if len(v) < 8:
        return False
    q = len(v) // 4
    quarters = [statistics.median(v[k * q : (k + 1) * q]) for k in range(4)]
    if any(b <= a for a, b in zip(quarters, quarters[1:], strict=False)):
        return False
    rise = v[-1] - v[0]
    biggest = max(b - a for a, b in zip(v, v[1:], strict=False))
    return rise > 0 and biggest <= T.GROWTH_MAX_STEP_SHARE * rise


def _foreign(snap: Snapshot, pid: int, owner) -> bool:
    """Whether pid belongs to another user than the biggest holder (or hides its details)."""
    info = snap.process(pid)
    if info is None or owner is None:
        return False
    if info.access_denied:
        return True
    return info.user is not None and owner.user is not None and info.user != owner.user
