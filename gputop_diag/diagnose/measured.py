"""What the probes measured inside the job, aggregated: the step split over the processes and the
memory of each, as the classifier, the Job pane and `watch` read them.

A probe's figures are measured, not inferred: `measured_split` sums each part over the probed
processes' latest steps (`ProbeState.steps`, already the mean of their last minute) and keeps a
part only where every process measured it. A probe whose last step is older than
`MEASURED_STALE_S` (or three of its steps) has stopped stepping and says nothing about now.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ..model import ProbeState, Snapshot, SyncSite
from . import thresholds as T

# The parts of the step as the split shows them: the waits (each one class's evidence), the
# host's own time, then the GPU's busy time (which runs beside the host: not part of the sum).
WAIT_PARTS = ("t_input", "t_sync", "t_comm")
PART_FIELD = {
    "t_input": "t_input_s",
    "t_sync": "t_sync_s",
    "t_comm": "t_comm_exposed_s",  # the communication the step waits for: the exposed part
    "t_host": "t_host_s",
    "t_gpu": "t_gpu_s",
}
PART_WORDS = {
    "t_input": "input",
    "t_sync": "sync",
    "t_comm": "comm",
    "t_host": "host",
    "t_gpu": "GPU busy",
}
# The class a waiting part is the evidence of.
PART_CLASS = {
    "t_input": "input_pipeline",
    "t_sync": "synchronization",
    "t_comm": "communication",
}


@dataclass(frozen=True, slots=True)
class MeasuredSplit:
    """The step split measured in `pids` over their latest steps: mean seconds per step."""

    pids: tuple[int, ...]
    # the job's steps: the steps of each process, the fewest of them (the ranks of a job take
    # the same steps; it has taken as many as its slowest); never processes x steps
    steps: int
    steps_each: int  # the most steps one process gave (several ranks take the same steps)
    step_s: float  # the mean step
    parts: tuple[tuple[str, float | None], ...]  # (part, seconds) in PART_FIELD order
    measured: tuple[str, ...]  # the parts every process measured
    t_comm_total_s: float | None = None  # communication in all (the exposed part is in parts)
    sync_count: float | None = None  # host syncs per step
    sync_sites: tuple[SyncSite, ...] = ()  # over every process, most time first
    steps_all: int = 0  # every process's steps added up: said as such where shown

    def seconds(self, part: str) -> float | None:
        return dict(self.parts).get(part)

    def is_measured(self, part: str) -> bool:
        """Measured in every process; the host's time is the rest of the measured wall time."""
        return part in self.measured or (part == "t_host" and self.seconds(part) is not None)

    def share(self, part: str) -> float | None:
        """The part's share of the step (0..1); None where it was not measured."""
        v = self.seconds(part)
        if v is None or not self.is_measured(part) or self.step_s <= 0:
            return None
        return max(0.0, min(1.0, v / self.step_s))

    @property
    def largest_wait(self) -> str | None:
        """The waiting part with the largest measured share."""
        shares = [(self.share(p), p) for p in WAIT_PARTS if self.share(p) is not None]
        return max(shares)[1] if shares else None


def is_recent(p: ProbeState, at: float) -> bool:
    """The probe stepped recently at time `at`: within MEASURED_STALE_S or three of its steps
    (a process that has since exited still speaks for the steps it took)."""
    s = p.steps
    if s is None:
        return False
    return at - s.last_at <= max(T.MEASURED_STALE_S, 3 * s.wall_s)


def probed_snapshot(window: Sequence[Snapshot]) -> Snapshot | None:
    """The newest snapshot of `window` that carries probe states (a probed process that has
    exited is in the snapshots before it did)."""
    return next((s for s in reversed(window) if s.probes), None)


def recent_probes(
    snap: Snapshot | None, pids: Collection[int] | None = None, at: float | None = None
) -> tuple[ProbeState, ...]:
    """The probes of `snap` (of `pids` only, where given) that stepped recently at `at`
    (default: the snapshot's time)."""
    if snap is None:
        return ()
    at = snap.timestamp if at is None else at
    return tuple(
        p for p in snap.probes or () if (pids is None or p.pid in pids) and is_recent(p, at)
    )


def measured_split(probes: Sequence[ProbeState]) -> MeasuredSplit | None:
    """The split over `probes` (each process weighs by its steps), None without steps."""
    with_steps = [p for p in probes if p.steps is not None]
    if not with_steps:
        return None
    steps = [p.steps for p in with_steps]
    weights = [s.steps for s in steps]
    total = sum(weights)

    def mean(field: str) -> float | None:
        pairs = [(getattr(s, field), w) for s, w in zip(steps, weights, strict=True)]
        pairs = [(v, w) for v, w in pairs if v is not None]
        if not pairs:
            return None
        return sum(v * w for v, w in pairs) / sum(w for _, w in pairs)

    measured = set(steps[0].measured)
    for s in steps[1:]:
        measured &= set(s.measured)
    return MeasuredSplit(
        pids=tuple(p.pid for p in with_steps),
        steps=min(weights),
        steps_each=max(weights),
        steps_all=total,
        step_s=mean("wall_s") or 0.0,
        parts=tuple((part, mean(f)) for part, f in PART_FIELD.items()),
        measured=tuple(p for p in PART_FIELD if p in measured),
        t_comm_total_s=mean("t_comm_s"),
        sync_count=mean("sync_count"),
        sync_sites=merged_sites(with_steps),
    )


def merged_sites(probes: Sequence[ProbeState], top: int = 5) -> tuple[SyncSite, ...]:
    """The host-sync call sites of every process, the same line and call added up."""
    acc: dict[tuple[str, str], list] = {}
    for p in probes:
        for s in p.sync_sites:
            a = acc.setdefault((s.site, s.call), [0, 0.0])
            a[0] += s.count
            a[1] += s.seconds
    out = [SyncSite(site, call, n, secs) for (site, call), (n, secs) in acc.items()]
    out.sort(key=lambda s: (-s.seconds, s.site))
    return tuple(out[:top])


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """One probed process's memory: the allocator's view beside NVML's."""

    pid: int
    rank: int | None
    gpus: tuple[int, ...]  # where NVML lists it
    device_total_bytes: int | None  # the memory of the (first) GPU it is on
    nvml_used_bytes: int | None  # what NVML says it holds (its CUDA context included)
    allocated_bytes: int | None
    reserved_bytes: int | None
    peak_bytes: int | None
    inactive_split_bytes: int | None
    alloc_retries: int | None
    ooms: int | None
    params_bytes: int | None
    grads_bytes: int | None
    optimizer_bytes: int | None
    activations_bytes: int | None  # peak - params - grads - optimizer, where all measured
    kv_cache_bytes: int | None
    gpu_name: str | None = None  # the (first) GPU it is on, as NVML names it
    compute_capability: tuple[int, int] | None = None

    @property
    def cached_bytes(self) -> int | None:
        if self.reserved_bytes is None or self.allocated_bytes is None:
            return None
        return max(0, self.reserved_bytes - self.allocated_bytes)

    @property
    def peak_pct(self) -> float | None:
        """Peak allocated as a share of the device (the profiler's capacity rule), 0..100."""
        top = self.peak_bytes if self.peak_bytes is not None else self.allocated_bytes
        if top is None or not self.device_total_bytes:
            return None
        return 100.0 * top / self.device_total_bytes

    @property
    def fragmented(self) -> bool:
        """The allocator's cache, not the tensors, holds the memory: reserved well above
        allocated, or cudaMalloc had to free the cache and retry."""
        cached = self.cached_bytes
        much = (
            cached is not None
            and self.reserved_bytes
            and cached >= T.MEASURED_CACHE_SHARE * self.reserved_bytes
        )
        return bool(much) or (self.alloc_retries or 0) > 0


def process_memory(
    snap: Snapshot, pids: Collection[int] | None = None
) -> tuple[ProcessMemory, ...]:
    """The probed processes of `snap` (of `pids` where given) with their memory."""
    out = []
    for p in snap.probes or ():
        if pids is not None and p.pid not in pids:
            continue
        on = [g for g in snap.gpu_processes if g.pid == p.pid]
        used = [g.used_memory_bytes for g in on if g.used_memory_bytes is not None]
        gpus = tuple(sorted({g.gpu_index for g in on}))
        gpu = snap.gpu(gpus[0]) if gpus else None
        m = p.memory
        out.append(
            ProcessMemory(
                pid=p.pid,
                rank=p.rank,
                gpus=gpus,
                device_total_bytes=gpu.mem_total_bytes if gpu is not None else None,
                nvml_used_bytes=sum(used) if used else None,
                allocated_bytes=m.allocated_bytes if m else None,
                reserved_bytes=m.reserved_bytes if m else None,
                peak_bytes=m.peak_bytes if m else None,
                inactive_split_bytes=m.inactive_split_bytes if m else None,
                alloc_retries=m.alloc_retries if m else None,
                ooms=m.ooms if m else None,
                params_bytes=p.params_bytes,
                grads_bytes=p.grads_bytes,
                optimizer_bytes=p.optimizer_bytes,
                activations_bytes=p.activations_bytes,
                kv_cache_bytes=p.kv_cache_bytes,
                gpu_name=gpu.static.name if gpu is not None else None,
                compute_capability=gpu.static.compute_capability if gpu is not None else None,
            )
        )
    return tuple(sorted(out, key=lambda r: (r.rank is None, r.rank or 0, r.pid)))
