"""gputop-diag in a container without the host's PID namespace: NVML gives the host's pids
(the driver knows no PID namespace), so the processes of the container's /proc that have those
numbers are other processes. Told apart once from /proc (is PID 2 the kernel's kthreadd?), said
once a tick as a notice with the fix, NVML's figures kept, and no local process ever taken for a
GPU process. On the simulator (`sim/container.py`) and on given /proc texts."""

from __future__ import annotations

import dataclasses
import errno
import json
import os

import pytest

from gputop_diag import sim
from gputop_diag.collect.owners import (
    PID_NAMESPACE_SOURCE,
    proc_is_the_hosts,
    runs_in_host_pid_namespace,
)
from gputop_diag.commands.common import render_snapshot
from gputop_diag.model.codec import snapshot_to_json
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.owner.namespace import judge_host_pid_namespace, judge_host_proc
from gputop_diag.sim.container import SELF_PID, in_container

KTHREADD = (
    "Name:\tkthreadd\nUmask:\t0000\nState:\tS (sleeping)\nTgid:\t2\nNgid:\t0\nPid:\t2\n"
    "PPid:\t0\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nNStgid:\t2\nNSpid:\t2\nKthread:\t1\n"
    "Threads:\t1\n"
)
OLD_KTHREADD = KTHREADD.replace("Kthread:\t1\n", "")  # kernels before the Kthread: line
# a process of a container named kthreadd, started by `docker exec` (its parent is outside)
IMPOSTOR = OLD_KTHREADD.replace("Threads:", "VmPeak:\t  2400 kB\nVmSize:\t  2400 kB\nThreads:")


class Counting:
    """Reads and psutil look-ups of a `Sources`' procfs and psutil, logged."""

    def __init__(self, inner, log, kind):
        self._inner, self._log, self._kind = inner, log, kind

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name in ("read_text", "listdir", "Process"):

            def counted(*args, **kw):
                self._log.append((self._kind, name, args[0] if args else None))
                return attr(*args, **kw)

            return counted
        return attr


def _counted(src):
    log: list = []
    return (
        dataclasses.replace(
            src,
            procfs=Counting(src.procfs, log, "procfs"),
            psutil=Counting(src.psutil, log, "psutil"),
        ),
        log,
    )


def _gpu_pids(src) -> list[int]:
    return sorted(p for p, q in src.sim.procs.items() if q.role in ("rank", "cotenant"))


def _notices(snap):
    return [e for e in snap.errors if e.source == PID_NAMESPACE_SOURCE]


# --- telling the host's /proc from a container's -----------------------------------------------


@pytest.mark.parametrize(
    ("pid2", "pid1_readable", "expected"),
    [
        (KTHREADD, True, True),
        (OLD_KTHREADD, True, True),
        (KTHREADD.replace("Kthread:\t1", "Kthread:\t0"), True, False),
        (IMPOSTOR, True, False),  # a name is not a kernel thread
        (KTHREADD.replace("PPid:\t0", "PPid:\t1"), True, False),
        ("Name:\tpython\nPPid:\t1\nVmSize:\t1 kB\n", True, False),  # a container's PID 2
        (None, True, False),  # a container with one process
        (None, False, None),  # hidepid=: root's kthreadd and init hidden
        (KTHREADD, False, True),
    ],
)
def test_the_hosts_proc_is_the_one_that_shows_kthreadd(pid2, pid1_readable, expected):
    assert judge_host_proc(pid2, pid1_readable) is expected


def test_a_namespace_of_its_own_over_the_hosts_proc_still_reads_the_hosts_pids():
    """`unshare --pid --fork` without `--mount-proc`: the program is in a namespace of its own
    (two pids in its NSpid), but its /proc is the host's, where NVML's pids are."""
    own = "Name:\tpython\nNSpid:\t48213\t1\n"
    assert judge_host_pid_namespace(own, KTHREADD, True) is False
    assert judge_host_proc(KTHREADD, True) is True
    assert judge_host_pid_namespace("NSpid:\t48213\n", KTHREADD, True) is True
    assert judge_host_pid_namespace("NSpid:\t7\n", None, True) is False
    assert judge_host_pid_namespace("NSpid:\t7\n", IMPOSTOR, True) is False
    assert judge_host_pid_namespace("NSpid:\t7\n", None, False) is None


def test_the_simulated_container_is_told_apart_and_the_host_is_not():
    host = sim.build("compute-bound", noise=0)
    assert proc_is_the_hosts(host.procfs) is True
    assert runs_in_host_pid_namespace(host.procfs) is True
    inside = in_container(host)
    assert proc_is_the_hosts(inside.procfs) is False
    assert runs_in_host_pid_namespace(inside.procfs) is False
    status = inside.procfs.read_text("/proc/self/status")
    assert f"NSpid:\t{SELF_PID}\n" in status
    with pytest.raises(FileNotFoundError):
        inside.procfs.read_text("/proc/2/status")
    assert inside.psutil.pids() == [1, SELF_PID]
    assert host.psutil.virtual_memory() == inside.psutil.virtual_memory()  # the host's counters


# --- what the collectors make of it -------------------------------------------------------------


def test_in_a_container_gpu_processes_keep_nvmls_figures_and_nothing_local():
    host = sim.build("compute-bound", noise=0)
    pids = _gpu_pids(host)
    same = pids[:3]  # local shells that merely have the numbers of three GPU processes
    inside, log = _counted(in_container(sim.build("compute-bound", noise=0), same_numbers=same))
    assert all(inside.psutil.pid_exists(p) for p in same)

    seen, snap = Sampler(host).sample(), Sampler(inside).sample()

    assert snap.gpu_processes == seen.gpu_processes  # memory, utilization: NVML's, whole
    assert {p.pid for p in snap.gpu_processes} == set(pids)
    assert all(p.used_memory_bytes for p in snap.gpu_processes)
    assert snap.processes == ()  # no name, user, command line or owner from this /proc
    assert all(snap.process(p) is None for p in same)
    gpu_reads = [
        r
        for r in log
        if r[1] == "Process"
        and r[2] in pids
        or r[1] == "read_text"
        and any(r[2].startswith(f"/proc/{p}/") for p in pids)
    ]
    assert gpu_reads == []
    assert seen.processes and all(p.name and p.owner for p in seen.processes)


def test_the_notice_is_said_once_with_the_fix_on_every_surface():
    inside = in_container(sim.build("comm-bound", noise=0))
    sampler = Sampler(inside)
    for _ in range(3):
        snap = sampler.sample()
        (notice,) = _notices(snap)
        inside.clock.sleep(1.0)
    assert "host's PID namespace" in notice.message
    assert "`docker run --pid=host`" in notice.next_step
    assert "`hostPID: true`" in notice.next_step
    assert notice.gpu_index is None and "\n" not in notice.message + notice.next_step
    text = render_snapshot(snap)
    assert text.count("--pid=host") == 1
    assert f"! {PID_NAMESPACE_SOURCE}: " in text
    doc = json.loads(json.dumps(snapshot_to_json(snap)))
    assert [e["source"] for e in doc["errors"]].count(PID_NAMESPACE_SOURCE) == 1


def test_the_namespace_is_read_once_and_only_once_nvml_lists_a_process():
    inside, log = _counted(in_container(sim.build("tour", noise=0)))  # its job starts 20 s in
    sampler = Sampler(inside)
    snap = sampler.sample()
    assert snap.gpu_processes == () and _notices(snap) == []
    assert not [r for r in log if r[2] in ("/proc/2/status", "/proc/1/stat")]
    inside.clock.sleep(25.0)
    for _ in range(5):
        snap = sampler.sample()
        assert snap.gpu_processes and len(_notices(snap)) == 1
        inside.clock.sleep(1.0)
    kthreadd_reads = [r for r in log if r[2] == "/proc/2/status"]
    assert len(kthreadd_reads) == 2  # once by the process collector, once by the NVML collector


def test_on_the_hosts_proc_nothing_is_said_and_processes_are_named():
    snap = Sampler(sim.build("compute-bound", noise=0)).sample()
    assert _notices(snap) == []
    assert snap.processes and all(p.name is not None for p in snap.processes)


def test_a_proc_that_cannot_say_keeps_the_processes_and_says_nothing():
    """/proc mounted with hidepid=: kthreadd and init are hidden; most likely the host's, so
    the processes this user may see are still read, as before."""
    src = sim.build("compute-bound", noise=0)

    class Hidden(Counting):
        def __getattr__(self, name):
            attr = getattr(self._inner, name)
            if name == "read_text":

                def read(path):
                    if path.startswith(("/proc/1/", "/proc/2/")):
                        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
                    return attr(path)

                return read
            return attr

    src = dataclasses.replace(src, procfs=Hidden(src.procfs, [], "procfs"))
    assert proc_is_the_hosts(src.procfs) is None
    snap = Sampler(src).sample()
    assert _notices(snap) == []
    assert len(snap.processes) == len(snap.gpu_processes) == 9


def test_the_container_view_needs_a_simulated_machine():
    host = sim.build("idle", noise=0)
    with pytest.raises(ValueError, match="simulated machine"):
        in_container(dataclasses.replace(host, sim=None))
