"""The simulated machine as gputop-diag sees it from a container of its own PID namespace (a
Docker container run without `--pid=host`, a pod without `hostPID: true`).

The driver knows no PID namespace, so NVML still lists the host's pids
(https://github.com/NVIDIA/nvidia-docker/issues/1483), while the container's /proc (mounted
inside it) and psutil show the container's processes only: its first process as PID 1, this
program, and at each of `same_numbers` a shell that merely has the number of one of the host's
processes. That /proc has no kthreadd at PID 2 (kernel threads live in the host's namespace
only) and this program's `NSpid:` holds one pid (its /proc was mounted in its own namespace).
The machine-wide counters (/proc/stat, /proc/meminfo, pressure) are the host's, as they are in
a container.

`in_container(sim.build(...))` gives such a `Sources`; everything else is the scenario's.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Iterable
from typing import Any

from ..sources import Sources
from .fake_procfs import FakeProcFS
from .fake_psutil import FakeProcess
from .population import SimProc, SimThread

SELF_PID = 23  # this program's pid in the container
_STARTED_AGO_S = 600.0  # the container started this long before the scenario


class ContainerView:
    """The machine with the container's processes in place of the host's: what `FakeProcFS`
    and `FakeProcess` read of processes comes from here, the rest from the machine."""

    def __init__(self, machine: Any, same_numbers: Iterable[int] = ()) -> None:
        self._machine = machine
        started = machine.clock.start - _STARTED_AGO_S
        user = machine.user

        def proc(pid: int, ppid: int, name: str, cmdline: tuple[str, ...]) -> SimProc:
            return SimProc(
                pid, ppid, user, name, cmdline, "host", create_time=started,
                threads=[SimThread(pid, name, "main")],
            )  # fmt: skip

        self.procs: dict[int, SimProc] = {
            1: proc(1, 0, "sleep", ("sleep", "infinity")),
            SELF_PID: proc(SELF_PID, 1, "gputop-diag", ("/usr/bin/python3", "-m", "gputop_diag")),
        }
        for pid in same_numbers:
            if pid not in self.procs:
                self.procs[pid] = proc(pid, 1, "bash", ("bash",))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._machine, name)

    def alive(self, pid: int, t: float | None = None) -> SimProc | None:
        return self.procs.get(pid)


class ContainerProcFS(FakeProcFS):
    """The container's /proc: /proc/self is this program, and a pid the container does not
    hold is missing (the host's kthreadd included)."""

    def read_text(self, path: str) -> str:
        if path.startswith("/proc/self/"):
            path = f"/proc/{SELF_PID}/{path[len('/proc/self/') :]}"
        parts = path.split("/")
        if len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit():
            if self._m.alive(int(parts[2])) is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return super().read_text(path)


class ContainerPsutil:
    """psutil in the container: its processes only; the machine-wide counters are the host's."""

    def __init__(self, host: Any, view: ContainerView) -> None:
        self._host, self._view = host, view

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    def pids(self) -> list[int]:
        return sorted(self._view.procs)

    def pid_exists(self, pid: int) -> bool:
        return pid in self._view.procs

    def Process(self, pid: int | None = None) -> FakeProcess:  # noqa: N802 - psutil's name
        return FakeProcess(self._view, SELF_PID if pid is None else pid)

    def process_iter(self, attrs=None, ad_value=None):
        for pid in self.pids():
            p = FakeProcess(self._view, pid)
            if attrs is not None:
                p.info = p.as_dict(attrs, ad_value)
            yield p


def in_container(sources: Sources, same_numbers: Iterable[int] = ()) -> Sources:
    """`sources` (a simulated machine) as seen from a container of its own PID namespace, with
    a local shell at each pid of `same_numbers`."""
    if sources.sim is None:
        raise ValueError("in_container needs a simulated machine (sim.build)")
    view = ContainerView(sources.sim, same_numbers)
    return dataclasses.replace(
        sources, procfs=ContainerProcFS(view), psutil=ContainerPsutil(sources.psutil, view)
    )


__all__ = ["SELF_PID", "ContainerProcFS", "ContainerPsutil", "ContainerView", "in_container"]
