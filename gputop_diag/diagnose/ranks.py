"""The ranks of a distributed job, compared: each rank's steps and split, the straggler, the hang.

Input: the probes of one job's processes (`ProbeState`, one per rank) and, where there is one,
the tick's snapshot (which GPU each rank's pid is on, and that GPU's clocks and slowdown reasons).
Pure: the same probes give the same verdict on every surface.

Two rules from practice decide what is measured:

- In data-parallel training every rank waits for the others at each gradient all-reduce, so
  every rank's step takes the same wall time: the step alone never shows who is slow. What
  differs is how the step divides: the rank that is slow has the most work of its own (the step
  minus its exposed communication) and waits the **least** in the collectives; the others wait
  for it. The straggler is named from both (NVIDIA/nccl#1911: print the stragglers, not the fast
  ranks; Megatron's StragglerDetector and NVIDIA's resiliency extension score ranks the same
  way), behind gates against noise (TraceML's: a minimum of steps, a gap of at least
  `STRAGGLER_MIN_SHARE` of the step, the skew explained by the others' waits).
- A hang is a rank that takes no step while others block in a collective: which collective (the
  sequence number each rank's probe counts, its op and bytes), which ranks are in it, which
  never entered it, and the stepping thread's stack of each (probe/stacks.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from ..job.output import torchrun_first_failure
from ..model import GpuState, ProbeState, Snapshot
from . import thresholds as T

STRAGGLER_MIN_STEPS = 20  # of every rank, in its window (collect/probe.py: the newest 30 s, or 40)
STRAGGLER_MIN_SHARE = 0.20  # the gap, as a share of the median step (TraceML's upper gate)
STRAGGLER_NOTE_SHARE = 0.10  # from here a gap is said, not named (TraceML's lower gate)
STRAGGLER_MIN_GAP_S = 0.002
STRAGGLER_EXPLAINED = 0.8  # of the gap, matched by how much less the straggler waits
HANG_FLOOR_S = 10.0  # a rank is stalled past this, and past HANG_STEPS of its median steps
HANG_STEPS = 5
CLOCK_LOW_SHARE = 0.9  # a GPU clocked under 90 % of the others' median is a slower GPU


@dataclass(frozen=True, slots=True)
class RankRow:
    """One rank as the rank table shows it; seconds are medians over its latest steps."""

    rank: int
    pid: int
    node: str | None
    local_rank: int | None
    gpu_index: int | None  # the GPU NVML lists its pid on
    state: str  # "stepping", "waiting" (in a collective), "stalled", "ended", "gone"
    steps: int  # steps in its window
    last_step: int | None
    step_p50_s: float | None
    step_p95_s: float | None
    input_s: float | None
    sync_s: float | None
    wait_s: float | None  # exposed communication: blocked in collectives
    own_s: float | None  # the step minus its exposed communication
    lag_s: float | None = None  # own work beyond the fastest rank's
    stalled_s: float | None = None  # since its last step, while stalled or waiting
    collective: str | None = None  # the collective it is in, e.g. "all_reduce #122"
    entered: int | None = None  # collectives entered so far
    error: str | None = None  # what a gone rank died of, where the probe saw it (an exception)
    gone_at: float | None = None  # when a gone rank was first found gone

    @property
    def wait_share(self) -> float | None:
        if self.wait_s is None or not self.step_p50_s:
            return None
        return self.wait_s / self.step_p50_s


@dataclass(frozen=True, slots=True)
class Straggler:
    rank: int
    pid: int
    node: str | None
    gpu_index: int | None
    gap_s: float  # its own work beyond the other ranks' median
    gap_share: float  # of the median step
    explained: float  # share of the gap matched by how much less it waits
    cause: str  # "compute", "input pipeline", "host syncs"
    evidence: tuple[str, ...]  # the figures that say so
    next_step: str


@dataclass(frozen=True, slots=True)
class Hang:
    """Ranks that take no step: the ones the others wait for, and where the others wait."""

    missing: tuple[int, ...]  # ranks that never entered the collective the others wait in
    waiting: tuple[int, ...]  # ranks blocked in it
    stalled_s: float  # the longest stall among the missing ranks
    collective: str | None  # "all_reduce (DDP bucket) #122, 17 KiB"
    seq: int | None
    stacks: tuple[tuple[int, str], ...]  # (rank, its stepping thread's stack), missing first
    gone: tuple[int, ...]  # missing ranks whose process ended without a goodbye
    what: str  # one sentence
    next_step: str


@dataclass(frozen=True, slots=True)
class RanksView:
    rows: tuple[RankRow, ...]  # by rank
    world: int | None
    straggler: Straggler | None
    verdict: str  # the straggler's line, "no straggler: ...", or what is missing to say
    hang: Hang | None

    def row(self, rank: int) -> RankRow | None:
        return next((r for r in self.rows if r.rank == rank), None)


def judge_ranks(
    probes: Sequence[ProbeState], snap: Snapshot | None = None, at: float | None = None
) -> RanksView | None:
    """The ranks of the probes given (one job's); None with fewer than two ranks."""
    latest: dict[int, ProbeState] = {}
    for p in probes:
        if p.rank is None:
            continue
        kept = latest.get(p.rank)
        if kept is None or (p.updated_at or 0) >= (kept.updated_at or 0):
            latest[p.rank] = p  # a restarted rank: the newest process
    if len(latest) < 2:
        return None
    at = at if at is not None else (snap.timestamp if snap is not None else None)
    gpu_of = {g.pid: g.gpu_index for g in snap.gpu_processes} if snap is not None else {}
    rows = [_row(p, gpu_of.get(p.pid), at) for _, p in sorted(latest.items())]
    fastest = [r.own_s for r in rows if r.own_s is not None]
    if fastest:
        low = min(fastest)
        rows = [_with(r, lag_s=None if r.own_s is None else r.own_s - low) for r in rows]
    first = None
    if snap is not None and snap.job is not None:
        first = torchrun_first_failure(snap.job.output_tail)
    hang = _hang(rows, latest, first)
    straggler, verdict = (None, _hang_line(hang)) if hang is not None else _straggler(rows, snap)
    worlds = [p.world for p in latest.values() if p.world]
    return RanksView(tuple(rows), max(worlds) if worlds else None, straggler, verdict, hang)


def _row(p: ProbeState, gpu_index: int | None, at: float | None) -> RankRow:
    s = p.steps
    progress = p.progress
    state = "stepping"
    stalled = collective = None
    if p.ended:
        state = "ended"
    elif p.gone:
        state = "gone"
    elif progress is not None:
        stalled = progress.stalled_s + (max(0.0, at - progress.at) if at is not None else 0.0)
        state = "waiting" if progress.in_collective else "stalled"
        if progress.in_collective:
            collective = f"{progress.op or 'collective'} #{progress.entered}"
    return RankRow(
        rank=p.rank if p.rank is not None else -1,
        pid=p.pid,
        node=p.node,
        local_rank=p.local_rank,
        gpu_index=gpu_index,
        state=state,
        steps=(s.median_steps or s.steps) if s else 0,
        last_step=s.last_step if s else None,
        step_p50_s=s.wall_p50_s if s else None,
        step_p95_s=s.wall_p95_s if s else None,
        input_s=s.input_p50_s if s else None,
        sync_s=s.sync_p50_s if s else None,
        wait_s=s.wait_p50_s if s else None,
        own_s=s.own_p50_s if s else None,
        stalled_s=stalled,
        collective=collective,
        entered=progress.entered if progress is not None else (s.coll_seq if s else None),
        error=p.exit_error,
        gone_at=p.gone_at,
    )


def _with(row: RankRow, **changes: object) -> RankRow:
    from dataclasses import replace

    return replace(row, **changes)


# -- the straggler -----------------------------------------------------------------------------


def _straggler(rows: Sequence[RankRow], snap: Snapshot | None) -> tuple[Straggler | None, str]:
    live = [r for r in rows if r.steps]  # a rank that ended speaks for the steps it took
    if len(live) < 2:
        return None, "not enough ranks with steps to compare"
    few = [r for r in live if r.steps < STRAGGLER_MIN_STEPS]
    if few:
        names = _ranks(r.rank for r in few)
        have = "has" if len(few) == 1 else "have"
        return None, (
            f"not enough data yet: {names} {have} fewer than {STRAGGLER_MIN_STEPS} steps in the "
            "window"
        )
    if any(r.own_s is None or r.wait_s is None for r in live):
        return None, (
            "no straggler named: the time ranks wait in collectives is not measured in every "
            "rank (collectives on the GPU, or a built-in DDP hook), and without it every rank's "
            "step looks the same"
        )
    step = median(r.step_p50_s for r in live if r.step_p50_s is not None)
    slow = max(live, key=lambda r: r.own_s)
    others = [r for r in live if r is not slow]
    gap = slow.own_s - median(r.own_s for r in others)
    least = slow.wait_s <= min(r.wait_s for r in others) + 0.2 * max(gap, 0.0)
    explained = (median(r.wait_s for r in others) - slow.wait_s) / gap if gap > 0 else 0.0
    spread = (max(r.own_s for r in live) - min(r.own_s for r in live)) / step if step else 0.0
    big = gap >= max(STRAGGLER_MIN_GAP_S, STRAGGLER_MIN_SHARE * step)
    if not big and gap >= max(STRAGGLER_MIN_GAP_S, STRAGGLER_NOTE_SHARE * step):
        return None, (
            f"no straggler named: rank {slow.rank} works {_ms(gap)} ({_pct(gap / step)} of the "
            f"step) longer than the others, under the {_pct(STRAGGLER_MIN_SHARE)} gate (a busy "
            "host's noise, or a straggler to come: watch it)"
        )
    if not big:
        within = _pct(spread) if spread >= 0.01 else "1 %"
        return None, f"no straggler: every rank's own work within {within} of the step"
    if not least or explained < STRAGGLER_EXPLAINED:
        return None, (
            f"no straggler named: rank {slow.rank} works {_ms(gap)} longer a step, but the "
            f"others' waits explain only {_pct(max(explained, 0.0))} of it (ranks that do not "
            "wait for each other, or noise)"
        )
    cause, evidence = _cause(slow, others, gap, snap)
    found = Straggler(
        rank=slow.rank,
        pid=slow.pid,
        node=slow.node,
        gpu_index=slow.gpu_index,
        gap_s=gap,
        gap_share=gap / step if step else 0.0,
        explained=min(explained, 1.0),
        cause=cause,
        evidence=evidence,
        next_step=_NEXT[cause].format(rank=slow.rank),
    )
    where = f" on {slow.node}" if slow.node else ""
    return found, (
        f"straggler: rank {slow.rank}{where}, {_ms(gap)} ({_pct(found.gap_share)} of the "
        f"step) more time of its own a step, and the least wait in collectives; cause: {cause}"
    )


def _cause(
    slow: RankRow, others: Sequence[RankRow], gap: float, snap: Snapshot | None
) -> tuple[str, tuple[str, ...]]:
    def delta(field: str) -> float:
        mine = getattr(slow, field)
        theirs = [getattr(r, field) for r in others if getattr(r, field) is not None]
        return (mine - median(theirs)) if mine is not None and theirs else 0.0

    d_input, d_sync = delta("input_s"), delta("sync_s")
    waits = median(r.wait_s for r in others)
    evidence = [
        f"rank {slow.rank}: own work {_ms(slow.own_s)}, wait in collectives {_ms(slow.wait_s)}; "
        f"the other ranks: wait {_ms(waits)} (median)"
    ]
    if d_input >= 0.5 * gap:
        cause = "input pipeline"
        evidence.append(f"its DataLoader wait is {_ms(d_input)} longer than the others'")
    elif d_sync >= 0.5 * gap:
        cause = "host syncs"
        evidence.append(f"its host-device syncs take {_ms(d_sync)} longer than the others'")
    else:
        cause = "compute"
        evidence.append(
            f"its input ({_ms(slow.input_s)}) and syncs ({_ms(slow.sync_s)}) are the others'; "
            "the rest of its step is longer"
        )
        evidence.extend(_gpu_evidence(slow, others, snap))
    return cause, tuple(evidence)


def _gpu_evidence(slow: RankRow, others: Sequence[RankRow], snap: Snapshot | None) -> list[str]:
    """A slower GPU under the straggler: its clock, its slowdown reasons, beside the others'."""
    if snap is None or slow.gpu_index is None:
        return []
    mine = snap.gpu(slow.gpu_index)
    theirs = [g for r in others if r.gpu_index is not None and (g := snap.gpu(r.gpu_index))]
    if mine is None:
        return []
    out = []
    clocks = [g.sm_clock_mhz for g in theirs if g.sm_clock_mhz]
    if mine.sm_clock_mhz and clocks and mine.sm_clock_mhz < CLOCK_LOW_SHARE * median(clocks):
        out.append(
            f"GPU {mine.index} runs at {mine.sm_clock_mhz} MHz, the other ranks' GPUs at "
            f"{median(clocks):.0f} MHz"
        )
    slowdown = _slowdown(mine)
    if slowdown and not any(_slowdown(g) for g in theirs):
        out.append(f"GPU {mine.index} is slowed down: {', '.join(slowdown)}")
    return out


def _slowdown(g: GpuState) -> tuple[str, ...]:
    return tuple(r for r in g.clock_event_reasons if r in T.THERMAL_REASONS or "power" in r)


_NEXT = {
    "compute": (
        "rank {rank} does more work or runs slower: compare its GPU's clocks and slowdown "
        "reasons with the others' (`nvidia-smi -q -d PERFORMANCE`), look for uneven data "
        "(longer sequences, a larger shard) on that rank, then move it to another GPU or node "
        "to see whether the slowness follows the hardware"
    ),
    "input pipeline": (
        "rank {rank} waits for its DataLoader: raise num_workers or prefetch on that rank, "
        "and check its node's CPU and storage against the others'"
    ),
    "host syncs": (
        "rank {rank} waits on the GPU more often: remove the .item(), .cpu() or synchronize "
        "calls its sync sites name, or make them every N steps"
    ),
}


# -- the hang ----------------------------------------------------------------------------------


def _hang(
    rows: Sequence[RankRow], probes: dict[int, ProbeState], first: int | None = None
) -> Hang | None:
    stuck = [r for r in rows if r.state in ("waiting", "stalled", "gone")]
    if not stuck:
        return None

    def long(r: RankRow) -> bool:
        if r.state == "gone":
            return True
        typical = r.step_p50_s or 0.0
        return (r.stalled_s or 0.0) >= max(HANG_FLOOR_S, HANG_STEPS * typical)

    waiting = [r for r in rows if r.state == "waiting" and long(r)]
    stalled = [r for r in rows if r.state == "stalled" and long(r)]
    if not waiting and stalled and all(r.state in ("stalled", "ended") for r in rows):
        return None  # every rank paused together, in no collective: an evaluation, a save
    killed = [r for r in rows if r.state == "gone" and r.error is None]
    failed = [r for r in rows if r.state == "gone" and r.error is not None]
    if killed or (failed and not waiting and not stalled):
        return _lost(killed or failed, failed if killed else [], probes, first)
    if not waiting and not stalled:
        return None
    if waiting:
        seq = max(r.entered or 0 for r in waiting)
        in_it = [r for r in waiting if (r.entered or 0) >= seq]
        missing = [r for r in rows if r not in in_it and (r.entered or 0) < seq]
        missing = [r for r in missing if r.state != "ended"] or stalled
        first = probes[in_it[0].rank].progress
        collective = _collective_text(first) if first is not None else None
    else:
        seq, in_it, missing, collective = None, [], stalled, None
    if not missing and not in_it:
        return None
    gone = tuple(r.rank for r in missing if r.state == "gone")
    stacks = tuple(
        (r.rank, probes[r.rank].stack) for r in [*missing, *in_it] if probes[r.rank].stack
    )
    longest = max((r.stalled_s or 0.0 for r in missing or in_it), default=0.0)
    if missing:
        names = _ranks(r.rank for r in missing)
        if gone:
            what = f"{names} ended without a goodbye (killed or crashed)"
        else:
            what = f"{names} took no step for {longest:.0f} s"
        if in_it:
            them = "it" if len(missing) == 1 else "them"
            what += f"; {_ranks(r.rank for r in in_it)} wait for {them} in {collective}"
            what += f", which {them} never entered"
        next_step = (
            "look at what the missing rank is doing (its stack above: a loop, a lock, I/O, a "
            "branch only it takes), and at its node's kernel log for a crash or an OOM kill"
        )
    else:
        what = (
            f"every rank waits in {collective} ({_ranks(r.rank for r in in_it)}), none is "
            "missing: the collective itself does not finish"
        )
        next_step = (
            "a communication problem, not a rank: check the network between the nodes (NCCL "
            "RAS, `NCCL_DEBUG=INFO`), and the stacks below"
        )
    return Hang(
        missing=tuple(r.rank for r in missing),
        waiting=tuple(r.rank for r in in_it),
        stalled_s=longest,
        collective=collective,
        seq=seq,
        stacks=stacks,
        gone=gone,
        what=what,
        next_step=next_step,
    )


def _lost(
    lost: Sequence[RankRow], after: Sequence[RankRow], probes: dict, first_failed: int | None
) -> Hang:
    """Ranks whose process ended without a goodbye: killed (no record at all) or failed on an
    exception. The first found gone are the lost ones; those gone later (a launcher stops the
    others once one fails) and those that failed on an exception followed them."""
    named = [r for r in [*lost, *after] if r.rank == first_failed]
    first = min((r.gone_at for r in lost if r.gone_at is not None), default=None)
    if named:  # the launcher saw which died first (torchrun's "Root Cause")
        after = [r for r in [*lost, *after] if r is not named[0]]
        lost = named
    elif first is not None:
        later = [r for r in lost if r.gone_at is not None and r.gone_at > first]
        lost = [r for r in lost if r not in later]
        after = [*later, *after]
    names = _ranks(r.rank for r in lost)
    if named and lost[0].error is None:
        what = (
            f"{names} ended without a goodbye (killed by a signal, the OOM killer, or "
            "os._exit): torchrun's first observed failure"
        )
    elif lost[0].error is None:
        what = f"{names} ended without a goodbye (killed by a signal, the OOM killer, or os._exit)"
        if len(lost) > 1:
            what += (
                " at once (or a launcher stopped the others as soon as one failed: its log "
                "names the first)"
            )
    else:
        what = f"{names} failed: {lost[0].error}"
    killed_after = [r for r in after if r.error is None]
    failed_after = [r for r in after if r.error is not None]
    if killed_after:
        what += f"; then {_ranks(r.rank for r in killed_after)} ended (stopped by the launcher?)"
    if failed_after:
        what += f"; then {_ranks(r.rank for r in failed_after)} failed: {failed_after[0].error}"
    last = [r.last_step for r in lost if r.last_step is not None]
    if last:
        what += f" (after step {max(last)})"
    return Hang(
        missing=tuple(r.rank for r in lost),
        waiting=(),
        stalled_s=0.0,
        collective=None,
        seq=None,
        stacks=(),
        gone=tuple(r.rank for r in lost),
        what=what,
        next_step=(
            "look at the lost rank's node: its kernel log for an OOM kill or an Xid "
            "(`gputop-diag xid`), its output's last lines, and whether the launcher killed it"
        ),
    )


def _collective_text(progress: object) -> str:
    op = getattr(progress, "op", None) or "a collective"
    text = f"{op} #{getattr(progress, 'entered', '?')}"
    nbytes = getattr(progress, "nbytes", None)
    return f"{text} ({_bytes(nbytes)})" if nbytes else text


def _hang_line(hang: Hang) -> str:
    return f"hang: {hang.what}"


def _ranks(ranks: object) -> str:
    ranks = sorted(ranks)  # type: ignore[arg-type]
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks)


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.0f} {unit}"
    return f"{n} B"
