"""Who a process runs for, from the text of /proc/<pid>/cgroup.

The file has one line per hierarchy, `ID:CONTROLLERS:PATH` (cgroups(7)): on cgroup v2 a single
`0::/path`, on v1 one line per controller (`4:memory:/path`, `1:name=systemd:/path`), on a
hybrid machine both. Each path is read on its own and the most telling owner wins: a pod, then a
Slurm job, then a container, then a user's session, then a systemd unit (on v1 the
`name=systemd` line names slurmd's or dockerd's unit while the controllers name the job or the
container). The layouts read, from the tools' own documentation:

- Kubernetes, kubelet's systemd cgroup driver (https://kubernetes.io/docs/setup/production-
  environment/container-runtimes/#systemd-cgroup-driver): `kubepods.slice/kubepods-burstable.
  slice/kubepods-burstable-pod<uid, '-' as '_'>.slice/cri-containerd-<id>.scope` (`crio-<id>.
  scope` under CRI-O, `docker-<id>.scope` under cri-dockerd); the cgroupfs driver:
  `/kubepods/burstable/pod<uid>/<id>`. A Guaranteed pod sits directly under kubepods, with no
  QoS level in its path (https://kubernetes.io/docs/concepts/workloads/pods/pod-qos/ and the
  kubelet's "Node Allocatable" design: kubepods, kubepods/burstable, kubepods/besteffort).
  Nodes that run the kubelet under a cgroup root of their own (kind: `kubelet.slice/kubelet-
  kubepods…`) have a prefix before `kubepods`.
- Containers outside Kubernetes: systemd names a container's scope `<runtime>-<id>.scope`
  (`docker-`, `libpod-` for Podman, `cri-containerd-`, `crio-`, `nerdctl-`); with the cgroupfs
  driver Docker uses `/docker/<id>` (https://docs.docker.com/engine/containers/runmetrics/
  #find-the-cgroup-for-a-given-container). LXC 4 and later put a container in
  `lxc.payload.<name>` (older releases `/lxc/<name>`).
- Slurm (https://slurm.schedmd.com/cgroup_v2.html): `/system.slice/slurmstepd.scope/job_<N>/
  step_<M>/user/task_<T>` on v2 (`<nodename>_slurmstepd.scope` with multiple slurmd), and
  (https://slurm.schedmd.com/cgroups.html) `/slurm/uid_<U>/job_<N>/step_<M>/task_<T>` on v1; a
  step is a number, `batch`, `extern` or `interactive`.
- systemd (systemd.resource-control(5), systemd.special(7)): a service in
  `/system.slice/<name>.service`, a user's login session in `/user.slice/user-<UID>.slice/
  session-<N>.scope` and their own units under `user@<UID>.service`.

A user's own subtree is theirs to shape: systemd delegates `user@<UID>.service` to its user
(`Delegate=`, systemd.resource-control(5); the kernel's cgroup v2 delegation model,
Documentation/admin-guide/cgroup-v2.rst), who may make any directory in it, `kubepods-…-pod<uid>.
slice` or `slurm/job_<N>` included. So below the first `user.slice` (or `user@<UID>.service`)
component only what a user may really run there counts: a rootless container's scope (Docker's
`docker-<id>.scope`, Podman's `libpod-<id>.scope`, rootless containerd's `nerdctl-<id>.scope`;
Podman's `libpod-conmon-<id>.scope` is its monitor, not the container). Never a pod or a Slurm
job: such a process is the user's (`user-<UID>.slice`). A kubelet's `--cgroup-root` or Slurm's
layouts are read as before wherever they sit outside a user's subtree.

Pure: text in, an `Owner` (or None: a path that names no owner, such as `/` seen from inside a
cgroup namespace) out. Lines are read up to `MAX_LINES`, text up to `MAX_TEXT` characters.
"""

from __future__ import annotations

import dataclasses
import re

from ..model import Owner

MAX_TEXT = 64 * 1024  # a real file is a few hundred bytes (one line per v1 hierarchy)
MAX_LINES = 64
MAX_COMPONENTS = 64  # of one path
MAX_NAME = 255  # a cgroup directory's name is a file name (NAME_MAX)

# The order in which owners found on different lines win.
_RANK = {"pod": 5, "slurm": 4, "container": 3, "user": 2, "unit": 1}

# `<prefix>-<64 hex>[.scope]`: the scope (systemd) or directory (cgroupfs) of one container.
_SCOPE = re.compile(r"(docker|cri-containerd|crio|libpod|nerdctl)-([0-9a-f]{64})(?:\.scope)?")
_RUNTIME = {
    "docker": "docker",
    "cri-containerd": "containerd",
    "crio": "cri-o",
    "libpod": "podman",
    "nerdctl": "containerd",
}
_BARE_ID = re.compile(r"[0-9a-f]{64}")
# kubepods-burstable-pod<uid>.slice, kubepods-pod<uid>.slice, kubelet-kubepods-…-pod<uid>.slice
_POD_SLICE = re.compile(
    r"(?:[\w.-]+-)?kubepods(?:-(burstable|besteffort))?-pod([0-9a-fA-F_]{8,64})\.slice"
)
_POD_DIR = re.compile(r"pod([0-9a-fA-F-]{8,64})")
_QOS_DIR = ("burstable", "besteffort")
_SLURM_ROOT = re.compile(r"(?:[\w.-]+_)?slurmstepd\.scope|slurm(?:_[\w.-]+)?")
_SLURM_JOB = re.compile(r"job_([0-9]{1,12})")
_SLURM_STEP = re.compile(r"step_([A-Za-z0-9+]{1,24})")
_LXC_PAYLOAD = re.compile(r"lxc\.payload\.([A-Za-z0-9][\w.+-]{0,127})")
_LXC_NAME = re.compile(r"[A-Za-z0-9][\w.+-]{0,127}")
_USER_SLICE = re.compile(r"user-([0-9]{1,10})\.slice")
_USER_MANAGER = re.compile(r"user@([0-9]{1,10})\.service")
# The scopes a user's own (rootless) container runtime makes in the user's subtree.
_ROOTLESS = ("docker", "libpod", "nerdctl")
_ASCII_NUMBER = re.compile(r"[0-9]{1,10}")  # a hierarchy id (`str.isdigit` also takes `²`)
_UNIT = re.compile(r"[^/\s]{1,250}\.(?:service|scope)")


def cgroup_paths(text: str) -> list[str]:
    """The paths of the file's well-formed lines, in order (`0::/a` -> `/a`)."""
    out = []
    for line in text[:MAX_TEXT].split("\n")[:MAX_LINES]:
        ident, sep, rest = line.partition(":")
        if not sep or not _ASCII_NUMBER.fullmatch(ident):
            continue
        _controllers, sep, path = rest.partition(":")
        path = path.rstrip("\r")
        if sep and path.startswith("/"):
            out.append(path)
    return out


def owner_from_cgroup(text: str) -> Owner | None:
    """The owner /proc/<pid>/cgroup's text names, the most telling of its lines; None when no
    line names one."""
    best: Owner | None = None
    for path in cgroup_paths(text):
        found = owner_from_path(path)
        if found is not None and (best is None or _weight(found) > _weight(best)):
            best = found
    return best


def _weight(o: Owner) -> tuple[int, int]:
    known = sum(getattr(o, f.name) is not None for f in dataclasses.fields(o))
    return _RANK.get(o.kind, 0), known


def owner_from_path(path: str) -> Owner | None:
    """The owner one cgroup path names, or None."""
    parts = [c for c in path.split("/") if c and c not in (".", "..")][:MAX_COMPONENTS]
    if any(len(c) > MAX_NAME for c in parts):
        return None
    end = _delegated_from(parts)
    trusted = parts[:end]
    found = _pod(parts, end) or _slurm(trusted) or _container(trusted)
    if found is not None or end == len(parts):
        return found or _systemd(parts)
    return _rootless_container(parts[end:]) or _user(parts)


def _delegated_from(parts: list[str]) -> int:
    """The index of the first component of a user's own subtree (`user.slice`, or
    `user@<UID>.service` wherever it sits); len(parts) when the path never enters one."""
    for k, c in enumerate(parts):
        if c == "user.slice" or _USER_MANAGER.fullmatch(c):
            return k
    return len(parts)


def _rootless_container(parts: list[str]) -> Owner | None:
    """A container a user's own runtime runs: the first container scope among `parts`, of a
    runtime a user may run."""
    for c in parts:
        m = _SCOPE.fullmatch(c)
        if m and m.group(1) in _ROOTLESS:
            return Owner(
                kind="container", container_id=m.group(2), container_runtime=_RUNTIME[m.group(1)]
            )
    return None


def _user(parts: list[str]) -> Owner:
    """The user a path in a user's own subtree belongs to: their `user-<UID>.slice`, from that
    slice or from their `user@<UID>.service`."""
    for c in parts:
        m = _USER_SLICE.fullmatch(c) or _USER_MANAGER.fullmatch(c)
        if m:
            return Owner(kind="user", unit=f"user-{m.group(1)}.slice")
    return Owner(kind="user")


def _container_in(parts: list[str]) -> tuple[str | None, str | None]:
    """(id, runtime) of the first container scope or directory among `parts`."""
    for k, c in enumerate(parts):
        m = _SCOPE.fullmatch(c)
        if m:
            return m.group(2), _RUNTIME[m.group(1)]
        if _BARE_ID.fullmatch(c):
            return c, "docker" if k > 0 and parts[k - 1] == "docker" else None
    return None, None


def _pod(parts: list[str], end: int) -> Owner | None:
    """The pod whose cgroup is among `parts[:end]` (the container below it may sit deeper)."""
    for k, c in enumerate(parts[:end]):
        m = _POD_SLICE.fullmatch(c)  # the systemd driver
        if m:
            qos, uid = m.group(1) or "guaranteed", m.group(2).replace("_", "-").lower()
            return _pod_owner(uid, qos, parts[k + 1 :])
        if c == "kubepods":  # the cgroupfs driver
            rest = parts[k + 1 : end]
            qos = "guaranteed"
            if rest and rest[0] in _QOS_DIR:
                qos, rest = rest[0], rest[1:]
            m = _POD_DIR.fullmatch(rest[0]) if rest else None
            if m:
                below = k + 1 + (qos != "guaranteed") + 1
                return _pod_owner(m.group(1).lower(), qos, parts[below:])
    return None


def _pod_owner(uid: str, qos: str, below: list[str]) -> Owner:
    cid, runtime = _container_in(below)
    return Owner(kind="pod", pod_uid=uid, qos=qos, container_id=cid, container_runtime=runtime)


def _slurm(parts: list[str]) -> Owner | None:
    for k, c in enumerate(parts):
        if not _SLURM_ROOT.fullmatch(c):
            continue
        rest = parts[k + 1 :]
        for j, d in enumerate(rest):
            m = _SLURM_JOB.fullmatch(d)
            if m:
                s = _SLURM_STEP.fullmatch(rest[j + 1]) if j + 1 < len(rest) else None
                return Owner(kind="slurm", slurm_job=m.group(1), slurm_step=s and s.group(1))
    return None


def _container(parts: list[str]) -> Owner | None:
    cid, runtime = _container_in(parts)
    if cid is not None:
        return Owner(kind="container", container_id=cid, container_runtime=runtime)
    for k, c in enumerate(parts):
        m = _LXC_PAYLOAD.fullmatch(c)
        if m:
            return Owner(kind="container", container_runtime="lxc", container_name=m.group(1))
        if c == "lxc" and k + 1 < len(parts) and _LXC_NAME.fullmatch(parts[k + 1]):
            return Owner(kind="container", container_runtime="lxc", container_name=parts[k + 1])
    return None


def _systemd(parts: list[str]) -> Owner | None:
    if "user.slice" in parts:
        k = parts.index("user.slice")
        m = _USER_SLICE.fullmatch(parts[k + 1]) if k + 1 < len(parts) else None
        return Owner(kind="user", unit=m.group(0) if m else None)
    units = [c for c in parts if _UNIT.fullmatch(c)]
    if units:
        return Owner(kind="unit", unit=units[-1])
    return None
