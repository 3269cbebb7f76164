"""Owners read from real kernel objects through the real collector (`Sources.real()`'s /proc and
`collect/owners.py`): a sleeping child moved into cgroups shaped as the kubelet (both cgroup
drivers), Slurm and Docker make them, on every cgroup hierarchy mounted (cgroup v2, v1 or both),
and processes in a PID namespace of their own made by `unshare` (util-linux).

As root only; each test skips with the reason where it cannot run (not root, a read-only
/sys/fs/cgroup, no `unshare` or no right to make a namespace). Every cgroup made is removed,
deepest first, whatever the test's outcome.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from gputop_diag.collect.owners import (
    OwnerCollector,
    proc_is_the_hosts,
)
from gputop_diag.model import Owner
from gputop_diag.owner import ns_pids
from gputop_diag.sources import Sources

ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: makes cgroups and PID namespaces"
)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def _hierarchies() -> list[tuple[Path, bool]]:
    """(mount point, whether v1) of each cgroup hierarchy mounted, the first mount of each
    (proc_pid_mountinfo(5): the fields after ` - ` are the type, the source and the super
    block's options, which name a v1 hierarchy's controllers)."""
    seen, out = set(), []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if len(fields) < 5 or len(after) < 3 or after[0] not in ("cgroup", "cgroup2"):
            continue
        key = (after[0], after[2])
        if key not in seen:
            seen.add(key)
            out.append((Path(fields[4]), after[0] == "cgroup"))
    return out


@contextmanager
def _sleeper_in(v2_path: list[str], v1_path: list[str] | None = None) -> Iterator[psutil.Process]:
    """A sleeping child moved into a cgroup of `v2_path` (on v1 hierarchies `v1_path`, default
    the same) on every hierarchy, as a runtime puts a container in each. The paths sit under a
    directory of this test's own, as under a kubelet's `--cgroup-root` or Docker's
    `--cgroup-parent`: a node's own kubepods, system.slice or Slurm cgroups are never touched,
    and tests running at once never share a cgroup. After: the child is ended, then the cgroups
    made are removed, deepest first."""
    hierarchies = _hierarchies()
    if not hierarchies:
        pytest.skip("no cgroup hierarchy is mounted")
    made: list[Path] = []
    top = f"gputop-diag-test-{secrets.token_hex(4)}"
    child = subprocess.Popen(["sleep", "30"])
    try:
        for mount, v1 in hierarchies:
            d = mount
            for part in [top, *(v1_path if v1 and v1_path is not None else v2_path)]:
                parent, d = d, d / part
                if d.exists():
                    continue
                try:
                    d.mkdir()
                except OSError as e:
                    if e.errno in NOT_WRITABLE:
                        pytest.skip(f"{mount} is not writable here: {e.strerror}")
                    raise
                made.append(d)
                for name in ("cpuset.cpus", "cpuset.mems"):  # v1 cpuset: empty until set
                    if (parent / name).exists():
                        (d / name).write_text((parent / name).read_text())
            (d / "cgroup.procs").write_text(f"{child.pid}\n")
        yield psutil.Process(child.pid)
    finally:
        child.kill()
        child.wait()
        for d in reversed(made):
            _rmdir(d)


def _rmdir(d: Path) -> None:
    """Remove an emptied cgroup; the kernel may take a moment to see its last process gone."""
    for _ in range(50):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            time.sleep(0.02)
    d.rmdir()


def _owner(pid: int) -> Owner | None:
    src = Sources.real()
    return OwnerCollector(src.procfs, src.clock).owner(pid, psutil.Process(pid).create_time())


UID = str(uuid.uuid4())
CID = secrets.token_hex(32)
JOB = str(900000 + secrets.randbelow(99999))

CASES = {
    "kubepods, systemd driver": (
        [
            "kubepods.slice",
            "kubepods-burstable.slice",
            f"kubepods-burstable-pod{UID.replace('-', '_')}.slice",
            f"cri-containerd-{CID}.scope",
        ],
        None,
        Owner(
            kind="pod",
            pod_uid=UID,
            qos="burstable",
            container_id=CID,
            container_runtime="containerd",
        ),
    ),
    "kubepods, systemd driver, guaranteed, CRI-O": (
        ["kubepods.slice", f"kubepods-pod{UID.replace('-', '_')}.slice", f"crio-{CID}.scope"],
        None,
        Owner(
            kind="pod", pod_uid=UID, qos="guaranteed", container_id=CID, container_runtime="cri-o"
        ),
    ),
    "kubepods, cgroupfs driver": (
        ["kubepods", "burstable", f"pod{UID}", CID],
        None,
        Owner(kind="pod", pod_uid=UID, qos="burstable", container_id=CID),
    ),
    "slurm": (  # cgroup/v2's layout; cgroup/v1's on v1 hierarchies
        ["system.slice", "slurmstepd.scope", f"job_{JOB}", "step_0", "user", "task_0"],
        ["slurm", "uid_0", f"job_{JOB}", "step_0", "task_0"],
        Owner(kind="slurm", slurm_job=JOB, slurm_step="0"),
    ),
    "docker, systemd driver": (
        ["system.slice", f"docker-{CID}.scope"],
        None,
        Owner(kind="container", container_id=CID, container_runtime="docker"),
    ),
}


@ROOT_ONLY
@pytest.mark.parametrize("case", list(CASES))
def test_a_real_process_in_a_real_cgroup_has_its_owner(case):
    v2_path, v1_path, expected = CASES[case]
    with _sleeper_in(v2_path, v1_path) as child:
        text = Path(f"/proc/{child.pid}/cgroup").read_text()
        assert "/".join(v2_path) in text or v1_path and "/".join(v1_path) in text, text
        assert _owner(child.pid) == expected, text


def _pid_namespace(argv: list[str]) -> subprocess.Popen:
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    return subprocess.Popen(
        ["unshare", "--pid", "--fork", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@ROOT_ONLY
def test_a_real_pid_namespace_gives_the_inner_pid():
    outer = _pid_namespace(["--mount-proc", "sleep", "30"])
    try:
        inner = None
        deadline = time.monotonic() + 2.0
        while inner is None and time.monotonic() < deadline:
            if outer.poll() is not None:
                pytest.skip(f"unshare cannot make a PID namespace here: {outer.stderr.read()}")
            kids = psutil.Process(outer.pid).children()
            if kids and kids[0].name() == "sleep":  # forked, then exec'd
                inner = kids[0]
            else:
                time.sleep(0.01)
        assert inner is not None, "the namespace's sleep did not start"
        status = Path(f"/proc/{inner.pid}/status").read_text()
        assert ns_pids(status) == (inner.pid, 1)  # the namespace's first process
        owner = _owner(inner.pid)
        assert owner is not None and owner.ns_pid == 1 != inner.pid
    finally:  # the namespace's first process ended ends the namespace
        with contextlib.suppress(psutil.NoSuchProcess):
            for kid in psutil.Process(outer.pid).children(recursive=True):
                kid.kill()
        outer.kill()
        outer.communicate(timeout=5)


_JUDGE = (
    "import json; from gputop_diag.sources import Sources; "
    "from gputop_diag.collect.owners import proc_is_the_hosts, runs_in_host_pid_namespace; "
    "p = Sources.real().procfs; "
    "print(json.dumps([runs_in_host_pid_namespace(p), proc_is_the_hosts(p)]))"
)


def _judged_inside(mount_proc: bool) -> list:
    argv = (["--mount-proc"] if mount_proc else []) + [sys.executable, "-c", _JUDGE]
    p = _pid_namespace(argv)
    out, err = p.communicate(timeout=20)
    if p.returncode != 0 and "unshare" in err:
        pytest.skip(f"unshare cannot make a PID namespace here: {err.strip()}")
    assert p.returncode == 0, err
    return json.loads(out)


@ROOT_ONLY
def test_a_program_in_a_pid_namespace_with_its_own_proc_knows_nvmls_pids_are_not_its():
    assert _judged_inside(mount_proc=True) == [False, False]


@ROOT_ONLY
def test_a_program_in_a_pid_namespace_over_this_proc_reads_this_procs_pids():
    """Without --mount-proc the program is in a namespace of its own but reads the /proc this
    test reads: whether NVML's pids are there is this /proc's answer, not its namespace's."""
    here = proc_is_the_hosts(Sources.real().procfs)
    assert _judged_inside(mount_proc=False) == [False, here]
