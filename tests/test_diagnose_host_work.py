"""The host's side of a verdict: launch-bound work named within synchronization, the job's own
CPU judged apart from other users' load, the memory plan in `diagnose --model-config`, and
figures that are the current ones (a job that just started, a held verdict, the panel's age)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gputop_diag import cli, sim
from gputop_diag.diagnose import rules
from gputop_diag.diagnose.classify import judge
from gputop_diag.diagnose.features import Features
from gputop_diag.diagnose.render import render_text, to_json
from gputop_diag.diagnose.types import Diagnosis, Evidence
from gputop_diag.model import ProbeState, ProbeSteps
from gputop_diag.monitor.core import Monitor
from gputop_diag.tui.side_panel import HeldFigures, render_full

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"


def run(name: str, seconds: int):
    """Every tick's (snapshot, diagnosis) of a demo scenario, one a second."""
    src = sim.build(name)
    m = Monitor(src, interval=1.0)
    out = []
    try:
        for _ in range(seconds):
            t = m.tick()
            out.append((t.snapshot, t.diagnosis))
            src.clock.sleep(1.0)
        window = m.history.snapshots(60)
    finally:
        m.close()
    return out, window


@pytest.fixture(scope="module")
def launch():
    return run("launch-bound", 20)


def test_launch_bound_work_is_synchronization_with_its_own_checks(launch):
    ticks, _ = launch
    snap, d = ticks[-1]
    assert d.primary == "synchronization" and d.finding == "launch_bound"
    busy = [g.util_gpu_pct for g in snap.gpus]
    assert min(busy) >= 90  # busy time says busy, SM activity says otherwise
    assert "SMs active only" in d.evidence[0].text
    assert any("CUDA graphs" in c for c in d.checks)
    assert any("fused=True" in c for c in d.checks)
    assert not any("set_sync_debug_mode" in c for c in d.checks)  # not a sync's checks
    assert render_text(d).startswith("Bottleneck: SYNCHRONIZATION (launch-bound)")
    assert to_json(d)["finding"] == "launch_bound"
    assert "launch-bound" in render_full(d, width=60).plain


def test_a_sync_stall_is_no_launch_bound_finding():
    ticks, _ = run("sync-stall", 12)
    d = ticks[-1][1]
    assert d.primary == "synchronization" and d.finding is None
    assert to_json(d)["finding"] is None
    assert any("set_sync_debug_mode" in c for c in d.checks)


def _without_threads(window):
    return [
        replace(
            s, processes=tuple(replace(p, busiest_threads=(), children=()) for p in s.processes)
        )
        for s in window
    ]


def test_without_thread_data_the_launch_shape_names_no_class(launch):
    _, window = launch
    d = judge(_without_threads(window))
    assert d.primary == "undetermined"
    assert any("small kernels" in e.text for e in d.evidence)


def _probed(window, t_gpu: float):
    """The window with a probe in its newest snapshot: 12 ms steps, GPU busy `t_gpu` s."""
    last = window[-1]
    pid = last.gpu_processes[0].pid
    steps = ProbeSteps(
        steps=200,
        last_step=200,
        last_at=last.timestamp,
        wall_s=0.012,
        t_input_s=0.0002,
        t_sync_s=0.0001,
        t_gpu_s=t_gpu,
        t_host_s=0.0117,
        measured=("t_input", "t_sync", "t_gpu"),
    )
    probe = ProbeState(pid=pid, start_ticks=1, steps=steps)
    return [*window[:-1], replace(last, probes=(probe,))]


def test_measured_in_the_job_launch_bound_work_is_named_without_gpu_counters(launch):
    _, window = launch
    blind = [replace(s, gpus=tuple(replace(g, gpm=None) for g in s.gpus)) for s in window]
    assert judge(blind).finding is None  # busy time alone cannot tell
    d = judge(_probed(blind, t_gpu=0.003))
    assert d.primary == "synchronization" and d.finding == "launch_bound"
    assert "measured in the job: the GPU busy only 25 %" in d.evidence[0].text
    assert judge(_probed(blind, t_gpu=0.011)).finding is None  # the GPU busy: not the host


def test_a_sync_job_among_other_users_busy_processes_stays_synchronization():
    ticks, _ = run("sync-shared-host", 15)
    snap, d = ticks[-1]
    assert snap.host.cpu_pct >= 95  # the machine is saturated
    assert d.primary == "synchronization"
    assert not any(e.metric == "host_cpu" for e in d.evidence)
    busy = [a for a in d.alerts if a.kind == "host_cpu"]
    assert len(busy) == 1 and "busy with other processes" in busy[0].text
    assert "this job's processes: 2" in busy[0].text  # 8 spinning ranks of 32 cores: ~28 %
    assert "other processes 7" in render_text(d)  # whose load it is, beside the verdict


def test_the_same_job_on_a_quiet_machine_has_no_busy_host_finding():
    d = run("sync-stall", 12)[0][-1][1]
    assert d.primary == "synchronization"
    assert not any(a.kind == "host_cpu" for a in d.alerts)


@pytest.mark.parametrize(
    ("worker_cpu", "job_cpu", "counts"),
    [
        (50.0, 20.0, True),  # the job's loaders work and find no core: its input pressure
        (3.0, 20.0, False),  # its helpers idle: other processes' load, not its input
        (None, None, True),  # the job's own share cannot be seen: the machine's figure stands
    ],
)
def test_a_saturated_host_is_input_pressure_only_where_the_loaders_starve(
    worker_cpu, job_cpu, counts
):
    f = Features(
        host_cpu_median=97.0,
        cpu_count=32,
        job_cpu_pct=job_cpu,
        worker_cpu_mean=worker_cpu,
        worker_count=4 if worker_cpu else 0,
    )
    said = rules.starved_loaders(f)
    assert (said is not None) == counts
    if counts and job_cpu is not None:
        assert "other processes 77 %, the job's 20 %" in said


def test_diagnose_model_config_puts_the_plan_in_the_checks(capsys):
    args = ["--demo", "capacity", "diagnose", "--seconds", "10"]
    assert cli.main(args) == 0
    plain = capsys.readouterr().out
    assert "Where the memory goes" not in plain
    assert cli.main([*args, "--model-config", str(CONFIGS / "llama-3-8b.json")]) == 0
    out = capsys.readouterr().out
    assert "1. The config does not look like the running job's model: its plan needs" in out
    assert "2. Where the memory goes (training, llama 8.03 B parameters" in out
    assert "What would make it fit:" in out
    assert "Plan this job's model: gputop-diag memory --config" not in out  # the plan, made
    assert cli.main([*args, "--model-config", "/nonexistent/config.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gputop-diag: --model-config") and "\n" not in err


@pytest.fixture(scope="module")
def tour():
    return run("tour", 32)[0]


def test_a_job_that_starts_is_read_from_its_first_work(tour):
    """The tour's job starts at 20 s: no figure of the idle seconds before it stands beside
    the GPUs' busy time now (no 'SM activity 0 %' while the Utilization pane shows 94 %)."""
    for _, d in tour[21:]:
        texts = " ".join(e.text for e in d.evidence)
        assert "SM activity 0 %" not in texts and "busy time median 0 %" not in texts, texts
        if d.primary == "idle":  # held: it says what the GPUs do now
            assert "started running kernels" in texts
            assert "no GPU ran kernels" not in texts


def test_the_first_ticks_wait_instead_of_doubting_the_driver(tour):
    _, d = tour[1]
    assert d.primary == "insufficient_data"
    assert d.checks == ("Wait a few seconds: a verdict needs 5 samples (2 so far, one a tick)",)
    no_gpu = run("no-gpu", 3)[0][-1][1]
    assert any("NVIDIA driver loads" in c for c in no_gpu.checks)


def _diag(sm: float) -> Diagnosis:
    ev = Evidence("sm_util", sm, 70.0, f"SM active {sm:.0f} %", "%")
    return Diagnosis("compute", 0.85, evidence=(ev,))


def test_held_figures_are_dated_from_the_last_tick_that_said_them():
    held = HeldFigures()
    key = ("compute",)
    shown, age = held.update(_diag(88.0), key, 100.0)
    assert age == 0 and shown.evidence[0].text == "SM active 88 %"
    shown, age = held.update(_diag(89.0), key, 104.0)  # not material: held
    assert shown.evidence[0].text == "SM active 88 %" and age == 4.0
    shown, age = held.update(_diag(88.0), key, 112.0)  # the tick says it again
    assert age == 0.0  # current, not "figures 10 s old"
    shown, age = held.update(_diag(87.0), key, 115.0)
    assert shown.evidence[0].text == "SM active 88 %" and age == 3.0  # said last at 112
    shown, age = held.update(_diag(87.0), key, 117.0)  # a new text waits at most 5 s
    assert shown.evidence[0].text == "SM active 87 %" and age == 0.0
    shown, age = held.update(_diag(70.0), key, 118.0)  # material: repainted
    assert shown.evidence[0].text == "SM active 70 %" and age == 0.0
