"""Cgroup paths and systemd units as the sanitizer shows them: the layout kept, every id in it
replaced by the pseudonym it has everywhere else.

A cgroup path names who a process runs for (`owner/cgroup.py` reads it, and cites the
layouts): a pod by its uid (`kubepods-burstable-pod<uid, '-' as '_'>.slice`, `pod<uid>`), a
container by its id (`cri-containerd-<id>.scope`, `docker-<id>.scope`, `/docker/<id>`), a Slurm
job by its number (`job_<N>`, `uid_<U>`), a node (`<node>_slurmstepd.scope`), a user's session
by its uid (`user-<UID>.slice`, `user@<UID>.service`) and a service by its name. What systemd,
the kubelet and Slurm name the same on every machine (`kubepods.slice`, `system.slice`,
`step_0`, `task_3`, `session-4.scope`, `memory.max`) is kept, so the path still reads; from the
first component that is none of these the rest is replaced whole, as any path is
(`paths.py`). A uid under 1000 is a system account's (Debian Policy, "UID and GID classes":
https://www.debian.org/doc/debian-policy/ch-opersys.html#uid-and-gid-classes) and kept, as
`root` is; a person's becomes their user name's pseudonym where the uid's user is known (a GPU
process's `uid` and `user`), else a user pseudonym of its own.
"""

from __future__ import annotations

import re

from . import rules as R
from .table import PseudonymTable

_CGROUP_ROOTS = frozenset(
    "kubepods.slice kubepods kubelet.slice system.slice user.slice machine.slice init.scope "
    "slurm docker lxc".split()
)
_CGROUP_FS = "/sys/fs/cgroup/"
# cgroup v1's controller hierarchies under /sys/fs/cgroup (cgroups(7)).
_V1_HIERARCHIES = frozenset(
    "memory cpu cpuacct cpuset blkio devices freezer hugetlb net_cls net_prio perf_event pids "
    "rdma misc systemd unified".split()
)
_KEPT = re.compile(
    r"(?:kubelet-)?kubepods(?:-(?:burstable|besteffort))?\.slice|kubepods|burstable|besteffort|"
    r"kubelet\.slice|system\.slice|user\.slice|machine\.slice|init\.scope|slurm|"
    r"slurmstepd\.scope|docker|lxc|user|system|step_(?:\d+|batch|extern|interactive)|"
    r"task_(?:\d+|special)|session-c?\d+\.scope|run-(?:u\d+|r?[0-9a-f]{32})\.scope|"
    # a hierarchy's own files (cgroup v2's `memory.max`, v1's `tasks`)
    r"(?:cgroup|memory|cpu|cpuset|io|pids|hugetlb|rdma|misc|blkio|cpuacct|devices|freezer|"
    r"net_cls|net_prio|perf_event)\.[a-z_.]+|tasks|notify_on_release|release_agent"
)
_POD = re.compile(
    r"(?P<head>(?:kubelet-)?kubepods(?:-(?:burstable|besteffort))?-pod|pod)"
    r"(?P<id>[0-9a-fA-F]{8}(?P<sep>[-_])[0-9a-fA-F]{4}(?P=sep)[0-9a-fA-F]{4}(?P=sep)"
    r"[0-9a-fA-F]{4}(?P=sep)[0-9a-fA-F]{12})(?P<tail>\.slice)?"
)
_CONTAINER = re.compile(
    r"(?P<head>(?:docker|cri-containerd|crio-conmon|crio|libpod-conmon|libpod|nerdctl)-)?"
    r"(?P<id>[0-9a-f]{64})(?P<tail>\.scope)?"
)
_JOB = re.compile(r"(?P<head>job_)(?P<id>\d+)")
_STEPD = re.compile(r"(?P<id>[A-Za-z0-9][\w.-]*)(?P<tail>_slurmstepd\.scope)")
_UID = re.compile(
    r"(?P<head>uid_|user-|user@|user-runtime-dir@)(?P<id>\d{1,10})(?P<tail>\.slice|\.service)?"
)
_LXC = re.compile(r"(?P<head>lxc\.payload\.)(?P<id>[\w.-]+)")
_UNIT = re.compile(r"(?P<id>[^/\s]+?)(?P<tail>\.(?:service|scope|slice|socket|mount))")
# Services every Linux node may run: named the same everywhere (`safe_program` knows the
# programs of the trade, `slurmd`, `docker`, `nvidia-persistenced`).
_SYSTEM_UNITS = re.compile(
    r"dbus|dbus-broker|polkit|rsyslog|cron|crond|atd|snapd|containerd|dockerd|kubelet|cri-o|"
    r"crio|chronyd|chrony|ntp|ntpd|udisks2|irqbalance|munge|slurmctld|slurmdbd|sssd|nscd|"
    r"nslcd|autofs|rpcbind|nfs-server|nfs-client|lvm2-monitor|multipathd|accounts-daemon|"
    r"networkd-dispatcher|NetworkManager|ModemManager|unattended-upgrades|fwupd|"
    r"systemd(?:-[a-z]+)*|getty@tty\d+|serial-getty@\w+|dcgm|"
    r"nvidia-(?:persistenced|fabricmanager|dcgm|powerd|imex|suspend|resume|hibernate)"
)


def is_cgroup_path(path: str) -> bool:
    """`path` is a cgroup's: under /sys/fs/cgroup, or under a root only cgroups have."""
    if path.startswith(_CGROUP_FS):
        return True
    root = path.split("/", 2)[1] if path.startswith("/") else ""
    return root in _CGROUP_ROOTS or root.startswith("lxc.payload.")


def cgroup_path(s: PseudonymTable, path: str) -> str | None:
    """A cgroup path with every id replaced and its layout kept; None where nothing in it
    needs replacing (the system's own: kept as it is)."""
    head = ""
    rest = path
    if path.startswith(_CGROUP_FS):
        head, rest = _CGROUP_FS.rstrip("/"), path[len(_CGROUP_FS) - 1 :]
        first = rest.split("/", 2)[1] if rest.count("/") >= 1 else ""
        if all(h in _V1_HIERARCHIES for h in first.split(",")) and first:
            head, rest = f"{head}/{first}", rest[len(first) + 1 :]
    parts = rest.split("/")
    shown = []
    for i, part in enumerate(parts):
        if not part:
            shown.append(part)
            continue
        c = component(s, part)
        if c is None:  # someone's: the rest replaced whole, as in any path
            tail_path = "/".join(parts[i:]).rstrip("/")
            shown.append(s.pseudonym("path", f"{head}{'/'.join(parts[:i])}/{tail_path}"))
            break
        shown.append(c)
    out = head + "/".join(shown)
    return None if out == path else out


def component(s: PseudonymTable, part: str) -> str | None:
    """One component of a cgroup path as shown; None for one that is someone's own."""
    if _KEPT.fullmatch(part):
        return part
    m = _POD.fullmatch(part)
    if m:
        pod_uid = m.group("id").lower().replace("_", "-")
        s.seed_pod_uid(pod_uid)
        return _around(m, s.pseudonym("uuid", m.group("id"), pod_uid))
    m = _CONTAINER.fullmatch(part)
    if m:
        s.seed_container(m.group("id"))
        return _around(m, s.container(m.group("id")))
    m = _JOB.fullmatch(part)
    if m:
        s.seed_job(m.group("id"))
        return _around(m, s.pseudonym("job", m.group("id")))
    m = _UID.fullmatch(part)
    if m:
        return _around(m, uid(s, m.group("id"), part))
    m = _STEPD.fullmatch(part)
    if m:
        s.seed_hostname(m.group("id"))
        return _around(m, s.pseudonym("hostname", m.group("id"), m.group("id").lower()))
    m = _LXC.fullmatch(part)
    if m:
        return _around(m, container_name(s, m.group("id")))
    m = _UNIT.fullmatch(part)
    if m:
        return _around(m, unit_name(s, m.group("id")))
    return None


def _around(m: re.Match, shown: str) -> str:
    return (m.groupdict().get("head") or "") + shown + (m.groupdict().get("tail") or "")


def uid(s: PseudonymTable, number: str, original: str) -> str:
    """A uid written in a unit's or a cgroup's name (`original`): a system account's kept, a
    person's as their user name is."""
    n = int(number)
    if n < 1000 or n >= 65534:  # the system's accounts, nobody (65534)
        return number
    name = s.user_of_uid(n)
    if name is not None:
        return s.user(name) or name
    return s.pseudonym("user", original, f"uid {n}")


def unit(s: PseudonymTable, name: str) -> str:
    """A systemd unit (`Owner.unit`): its shape kept (`user-USER.slice`, `session-N.scope`,
    `NAME.service`), the uid or the name in it replaced."""
    return component(s, name) or s.pseudonym("arg", name)


def unit_name(s: PseudonymTable, name: str) -> str:
    """A unit's name: kept when every node may run it (a public program's, systemd's own), else
    replaced as a process's title is (a person named it: `train-llama`, `jupyter-alice`)."""
    if _SYSTEM_UNITS.fullmatch(name) or R.safe_program(name) and name.isalpha():
        return name
    return s.pseudonym("arg", name)


def container_name(s: PseudonymTable, name: str) -> str:
    """A container's name (Docker's `--name`, an LXC container's): its own pseudonym."""
    s.seed_word("container_name", name)
    return s.pseudonym("container_name", name, name.lower())
