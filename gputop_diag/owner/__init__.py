"""Who a GPU process runs for: its Kubernetes pod, container, Slurm job, systemd unit or user
session, and its pid inside its own PID namespace, read from what the node keeps (its cgroup,
its `NSpid:`, the kubelet's log directories, Docker's container configuration).

Pure parsing over text the collector read (`collect/owners.py` reads it once per process); the
result is `model.Owner`.
"""

from __future__ import annotations

from .cgroup import cgroup_paths, owner_from_cgroup, owner_from_path
from .names import docker_container_name, pod_names
from .namespace import judge_host_pid_namespace, ns_pid, ns_pids, with_ns_pid

__all__ = [
    "cgroup_paths",
    "docker_container_name",
    "judge_host_pid_namespace",
    "ns_pid",
    "ns_pids",
    "owner_from_cgroup",
    "owner_from_path",
    "pod_names",
    "with_ns_pid",
]
