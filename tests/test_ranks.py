"""diagnose/ranks.py over generated ranks, built unlike the real jobs of test_ranks_jobs.py: random
world sizes, step times, noise and straggler gaps (seeded), so the gates are crossed from both
sides: a balanced job with noise is never named, a straggler past the gates always is, the one
below them never; the hang's floor, its missing rank and a collective every rank waits in."""

from __future__ import annotations

import random

import pytest

from gputop_diag.diagnose import ranks as R
from gputop_diag.diagnose.ranks import judge_ranks
from gputop_diag.model import (
    GpuProcess,
    GpuState,
    GpuStatic,
    ProbeProgress,
    ProbeState,
    ProbeSteps,
    Snapshot,
    SystemInfo,
)

NOW = 1_000_000.0


def _rank(
    rank: int,
    step: float,
    own: float,
    steps: int = 80,
    input_s: float = 0.0005,
    sync_s: float = 0.0,
    measured: bool = True,
    **kw,
) -> ProbeState:
    wait = step - own
    return ProbeState(
        pid=1000 + rank,
        start_ticks=1,
        rank=rank,
        world=kw.pop("world", None),
        node=kw.pop("node", f"node-{rank // 8}"),
        steps=ProbeSteps(
            steps=steps,
            last_step=steps,
            last_at=NOW,
            wall_s=step,
            wall_p50_s=step,
            wall_p95_s=step * 1.1,
            own_p50_s=own if measured else None,
            wait_p50_s=wait if measured else None,
            input_p50_s=input_s,
            sync_p50_s=sync_s,
            coll_seq=steps * 2,
        ),
        updated_at=NOW,
        **kw,
    )


def _job(rng: random.Random, world: int, step: float, noise: float, slow: int | None, gap: float):
    """Ranks of a synchronous job: every step takes `step`; each rank's own work is a base plus
    noise, the slow rank's `gap` more; each rank waits the rest of the step."""
    base = step * rng.uniform(0.2, 0.6)
    own = [base * (1 + rng.gauss(0, noise)) for _ in range(world)]
    if slow is not None:
        own[slow] = base + gap
    step = max(step, max(own) + 0.0005)
    return [_rank(r, step, own[r], world=world) for r in range(world)]


def test_balanced_jobs_with_noise_are_never_named():
    rng = random.Random(7)
    for _ in range(300):
        world = rng.choice((2, 3, 4, 8, 16, 64))
        probes = _job(rng, world, rng.uniform(0.008, 2.0), rng.uniform(0.0, 0.03), None, 0.0)
        view = judge_ranks(probes, at=NOW)
        assert view.straggler is None, view.verdict
        assert view.verdict.startswith("no straggler: every rank's own work within")


def test_a_straggler_past_the_gates_is_always_named_with_its_gap():
    rng = random.Random(11)
    for _ in range(300):
        world = rng.choice((2, 3, 4, 8, 16, 64))
        step = rng.uniform(0.008, 2.0)
        slow = rng.randrange(world)
        gap = step * rng.uniform(0.25, 0.5)
        probes = _job(rng, world, step, rng.uniform(0.0, 0.01), slow, gap)
        view = judge_ranks(probes, at=NOW)
        assert view.straggler is not None, view.verdict
        assert view.straggler.rank == slow
        assert view.straggler.gap_s == pytest.approx(gap, rel=0.12)
        assert view.straggler.cause == "compute"


def test_a_gap_below_the_gate_is_not_a_straggler_and_one_near_it_is_said():
    rng = random.Random(13)
    for _ in range(200):
        step = rng.uniform(0.02, 2.0)
        probes = _job(rng, 4, step, 0.0, 1, step * rng.uniform(0.0, 0.08))
        assert judge_ranks(probes, at=NOW).straggler is None
    for _ in range(200):
        step = rng.uniform(0.02, 2.0)
        probes = _job(rng, 4, step, 0.0, 2, step * rng.uniform(0.12, 0.17))
        view = judge_ranks(probes, at=NOW)
        assert view.straggler is None
        assert view.verdict.startswith("no straggler named: rank 2 works"), view.verdict
        assert "under the 20 % gate" in view.verdict


def test_the_cause_follows_the_longer_part_of_the_straggler_step():
    step = 0.1
    starved = [_rank(r, step, 0.03) for r in range(4)]
    starved[2] = _rank(2, step, 0.07, input_s=0.04)
    assert judge_ranks(starved, at=NOW).straggler.cause == "input pipeline"
    syncing = [_rank(r, step, 0.03) for r in range(4)]
    syncing[3] = _rank(3, step, 0.07, sync_s=0.035)
    assert judge_ranks(syncing, at=NOW).straggler.cause == "host syncs"


def test_what_is_missing_to_say_is_said():
    few = [_rank(r, 0.1, 0.03, steps=10 if r == 1 else 80) for r in range(4)]
    assert judge_ranks(few, at=NOW).verdict.startswith("not enough data yet: rank 1")
    unmeasured = [_rank(r, 0.1, 0.03, measured=(r != 0)) for r in range(4)]
    view = judge_ranks(unmeasured, at=NOW)
    assert view.straggler is None and "not measured in every rank" in view.verdict
    # ranks that do not wait for each other: one is slower, but nobody waits for it
    apart = [_rank(r, 0.05, 0.05) for r in range(3)] + [_rank(3, 0.09, 0.09)]
    view = judge_ranks(apart, at=NOW)
    assert view.straggler is None and "explain only" in view.verdict
    assert judge_ranks([_rank(0, 0.1, 0.03)], at=NOW) is None  # one rank: no table


def _stalled(rank: int, stalled: float, entered: int, waiting: bool) -> ProbeState:
    progress = ProbeProgress(
        at=NOW,
        step=40,
        stalled_s=stalled,
        entered=entered,
        done=entered - 1 if waiting else entered,
        op="all_reduce (DDP bucket)" if waiting else "all_reduce (DDP bucket)",
        nbytes=17412,
        in_s=stalled if waiting else None,
    )
    stack = f'File "train.py", line {10 + rank} in main'
    return _rank(rank, 0.05, 0.02, progress=progress, stack=stack)


@pytest.mark.parametrize("missing", [0, 2, 5])
def test_the_hang_names_the_rank_that_never_entered_the_collective(missing):
    probes = [_stalled(r, 12.0, 81 if r == missing else 82, r != missing) for r in range(6)]
    view = judge_ranks(probes, at=NOW)
    h = view.hang
    assert h is not None and view.straggler is None
    assert h.missing == (missing,) and h.waiting == tuple(r for r in range(6) if r != missing)
    assert h.seq == 82 and h.collective == "all_reduce (DDP bucket) #82 (17 KiB)"
    assert h.stacks[0] == (missing, f'File "train.py", line {10 + missing} in main')
    assert view.verdict.startswith(f"hang: rank {missing} took no step for 12 s")


def test_no_hang_below_the_floor_and_every_rank_waiting_is_the_collective():
    short = [_stalled(r, R.HANG_FLOOR_S - 1, 81 if r == 0 else 82, r != 0) for r in range(4)]
    assert judge_ranks(short, at=NOW).hang is None
    everyone = [_stalled(r, 20.0, 82, True) for r in range(4)]
    h = judge_ranks(everyone, at=NOW).hang
    assert h is not None and h.missing == () and h.waiting == (0, 1, 2, 3)
    assert "none is missing" in h.what


def test_a_killed_rank_is_told_from_those_that_failed_after_it():
    probes = [
        _rank(r, 0.05, 0.02, gone=True, exit_error="RuntimeError: peer closed") for r in (0, 1)
    ]
    probes.append(_rank(2, 0.05, 0.02, gone=True))
    h = judge_ranks(probes, at=NOW).hang
    assert h.missing == (2,) == h.gone
    assert "rank 2 ended without a goodbye" in h.what and "then ranks 0, 1 failed" in h.what


def test_a_slower_gpu_under_the_straggler_is_its_evidence():
    probes = [_rank(r, 0.1, 0.03) for r in range(4)]
    probes[1] = _rank(1, 0.1, 0.07)
    info = SystemInfo(hostname="h", driver_version="550", cuda_driver_version=12040, gpu_count=4)
    gpus = tuple(
        GpuState(
            index=i,
            static=GpuStatic(index=i),
            sm_clock_mhz=1410 if i != 1 else 1005,
            clock_event_reasons=reasons,
        )
        for i, reasons in zip(range(4), ((), ("hw_slowdown",), (), ()), strict=True)
    )
    procs = tuple(GpuProcess(pid=1000 + r, gpu_index=r, kind="compute") for r in range(4))
    snap = Snapshot(timestamp=NOW, system=info, gpus=gpus, gpu_processes=procs)
    s = judge_ranks(probes, snap).straggler
    assert s.rank == 1 and s.gpu_index == 1 and s.cause == "compute"
    assert any("GPU 1 runs at 1005 MHz, the other ranks' GPUs at 1410 MHz" in e for e in s.evidence)
    assert any("GPU 1 is slowed down: hw_slowdown" in e for e in s.evidence)


def test_every_rank_paused_together_in_no_collective_is_no_hang():
    probes = [_stalled(r, 15.0, 82, False) for r in range(4)]  # an evaluation, a checkpoint
    view = judge_ranks(probes, at=NOW)
    assert view.hang is None and not view.verdict.startswith("hang")


def test_the_first_rank_found_gone_is_the_lost_one_and_the_launcher_stopped_the_rest():
    first = _rank(3, 0.05, 0.02, gone=True, gone_at=NOW - 2)
    rest = [_rank(r, 0.05, 0.02, gone=True, gone_at=NOW - 1) for r in range(3)]
    h = judge_ranks([*rest, first], at=NOW).hang
    assert h.missing == (3,) and h.gone == (3,)
    assert h.what.startswith("rank 3 ended without a goodbye")
    assert "then ranks 0, 1, 2 ended (stopped by the launcher?)" in h.what
    together = [_rank(r, 0.05, 0.02, gone=True, gone_at=NOW) for r in range(4)]
    h = judge_ranks(together, at=NOW).hang
    assert h.missing == (0, 1, 2, 3) and "its log names the first" in h.what


def test_too_few_steps_is_said_in_plain_words():
    few = [_rank(r, 0.1, 0.03, steps=10 if r in (1, 2) else 80) for r in range(4)]
    assert judge_ranks(few, at=NOW).verdict.startswith(
        "not enough data yet: ranks 1, 2 have fewer than 20 steps"
    )


def test_torchruns_first_observed_failure_names_the_lost_rank_when_all_vanish_at_once():
    from gputop_diag.job.output import torchrun_first_failure
    from gputop_diag.model import JobState

    tail = (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-12-06_12:14:15",
        "  host      : localhost",
        "  rank      : 2 (local_rank: 2)",
        "  exitcode  : -9 (pid: 15087)",
    )
    assert torchrun_first_failure(tail) == 2
    assert torchrun_first_failure(tail[:2]) is None and torchrun_first_failure(()) is None
    probes = [_rank(r, 0.05, 0.02, gone=True, gone_at=NOW) for r in (0, 1, 3)]
    probes.append(_rank(2, 0.05, 0.02, gone=True, gone_at=NOW))
    info = SystemInfo(hostname="h")
    job = JobState(target="command", label="torchrun", output_tail=tail)
    snap = Snapshot(timestamp=NOW, system=info, job=job)
    h = judge_ranks(probes, snap).hang
    assert h.missing == (2,) and "torchrun's first observed failure" in h.what
    assert "then ranks 0, 1, 3 ended (stopped by the launcher?)" in h.what
