"""Each GPU process's owner, read once (`collect/owners.py` through `collect/procs.py`): the
simulator's Slurm job, Kubernetes pod and Docker container as the collectors see them; what a
tick reads for a process already known (nothing); the kubelet's log directories listed at most
once a minute and only for a pod; a process that ended, a file we may not read or a node without
those files giving None or part of an owner, never an exception; and whether this program runs
in the host's PID namespace."""

from __future__ import annotations

import dataclasses
import errno
import json
import os

from gputop_diag import sim
from gputop_diag.collect.jobtree import TreeReader
from gputop_diag.collect.owners import (
    POD_LIST_EVERY_S,
    OwnerCollector,
    runs_in_host_pid_namespace,
)
from gputop_diag.model import Owner, ProcessInfo, Snapshot
from gputop_diag.model.codec import from_jsonable, jsonable, snapshot_to_json
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.sim.owners import container_id, pod_uid
from gputop_diag.sim.population import SimProc, SimThread


class Counting:
    """The simulator's /proc with every read and listing logged."""

    def __init__(self, inner, log):
        self._inner, self._log = inner, log

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name in ("read_text", "listdir"):

            def counted(*args, **kw):
                self._log.append((name, args[0]))
                return attr(*args, **kw)

            return counted
        return attr


def _counted(scenario: str):
    src = sim.build(scenario, noise=0)
    log: list = []
    return dataclasses.replace(src, procfs=Counting(src.procfs, log)), log


def _owners(snap) -> dict[int, Owner | None]:
    return {p.pid: p.owner for p in snap.processes}


def _owner_reads(log) -> list:
    return [
        r
        for r in log
        if r[1].endswith(("/cgroup", "/status", "config.v2.json")) or r[1].startswith("/var/")
    ]


# --- the simulator's owners, as collected -------------------------------------------------------


def test_a_slurm_jobs_ranks_and_a_docker_containers_notebook():
    src = sim.build("compute-bound", noise=0)
    snap = Sampler(src).sample()
    m = src.sim
    ranks = [p for p in snap.processes if m.procs[p.pid].role == "rank"]
    assert len(ranks) == 8
    for p in ranks:
        assert p.owner == Owner(kind="slurm", slurm_job="424242", slurm_step="0")
        assert p.owner.label == "job 424242"
    (notebook,) = [p for p in snap.processes if m.procs[p.pid].role == "cotenant"]
    assert notebook.access_denied  # another user's: its cgroup and status are still readable
    assert notebook.owner == Owner(
        kind="container",
        container_id=container_id("bob-notebook"),
        container_runtime="docker",
        ns_pid=7,  # in the container's own PID namespace
    )
    assert notebook.owner.label == f"ctr {container_id('bob-notebook')[:8]}"


def test_a_docker_containers_name_is_read_where_its_config_is_readable():
    src = sim.build("compute-bound", noise=0)
    src.sim.user = "root"  # /var/lib/docker is root's
    snap = Sampler(src).sample()
    (owner,) = {p.owner for p in snap.processes if p.owner.kind == "container"}
    assert owner.container_name == "bob-notebook"


def test_a_pods_ranks_named_from_the_kubelets_log_directories():
    src = sim.build("comm-bound", noise=0)
    snap = Sampler(src).sample()
    uid = pod_uid("ml-research", "llama-ddp-0")
    assert len(snap.processes) == 8
    for k, p in enumerate(sorted(snap.processes, key=lambda p: p.pid)):
        assert p.owner == Owner(
            kind="pod",
            pod_uid=uid,
            pod_namespace="ml-research",
            pod_name="llama-ddp-0",
            qos="burstable",
            container_id=container_id("ml-research/llama-ddp-0"),
            container_runtime="containerd",
            ns_pid=k + 2,  # torchrun is the container's first process
        )
        assert p.owner.label == "pod ml-research/llama-ddp-0"


def test_processes_without_a_job_owner_are_in_their_users_session():
    src = sim.build("capacity", noise=0)
    snap = Sampler(src).sample()
    kinds = {p.owner.kind for p in snap.processes}
    assert kinds == {"user", "container"}
    alice = [p.owner for p in snap.processes if p.user == "alice"]
    assert alice and all(o == Owner(kind="user", unit="user-1001.slice") for o in alice)
    assert all(o.label is None for o in alice)


def test_the_simulated_slurm_cgroups_are_those_slurms_tools_read():
    """The watched-job reader finds the job's processes by the same cgroup files."""
    src = sim.build("compute-bound", noise=0)
    pids = TreeReader(src.psutil, src.procfs).pids_in_cgroup_of_job("424242")
    roles = {src.sim.procs[p].role for p in pids}
    assert roles == {"rank", "worker"} and len(pids) > 8


def test_owners_travel_in_the_snapshot_and_its_json():
    src = sim.build("comm-bound", noise=0)
    snap = Sampler(src).sample()
    doc = snapshot_to_json(snap)
    assert doc["processes"][0]["owner"]["pod_name"] == "llama-ddp-0"
    back = from_jsonable(Snapshot, json.loads(json.dumps(jsonable(snap))))
    assert back.processes == snap.processes


# --- what a tick reads --------------------------------------------------------------------------


def test_an_owner_is_read_once_per_process_never_per_tick():
    for scenario in ("compute-bound", "comm-bound"):
        src, log = _counted(scenario)
        sampler = Sampler(src)
        gpu_pids = {p.pid for p in sampler.sample().processes}
        first = _owner_reads(log)
        cgroups = [r for r in first if r[1].endswith("/cgroup")]
        assert len(cgroups) == len(gpu_pids) > 0, scenario  # one read each
        assert {int(r[1].split("/")[2]) for r in cgroups} == gpu_pids
        for _ in range(5):
            src.clock.sleep(1.0)
            del log[:]
            sampler.sample()
            assert _owner_reads(log) == [], scenario
        listings = [r for r in first if r == ("listdir", "/var/log/pods")]
        assert len(listings) == (1 if scenario == "comm-bound" else 0)


def test_a_new_process_is_read_when_it_appears_and_an_ended_one_forgotten():
    src, log = _counted("tour")  # its job starts 20 s in
    sampler = Sampler(src)
    assert sampler.sample().processes == ()
    assert _owner_reads(log) == []
    src.clock.sleep(25.0)
    del log[:]
    snap = sampler.sample()
    assert len(snap.processes) == 8
    assert all(p.owner == Owner(kind="user", unit="user-1001.slice") for p in snap.processes)
    assert len([r for r in _owner_reads(log) if r[1].endswith("/cgroup")]) == 8
    m = src.sim
    gone = min(p for p, q in m.procs.items() if q.role == "rank")
    m.vanish_process(gone)
    src.clock.sleep(1.0)
    del log[:]
    snap = sampler.sample()
    assert gone not in _owners(snap)
    assert _owner_reads(log) == []
    assert gone not in sampler.procs.owners._known


class Files:
    """A /proc stand-in of given files; a value that is an OSError is raised."""

    def __init__(self, files: dict, dirs: dict | None = None):
        self.files, self.dirs, self.reads = files, dirs or {}, []

    def read_text(self, path):
        self.reads.append(path)
        v = self.files.get(path)
        if v is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        if isinstance(v, OSError):
            raise v
        return v

    def listdir(self, path):
        self.reads.append(("listdir", path))
        v = self.dirs.get(path)
        if v is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        if isinstance(v, OSError):
            raise v
        return list(v)

    def exists(self, path):
        return path in self.files or path in self.dirs


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def now(self):
        return self.t


UID = "0f9e8d7c-6b5a-4938-a716-152433425160"
CID = "ab" * 32


def _pod_cgroup(uid: str = UID) -> str:
    return (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{uid.replace('-', '_')}.slice/crio-{CID}.scope\n"
    )


def test_a_pid_used_again_is_a_new_process():
    fs = Files({"/proc/10/cgroup": "0::/docker/" + CID + "\n"})
    owners = OwnerCollector(fs, Clock())
    assert owners.owner(10, 100.0).container_id == CID
    assert owners.owner(10, 100.0).container_id == CID
    assert fs.reads.count("/proc/10/cgroup") == 1
    fs.files["/proc/10/cgroup"] = "0::/system.slice/slurmstepd.scope/job_5/step_batch/slurm\n"
    assert owners.owner(10, 250.0) == Owner(kind="slurm", slurm_job="5", slurm_step="batch")
    assert fs.reads.count("/proc/10/cgroup") == 2


def test_an_unnamed_pods_directories_are_listed_at_most_once_a_minute():
    clock = Clock()
    fs = Files({"/proc/10/cgroup": _pod_cgroup()}, {"/var/log/pods": ["kube-system_x_" + "1" * 32]})
    owners = OwnerCollector(fs, clock)
    for _ in range(30):  # a tick a second: the pod is not (yet) in the listing
        o = owners.owner(10, 1.0)
        assert (o.pod_uid, o.pod_name, o.label) == (UID, None, f"pod {UID[:8]}")
        clock.t += 1.0
    assert fs.reads.count(("listdir", "/var/log/pods")) == 1
    fs.dirs["/var/log/pods"].append(f"team-a_trainer-0_{UID}")
    clock.t += POD_LIST_EVERY_S
    o = owners.owner(10, 1.0)
    assert (o.pod_namespace, o.pod_name, o.qos) == ("team-a", "trainer-0", "besteffort")
    assert o.container_runtime == "cri-o"
    clock.t += 10 * POD_LIST_EVERY_S
    owners.owner(10, 1.0)
    assert fs.reads.count(("listdir", "/var/log/pods")) == 2  # named: never listed again


def test_a_second_pod_is_named_from_the_listing_already_read():
    other = "11111111-2222-4333-8444-555555555555"
    fs = Files(
        {"/proc/10/cgroup": _pod_cgroup(), "/proc/11/cgroup": _pod_cgroup(other)},
        {"/var/log/pods": [f"a_p0_{UID}", f"b_p1_{other}"]},
    )
    owners = OwnerCollector(fs, Clock())
    assert owners.owner(10, 1.0).pod_name == "p0"
    assert owners.owner(11, 1.0).pod_name == "p1"
    assert fs.reads.count(("listdir", "/var/log/pods")) == 1


def test_unreadable_vanished_and_unknown_give_none_or_part_never_an_exception():
    denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    fs = Files(
        {
            "/proc/10/cgroup": denied,
            "/proc/10/status": "Name:\tpython\nNSpid:\t10\t3\n",
            "/proc/11/cgroup": "\0\xff garbage",
            "/proc/12/cgroup": f"0::/docker/{CID}\n",
            "/proc/12/status": denied,
            "/proc/13/cgroup": _pod_cgroup(),
            f"/var/lib/docker/containers/{CID}/config.v2.json": denied,
        },
        {"/var/log/pods": denied},
    )
    owners = OwnerCollector(fs, Clock())
    assert owners.owner(10, 1.0) == Owner(kind="container", ns_pid=3)  # namespace only
    assert owners.owner(11, 1.0) is None  # nothing readable names an owner
    assert owners.owner(12, 1.0) == Owner(
        kind="container", container_id=CID, container_runtime="docker"
    )
    assert owners.owner(99, 1.0) is None  # ended before it was read
    assert owners.owner(13, 1.0).pod_name is None  # /var/log/pods unreadable
    owners.owner(12, 1.0)
    owners.owner(12, 2.0)  # a new process in the same container: its config is not read again
    assert fs.reads.count(f"/var/lib/docker/containers/{CID}/config.v2.json") == 1


def test_a_collector_that_fails_on_a_process_keeps_the_others():
    """A process whose /proc vanishes between psutil and the owner's read still shows."""
    src = sim.build("compute-bound", noise=0)

    class Vanishing(Counting):
        def __getattr__(self, name):
            attr = getattr(self._inner, name)
            if name == "read_text":

                def read(path):
                    if path.endswith(("/cgroup", "/status")):
                        raise ProcessLookupError(errno.ESRCH, "No such process")
                    return attr(path)

                return read
            return attr

    src = dataclasses.replace(src, procfs=Vanishing(src.procfs, []))
    snap = Sampler(src).sample()
    assert snap.errors == () or all(e.source != "process" for e in snap.errors)
    assert len(snap.processes) == 9 and all(p.owner is None for p in snap.processes)


# --- this program's own PID namespace -----------------------------------------------------------


def test_the_simulated_program_runs_in_the_hosts_pid_namespace():
    assert runs_in_host_pid_namespace(sim.build("idle").procfs) is True


def test_a_container_or_a_hidden_proc_is_told_apart():
    kthreadd = "Name:\tkthreadd\nPid:\t2\nPPid:\t0\n"
    host = Files({"/proc/self/status": "NSpid:\t500\n", "/proc/2/status": kthreadd})
    assert runs_in_host_pid_namespace(host) is True
    nested = Files({"/proc/self/status": "NSpid:\t500\t12\n", "/proc/2/status": kthreadd})
    assert runs_in_host_pid_namespace(nested) is False
    container = Files({"/proc/self/status": "NSpid:\t12\n", "/proc/1/stat": "1 (sh) S 0"})
    assert runs_in_host_pid_namespace(container) is False
    denied = PermissionError(errno.EACCES, os.strerror(errno.EACCES))
    hidden = Files({"/proc/self/status": "NSpid:\t500\n", "/proc/1/stat": denied})
    assert runs_in_host_pid_namespace(hidden) is None


def test_an_owner_is_the_last_field_of_a_process_and_none_by_default():
    fields = [f.name for f in dataclasses.fields(ProcessInfo)]
    assert fields[-1] == "owner"
    assert ProcessInfo(pid=1).owner is None


def test_a_process_added_to_a_running_machine_gets_its_users_session():
    src = sim.build("idle", noise=0)
    m = src.sim
    m.procs[90001] = SimProc(
        90001, 1, "carol", "sleep", ("sleep", "1"), "host",
        create_time=m.boot_time + 5, threads=[SimThread(90001, "sleep", "other")],
    )  # fmt: skip
    owners = OwnerCollector(src.procfs, src.clock)
    assert owners.owner(90001, m.boot_time + 5) == Owner(kind="user", unit="user-1002.slice")
