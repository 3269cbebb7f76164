"""Children of GPU processes from one parent map per tick, over the simulator and the real /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from gputop_diag import sim
from gputop_diag.collect.procs import ProcessCollector, parse_ppid
from gputop_diag.sources import RealClock, RealProcFS


def test_parse_ppid_survives_odd_command_names():
    assert parse_ppid("4321 (python) S 1200 4321 4321 0 -1 4194560 0") == 1200
    assert parse_ppid("77 (a) b) (c ) R 5 77 77 0") == 5  # comm holds ') ' and spaces
    assert parse_ppid("9 ()) S 3 9") == 3
    with pytest.raises(ValueError):
        parse_ppid("garbage")


class CountingProcFS:
    def __init__(self, inner, fail=None):
        self.inner, self.reads, self.fail = inner, [], fail or {}

    def read_text(self, path):
        self.reads.append(path)
        if path in self.fail:
            raise self.fail[path]
        return self.inner.read_text(path)

    def exists(self, path):
        return self.inner.exists(path)

    def listdir(self, path):
        return self.inner.listdir(path)


def test_children_match_psutil_and_proc_is_scanned_once_per_tick():
    src = sim.build("input-starved")
    ranks = sorted(p.pid for p in src.sim.procs.values() if p.role == "rank")
    assert len(ranks) == 8
    fs = CountingProcFS(src.procfs)
    pc = ProcessCollector(src.psutil, fs, src.clock)
    infos = pc.collect(ranks)
    for info in infos:
        want = {c.pid for c in src.psutil.Process(info.pid).children(recursive=True)}
        assert want and {c.pid for c in info.children} == want
        assert all(c.name == "pt_data_worker" for c in info.children)
    stats = [p for p in fs.reads if p.endswith("/stat")]
    assert len(stats) == len(set(stats)) == len(src.psutil.pids())  # one scan, not eight


def test_no_scan_without_gpu_processes():
    src = sim.build("idle")
    fs = CountingProcFS(src.procfs)
    ProcessCollector(src.psutil, fs, src.clock).collect([])
    assert not [p for p in fs.reads if p.endswith("/stat")]


def test_a_child_that_vanishes_or_hides_is_skipped():
    src = sim.build("input-starved")
    rank = min(p.pid for p in src.sim.procs.values() if p.role == "rank")
    kids = [c.pid for c in src.psutil.Process(rank).children(recursive=True)]
    fs = CountingProcFS(src.procfs, fail={f"/proc/{kids[0]}/stat": PermissionError(13, "denied")})
    pc = ProcessCollector(src.psutil, fs, src.clock)
    (info,) = pc.collect([rank])
    assert {c.pid for c in info.children} == set(kids[1:])  # unreadable stat: not in the map
    src.sim.vanish_process(kids[1])
    src.clock.sleep(1)
    (info,) = pc.collect([rank])
    assert kids[1] not in {c.pid for c in info.children}


def test_cpu_of_children_averages_over_the_tick():
    src = sim.build("input-starved", noise=0)
    rank = min(p.pid for p in src.sim.procs.values() if p.role == "rank")
    pc = ProcessCollector(src.psutil, src.procfs, src.clock)
    pc.collect([rank])
    src.clock.sleep(1)
    (info,) = pc.collect([rank])
    assert info.children and all(c.cpu_pct > 50 for c in info.children)


TREE = """
import os, sys, time
for _ in range(3):
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(60); os._exit(0)
        time.sleep(60); os._exit(0)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the real /proc")
def test_real_proc_tree():
    """The real psutil and /proc: a parent with three children, each with a child."""
    p = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.1)
        want = {c.pid for c in psutil.Process(p.pid).children(recursive=True)}
        assert len(want) == 6
        pc = ProcessCollector(psutil, RealProcFS(), RealClock())
        (info,) = pc.collect([p.pid, 2**22 + 17])  # the second: a pid that does not exist
        assert {c.pid for c in info.children} == want
        assert info.name and info.cmdline[0] == sys.executable
        assert pc.collect([os.getpid()])[0].pid == os.getpid()
    finally:
        for c in psutil.Process(p.pid).children(recursive=True):
            c.kill()
        p.kill()
        p.wait()
