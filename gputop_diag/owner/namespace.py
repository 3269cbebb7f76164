"""PID namespaces, from the text of /proc/<pid>/status.

`NSpid:` lists a process's pid in each PID namespace it belongs to, the first as seen from the
namespace of whoever mounted that /proc, the last in its own (proc(5), Linux 4.1 and later:
https://man7.org/linux/man-pages/man5/proc_pid_status.5.html). A containerised process shows two
or more (`NSpid:\t48213\t7`); a host process one.

Pure: text in, figures out.
"""

from __future__ import annotations

import dataclasses
import re

from ..model import Owner

MAX_STATUS = 64 * 1024  # a real status file is about 1.5 KiB
MAX_NS_LEVELS = 33  # the kernel nests PID namespaces 32 deep at most (MAX_PID_NS_LEVEL)
# A pid as the kernel writes it: ASCII digits only (`str.isdigit` also takes `²` or `٣`).
_PID = re.compile(r"[0-9]{1,10}")


def ns_pids(status: str) -> tuple[int, ...] | None:
    """The pids of a process's `NSpid:` line, outermost first; None without a readable line."""
    for line in status[:MAX_STATUS].split("\n"):
        if line.startswith("NSpid:"):
            fields = line[6:].split()
            if not fields or len(fields) > MAX_NS_LEVELS or not all(map(_PID.fullmatch, fields)):
                return None
            return tuple(int(f) for f in fields)
    return None


def ns_pid(status: str) -> int | None:
    """A process's pid inside its own PID namespace: the last of `NSpid:`; None where that is
    the pid this /proc shows (no namespace of its own) or cannot be read."""
    pids = ns_pids(status)
    if not pids or len(pids) < 2 or pids[-1] == pids[0]:
        return None
    return pids[-1]


def with_ns_pid(owner: Owner | None, inner_pid: int | None) -> Owner | None:
    """`owner` with the pid inside its namespace. A process in a PID namespace of its own whose
    cgroup names no owner is in a container of some kind (the cgroup may be hidden from us by a
    cgroup namespace, or kept by a runtime we do not know)."""
    if inner_pid is None:
        return owner
    if owner is None:
        return Owner(kind="container", ns_pid=inner_pid)
    return dataclasses.replace(owner, ns_pid=inner_pid)


def judge_host_pid_namespace(
    own_status: str | None, pid2_status: str | None, pid1_readable: bool
) -> bool | None:
    """Whether a program whose /proc/self/status is `own_status` runs in the host's (the
    initial) PID namespace: False when its own `NSpid:` has more than one pid (this /proc was
    mounted outside its namespace); True when this /proc is the host's (`judge_host_proc`) and
    shows the program at one pid only; False when this /proc is a container's; None when /proc
    hides other users' processes (mounted with `hidepid=`) and nothing above decides.

    Whether NVML's pids name the processes of this /proc is `judge_host_proc`'s question, not
    this one: a program started by `unshare --pid --fork` without `--mount-proc` runs in a
    namespace of its own yet reads the host's /proc, where the host's pids are."""
    if own_status is not None:
        pids = ns_pids(own_status)
        if pids is not None and len(pids) > 1:
            return False
    return judge_host_proc(pid2_status, pid1_readable)


def judge_host_proc(pid2_status: str | None, pid1_readable: bool) -> bool | None:
    """Whether a /proc whose /proc/2/status is `pid2_status` is the host's (that of the initial
    PID namespace), and so shows the pids the driver and NVML give: True when PID 2 is the
    kernel thread `kthreadd` with no parent. The kernel starts kthreadd second, right after
    init (`rest_init` in init/main.c), and kernel threads live in the initial namespace only,
    so a container's /proc never shows it. False when PID 1 is readable but PID 2 is not
    kthreadd (a container's /proc); None when /proc hides other users' processes (mounted with
    `hidepid=`: kthreadd and init are root's) and so cannot say."""
    if pid2_status is not None and _is_kthreadd(pid2_status):
        return True
    if pid1_readable:
        return False
    return None


def _is_kthreadd(status: str) -> bool:
    """The status of the kernel thread kthreadd: named so, no parent, and a kernel thread: the
    `Kthread:` line of newer kernels says 1, and there is no `VmSize:` line (the kernel writes
    a task's memory lines only for a task with memory of its own: `proc_pid_status` in
    fs/proc/array.c). A process that merely took the name, such as one `docker exec` started
    (its parent outside the namespace shows as 0), has memory of its own."""
    name = ppid = kthread = None
    vm = False
    for line in status[:MAX_STATUS].split("\n"):
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "PPid":
            ppid = value.strip()
        elif key == "Kthread":
            kthread = value.strip()
        elif key == "VmSize":
            vm = True
    return name == "kthreadd" and ppid == "0" and kthread in (None, "1") and not vm
