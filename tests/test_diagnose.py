"""The classifier over the simulator: every scenario, noise, a change of class, missing evidence.

Each scenario is sampled once through the real Sampler and collectors (cached per module), as
the live view does: 1 s ticks, a classification every tick with the previous one fed back.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from dataclasses import replace

import pytest

from gputop_diag import sim
from gputop_diag.diagnose import (
    ALL_PRIMARY,
    BOTTLENECK_CLASSES,
    classify,
    collect_scheduler_evidence,
    judge,
)
from gputop_diag.diagnose.thresholds import RECENT_S
from gputop_diag.model import ChildInfo, PressureStall, ThreadInfo
from gputop_diag.sampler import Sampler

SCENARIOS = {s.name: s for s in sim.list_scenarios()}
# The tour loops through several classes on purpose; its declared class is no single window's
# verdict (see test_the_tour_is_followed_phase_by_phase).
DECLARED = [s for s in SCENARIOS.values() if s.name != "tour"]
CHANGING = {"compute-then-input"}  # input starts at 60 s
WINDOW_S = 60


@functools.cache
def record(name: str, seconds: int = 90, seed: int | None = None):
    """(window of the last 60 s, every tick's diagnosis, scheduler evidence) of a scenario."""
    sources = sim.build(name, seed=seed)
    sampler = Sampler(sources, interval=1.0)
    sched = tuple(collect_scheduler_evidence(sources))
    diag, trail = None, []
    for k in range(seconds + 1):
        if k:
            sources.clock.sleep(1.0)
        sampler.sample()
        diag = classify(sampler.history.snapshots(WINDOW_S), diag, sched)
        trail.append(diag)
    sampler.close()
    return sampler.history.snapshots(WINDOW_S), tuple(trail), sched


@pytest.mark.parametrize("info", DECLARED, ids=lambda i: i.name)
def test_every_scenario_is_classified_as_declared(info):
    _, trail, _ = record(info.name)
    d = trail[-1]
    assert d.primary == info.expected_class, (d.primary, [e.text for e in d.evidence])
    assert d.evidence and all(e.text for e in d.evidence)
    assert {r.cls for r in d.ruled_out} == set(BOTTLENECK_CLASSES) - {d.primary}
    assert all(r.evidence.text for r in d.ruled_out)
    assert d.checks and all(c and "\n" not in c for c in d.checks)
    if d.primary in ("insufficient_data", "undetermined"):
        assert d.confidence == 0.0  # not a verdict: no confidence figure
    else:
        assert 0 < d.confidence <= 1
    # once settled the verdict does not flicker
    settled = trail[75:] if info.name in CHANGING else trail[30:]
    assert {t.primary for t in settled} == {info.expected_class}


def test_the_tour_is_followed_phase_by_phase():
    # The tour declares "balanced", but every phase of it is a clear class; check each phase's
    # class 15 s before the phase ends.
    _, trail, _ = record("tour", 300)
    at = {35: "compute", 125: "input_pipeline", 185: "synchronization", 245: "communication"}
    assert {k: trail[k].primary for k in at} == at
    assert trail[15].primary == "idle"


# -- noise ----------------------------------------------------------------------------------
NOISE_SCALE = 2.0  # twice the simulator's own noise (NOISE_SD at noise=1.0) on every figure
NOISE_TAIL_S = 25  # perturb and judge the last 25 s: the shape window plus the growth span


def _jitter(rng: random.Random, v, sd: float, lo=0.0, hi=100.0):
    if not v:  # None stays missing; a counter at exactly 0 (an idle GPU) stays 0, as in NVML
        return v
    return min(hi, max(lo, v + rng.gauss(0.0, sd * NOISE_SCALE)))


def _scale(rng: random.Random, v, rel=0.05):
    return None if v is None else type(v)(max(0, v * (1 + rng.gauss(0.0, rel * NOISE_SCALE))))


def perturb(window, seed: int):
    """The window with seeded Gaussian noise on every figure the classifier reads.

    Only the snapshots of the shape window (RECENT_S) get noise: older ones feed the memory
    trend alone, which the noise does not touch.
    """
    rng = random.Random(seed)
    cutoff = window[-1].timestamp - RECENT_S
    out = [s for s in window if s.timestamp < cutoff]
    for s in window[len(out) :]:
        gpus = []
        for g in s.gpus:
            if g.lost:
                gpus.append(g)
                continue
            gpm = g.gpm and replace(
                g.gpm,
                sm_util_pct=_jitter(rng, g.gpm.sm_util_pct, 2.5),
                sm_occupancy_pct=_jitter(rng, g.gpm.sm_occupancy_pct, 1.5),
                dram_bw_util_pct=_jitter(rng, g.gpm.dram_bw_util_pct, 2.5),
                tensor_util_pct=_jitter(rng, g.gpm.tensor_util_pct, 2.5),
            )
            limit = g.static.power_limit_w or 1.0
            gpus.append(
                replace(
                    g,
                    util_gpu_pct=_jitter(rng, g.util_gpu_pct, 2.0),
                    util_mem_pct=_jitter(rng, g.util_mem_pct, 2.0),
                    power_w=_jitter(rng, g.power_w, 0.02 * limit, 0.0, limit),
                    sm_clock_mhz=_scale(rng, g.sm_clock_mhz, 0.01),
                    nvlink_tx_kib_s=_scale(rng, g.nvlink_tx_kib_s),
                    nvlink_rx_kib_s=_scale(rng, g.nvlink_rx_kib_s),
                    pcie_tx_kbps=_scale(rng, g.pcie_tx_kbps),
                    pcie_rx_kbps=_scale(rng, g.pcie_rx_kbps),
                    gpm=gpm,
                )
            )
        host = s.host and replace(
            s.host,
            cpu_pct=_jitter(rng, s.host.cpu_pct, 3.0),
            iowait_pct=_jitter(rng, s.host.iowait_pct, 1.5),
            pressure={
                k: PressureStall(_jitter(rng, p.some_avg10, 1.5), p.full_avg10, p.some_avg60)
                for k, p in s.host.pressure.items()
            },
        )
        procs = tuple(
            replace(
                p,
                busiest_threads=tuple(  # the main thread is the one the classifier reads
                    ThreadInfo(t.tid, t.name, _jitter(rng, t.cpu_pct, 3.0))
                    if t.name == "pt_main_thread"
                    else t
                    for t in p.busiest_threads
                ),
                children=tuple(
                    ChildInfo(c.pid, c.name, _jitter(rng, c.cpu_pct, 3.0)) for c in p.children
                ),
            )
            for p in s.processes
        )
        out.append(replace(s, gpus=tuple(gpus), host=host, processes=procs))
    return out


def test_noise_keeps_the_verdict():
    """100 seeds of noise on each scenario's window: at least 95 % right; prints the table."""
    seeds = 100
    confusion: dict[str, Counter] = {}
    for info in DECLARED:
        window, _, sched = record(info.name)
        tail = [s for s in window if s.timestamp >= window[-1].timestamp - NOISE_TAIL_S]
        confusion[info.name] = Counter(
            judge(perturb(tail, seed), sched).primary for seed in range(seeds)
        )
    expected = {i.name: i.expected_class for i in DECLARED}
    bad = {n: c for n, c in confusion.items() if c[expected[n]] < 0.95 * seeds}
    width = max(map(len, confusion))
    print(f"\n{'scenario':<{width}}  expected           right  verdicts")
    for n, c in confusion.items():
        verdicts = ", ".join(f"{k} {v}" for k, v in c.most_common())
        print(f"{n:<{width}}  {expected[n]:<18} {c[expected[n]]:>4}   {verdicts}")
    assert not bad, f"below 95 % of {seeds} seeds: {bad}"


@pytest.mark.parametrize("name", ["sync-stall", "input-starved", "comm-bound", "bandwidth-bound"])
def test_other_simulator_seeds_give_the_same_verdict(name):
    """The simulator's own seeded noise, a few seeds each (a run costs what sampling costs)."""
    got = Counter(record(name, 45, seed)[1][-1].primary for seed in range(5))
    assert got == Counter({SCENARIOS[name].expected_class: 5}), got


# -- change of class and outliers -------------------------------------------------------------
def test_a_change_of_class_is_followed_within_10_s():
    _, trail, _ = record("compute-then-input", 100)  # input starts at t = 60 s
    assert all(d.primary == "compute" for d in trail[20:61])
    switched = next(k for k, d in enumerate(trail) if k > 60 and d.primary == "input_pipeline")
    assert switched - 60 <= 10, f"followed after {switched - 60} s"
    assert all(d.primary == "input_pipeline" for d in trail[switched:])


def test_one_outlier_sample_does_not_flip_the_verdict():
    window, trail, _ = record("compute-bound")
    last = window[-1]
    idle = tuple(
        replace(g, util_gpu_pct=0.0, gpm=replace(g.gpm, sm_util_pct=0.0, tensor_util_pct=0.0))
        for g in last.gpus
    )
    outlier = replace(last, timestamp=last.timestamp + 1, gpus=idle)
    after = classify([*window, outlier], trail[-1])
    assert after.primary == "compute"
    back = replace(last, timestamp=last.timestamp + 2)
    assert classify([*window, outlier, back], after).primary == "compute"


# -- missing evidence -------------------------------------------------------------------------
def _strip(window, **fields):
    return [replace(s, gpus=tuple(replace(g, **fields) for g in s.gpus)) for s in window]


@pytest.mark.parametrize("name", ["compute-bound", "bandwidth-bound", "comm-bound"])
def test_missing_gpm_still_gives_a_verdict_with_lower_confidence(name):
    window, trail, _ = record(name)
    d = judge(_strip(window, gpm=None))
    assert d.primary == SCENARIOS[name].expected_class
    assert d.confidence < trail[-1].confidence
    assert "GPM (SM, tensor and DRAM activity)" in d.missing_evidence
    assert "GPM (SM, tensor and DRAM activity)" not in d.available_evidence


def test_missing_nvlink_leaves_communication_open_and_names_what_is_missing():
    window, trail, _ = record("comm-bound")
    assert trail[-1].primary == "communication"
    d = judge(_strip(window, nvlink_tx_kib_s=None, nvlink_rx_kib_s=None))
    # the dips are seen, but absent evidence never votes
    assert d.primary == "undetermined" and d.confidence == 0.0
    assert "NVLink throughput" in d.missing_evidence
    assert any("NCCL_DEBUG=INFO" in c for c in d.checks)
    compute = judge(_strip(record("compute-bound")[0], nvlink_tx_kib_s=None, nvlink_rx_kib_s=None))
    assert compute.primary == "compute" and "NVLink throughput" in compute.missing_evidence


def test_missing_per_process_data_input_still_seen_from_host_figures():
    window, trail, _ = record("input-starved")
    d = judge([replace(s, processes=()) for s in window])
    assert d.primary == "input_pipeline"  # iowait and host CPU still show the pressure
    assert d.confidence < trail[-1].confidence
    assert "per-process thread and dataloader data" in d.missing_evidence


def test_missing_per_process_data_leaves_synchronization_open():
    window, trail, _ = record("sync-stall")
    assert trail[-1].primary == "synchronization"
    d = judge([replace(s, processes=()) for s in window])
    # without the main thread's CPU, sync cannot be told from anything else: no verdict
    assert d.primary == "undetermined" and d.confidence == 0.0
    assert "per-process thread and dataloader data" in d.missing_evidence
    assert any("as the job's user or as root" in c for c in d.checks)


def test_gpm_nvlink_and_processes_all_missing():
    window, trail, _ = record("compute-bound")
    bare = [
        replace(s, processes=(), gpu_processes=())
        for s in _strip(window, gpm=None, nvlink_tx_kib_s=None, nvlink_rx_kib_s=None)
    ]
    d = judge(bare)
    assert d.primary == "compute" and d.confidence < 0.5 < trail[-1].confidence
    assert len(d.missing_evidence) >= 3


# -- what the scenarios show besides the class ------------------------------------------------
def test_alerts_of_the_scenarios():
    def kinds(name, seconds=90):
        return {a.kind for a in record(name, seconds)[1][-1].alerts}

    assert {"gpu_lost", "xid"} <= kinds("xid-79", 100)
    assert any("Xid 79" in a.text for a in record("xid-79", 100)[1][-1].alerts)
    assert "xid" in kinds("xid-app", 100)
    assert "thermal" in kinds("thermal-throttle")
    assert "memory_growth" in kinds("memory-leak")
    assert "memory_full" in kinds("capacity")
    assert not kinds("compute-bound")


def test_xid_79_keeps_judging_the_other_gpus():
    d = record("xid-79", 100)[1][-1]
    assert d.primary == "compute" and 3 not in d.scope_gpus and len(d.scope_gpus) == 7


def test_scheduler_wait_names_the_job_and_the_check():
    d = record("scheduler-wait")[1][-1]
    assert d.primary == "scheduler" and d.scope_job == "48213"
    assert any("squeue -j 48213" in c for c in d.checks)
    assert "Resources" in d.evidence[0].text


def test_no_gpu_is_insufficient_data_with_the_reason():
    d = record("no-gpu", 10)[1][-1]
    assert d.primary == "insufficient_data" and d.primary in ALL_PRIMARY
    assert "driver" in d.evidence[0].text.lower()


def test_mig_is_judged_without_gpm_or_busy_time():
    d = record("mig")[1][-1]
    assert d.primary == "compute" and d.confidence < 0.5
    assert "GPU busy time (utilization.gpu)" in d.missing_evidence
