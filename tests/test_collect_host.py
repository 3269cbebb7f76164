"""Host and process collectors over the simulator's psutil and /proc stand-ins."""

from __future__ import annotations

import psutil

from gputop_diag import sim
from gputop_diag.collect.host import HostCollector, parse_pressure
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.sources import RealClock, RealProcFS


def run(name, seconds=10, **kw):
    s = Sampler(sim.build(name, **kw), interval=1.0)
    snap = s.sample()
    for _ in range(seconds):
        s.sources.clock.sleep(1.0)
        snap = s.sample()
    return s, snap


def test_parse_pressure_kernel_format():
    text = (
        "some avg10=12.50 avg60=8.00 avg300=2.10 total=123456\n"
        "full avg10=3.25 avg60=1.00 avg300=0.50 total=6543\n"
    )
    p = parse_pressure(text)
    assert (p.some_avg10, p.full_avg10, p.some_avg60) == (12.5, 3.25, 8.0)
    assert parse_pressure("") is None
    assert parse_pressure("\x00\xff garbage\n") is None


def test_host_state_from_the_real_machine():
    """The real psutil and /proc of this machine go through the same code."""
    h = HostCollector(psutil, RealProcFS(), RealClock()).collect()
    assert h.cpu_count >= 1 and len(h.per_cpu_pct) == h.cpu_count
    assert h.mem_total_bytes > 0


def test_input_starved_host_shows_iowait_and_busy_workers():
    _, snap = run("input-starved", 20)
    h = snap.host
    assert h.iowait_pct is not None and h.iowait_pct > 5
    assert "io" in h.pressure
    workers = [c for p in snap.processes for c in p.children if c.name == "pt_data_worker"]
    assert workers and max(c.cpu_pct for c in workers) > 50


def test_sync_stall_names_the_spinning_main_thread():
    _, snap = run("sync-stall", 10)
    tops = [p.busiest_threads[0] for p in snap.processes if p.busiest_threads]
    assert any(t.name == "pt_main_thread" and t.cpu_pct > 80 for t in tops)


def test_process_fields():
    _, snap = run("compute-bound", 3)
    p = next(p for p in snap.processes if not p.access_denied)
    assert p.user and p.cmdline and p.cmdline[0].startswith("python")
    assert p.rss_bytes > 0 and p.num_threads > 0 and p.start_time
    assert p.environ_readable and p.cuda_visible_devices is not None


def test_first_cpu_reading_is_zero_then_real():
    s = Sampler(sim.build("compute-bound"), interval=1.0)
    first = s.sample()
    assert all(p.cpu_pct == 0.0 for p in first.processes if p.cpu_pct is not None)
    s.sources.clock.sleep(1.0)
    second = s.sample()
    assert any((p.cpu_pct or 0) > 0 for p in second.processes)


def test_vanished_process_is_skipped_silently():
    s = Sampler(sim.build("compute-bound"), interval=1.0)
    snap = s.sample()
    victim = snap.processes[0].pid
    s.sources.sim.vanish_process(victim)
    s.sources.clock.sleep(1.0)
    snap = s.sample()
    assert victim not in {p.pid for p in snap.processes}
    assert not [e for e in snap.errors if e.source == "process"]


def test_other_users_process_shows_what_can_be_read():
    found = None
    for name in [i.name for i in sim.list_scenarios()]:
        if name == "no-gpu":
            continue
        _, snap = run(name, 2)
        found = next((p for p in snap.processes if p.access_denied), None)
        if found:
            break
    assert found is not None, "no scenario has another user's process"
    assert found.name and found.cpu_pct is not None
    assert found.cmdline is None and not found.environ_readable


def test_host_failure_becomes_a_collector_error(monkeypatch):
    s = Sampler(sim.build("idle"), interval=1.0)

    def boom():
        raise RuntimeError("psutil broke")

    monkeypatch.setattr(s.host, "collect", boom)
    snap = s.sample()
    assert snap.host is None and len(snap.gpus) == 8
    assert any(e.source == "host" and "psutil broke" in e.message for e in snap.errors)


def test_many_processes():
    _, snap = run("compute-bound", 2, gpu_count=64, process_count=1000)
    assert len(snap.gpus) == 64
    assert len(snap.gpu_processes) >= 1000
