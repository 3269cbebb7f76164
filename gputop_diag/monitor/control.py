"""The one seam through which the live view acts on processes: signals, a process's environment
for its detail screen, and quitting a job the view started (`gputop-diag watch -- CMD`).

The view is handed a `ProcessControl` and reads or changes nothing of the machine itself. A
signal goes through `Sources.send_signal`, which asks again at that moment who may signal the
pid and refuses a pid that now names another process than the one the user chose (its start
time differs). In a replay (no sources) nothing is sent and nothing is read. No Textual here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..collect.procs import (
    DETAIL_ENV_PREFIXES,
    job_environment,
    process_exists,
    process_start_time,
)
from ..sources import Sources

if TYPE_CHECKING:  # a job's watch loads with a job
    from ..collect.job import JobWatch

__all__ = ["DETAIL_ENV_PREFIXES", "JobControl", "ProcessControl"]


class JobControl:
    """A watched job as the live view may act on it: stop it (SIGTERM to its process group,
    SIGKILL after a grace period), pass a Ctrl-C on, leave it running."""

    def __init__(self, watch: JobWatch) -> None:
        self._watch = watch

    @property
    def label(self) -> str:
        return self._watch.label

    @property
    def log_path(self) -> str | None:
        """The output log of a started command (None: there is none)."""
        tail = self._watch.tail
        return tail.path if tail is not None else None

    @property
    def stop_grace_s(self) -> float:
        return self._watch.stop_grace_s

    def ours_running(self) -> bool:
        """A job this view started, not left running on purpose, with a process left now."""
        w = self._watch
        return w.started and not w.detached and w.alive()

    def exit_code(self) -> int:
        """The code the view leaves with: a started job's exit status once it has ended (0
        when unknown); 0 for a job the view did not start or left running."""
        w = self._watch
        if not w.started or w.detached:
            return 0
        w._reap()
        return w.exit_code or 0

    def interrupt(self) -> tuple[str, int, str | None] | None:
        """Ctrl-C passed on to the job (SIGINT to its group, SIGTERM the second time, SIGKILL
        the third): (the signal sent, the job's pid, what the next Ctrl-C sends, None after
        SIGKILL); None when it had ended meanwhile."""
        w = self._watch
        if w.interrupt() is None:
            return None
        sent = w.signals_sent[-1]
        following = w.next_interrupt() if sent != "SIGKILL" else None
        return sent, w.roots[0], following

    def alive(self) -> bool:
        return self._watch.alive()

    def stop(self) -> int | None:
        """Stop the job (blocks for up to the grace period); its exit status."""
        return self._watch.stop()

    def detach(self) -> None:
        """Leave it running on purpose (it has its own session and writes to its log)."""
        self._watch.detach()

    def hung_up(self) -> None:
        """The terminal closed: a started job that runs goes on, and its log says that the
        watcher left. Safe from a signal handler or another thread."""
        self._watch.left_by_hangup()


class ProcessControl:
    """What the live view may do to the processes it shows. `sources` None: a replay (nothing
    is signalled or read); `job`: the job `gputop-diag watch` watches."""

    def __init__(self, sources: Sources | None, job: JobWatch | None = None) -> None:
        self._sources = sources
        self.job = JobControl(job) if job is not None else None

    @property
    def replaying(self) -> bool:
        return self._sources is None

    def running(self, pid: int) -> bool:
        """A process with this pid runs now (False in a replay)."""
        return self._sources is not None and process_exists(self._sources.psutil, pid)

    def started(self, pid: int) -> float | None:
        """When `pid` started (epoch s), to tell it from a later process given the same pid;
        None in a replay, or when it has ended or cannot be read."""
        if self._sources is None:
            return None
        return process_start_time(self._sources.psutil, pid)

    def may_signal(self, pid: int) -> str | None:
        """None when this user may signal `pid`, else why not, in words."""
        if self._sources is None:
            return "a replay shows recorded data: there is no process here to signal"
        return self._sources.may_signal(pid)

    def send_signal(self, pid: int, sig: int, started: float | None = None) -> tuple[bool, str]:
        """Send `sig` to `pid` unless it now names another process than the one that started
        at `started`: (sent, what happened, in words)."""
        if self._sources is None:
            return False, "a replay shows recorded data: nothing sent"
        return self._sources.send_signal(pid, sig, started)

    def environment(self, pid: int) -> tuple[tuple[tuple[str, str], ...], str | None]:
        """The variables of `DETAIL_ENV_PREFIXES` `pid` started with, sorted; or () and why
        they cannot be read."""
        if self._sources is None:
            return (), "not recorded: a replay shows recorded data"
        return job_environment(self._sources.psutil, pid)
