"""What a tick reads follows the GPU processes, not the machine: the same reads with 2,000 other
processes as with none (a kernel with `children` files), one parent map per 10 s without them,
and never psutil's list of every process. Counted on the simulator, not timed (bench/collect.py
times it on real processes)."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from gputop_diag import sim
from gputop_diag.collect.proctree import RESCAN_S
from gputop_diag.monitor.core import Monitor
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.sim.population import SimProc, SimThread

OTHERS = 2000


class Counting:
    """Counts the reads of a /proc stand-in and the calls of psutil's every-process listings."""

    def __init__(self, inner, log):
        self._inner, self._log = inner, log

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name in ("read_text", "listdir", "pids", "process_iter"):

            def counted(*args, **kw):
                self._log.append((name, args[0] if args else None))
                return attr(*args, **kw)

            return counted
        return attr


def _machine(others: int, children_files: bool = True):
    """input-starved (8 ranks, 4 dataloader workers each) and `others` idle processes."""
    src = sim.build("input-starved", noise=0)
    src.procfs.children_files = children_files
    m = src.sim
    for pid in range(700000, 700000 + others):
        m.procs[pid] = SimProc(
            pid, 1, "carol", "sleep", ("sleep", "600"), "host",
            create_time=m.boot_time + 60, cpu_fixed=0.0, threads=[SimThread(pid, "sleep", "other")],
        )  # fmt: skip
    log: list = []
    counted = dataclasses.replace(
        src, psutil=Counting(src.psutil, log), procfs=Counting(src.procfs, log)
    )
    return counted, log


def _ticks(sources, log, n: int, monitor: bool = False) -> list[list]:
    """The reads of each of `n` ticks a second apart, after a first one."""
    feed = Monitor(sources) if monitor else Sampler(sources)
    tick = feed.tick if monitor else feed.sample
    tick()
    out = []
    for _ in range(n):
        sources.clock.sleep(1.0)
        del log[:]
        tick()
        out.append(list(log))
    return out


def test_a_ticks_reads_do_not_grow_with_the_other_processes():
    quiet = _ticks(*_machine(0), 3)
    busy = _ticks(*_machine(OTHERS), 3)
    assert [len(t) for t in busy] == [len(t) for t in quiet]
    for reads in busy:
        assert not [r for r in reads if r[0] in ("pids", "process_iter")]
        assert ("listdir", "/proc") not in reads
        assert not [r for r in reads if r[1] and r[1].startswith("/proc/7")]  # the others'


def test_without_children_files_every_process_is_read_once_in_10_s():
    ticks = _ticks(*_machine(OTHERS, children_files=False), int(3 * RESCAN_S))
    scans = [k for k, reads in enumerate(ticks) if ("listdir", "/proc") in reads]
    assert len(scans) == 3 and scans[1] - scans[0] == scans[2] - scans[1] == RESCAN_S
    between = [len(t) for k, t in enumerate(ticks) if k not in scans]
    assert max(between) < 200 < OTHERS  # the trees only
    assert not [r for t in ticks for r in t if r[0] in ("pids", "process_iter")]


@pytest.mark.parametrize("children_files", [True, False])
def test_the_monitors_ticks_between_the_slow_sources_follow_the_gpu_processes(children_files):
    """The Monitor asks its slow sources every 10 s (the driver chain reads a new process's
    maps then); the ticks in between read what the Sampler reads."""
    quiet = _ticks(*_machine(0, children_files), 8, monitor=True)
    busy = _ticks(*_machine(OTHERS, children_files), 8, monitor=True)
    assert [len(t) for t in busy] == [len(t) for t in quiet]


def _held_squeue(scenario: str):
    """`scenario` on a wall clock whose `squeue` waits until `gate` is set (a Slurm controller
    that does not answer holds it up to its timeout)."""
    src = sim.build(scenario, realtime=True)
    gate = threading.Event()
    inner = src.run_command

    def run_command(argv, timeout):
        if argv[0] == "squeue":
            gate.wait(10.0)
        return inner(argv, timeout)

    return dataclasses.replace(src, run_command=run_command), gate


def test_a_live_views_ticks_wait_for_no_slow_command():
    """A live view asks the slow sources in a thread: its first tick is drawn while `squeue`
    still waits, and the answers ride on the first tick after the read ended."""
    sources, gate = _held_squeue("scheduler-wait")
    monitor = Monitor(sources, live=True)
    try:
        t0 = time.monotonic()
        first, second = monitor.tick(), monitor.tick()
        assert time.monotonic() - t0 < 5.0  # squeue holds for 10 s
        assert first.snapshot.gpus and first.snapshot.slow_sources_at is None
        assert second.snapshot.scheduler_jobs is None
        gate.set()
        assert monitor._slow_read.join(10.0)
        third = monitor.tick()
        assert third.snapshot.slow_sources_at == first.snapshot.timestamp
        assert [j.job_id for j in third.snapshot.scheduler_jobs]  # the scenario's pending job
        assert third.snapshot.driver_chain is not None
    finally:
        gate.set()
        monitor.close()


def test_a_headless_monitors_first_tick_holds_the_slow_sources():
    """`diagnose`, `watch` and `record` on a wall clock read the slow sources in the tick:
    their first snapshot carries Slurm's answer."""
    sources, gate = _held_squeue("scheduler-wait")
    gate.set()
    monitor = Monitor(sources)
    try:
        first = monitor.tick()
        assert first.snapshot.slow_sources_at == first.snapshot.timestamp
        assert [j.job_id for j in first.snapshot.scheduler_jobs]
    finally:
        monitor.close()


def test_a_headless_run_that_ticks_on_waits_for_no_slow_command_after_its_first(monkeypatch):
    """`watch --no-tui` and the exporter (`threaded_slow`): the first tick holds Slurm's answer
    as every headless command's does; the reads after it run in their thread, so a `squeue`
    that hangs stops no tick (status lines, scrapes), and the ticks carry the last answer."""
    from gputop_diag.monitor import core

    monkeypatch.setattr(core, "SLOW_SOURCES_EVERY_S", 0.0)  # a read due at every tick
    sources, gate = _held_squeue("scheduler-wait")
    gate.set()
    monitor = Monitor(sources, threaded_slow=True)
    try:
        first = monitor.tick()
        assert first.snapshot.slow_sources_at == first.snapshot.timestamp
        jobs = [j.job_id for j in first.snapshot.scheduler_jobs]
        assert jobs  # the scenario's pending job
        gate.clear()  # from now on squeue hangs (up to 10 s)
        t0 = time.monotonic()
        later = [monitor.tick() for _ in range(3)]
        assert time.monotonic() - t0 < 5.0
        for t in later:  # the first read's answer, carried
            assert [j.job_id for j in t.snapshot.scheduler_jobs] == jobs
            assert t.snapshot.slow_sources_at == first.snapshot.timestamp
        assert monitor._slow_read.running
        gate.set()
        assert monitor._slow_read.join(10.0)
        assert monitor.tick().snapshot.slow_sources_at > first.snapshot.timestamp
    finally:
        gate.set()
        monitor.close()


def test_the_driver_chains_minutely_rescan_reads_statm_of_a_process_without_cuda_libraries():
    """Once a minute the driver chain reads each process's maps again, unless the process had
    no CUDA library and its virtual memory size (statm) is the same: with 2,000 idle processes
    that is most of the scan's cost. A process that grew, or holds CUDA libraries (an upgrade
    marks them deleted), is read again."""
    from gputop_diag.collect.cuda_libs import ChainMemo, read_chain

    src = sim.build("compute-bound")
    m = src.sim
    for pid in range(700000, 700005):  # idle processes without a CUDA library
        m.procs[pid] = SimProc(
            pid, 1, "carol", "sleep", ("sleep", "600"), "host",
            create_time=m.boot_time + 60, cpu_fixed=0.0, threads=[SimThread(pid, "sleep", "other")],
        )  # fmt: skip
    maps: list[int] = []
    sizes: dict[int, int] = {}
    original = src.procfs.read_text

    def read_text(path: str) -> str:
        pid = int(path.split("/")[2]) if path.split("/")[2].isdigit() else 0
        if path.endswith("/statm"):
            return f"{sizes.get(pid, 1000)} 200 100 10 0 300 0\n"
        if path.endswith("/maps"):
            maps.append(pid)
            if pid >= 700000:  # the idle ones: libc only
                return "7f3a00000000-7f3a00200000 r-xp 00000000 103:02 9000 /usr/lib/libc.so.6\n"
        return original(path)

    src.procfs.read_text = read_text
    memo = ChainMemo(rescan_s=60.0)
    first = read_chain(src, memo=memo)
    cuda = {p.pid for p in first.processes}
    others = [pid for pid in dict.fromkeys(maps) if pid not in cuda]
    assert cuda and len(others) >= 5
    sizes[others[0]] = 2000  # it mapped something since
    del maps[:]
    src.clock.sleep(61.0)
    again = read_chain(src, memo=memo)
    assert sorted(maps) == sorted(cuda | {others[0]})
    assert [p.pid for p in again.processes] == [p.pid for p in first.processes]
    assert (again.scanned, again.unreadable) == (first.scanned, first.unreadable)
    del maps[:]
    src.clock.sleep(11.0)
    read_chain(src, memo=memo)
    assert maps == []  # renewed: not due again for a minute


def test_the_mapping_is_made_again_only_when_what_it_reads_changed():
    """The Mapping pane's content is the last tick's while the GPUs, their processes, the host
    and this shell's environment are the same; a changed CUDA_VISIBLE_DEVICES makes it anew."""
    from gputop_diag.collect.mapping import collect_mapping
    from gputop_diag.monitor.view import Feeder, mapping_view

    src = sim.build("idle", noise=0)
    feeder = Feeder(Monitor(src), find_configs=False)
    first = feeder.tick()
    src.clock.sleep(1.0)
    second = feeder.tick()
    assert second.snapshot.timestamp > first.snapshot.timestamp
    assert second.mapping is first.mapping
    fresh = mapping_view(collect_mapping(second.snapshot, None, dict(src.environ)))
    assert second.mapping == fresh
    src.environ["CUDA_VISIBLE_DEVICES"] = "1"
    src.clock.sleep(1.0)
    third = feeder.tick()
    assert third.mapping is not second.mapping and third.mapping.cvd == "1"
    assert third.mapping == mapping_view(collect_mapping(third.snapshot, None, dict(src.environ)))


def test_a_slurm_controller_out_of_reach_is_asked_once_a_minute_not_every_10_s():
    """`squeue` that runs into its timeout (a controller out of reach: each ask holds a process
    for 5 s) is run again a minute later; once it answers, every 10 s again."""
    import subprocess

    from gputop_diag.monitor.core import SLOW_SOURCES_EVERY_S, SQUEUE_RETRY_S

    src = sim.build("scheduler-wait")
    asked: list[float] = []
    down = [True]
    inner = src.run_command

    def run_command(argv, timeout):
        if argv[0] == "squeue":
            asked.append(src.clock.now())
            if down[0]:
                raise subprocess.TimeoutExpired(argv, timeout)
        return inner(argv, timeout)

    src.run_command = run_command
    m = Monitor(src, interval=1.0)
    t0 = src.clock.now()
    m.run_for(130)
    assert [round(t - t0) for t in asked] == [0, 60, 120]
    assert m.last.snapshot.scheduler_jobs == ()
    # said as no answer, not as no job queued
    [said] = [e for e in m.last.snapshot.errors if e.source == "slurm"]
    assert "did not answer" in said.message and "scontrol ping" in said.next_step
    [why] = [r for r in m.diagnosis.ruled_out if r.cls == "scheduler"]
    assert "Slurm did not answer" in why.evidence.text and "no Slurm job" not in why.evidence.text
    down[0] = False
    del asked[:]
    m.run_for(SQUEUE_RETRY_S + 30)
    gaps = [round(b - a) for a, b in zip(asked, asked[1:], strict=False)]
    assert asked and set(gaps) == {SLOW_SOURCES_EVERY_S}
    assert [j.job_id for j in m.last.snapshot.scheduler_jobs]  # the scenario's pending job
    assert not [e for e in m.last.snapshot.errors if e.source == "slurm"]
