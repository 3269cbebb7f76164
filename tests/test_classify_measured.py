"""The classifier prefers what was measured inside the job (the probe) to what is inferred from
outside: a measured t_input decides the input pipeline, measured sync time synchronization,
measured exposed communication the communication class, and the allocator's figures tell true
memory pressure from its cache and fragmentation. Windows are the simulator's, sampled by the
real collectors; the probe states are laid on them as the Monitor would attach them."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from gputop_diag import sim
from gputop_diag.collect.job import JobWatch
from gputop_diag.diagnose.classify import classify, judge
from gputop_diag.diagnose.render import render_text, to_json
from gputop_diag.model import (
    GIB,
    ProbeMemory,
    ProbeProgress,
    ProbeState,
    ProbeSteps,
    Snapshot,
    SyncSite,
)
from gputop_diag.monitor.core import Monitor
from gputop_diag.monitor.sampler import Sampler

PARTS = ("t_input", "t_sync", "t_gpu")


@functools.cache
def outside(name: str, seconds: int = 40) -> tuple[Snapshot, ...]:
    """`seconds` of a scenario sampled from outside (no probe read), oldest first."""
    sources = sim.build(name)
    sampler = Sampler(sources)
    for k in range(seconds):
        if k:
            sources.clock.sleep(1.0)
        sampler.sample()
    sampler.close()
    return sampler.history.snapshots()


def probe(
    pid: int,
    at: float,
    *,
    wall: float = 0.8,
    t_input: float = 0.01,
    t_sync: float = 0.01,
    exposed: float | None = None,
    t_gpu: float | None = None,
    steps: int = 40,
    memory: ProbeMemory | None = None,
    sites: tuple[SyncSite, ...] = (),
    **kw,
) -> ProbeState:
    measured = [p for p in PARTS if p != "t_gpu" or t_gpu is not None]
    if exposed is not None:
        measured.append("t_comm")
    waits = t_input + t_sync + (exposed or 0.0)
    return ProbeState(
        pid=pid,
        start_ticks=1,
        cuda=True,
        steps=ProbeSteps(
            steps=steps,
            last_step=1000,
            last_at=at,
            wall_s=wall,
            t_input_s=t_input,
            t_sync_s=t_sync,
            sync_count=2.0,
            t_comm_s=None if exposed is None else exposed + 0.1,
            t_comm_exposed_s=exposed,
            t_gpu_s=t_gpu,
            t_host_s=wall - waits,
            measured=tuple(measured),
        ),
        memory=memory,
        sync_sites=sites,
        **kw,
    )


def probed(window, stale_s: float = 0.0, **kw) -> list[Snapshot]:
    """`window` with a probe state in each GPU process of each snapshot (last step `stale_s`
    before the snapshot)."""
    out = []
    for s in window:
        pids = sorted({p.pid for p in s.gpu_processes})
        probes = tuple(probe(pid, s.timestamp - stale_s, **kw) for pid in pids)
        out.append(replace(s, probes=probes))
    return out


def against(d, cls: str) -> str:
    return next(r.evidence.text for r in d.ruled_out if r.cls == cls)


def test_a_measured_t_input_decides_over_a_main_thread_that_looks_like_a_sync():
    window = outside("sync-stall")
    assert judge(window).primary == "synchronization"  # from outside: the main thread spins
    d = judge(probed(window, t_input=0.45, t_sync=0.02))
    assert d.primary == "input_pipeline" and d.confidence == pytest.approx(0.9)
    assert d.evidence[0].metric == "measured_t_input_share"
    assert d.evidence[0].text.startswith("measured in the job: waiting for the next batch")
    assert "450 ms of every 800 ms step (56 %" in d.evidence[0].text
    assert "measured in the job" in against(d, "synchronization") and "only" in against(
        d, "synchronization"
    )
    assert "measured" in render_text(d) and to_json(d)["evidence"][0]["value"] == pytest.approx(
        56.25
    )


def test_measured_sync_time_and_its_call_sites_decide_over_input_pressure():
    window = outside("input-starved")
    assert judge(window).primary == "input_pipeline"
    sites = (
        SyncSite("train.py:88", ".item", 400, 30.0),
        SyncSite("metrics.py:41", ".cpu", 100, 10.0),
    )
    d = judge(probed(window, t_input=0.05, t_sync=0.35, t_gpu=0.4, sites=sites))
    assert d.primary == "synchronization"
    text = d.evidence[0].text
    assert "blocked in host-device syncs (t_sync) 350 ms of every 800 ms step" in text
    assert "train.py:88 .item (75 %), metrics.py:41 .cpu (25 %)" in text
    assert "measured: the GPU busy 50 %" in d.evidence[1].text
    assert "only 50 ms" in against(d, "input_pipeline")


def test_measured_exposed_communication_names_the_class_without_interconnect_counters():
    stripped = [
        replace(
            s, gpus=tuple(replace(g, nvlink_tx_kib_s=None, nvlink_rx_kib_s=None) for g in s.gpus)
        )
        for s in outside("comm-bound")
    ]
    assert judge(stripped).primary == "undetermined"  # the dips alone never vote
    d = judge(probed(stripped, exposed=0.3, t_gpu=0.45))
    assert d.primary == "communication" and d.confidence == pytest.approx(0.9)
    assert "exposed t_comm) 300 ms of every 800 ms step" in d.evidence[0].text
    assert "of 400 ms communication in all" in d.evidence[0].text


def test_the_largest_measured_wait_wins_and_the_other_says_why_not():
    d = judge(probed(outside("sync-stall"), t_input=0.2, t_sync=0.35))
    assert d.primary == "synchronization"
    assert "less than blocked in host-device syncs (44 %)" in against(d, "input_pipeline")


def test_waits_the_gpu_is_busy_through_name_no_wait():
    window = outside("compute-bound")
    d = judge(probed(window, t_sync=0.3, t_gpu=0.78))
    assert d.primary == "compute"
    assert "the GPU is busy 97 % of the time: the wait overlaps GPU work" in against(
        d, "synchronization"
    )


@pytest.mark.parametrize(
    ("part", "cls"), [("t_sync", "synchronization"), ("t_input", "input_pipeline")]
)
def test_a_host_wait_while_nvml_sees_the_gpu_busy_is_the_gpus_time(part, cls):
    """What the real probe gives on CUDA: no GPU busy time of its own (schema.py), and a host
    blocked in .item() for most of the step while the GPU runs what it queued. NVML's busy
    share says the GPU is the limit: the wait names no class."""
    window = outside("compute-bound")
    d = judge(probed(window, wall=1.0, **{"t_sync": 0.01, "t_input": 0.01, part: 0.6}))
    assert d.primary == "compute", (d.primary, [e.text for e in d.evidence])
    assert "(NVML): the wait overlaps GPU work" in against(d, cls)
    # the same wait on GPUs NVML sees waiting is the class
    idle = judge([replace(s, probes=(probe(7, s.timestamp, wall=1.0, **{part: 0.6}),))
                  for s in outside("idle", 30)])  # fmt: skip
    assert idle.primary == cls


def test_without_a_driver_a_measured_wait_still_names_the_class():
    window = outside("no-gpu", 10)
    assert judge(window).primary == "insufficient_data"
    fake = [
        replace(s, probes=(probe(31755, s.timestamp, wall=0.07, t_input=0.068),)) for s in window
    ]
    d = judge(fake)
    assert d.primary == "input_pipeline" and d.confidence == pytest.approx(0.9)
    assert d.scope_job == "pid 31755" and d.scope_gpus == ()
    assert "measured" in against(d, "synchronization")
    assert against(d, "compute") == "not judged: no GPU figures"


def test_a_measured_wait_beats_gpus_that_look_idle():
    """A job starving a big GPU leaves it idle to NVML: the job's own steps say why."""
    window = outside("idle", 30)
    assert judge(window).primary == "idle"
    d = judge([replace(s, probes=(probe(7, s.timestamp, t_input=0.7, wall=0.75),)) for s in window])
    assert d.primary == "input_pipeline"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (dict(stale_s=120.0), "stopped stepping two minutes ago"),
        (dict(steps=2), "two steps are an anecdote"),
    ],
)
def test_a_stale_probe_or_too_few_steps_leave_the_outside_verdict(change, why):
    d = judge(probed(outside("sync-stall"), t_input=0.45, **change))
    assert d.primary == "synchronization", why
    assert not d.evidence[0].text.startswith("measured")


def test_a_process_that_exited_still_speaks_for_its_last_steps():
    window = probed(outside("sync-stall"), t_input=0.45)
    ended = [*window[:-3], *(replace(s, probes=()) for s in window[-3:])]
    assert judge(ended).primary == "input_pipeline"


def _capacity(allocated: float, reserved: float, peak: float, retries: int, split: float = 0.0):
    mem = ProbeMemory(
        int(allocated * GIB), int(reserved * GIB), int(peak * GIB), int(split * GIB), retries, 0
    )
    model = dict(params_bytes=2 * GIB, grads_bytes=2 * GIB, optimizer_bytes=12 * GIB)
    return judge(probed(outside("capacity"), t_gpu=0.77, memory=mem, **model))


def test_capacity_tells_the_allocators_cache_from_true_pressure():
    d = _capacity(allocated=40, reserved=76, peak=42, retries=37, split=20)
    assert d.primary == "capacity"
    frag = next(e for e in d.evidence if e.metric == "measured_cached_share")
    assert "reserved 76.0 GiB for 40.0 GiB of tensors (36.0 GiB cached, 20.0 GiB of it split)" in (
        frag.text
    )
    assert "37 cudaMalloc retries" in frag.text
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in frag.text
    assert "empty_cache() is not the fix" in frag.text
    peak = next(e for e in d.evidence if e.metric == "measured_peak_pct")
    assert "below the profiler's 90 % capacity rule" in peak.text
    assert "activations and temporaries 26.0 GiB" in peak.text  # 42 - 2 - 2 - 12

    d = _capacity(allocated=74, reserved=76, peak=75.5, retries=0)
    assert d.primary == "capacity"
    metrics = [e.metric for e in d.evidence]
    assert "measured_cached_share" not in metrics
    peak = next(e for e in d.evidence if e.metric == "measured_peak_pct")
    assert "(95 %): true pressure, the tensors need it" in peak.text
    assert "expandable_segments" not in render_text(d)


def test_hysteresis_holds_for_measured_verdicts_too():
    window = probed(outside("sync-stall"), t_input=0.45)
    before = classify(outside("sync-stall"))
    assert before.primary == "synchronization"
    d = classify(window, before)
    assert d.primary == "synchronization" and d.candidate == "input_pipeline"
    for _ in range(2):
        d = classify(window, d)
    assert d.primary == "input_pipeline"


@pytest.mark.parametrize(
    ("scenario", "cls", "metric"),
    [
        ("input-measured", "input_pipeline", "measured_t_input_share"),
        ("sync-measured", "synchronization", "measured_t_sync_share"),
        ("capacity-fragmented", "capacity", "measured_cached_share"),
    ],
)
def test_the_measured_demo_scenarios_through_the_monitor(scenario, cls, metric):
    s = sim.build(scenario)
    d = Monitor(s, job=JobWatch.for_pid(s, 41200)).run_for(20).diagnosis
    assert d.primary == cls
    assert metric in [e.metric for e in d.evidence]


def test_an_input_starved_straggler_is_said_where_the_ranks_mean_rules_input_out():
    stripped = [
        replace(
            s, gpus=tuple(replace(g, nvlink_tx_kib_s=None, nvlink_rx_kib_s=None) for g in s.gpus)
        )
        for s in outside("comm-bound")
    ]
    out = []
    for s in stripped:
        pids = sorted({p.pid for p in s.gpu_processes})[:4]
        probes = []
        for r, pid in enumerate(pids):
            slow = r == 1  # its own loader starves it: the others wait for it
            p = probe(pid, s.timestamp, exposed=0.05 if slow else 0.3, t_gpu=0.45, rank=r)
            medians = dict(
                wall_p50_s=0.8,
                own_p50_s=0.75 if slow else 0.5,
                wait_p50_s=0.05 if slow else 0.3,
                input_p50_s=0.26 if slow else 0.01,
                sync_p50_s=0.01,
                median_steps=40,
            )
            probes.append(replace(p, world=4, steps=replace(p.steps, **medians)))
        out.append(replace(s, probes=tuple(probes)))
    d = judge(out)
    assert d.primary == "communication"
    assert any("straggler: rank 1" in e.text and "input pipeline" in e.text for e in d.evidence)
    assert d.scope_job == f"pid {sorted({p.pid for p in out[-1].gpu_processes})[1]}"  # culprit
    why_not = against(d, "input_pipeline")
    assert "rank 1 alone is the straggler of it" in why_not


def test_a_hang_stays_the_verdict_once_no_step_is_recent():
    """Ranks that stopped 40 s ago: no step is recent (no split), but the hang is measured."""
    stripped = list(outside("comm-bound"))
    out = []
    for s in stripped:
        pids = sorted({p.pid for p in s.gpu_processes})[:4]
        probes = []
        for r, pid in enumerate(pids):
            missing = r == 3
            progress = ProbeProgress(
                at=s.timestamp,
                step=100,
                stalled_s=40.0,
                entered=200 if missing else 201,
                done=200,
                op="all_reduce (DDP bucket)",
                in_s=None if missing else 40.0,
            )
            p = probe(pid, s.timestamp - 40.0, exposed=0.3, t_gpu=0.45, rank=r)
            probes.append(replace(p, world=4, progress=progress))
        out.append(replace(s, probes=tuple(probes)))
    d = judge(out)
    assert d.primary == "communication", d.primary
    assert any("hang: rank 3 took no step for 40 s" in e.text for e in d.evidence)
    assert d.scope_job == f"pid {sorted({p.pid for p in out[-1].gpu_processes})[3]}"
