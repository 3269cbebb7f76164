"""A watched job's tree: children, grandchildren, threads that start processes, and workers
reparented when their parent ended; from the kernel's `children` files and, where a kernel lacks
them, from the parent map. Real process trees; `ProcTree.walk` over a small /proc of our own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from gputop_diag import sim
from gputop_diag.collect.job import JobWatch
from gputop_diag.collect.jobtree import TreeReader
from gputop_diag.collect.proctree import ProcTree
from gputop_diag.sources import RealClock, RealProcFS, Sources, run_real_command

MODES = pytest.mark.parametrize("children_files", [True, False], ids=["kernel", "no-children"])


class HiddenChildren(RealProcFS):
    """This machine's /proc with the `children` files missing, as on a kernel built without
    CONFIG_PROC_CHILDREN (on a kernel without them, `RealProcFS` is already that)."""

    def read_text(self, path: str) -> str:
        if path.endswith("/children"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return super().read_text(path)


def _sources(children_files: bool) -> Sources:
    return Sources(
        nvml=None,
        psutil=psutil,
        procfs=RealProcFS() if children_files else HiddenChildren(),
        clock=RealClock(),
        run_command=run_real_command,
        hostname=lambda: "h",
    )


def _wait_for(path, word, timeout=10.0) -> list[str]:
    """The lines of `path` once one starts with `word`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines() if path.exists() else []
        if any(line.startswith(word) for line in lines):
            return lines
        time.sleep(0.02)
    raise AssertionError(f"{word!r} never written to {path}")


def _pids(lines, word) -> list[int]:
    return [int(x) for line in lines if line.startswith(word) for x in line.split()[1:]]


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# A job that leaves orphans: a child that starts a grandchild and ends at once (the grandchild
# is reparented before anything could see it under the job), a worker with a worker of its own,
# a worker started by a second thread; later, on SIGUSR1, one more orphan.
JOB = r"""
import os, signal, subprocess, sys, threading, time
def orphan(word):
    if os.fork() == 0:
        if os.fork() == 0:
            print(word, os.getpid(), flush=True)
            time.sleep(60); os._exit(0)
        os._exit(0)
    os.wait()
orphan("orphan")
nested = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
    "'import time; time.sleep(60)']); print('grandchild', c.pid, flush=True); time.sleep(60)"])
box = []
t = threading.Thread(target=lambda: box.append(subprocess.Popen(["sleep", "60"])))
t.start(); t.join()
print("workers", nested.pid, box[0].pid, flush=True)
signal.signal(signal.SIGUSR1, lambda *a: orphan("late"))
while True:
    time.sleep(0.05)
"""


@MODES
def test_a_started_jobs_descendants_and_orphans_are_found(tmp_path, children_files):
    log = tmp_path / "job.log"
    w = JobWatch.for_command(
        _sources(children_files), [sys.executable, "-c", JOB], log_path=str(log)
    )
    w.reader.proctree.rescan_s = 0.3  # the fallback's parent map: rebuilt quickly here
    found: list[int] = []
    try:
        lines = _wait_for(log, "workers")
        lines = _wait_for(log, "grandchild")
        nested, threaded = _pids(lines, "workers")
        (orphan,) = _pids(lines, "orphan")
        (grandchild,) = _pids(lines, "grandchild")
        found = [orphan, grandchild, nested, threaded]
        st = w.sample()
        depth = {p.pid: p.depth for p in st.processes}
        root = w.roots[0]
        assert depth[root] == 0 and depth[nested] == 1 and depth[threaded] == 1
        assert depth[grandchild] == 2
        assert depth[orphan] == 0  # not under the root any more: found by its session
        tree = w.reader.proctree
        assert tree.children_files is children_files and (tree.scans == 0) is children_files
        os.kill(w.roots[0], signal.SIGUSR1)  # an orphan made between two ticks
        (late,) = _pids(_wait_for(log, "late"), "late")
        found.append(late)
        time.sleep(0.35)
        st = w.sample()
        assert {orphan, late, grandchild, nested, threaded, root} == {p.pid for p in st.processes}
    finally:
        w.stop(grace_s=1)
        _kill(found)


PARENT = """
import subprocess, sys
c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])
print(c.pid, flush=True)
sys.stdin.readline()
"""


@MODES
def test_a_watched_pids_worker_stays_after_its_parent_ends(children_files):
    p = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    child = int(p.stdout.readline())
    try:
        w = JobWatch.for_pid(_sources(children_files), p.pid)
        assert {p.pid, child} <= {q.pid for q in w.sample().processes}
        p.stdin.close()
        p.wait(5)
        st = w.sample()
        assert [(q.pid, q.depth) for q in st.processes] == [(child, 0)] and not w.finished
    finally:
        _kill([child])
        p.kill()
        p.wait()


@MODES
def test_job_tree_over_the_simulator(children_files):
    src = sim.build("comm-bound")  # torchrun, its 8 ranks, their dataloader workers
    src.procfs.children_files = children_files
    launcher = next(p.pid for p in src.sim.procs.values() if p.role == "launcher")
    tree = TreeReader(src.psutil, src.procfs).tree([launcher], src.clock.now())
    ranks = [p for p in tree if p.depth == 1]
    workers = [p for p in tree if p.depth == 2]
    assert tree[0].pid == launcher and len(ranks) == 8
    assert workers and all(p.name == "pt_data_worker" for p in workers)
    assert all(tree[tree.index(w) - 1].depth >= 1 for w in workers)  # under their rank
    w = JobWatch.for_pid(src, launcher)
    for _ in range(8):  # ticks within 10 s: the fallback's one parent map serves them all
        assert len(w.sample().processes) == len(tree)
        src.clock.sleep(1)
    assert w.reader.proctree.scans == (0 if children_files else 1)


# -- ProcTree.walk over a /proc of our own ----------------------------------------------------
class TinyProc:
    """A /proc of a few single-threaded processes: {pid: (ppid, session, start)}."""

    def __init__(self, procs, children_files=True):
        self.procs, self.children_files = dict(procs), children_files

    def _stat(self, pid):
        ppid, sid, start = self.procs[pid]
        return f"{pid} (p{pid}) S {ppid} {pid} {sid} 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 {start} 0\n"

    def read_text(self, path):
        parts = path.split("/")[1:]
        pid = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
        if pid not in self.procs:
            raise FileNotFoundError(2, "No such file or directory", path)
        if parts[2:] in (["stat"], ["task", str(pid), "stat"]):
            return self._stat(pid)
        if parts[2:] == ["task", str(pid), "children"] and self.children_files:
            return "".join(f"{c} " for c, v in sorted(self.procs.items()) if v[0] == pid)
        raise FileNotFoundError(2, "No such file or directory", path)

    def exists(self, path):
        try:
            self.read_text(path)
        except OSError:
            return False
        return True

    def listdir(self, path):
        parts = path.split("/")[1:]
        if parts == ["proc"]:
            return [str(p) for p in self.procs]
        if len(parts) == 3 and parts[2] == "task" and int(parts[1]) in self.procs:
            return [parts[1]]
        raise FileNotFoundError(2, "No such file or directory", path)


@MODES
def test_walk_lists_parents_first_and_a_root_under_another_root_once(children_files):
    fs = TinyProc({10: (1, 10, 5), 11: (10, 10, 6), 12: (11, 10, 7), 13: (10, 10, 8)})
    fs.children_files = children_files
    t = ProcTree(fs)
    t.refresh([12, 10], 0.0)
    walked = [(m.pid, m.depth) for m in t.walk([12, 10], 64)]
    assert walked == [(10, 0), (11, 1), (12, 2), (13, 1)]
    assert [m.pid for m in t.walk([10], 2)] == [10, 11]  # the limit: breadth-first
    assert t.walk([10], 64, accept=lambda pid, st: False) == []


def test_the_fallback_drops_what_the_parent_map_says_that_is_no_longer_true():
    fs = TinyProc({10: (1, 10, 5), 11: (10, 10, 6)}, children_files=False)
    t = ProcTree(fs)
    t.refresh([10], 0.0)
    assert [m.pid for m in t.walk([10], 64)] == [10, 11]
    fs.procs[11] = (1, 10, 6)  # its parent ended: reparented to the first process
    fs.procs[12] = (10, 10, 9)  # a child started since the map was built
    t.refresh([10], 5.0)
    assert [m.pid for m in t.walk([10], 64)] == [10] and t.scans == 1  # until the next map
    t.refresh([10], 10.0)
    assert [m.pid for m in t.walk([10], 64)] == [10, 12] and t.scans == 2


def test_a_remembered_pid_that_is_now_another_process_is_not_the_jobs():
    fs = TinyProc({10: (1, 10, 5), 11: (10, 10, 6)})

    class PS:
        NoSuchProcess = ZombieProcess = AccessDenied = LookupError

    r = TreeReader(PS, fs)
    r._cache = {11: type("C", (), {"start": 6})()}  # seen before as the process started at 6
    del fs.procs[10]  # the root ended; 11 lives on, reparented
    fs.procs[11] = (1, 10, 6)
    assert [m.pid for m in r.tree_of([10], 1.0, known=[11])] == [11]
    fs.procs[11] = (1, 99, 60)  # the pid reused by a process of another session
    assert r.tree_of([10], 2.0, known=[11]) == []
    assert [m.pid for m in r.tree_of([10], 3.0, known=[11], session=99)] == [11]
