"""The machine, as the collectors reach it.

A `Sources` bundle is the only door to I/O. `Sources.real()` opens the real machine (the `pynvml`
module, `psutil`, `/proc`, the kernel log, Slurm commands); the simulator builds a bundle of
stand-ins with the same interfaces (`gputop_diag.sim.build`). Collectors take a bundle and never
know which one they have, so the real collector code is what runs in tests and demos.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        """Wait; return True when `cancel` was set before the time was up."""


class RealClock:
    realtime = True  # its seconds pass while a read waits (slow reads go to threads)

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        if cancel is None:
            time.sleep(max(0.0, seconds))
            return False
        return cancel.wait(max(0.0, seconds))


class ProcFS(Protocol):
    """Reads text from /proc and /sys paths; raises OSError like the real files do."""

    def read_text(self, path: str) -> str: ...

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]:
        """The names in a directory, unsorted; OSError like `os.listdir`."""
        ...


# The unit of the CPU times in /proc/<pid>/stat (USER_HZ: 100 on every Linux we know of).
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_READ = 65536


class RealProcFS:
    def read_text(self, path: str) -> str:
        # os.open and os.read: a third of the cost of open() for the small files a tick reads
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks = []
            while chunk := os.read(fd, _READ):
                chunks.append(chunk)
        finally:
            os.close(fd)
        text = b"".join(chunks).decode("utf-8", errors="replace")
        if "\r" in text:  # newlines as open() in text mode gives them
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        return text

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def open_binary(self, path: str) -> BinaryIO:
        """A file opened to read bytes at offsets (a library's ELF headers); the caller closes
        it. Sources without it read no binary files."""
        return open(path, "rb", buffering=0)  # noqa: SIM115 - the caller closes it


@dataclass(frozen=True, slots=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str = ""


CommandRunner = Callable[[Sequence[str], float], CommandResult]
"""Runs argv with a timeout in seconds. Raises FileNotFoundError when the program is missing."""


def run_real_command(argv: Sequence[str], timeout: float) -> CommandResult:
    """Run `argv` in a session of its own; on timeout kill its whole process group (a wrapper
    script's children with it), then raise `subprocess.TimeoutExpired` as `subprocess.run`
    does. A program that is not on PATH raises FileNotFoundError, as `Popen` does, without
    the fork it would cost (the live view asks for `squeue` every 10 s, on machines without
    Slurm too)."""
    if os.sep not in argv[0] and shutil.which(argv[0]) is None:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", argv[0])
    p = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException:  # the timeout, or an interrupt: leave nothing running
        _kill_group(p)
        raise
    return CommandResult(p.returncode, out, err)


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)  # the session's leader: its pid is the group's id
    except (ProcessLookupError, PermissionError):
        p.kill()
    try:
        p.communicate(timeout=5)  # reap it; the group's members held the pipes, now closed
    except subprocess.TimeoutExpired:  # a member that left the group keeps a pipe open
        for f in (p.stdout, p.stderr):
            if f is not None:
                f.close()
        p.wait()


@dataclass
class Sources:
    """Everything a collector may touch."""

    nvml: Any  # the `pynvml` module or the simulator's stand-in
    psutil: Any  # the `psutil` module or the simulator's stand-in
    procfs: ProcFS
    clock: Clock
    run_command: CommandRunner  # journalctl, squeue, scontrol, ...
    hostname: Callable[[], str]
    environ: dict[str, str] = field(default_factory=dict)  # this process's environment
    scenario: str | None = None  # set by the simulator
    sim: Any = None  # the simulator's machine, for tests and the demo banner

    @property
    def simulated(self) -> bool:
        return self.scenario is not None

    def euid(self) -> int:
        """Who runs this: the effective user id (the simulated user's under the simulator)."""
        return self.sim.uid_of(self.sim.user) if self.sim is not None else os.geteuid()

    # -- signals: the one way the live view acts on a process -------------------------------
    def _kill(self, pid: int, sig: int) -> None:
        """`os.kill`, or the simulator's twin (a demo never signals a real process)."""
        if self.sim is not None:
            self.sim.kill(pid, sig)
        else:
            os.kill(pid, sig)

    def may_signal(self, pid: int) -> str | None:
        """None when this user may signal `pid`, else why not, in words. kill(2): root may
        signal any process; others only a process whose real or saved user id is their real
        or effective one."""
        me = (
            {self.sim.uid_of(self.sim.user)}
            if self.sim is not None
            else {os.getuid(), os.geteuid()}
        )
        if 0 in me:
            return None
        try:
            proc = self.psutil.Process(pid)
            uids = proc.uids()
        except self.psutil.NoSuchProcess:
            return f"pid {pid} has ended"
        except self.psutil.AccessDenied:
            return f"pid {pid} is not readable by this user: only its owner or root may signal it"
        if me & {uids.real, uids.saved}:
            return None
        try:
            owner = proc.username()
        except Exception:  # noqa: BLE001 - a name is a courtesy: the uid says it
            owner = f"uid {uids.real}"
        return f"pid {pid} belongs to {owner}: only its owner or root may signal it"

    def send_signal(self, pid: int, sig: int, started: float | None = None) -> tuple[bool, str]:
        """Send `sig` to `pid`: (sent, what happened, in words). `started`: when the process
        the user chose started (epoch s, as the tick saw it); a pid that now names a process
        started at another time (the one chosen ended, the pid was given to another) is not
        signalled. Who may signal is asked again at this moment."""
        name = signal.Signals(sig).name
        try:
            now_started = self.psutil.Process(pid).create_time()
        except self.psutil.NoSuchProcess:
            return False, f"pid {pid} had already ended: nothing sent"
        except Exception:  # noqa: BLE001 - unreadable: the kernel's own check stands below
            now_started = None
        if started is not None and now_started is not None and abs(now_started - started) > 1:
            return False, (
                f"pid {pid} is now another process (the one chosen has ended): nothing sent"
            )
        why = self.may_signal(pid)
        if why is not None:
            return False, f"{why}: nothing sent"
        try:
            self._kill(pid, sig)
        except ProcessLookupError:
            return False, f"pid {pid} had already ended: nothing sent"
        except PermissionError:
            return False, f"{name} to pid {pid}: not permitted (only its owner or root)"
        return True, f"sent {name} to pid {pid}"

    @classmethod
    def real(cls) -> Sources:
        import psutil
        import pynvml

        return cls(
            nvml=pynvml,
            psutil=psutil,
            procfs=RealProcFS(),
            clock=RealClock(),
            run_command=run_real_command,
            hostname=socket.gethostname,
            environ=dict(os.environ),
        )
