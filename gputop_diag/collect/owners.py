"""Who each GPU process runs for (`model.Owner`), read once per process.

A process's pod, container or Slurm job cannot change while it runs, so its /proc/<pid>/cgroup
and the `NSpid:` of its /proc/<pid>/status are read when it is first seen (by pid and start
time: a pid used again is a new process) and never again; a tick reads nothing for a process
already known. What the cgroup names by id is named from what the node keeps:
- a pod's namespace and name from the kubelet's log directories (`/var/log/pods`), listed only
  once a pod was seen, and again at most every `POD_LIST_EVERY_S` while a pod is not in it;
- a Docker container's name from its `config.v2.json`, read once per container (root only on
  a default install: the directory is 0700; Docker's default data root, `/var/lib/docker`).

Whether this /proc is the host's, where NVML's pids are (`proc_is_the_hosts`), is read once by
each collector that needs it (`procs.py`, which then reads nothing for NVML's pids, and the NVML
collector, which then says so once a tick with `foreign_pids_notice`).

Nothing here raises for a process that ended, a file another user may not read or one of a
shape we do not know: the owner is then None or holds what could be read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from ..model import CollectorError, Owner
from ..owner import (
    docker_container_name,
    judge_host_pid_namespace,
    ns_pid,
    owner_from_cgroup,
    pod_names,
    with_ns_pid,
)
from ..owner.namespace import judge_host_proc

POD_LOG_DIR = "/var/log/pods"
POD_LIST_EVERY_S = 60.0  # the kubelet's log directories, listed at most this often
DOCKER_CONTAINERS = "/var/lib/docker/containers"
MAX_CONTAINER_NAMES = 4096  # containers whose names are kept (a node runs far fewer at once)


def _read(procfs: Any, path: str) -> str | None:
    try:
        return procfs.read_text(path)
    except (OSError, ValueError):  # ended, another user's, not there
        return None


class OwnerCollector:
    """The owners of the processes asked about, each read once (`owner`)."""

    def __init__(self, procfs: Any, clock: Any) -> None:
        self.procfs, self.clock = procfs, clock
        self._known: dict[int, tuple[float | None, Owner | None]] = {}  # pid -> (start, owner)
        self._pods: dict[str, tuple[str, str]] = {}  # pod uid -> (namespace, name)
        self._pods_listed_at: float | None = None
        self._containers: dict[str, str | None] = {}  # Docker container id -> its name

    def owner(self, pid: int, started: float | None) -> Owner | None:
        """The owner of `pid`, the process that started at `started` (epoch s)."""
        known = self._known.get(pid)
        if known is None or known[0] != started:
            known = (started, self._read_owner(pid))
        named = self._named(known[1])
        self._known[pid] = (started, named)
        return named

    def retain(self, pids: Collection[int]) -> None:
        """Forget the processes not in `pids` (they are no longer GPU processes)."""
        for pid in [p for p in self._known if p not in pids]:
            del self._known[pid]

    def _read_owner(self, pid: int) -> Owner | None:
        cgroup = _read(self.procfs, f"/proc/{pid}/cgroup")
        status = _read(self.procfs, f"/proc/{pid}/status")
        found = owner_from_cgroup(cgroup) if cgroup else None
        return with_ns_pid(found, ns_pid(status) if status else None)

    def _named(self, o: Owner | None) -> Owner | None:
        """`o` with the names the node keeps for its pod or container, where known."""
        if o is None:
            return None
        if o.pod_uid is not None and o.pod_name is None:
            names = self._pod_names(o.pod_uid)
            if names is not None:
                o = dataclasses.replace(o, pod_namespace=names[0], pod_name=names[1])
        if o.container_runtime == "docker" and o.container_id and o.container_name is None:
            name = self._container_name(o.container_id)
            if name is not None:
                o = dataclasses.replace(o, container_name=name)
        return o

    def _pod_names(self, uid: str) -> tuple[str, str] | None:
        names = self._pods.get(uid)
        if names is not None:
            return names
        now = self.clock.now()
        if self._pods_listed_at is not None and now - self._pods_listed_at < POD_LIST_EVERY_S:
            return None
        self._pods_listed_at = now
        try:
            self._pods = pod_names(self.procfs.listdir(POD_LOG_DIR))
        except (OSError, ValueError):  # not a Kubernetes node's view, or not readable
            self._pods = {}
        return self._pods.get(uid)

    def _container_name(self, cid: str) -> str | None:
        if cid not in self._containers:
            if len(self._containers) >= MAX_CONTAINER_NAMES:
                self._containers.clear()
            text = _read(self.procfs, f"{DOCKER_CONTAINERS}/{cid}/config.v2.json")
            self._containers[cid] = docker_container_name(text) if text else None
        return self._containers[cid]


def runs_in_host_pid_namespace(procfs: Any) -> bool | None:
    """Whether this program runs in the host's PID namespace; None when /proc does not say
    (`owner.judge_host_pid_namespace` gives the reasons). Whether NVML's pids name this
    /proc's processes is `proc_is_the_hosts`."""
    return judge_host_pid_namespace(
        _read(procfs, "/proc/self/status"),
        _read(procfs, "/proc/2/status"),
        _read(procfs, "/proc/1/stat") is not None,
    )


def proc_is_the_hosts(procfs: Any) -> bool | None:
    """Whether this /proc is the host's (the initial PID namespace's), where the pids NVML
    gives are; None when it does not say (mounted with `hidepid=`: `owner.judge_host_proc`).
    False matters: the driver knows no PID namespace, so NVML lists the host's pids, which a
    container's /proc does not show, or shows as other processes that have the same numbers
    (https://github.com/NVIDIA/nvidia-docker/issues/1483)."""
    pid2 = _read(procfs, "/proc/2/status")
    if judge_host_proc(pid2, pid1_readable=False):  # the host's: PID 1 need not be read
        return True
    return judge_host_proc(pid2, _read(procfs, "/proc/1/stat") is not None)


PID_NAMESPACE_SOURCE = "pid-namespace"


def foreign_pids_notice() -> CollectorError:
    """What a surface says, once, while NVML lists GPU processes this /proc cannot name."""
    return CollectorError(
        source=PID_NAMESPACE_SOURCE,
        message="gputop-diag runs in a container without the host's PID namespace: NVML "
        "gives the host's pids, which name no process here, so GPU processes show NVML's "
        "figures only (no name, user or owner)",
        next_step="run it in the host's PID namespace: `docker run --pid=host`, or "
        "`hostPID: true` in a Kubernetes pod's spec",
        code="ForeignPidNamespace",
    )
