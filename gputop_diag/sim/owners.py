"""Who the simulated processes run for: their /proc/<pid>/cgroup, the `NSpid:` of their status,
and what the node keeps of their pods and containers (the kubelet's /var/log/pods, Docker's
config.v2.json), in the layouts the real tools write (`owner/cgroup.py` cites them).

A scenario's job says whose it is with `owner` (`scenarios._job`):
- `dict(slurm="424242")`: a Slurm job's step 0, each rank a task of it (cgroup v2, the layout of
  Slurm's cgroup/v2 plugin);
- `dict(pod=("namespace", "name"), qos="burstable")`: a Kubernetes pod of one container
  (containerd, the kubelet's systemd cgroup driver), in a PID namespace of its own;
- `dict(docker="name")`: a Docker container (systemd cgroup driver), in a PID namespace of
  its own.
Every other process is in its user's login session. This program itself runs in the host's
PID namespace: /proc/self/status has one pid and /proc/2 is kthreadd.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os

from .population import SimProc

POD_LOG_DIR = "/var/log/pods"
DOCKER_CONTAINERS = "/var/lib/docker/containers"
SELF_PID = 61807  # this program's pid on the simulated machine
# The node's own pods, beside the scenario's (a GPU node runs NVIDIA's device plugin).
_NODE_PODS = (
    ("kube-system", "kube-proxy-x7k2q"),
    ("gpu-operator", "nvidia-device-plugin-daemonset-9fz4m"),
)


def pod_uid(namespace: str, name: str) -> str:
    """A random (version 4) UUID, as the API server gives a pod, fixed by its names."""
    h = hashlib.md5(f"pod/{namespace}/{name}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def container_id(seed: str) -> str:
    return hashlib.sha256(f"container/{seed}".encode()).hexdigest()


def _key(owner: dict) -> str:
    return json.dumps(owner, sort_keys=True)


class SimOwners:
    """The owner files of one simulated machine (`FakeProcFS` serves them)."""

    def __init__(self, machine) -> None:
        self._m = machine
        self._groups: dict[str, list[int]] | None = None  # owner -> its processes' pids

    def _group(self, p: SimProc) -> list[int]:
        if self._groups is None:
            groups: dict[str, list[int]] = {}
            for q in sorted(self._m.procs.values(), key=lambda q: q.pid):
                if q.owner:
                    groups.setdefault(_key(q.owner), []).append(q.pid)
            self._groups = groups
        return self._groups.get(_key(p.owner), [p.pid]) if p.owner else [p.pid]

    def _rank_of(self, p: SimProc) -> int:
        """The task a process of a Slurm job is: its rank's, for a dataloader worker."""
        ranks = [q for q in self._group(p) if self._m.procs[q].role == "rank"]
        pid = p.ppid if p.role == "worker" else p.pid
        return ranks.index(pid) if pid in ranks else 0

    def cgroup(self, p: SimProc) -> str:
        """/proc/<pid>/cgroup: one cgroup v2 line."""
        o = p.owner or {}
        if "slurm" in o:
            step = f"job_{o['slurm']}/step_0/user/task_{self._rank_of(p)}"
            return f"0::/system.slice/slurmstepd.scope/{step}\n"
        if "pod" in o:
            ns, name = o["pod"]
            qos = o.get("qos", "burstable")
            uid = pod_uid(ns, name).replace("-", "_")
            cid = container_id(f"{ns}/{name}")
            if qos == "guaranteed":
                return f"0::/kubepods.slice/kubepods-pod{uid}.slice/cri-containerd-{cid}.scope\n"
            return (
                f"0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice/"
                f"cri-containerd-{cid}.scope\n"
            )
        if "docker" in o:
            return f"0::/system.slice/docker-{container_id(o['docker'])}.scope\n"
        uid = self._m.uid_of(p.user)
        return f"0::/user.slice/user-{uid}.slice/session-{max(1, uid - 998)}.scope\n"

    def ns_pids(self, p: SimProc) -> tuple[int, ...]:
        """The pids of `NSpid:`: the host's, then the container's for a pod or a container."""
        o = p.owner or {}
        if "pod" not in o and "docker" not in o:
            return (p.pid,)
        group = self._group(p)
        first = int(o.get("ns_first", 1))
        return (p.pid, first + group.index(p.pid))

    # -- the node's files --------------------------------------------------------------------
    def _pods(self) -> list[tuple[str, str]]:
        own = {tuple(q.owner["pod"]) for q in self._m.procs.values() if "pod" in (q.owner or {})}
        return sorted(own) + list(_NODE_PODS) if own else []

    def _containers(self) -> dict[str, str]:
        return {
            container_id(q.owner["docker"]): q.owner["docker"]
            for q in self._m.procs.values()
            if q.owner and "docker" in q.owner
        }

    def listdir(self, path: str) -> list[str] | None:
        """The names in one of the node's directories; None for a path not ours."""
        if path.rstrip("/") == POD_LOG_DIR:
            pods = self._pods()
            if not pods:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
            return [f"{ns}_{name}_{pod_uid(ns, name)}" for ns, name in pods]
        return None

    def read(self, path: str) -> str | None:
        """One of the node's files, or this program's and the kernel's /proc entries; None for
        a path not ours. Docker's files are root's (its data root is 0700)."""
        if path == "/proc/self/status":
            uid = self._m.uid_of(self._m.user)
            return (
                f"Name:\tgputop-diag\nState:\tR (running)\nTgid:\t{SELF_PID}\nPid:\t{SELF_PID}\n"
                f"PPid:\t{SELF_PID - 40}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                f"NStgid:\t{SELF_PID}\nNSpid:\t{SELF_PID}\nThreads:\t3\n"
            )
        if path == "/proc/2/status":
            return (
                "Name:\tkthreadd\nState:\tS (sleeping)\nTgid:\t2\nPid:\t2\nPPid:\t0\n"
                "Uid:\t0\t0\t0\t0\nNStgid:\t2\nNSpid:\t2\nThreads:\t1\n"
            )
        prefix = DOCKER_CONTAINERS + "/"
        if path.startswith(prefix) and path.endswith("/config.v2.json"):
            cid = path[len(prefix) : -len("/config.v2.json")]
            name = self._containers().get(cid)
            if name is None:
                return None
            if self._m.user != "root":
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            return json.dumps(
                {"ID": cid, "Name": f"/{name}", "Driver": "overlay2", "State": {"Running": True}}
            )
        return None
