"""Children of GPU processes from the kernel's `children` files (the fallback: a parent map of
every process, rebuilt at most every 10 s), over the simulator and the real /proc."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from gputop_diag import sim
from gputop_diag.collect.procs import ProcessCollector
from gputop_diag.collect.proctree import RESCAN_S, parse_ppid, parse_stat
from gputop_diag.sources import RealClock, RealProcFS


def test_parse_ppid_survives_odd_command_names():
    assert parse_ppid("4321 (python) S 1200 4321 4321 0 -1 4194560 0") == 1200
    assert parse_ppid("77 (a) b) (c ) R 5 77 77 0") == 5  # comm holds ') ' and spaces
    assert parse_ppid("9 ()) S 3 9") == 3
    with pytest.raises(ValueError):
        parse_ppid("garbage")


def test_parse_stat_reads_the_fields_a_tick_uses():
    line = "77 (a) b) (c ) R 5 70 71 0 -1 4194560 9 0 0 0 130 20 0 0 20 0 6 0 98765 0 0\n"
    st = parse_stat(line)
    assert (st.name, st.ppid, st.session) == ("a) b) (c ", 5, 71)
    assert (st.cpu_ticks, st.num_threads, st.start_ticks) == (150, 6, 98765)
    with pytest.raises(ValueError):
        parse_stat("77 (x) S 1")


class CountingProcFS:
    """The machine's /proc, counting what is read (and hiding the `children` files when asked:
    a kernel built without CONFIG_PROC_CHILDREN)."""

    def __init__(self, inner, fail=None, children_files=True):
        self.inner, self.reads, self.fail = inner, [], fail or {}
        self.children_files = children_files

    def read_text(self, path):
        self.reads.append(path)
        if path in self.fail:
            raise self.fail[path]
        if not self.children_files and path.endswith("/children"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.inner.read_text(path)

    def exists(self, path):
        return self.inner.exists(path)

    def listdir(self, path):
        self.reads.append(path + "/")
        return self.inner.listdir(path)


def _ranks(src):
    return sorted(p.pid for p in src.sim.procs.values() if p.role == "rank")


def _stat_reads(fs):
    return [p for p in fs.reads if p.count("/") == 3 and p.endswith("/stat")]


@pytest.mark.parametrize("children_files", [True, False])
def test_children_match_psutil(children_files):
    src = sim.build("input-starved")
    src.procfs.children_files = children_files
    ranks = _ranks(src)
    assert len(ranks) == 8
    pc = ProcessCollector(src.psutil, src.procfs, src.clock)
    infos = pc.collect(ranks)
    for info in infos:
        want = {c.pid for c in src.psutil.Process(info.pid).children(recursive=True)}
        assert want and {c.pid for c in info.children} == want
        assert all(c.name == "pt_data_worker" for c in info.children)
    assert pc.tree.children_files is children_files
    assert pc.tree.scans == (0 if children_files else 1)


def test_the_kernels_children_files_spare_the_scan_of_every_process():
    src = sim.build("input-starved")
    ranks = _ranks(src)
    fs = CountingProcFS(src.procfs)
    pc = ProcessCollector(src.psutil, fs, src.clock)
    for _ in range(3):
        pc.collect(ranks)
        src.clock.sleep(1)
    workers = {c for r in ranks for c in src.sim.procs[r].children}
    read = {int(p.split("/")[2]) for p in _stat_reads(fs)}
    assert read == set(ranks) | workers  # the trees, nothing else
    assert "/proc/" not in fs.reads  # /proc is never listed


def test_without_children_files_the_parent_map_is_rebuilt_every_10_s_and_for_new_processes():
    src = sim.build("input-starved")
    ranks = _ranks(src)
    fs = CountingProcFS(src.procfs, children_files=False)
    pc = ProcessCollector(src.psutil, fs, src.clock)
    pc.collect(ranks[:4])
    assert pc.tree.scans == 1 and len(_stat_reads(fs)) > len(src.psutil.pids()) - 2
    for _ in range(int(RESCAN_S) - 2):  # ticks within 10 s: no scan
        src.clock.sleep(1)
        pc.collect(ranks[:4])
    assert pc.tree.scans == 1
    src.clock.sleep(1)
    (info,) = [i for i in pc.collect(ranks[:5]) if i.pid == ranks[4]]  # a new GPU process
    assert pc.tree.scans == 2 and info.children  # its children at once
    src.clock.sleep(1)
    pc.collect(ranks[:5])
    assert pc.tree.scans == 2
    src.clock.sleep(RESCAN_S)
    pc.collect(ranks[:5])
    assert pc.tree.scans == 3


def test_a_child_started_by_another_thread_is_found():
    """The kernel lists a child under the thread that started it, not the main one."""
    src = sim.build("input-starved")
    rank = _ranks(src)[0]
    p = src.sim.procs[rank]
    pin = next(th.tid for th in p.threads if th.name == "pt_data_pin")
    src.procfs.forked_by[p.children[0]] = pin
    assert src.procfs.read_text(f"/proc/{rank}/task/{pin}/children") == f"{p.children[0]} "
    assert str(p.children[0]) not in src.procfs.read_text(f"/proc/{rank}/task/{rank}/children")
    (info,) = ProcessCollector(src.psutil, src.procfs, src.clock).collect([rank])
    assert {c.pid for c in info.children} == set(p.children)


def test_no_reads_without_gpu_processes():
    src = sim.build("idle")
    fs = CountingProcFS(src.procfs)
    ProcessCollector(src.psutil, fs, src.clock).collect([])
    assert fs.reads == []


@pytest.mark.parametrize("children_files", [True, False])
def test_a_child_that_vanishes_or_hides_is_skipped(children_files):
    src = sim.build("input-starved")
    rank = _ranks(src)[0]
    kids = [c.pid for c in src.psutil.Process(rank).children(recursive=True)]
    fail = {f"/proc/{kids[0]}/stat": PermissionError(13, "denied")}
    fs = CountingProcFS(src.procfs, fail=fail, children_files=children_files)
    pc = ProcessCollector(src.psutil, fs, src.clock)
    (info,) = pc.collect([rank])
    assert {c.pid for c in info.children} == set(kids[1:])  # unreadable stat: not listed
    src.sim.vanish_process(kids[1])
    src.clock.sleep(1)
    (info,) = pc.collect([rank])
    assert kids[1] not in {c.pid for c in info.children}


@pytest.mark.parametrize("children_files", [True, False])
def test_cpu_of_children_and_threads_is_over_the_tick(children_files):
    src = sim.build("input-starved", noise=0)
    src.procfs.children_files = children_files
    rank = _ranks(src)[0]
    pc = ProcessCollector(src.psutil, src.procfs, src.clock)
    (first,) = pc.collect([rank])
    assert first.children and all(c.cpu_pct is None for c in first.children)  # nothing yet
    src.clock.sleep(1)
    (info,) = pc.collect([rank])
    assert info.children and all(c.cpu_pct > 50 for c in info.children)
    assert info.busiest_threads and info.busiest_threads[0].name == "pt_main_thread"
    by_tid = {t.tid: t.cpu_pct for t in info.busiest_threads}
    st = src.sim.state()["cpu"][rank]  # the simulator's own rates, percent of a core
    for tid, pct in by_tid.items():
        assert pct == pytest.approx(st[tid], abs=1.5)


def test_another_users_threads_are_hidden_not_fatal():
    src = sim.build("compute-bound")  # bob's co-tenant process on GPU 0
    (denied,) = [p.pid for p in src.sim.procs.values() if p.denied and p.gpu is not None]
    pc = ProcessCollector(src.psutil, src.procfs, src.clock)
    pc.collect([denied])
    src.clock.sleep(1)
    (info,) = pc.collect([denied])
    assert info.access_denied and info.busiest_threads == () and info.children == ()
    assert info.name == "python" and info.cpu_pct is not None


TREE = """
import os, threading, time
r, w = os.pipe()
def fork_tree():
    if os.fork() == 0:
        if os.fork() == 0:
            os.write(w, b"x")  # the grandchild is there
            time.sleep(60); os._exit(0)
        time.sleep(60); os._exit(0)
for _ in range(2):
    fork_tree()
t = threading.Thread(target=fork_tree)  # a child started by a thread that is not the main one
t.start(); t.join()
for _ in range(3):
    os.read(r, 1)
print("ready", flush=True)
time.sleep(60)
"""


def _kill_tree(p):
    for c in psutil.Process(p.pid).children(recursive=True):
        c.kill()
    p.kill()
    p.wait()


@pytest.mark.parametrize("children_files", [True, False], ids=["kernel", "no-children-files"])
def test_real_proc_tree(children_files):
    """The real psutil and /proc: a parent with three children (one started by a second
    thread), each with a child."""
    p = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        want = {c.pid for c in psutil.Process(p.pid).children(recursive=True)}
        assert len(want) == 6
        fs = CountingProcFS(RealProcFS(), children_files=children_files)
        pc = ProcessCollector(psutil, fs, RealClock())
        (info,) = pc.collect([p.pid, 2**22 + 17])  # the second: a pid that does not exist
        assert {c.pid for c in info.children} == want
        assert info.name and info.cmdline[0] == sys.executable
        assert pc.collect([os.getpid()])[0].pid == os.getpid()
        if not children_files:  # a scan for each tick's new process
            assert pc.tree.children_files is False and pc.tree.scans == 2
    finally:
        _kill_tree(p)


THREAD_FORKS = """
import subprocess, sys, threading, time
def start():
    c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print(threading.get_native_id(), c.pid, flush=True)
    time.sleep(60)  # the thread lives on: its child stays listed under it
threading.Thread(target=start, daemon=True).start()
time.sleep(60)
"""


@pytest.mark.skipif(
    not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"),
    reason="the kernel has no children files",
)
def test_the_kernel_lists_a_child_under_the_thread_that_started_it():
    """What the per-thread reading rests on, on this machine's kernel; and the child found."""
    p = subprocess.Popen([sys.executable, "-c", THREAD_FORKS], stdout=subprocess.PIPE, text=True)
    try:
        tid, child = map(int, p.stdout.readline().split())
        with open(f"/proc/{p.pid}/task/{tid}/children") as f:
            assert f.read().split() == [str(child)]
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            assert f.read().split() == []  # not under the main thread
        pc = ProcessCollector(psutil, RealProcFS(), RealClock())
        (info,) = pc.collect([p.pid])
        assert [c.pid for c in info.children] == [child]
    finally:
        _kill_tree(p)
