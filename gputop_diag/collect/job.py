"""The watched job: a process and its descendants, a command we start, or a Slurm job.

`JobWatch.sample(snapshot)` reads the job once per tick and returns a frozen `JobState`:
- the process tree (the roots and every descendant, `collect/jobtree.py`: the kernel's per-thread
  `children` files, where it has them), each with CPU %, RSS, threads, its busiest threads by
  name, and CUDA_VISIBLE_DEVICES from its environment where readable;
- new lines of its output (the file a started command writes to, `--log FILE`, the file the
  watched process's stdout is, or the Slurm job's StdOut=), kept as a ring buffer, scanned for
  failure lines (`job/output.py`) and step times (`job/steps.py`);
- for a Slurm job, its scheduler record (`collect/slurm.py`: scontrol, squeue), and its local
  processes: `scontrol listpids`, else cgroup membership (/proc/<pid>/cgroup naming job_<id>),
  else SLURM_JOB_ID in a process's environment (these two read every process: at most every
  `proctree.RESCAN_S`, the processes found last and their descendants in between).

A started command (`collect/job_command.py`: its log, how it is started, its signals) outlives
us when we are detached or killed; Ctrl-C reaches it only as a shell would pass it on
(`interrupt`: SIGINT to its process group, then SIGTERM, then SIGKILL); a watcher that leaves
while it runs (detached on purpose, or its terminal closed) says so in the log (`leave_note`).
The output is followed by `collect/job_output.py`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from ..job.output import event_of
from ..job.steps import StepParser
from ..model import JobState, OutputEvent, SchedulerEvidence, Snapshot
from ..sources import RealProcFS
from . import slurm as S
from .job_command import (  # noqa: F401 - default_log_path re-exported for `watch`
    INTERRUPT_SIGNALS,
    STOP_GRACE_S,
    WatchError,
    default_log_path,
    signal_name,
    start_command,
)
from .job_output import READ_CHUNK, OutputTail, stdout_file  # noqa: F401 - READ_CHUNK re-exported
from .jobtree import TreeReader
from .proctree import RESCAN_S

SNAPSHOT_TAIL = 40  # output lines each snapshot carries (the newest of `job_output.TAIL_LINES`)
MAX_EVENTS = 20  # failure lines kept


class JobWatch:
    """One watched job. Build it with `for_pid`, `for_command` or `for_slurm`."""

    def __init__(
        self,
        sources: Any,
        target: str,
        label: str,
        *,
        psutil: Any = None,
        procfs: Any = None,
        log: str | None = None,
        log_from_start: bool = False,
        step_regex: re.Pattern | None = None,
    ) -> None:
        self.sources = sources
        self.target = target
        self.label = label
        self.argv: tuple[str, ...] | None = None  # a started command's command line
        self.roots: tuple[int, ...] = ()
        self.popen: subprocess.Popen | None = None
        self.slurm_id: str | None = None
        self.slurm: SchedulerEvidence | None = None
        self.slurm_problem: str | None = None
        self.exit_code: int | None = None
        self.exit_signal: str | None = None
        self.detached = False
        self.stopped = False  # stop() was called
        self.killed = False  # stop() needed SIGKILL
        self.interrupts = 0  # Ctrl-C passed on to a started command (`interrupt`)
        self.signals_sent: list[str] = []  # by `interrupt`, in order: ["SIGINT", "SIGTERM"]
        # under --sanitize, the key of the run that watches (its stderr and its live view name
        # the log by one pseudonym)
        self.sanitize_key: bytes | None = None
        self.stop_grace_s = STOP_GRACE_S  # SIGTERM, then SIGKILL this much later
        self.reader = TreeReader(psutil or sources.psutil, procfs or sources.procfs)
        self.tail = OutputTail(log, log_from_start) if log else None
        self.steps = StepParser(step_regex)
        self.events: deque[OutputEvent] = deque(maxlen=MAX_EVENTS)
        self._explicit_log = log is not None
        self._root_gone = False  # no process of the job is left (--pid, a started command)
        self._known: list[int] = []  # the job's processes at the last tick
        self._slurm_checked: float | None = None
        self._slurm_answered: float | None = None  # when Slurm last gave the job's record
        self._slurm_scan: tuple[float, list[int]] | None = None  # (when, pids) by cgroup or env
        self._line_read_t: float | None = None  # the last read of the output, on `_line_clock`

    # -- the three ways in -------------------------------------------------------------------
    @classmethod
    def for_pid(cls, sources, pid: int, *, log=None, step_regex=None) -> JobWatch:
        ps = sources.psutil
        try:
            proc = ps.Process(pid)
            name = proc.name()
        except (ps.NoSuchProcess, ps.ZombieProcess):
            raise WatchError(f"no process {pid} on this machine", code=2) from None
        except ps.AccessDenied:
            name = "?"
        w = cls(sources, "pid", f"pid {pid} ({name})", log=log, step_regex=step_regex)
        w.roots = (pid,)
        try:  # inside a Slurm job: its scheduler record is evidence too
            w.slurm_id = _slurm_job_of(proc.environ())
        except (ps.Error, OSError):
            pass
        if log is None:  # its stdout, when that is a file
            out = stdout_file(pid)
            if out is not None:
                w.tail = OutputTail(out, from_start=False)
        return w

    @classmethod
    def for_command(
        cls, sources, argv: Sequence[str], *, log_path: str, step_regex=None, env=None
    ) -> JobWatch:
        import psutil as real_psutil  # the command runs on this machine, under --demo too

        started = start_command(argv, log_path, env)
        w = cls(
            sources,
            "command",
            shlex.join(argv),
            psutil=real_psutil,
            procfs=RealProcFS() if sources.simulated else None,
            log=log_path,
            log_from_start=True,
            step_regex=step_regex,
        )
        w.popen = started.popen
        w.argv = tuple(argv)
        w.roots = (started.popen.pid,)
        w.tail._offset = started.log_offset
        w.slurm_id = _slurm_job_of(started.environ)  # started inside an allocation (salloc, sbatch)
        return w

    @classmethod
    def for_slurm(cls, sources, job_id: str, *, log=None, step_regex=None) -> JobWatch:
        job_id = job_id.strip()
        if not re.fullmatch(r"\d+(?:_\d+)?(?:\.\w+)?", job_id):
            raise WatchError(f"--slurm {job_id!r} is not a Slurm job id (like 4242)", code=2)
        w = cls(sources, "slurm", f"Slurm job {job_id}", log=log, step_regex=step_regex)
        w.slurm_id = job_id
        found, problem = S.resolve_job(sources, job_id)
        if found is None:
            unknown = problem is not None and problem.startswith("Slurm does not know")
            raise WatchError(problem or f"Slurm job {job_id} not found", code=2 if unknown else 1)
        w.slurm = found
        w._slurm_checked = w._slurm_answered = sources.clock.now()
        if found.name:
            w.label = f"Slurm job {job_id} ({found.name})"
        return w

    # -- the job's life ----------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self.popen is not None

    @property
    def running(self) -> bool:
        """Some process of the job lives (for a started command: the main process, or one
        that outlived it in its session)."""
        if self.popen is not None:
            if self.exit_code is None and self.popen.poll() is None:
                return True
            return not self._root_gone
        if self.target == "slurm":
            s = self.slurm
            return s is not None and s.state.upper() in S.ACTIVE_STATES
        return not self._root_gone

    @property
    def finished(self) -> bool:
        """The job had ended at the last `sample()` (a started command exited and its output
        was read to the end, the process is gone, Slurm ended it)."""
        if self.popen is not None:
            return self.exit_code is not None and self._root_gone
        if self.target == "slurm":
            s = self.slurm
            return s is not None and s.state.upper() in S.ENDED_STATES
        return self._root_gone

    def _reap(self) -> None:
        if self.popen is None or self.exit_code is not None:
            return
        rc = self.popen.poll()
        if rc is None:
            return
        if rc < 0:
            self.exit_signal = signal_name(-rc)
            self.exit_code = 128 - rc
        else:
            self.exit_code = rc

    def send(self, sig: int) -> bool:
        """Send `sig` to a started command's process group (the main process and what it
        started, even after the main process ended); False when none is left."""
        if self.popen is None:
            return False
        self.popen.poll()  # an ended main process is reaped: its zombie is not the group
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _group_alive(self) -> bool:
        return self.send(0)

    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM the started command's group, SIGKILL after `grace_s`; the main process's
        exit code. `self.killed` says whether SIGKILL was needed."""
        self.killed, self.stopped = False, True
        grace_s = self.stop_grace_s if grace_s is None else grace_s
        if self.send(signal.SIGTERM):
            self.interrupts = max(self.interrupts, INTERRUPT_SIGNALS.index(signal.SIGTERM) + 1)
            deadline = time.monotonic() + grace_s
            while self._group_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._group_alive():
                self.killed = self.send(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.popen.wait(5.0)
        self._reap()
        return self.exit_code

    def detach(self) -> None:
        """Stop watching; a started command keeps running (it has its own session)."""
        self.detached = True

    def interrupt(self) -> int | None:
        """Ctrl-C, passed on as a shell passes it to the job in its foreground: SIGINT to the
        started command's process group; the second time SIGTERM, the third (and after) SIGKILL.
        The signal sent; None when no process of the job is left to get it."""
        sig = INTERRUPT_SIGNALS[min(self.interrupts, len(INTERRUPT_SIGNALS) - 1)]
        self.interrupts += 1
        if not self.send(sig):
            return None
        self.signals_sent.append(signal_name(sig))
        return sig

    def next_interrupt(self) -> str:
        """The signal the next Ctrl-C sends (`SIGTERM`)."""
        return signal_name(INTERRUPT_SIGNALS[min(self.interrupts, len(INTERRUPT_SIGNALS) - 1)])

    def alive(self) -> bool:
        """Some process of a started command's group is left now (not as of the last tick);
        for a job we did not start, `running`."""
        if self.popen is None:
            return self.running
        if self.popen.poll() is None:
            return True
        self._reap()
        return self._group_alive()

    def leave_note(self, text: str) -> bool:
        """Append `text` as a line of its own to a started command's output log, marked as
        ours (the job writes there in append mode too: the line lands between two of its
        writes). False when there is no such log or it cannot be written."""
        if self.popen is None or self.tail is None:
            return False
        stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
        try:
            with open(self.tail.path, "a", encoding="utf-8") as f:
                f.write(f"\n[gputop-diag {stamp}] {text}\n")
        except OSError:
            return False
        return True

    def left_by_hangup(self) -> bool:
        """The watcher's terminal closed: a started command that still runs goes on (it has its
        own session), detached, and its log says that the watcher left. False when there was
        no such job."""
        if self.popen is None or self.detached or not self.alive():
            return False
        self.detach()
        self.leave_note(
            f"the terminal closed (SIGHUP): gputop-diag stopped watching; the job (pid "
            f"{self.roots[0]}) was left running, its output still comes to this file"
        )
        return True

    def ended_words(self) -> str:
        """How a started command ended, once it has (`exit code 3`, `killed by SIGTERM, exit
        code 143`)."""
        self._reap()
        if self.exit_code is None:
            return "exit code unknown"
        if self.exit_signal is not None:
            return f"killed by {self.exit_signal}, exit code {self.exit_code}"
        return f"exit code {self.exit_code}"

    # -- Slurm -------------------------------------------------------------------------------
    def scheduler_evidence(self) -> list[SchedulerEvidence]:
        """The watched Slurm job's record, asked again (the Monitor's slow-source cadence); the
        last answer stands when Slurm does not answer, and the problem is said."""
        if self.slurm_id is None:
            return []
        found, problem = S.resolve_job(self.sources, self.slurm_id)
        self._slurm_checked = self.sources.clock.now()
        if found is not None:
            self.slurm, self.slurm_problem = found, None
            self._slurm_answered = self._slurm_checked
        elif problem and problem.startswith("Slurm does not know") and self.slurm is not None:
            # known before, gone now: it ended and left the controller's memory (MinJobAge)
            self.slurm = _ended(self.slurm)
            self.slurm_problem = None
        else:
            self.slurm_problem = problem
        return [self.slurm] if self.slurm is not None else []

    def _slurm_exit(self) -> None:
        """An ended Slurm job's ExitCode=CODE:SIGNAL as a started command's exit code would be
        (a signal: 128 + its number)."""
        s = self.slurm
        if s is None or s.state.upper() not in S.ENDED_STATES or not s.exit_code:
            return
        code, _, sig = s.exit_code.partition(":")
        try:
            code_n, sig_n = int(code), int(sig or 0)
        except ValueError:
            return
        if sig_n:
            self.exit_signal, self.exit_code = signal_name(sig_n), 128 + sig_n
        else:
            self.exit_signal, self.exit_code = None, code_n

    def _slurm_stale(self) -> float | None:
        """How old the record shown is, when the last ask got no answer (None: it is fresh)."""
        if self.slurm is None or not self.slurm_problem or self._slurm_answered is None:
            return None
        return max(0.0, self.sources.clock.now() - self._slurm_answered)

    def _slurm_pids(self, now: float) -> tuple[list[int], str | None]:
        s = self.slurm
        if s is None or s.state.upper() not in ("RUNNING", "COMPLETING", "SUSPENDED"):
            return [], None
        pids, problem = S.list_pids(self.sources, self.slurm_id)
        if pids:
            return pids, None
        pids = self._slurm_scanned(now)
        if pids:
            return pids, None
        where = f" (it runs on {s.nodes})" if s.nodes else ""
        why = f": {problem}" if problem else ""
        return [], f"no process of Slurm job {self.slurm_id} found on this machine{where}{why}"

    def _slurm_scanned(self, now: float) -> list[int]:
        """The job's processes by cgroup, else by environment: both read every process, so they
        are asked at most every RESCAN_S; in between, the processes found last stand (and the
        tree finds what they start)."""
        last = self._slurm_scan
        if last is not None and 0 <= now - last[0] < RESCAN_S:
            return last[1]
        pids = self.reader.pids_in_cgroup_of_job(self.slurm_id)
        if not pids:
            pids = self.reader.pids_with_env("SLURM_JOB_ID", self.slurm_id.split(".")[0])
        self._slurm_scan = (now, pids)
        return pids

    # -- one tick ----------------------------------------------------------------------------
    @property
    def wall_clock_lines(self) -> bool:
        """The output's lines are timed on the wall clock: a started command is a real process
        whatever the sources (under --demo, the simulated clock is not its time), and on a real
        machine the sources' clock is the wall clock."""
        return self.popen is not None or not self.sources.simulated

    def _line_clock(self) -> float:
        """When the output is read, on the clock its step lines are timed by."""
        return time.time() if self.popen is not None else self.sources.clock.now()

    def _written_at(self, read_t: float) -> float | None:
        """When the newest line read was written (the file's modification time), within the
        span since the last read (a clock of another machine's file server does not move it
        out of that); None where the lines are not timed on the wall clock."""
        if not self.wall_clock_lines or self.tail is None or self.tail.written_at is None:
            return None
        at = min(self.tail.written_at, read_t)
        if self._line_read_t is not None:
            at = max(at, self._line_read_t)
        return at

    def sample(self, snap: Snapshot | None = None) -> JobState:
        now = snap.timestamp if snap is not None else self.sources.clock.now()
        self._reap()
        problems: list[str] = []
        roots = self.roots
        if self.target == "slurm":
            out = self.slurm.stdout_path if self.slurm is not None else None
            if self.tail is None and out and out != "/dev/null":
                self.tail = OutputTail(out, from_start=True)
            pids, problem = self._slurm_pids(now)
            roots = tuple(sorted(pids))
            if problem and self.slurm is not None and not self.slurm.pending:
                problems.append(problem)
            if self.slurm_problem:
                problems.append(self.slurm_problem)
        if self.target == "slurm":
            self._slurm_exit()
            procs = self.reader.tree(roots, now) if roots else ()
        else:  # what outlives its parent stays the job's: by session, and once seen
            session = self.popen.pid if self.popen is not None else None
            procs = self.reader.tree(roots, now, known=self._known, session=session)
            self._known = [p.pid for p in procs]
            self._root_gone = not procs
        if self.tail is not None:
            # stamped when read: the Slurm calls above may have taken seconds since `now`
            read_t = self.sources.clock.now() if snap is not None else now
            line_t = self._line_clock()
            for line_no, line in self.tail.read():
                e = event_of(line, line_no, read_t)
                if e is not None:
                    self.events.append(e)
                self.steps.feed(line, line_t)
            if self.tail.redraw is not None:  # the bar drawn now, ended by the next one
                self.steps.feed_redraw(self.tail.redraw, line_t)
            self.steps.end_read(line_t, self._written_at(line_t))
            self._line_read_t = line_t
            step_problem = self.steps.problem()
            if step_problem:
                problems.append(step_problem)
            if self.tail.skipped_bytes:
                problems.append(
                    f"{self.tail.skipped_bytes / 2**20:.0f} MiB of output written faster than it "
                    "could be read were skipped (the file has all of it)"
                )
            pending = self.slurm is not None and self.slurm.pending  # no output before start
            if (
                self.tail.problem
                and not pending
                and (self._explicit_log or self.target == "pid" or self.target == "slurm")
            ):
                problems.append(self.tail.problem)
        visible = next((p.cuda_visible_devices for p in procs if p.cuda_visible_devices), None)
        return JobState(
            target=self.target,
            label=self.label,
            root_pids=roots,
            running=self.running,
            exit_code=self.exit_code,
            exit_signal=self.exit_signal,
            processes=procs,
            log_path=self.tail.path if self.tail is not None else None,
            output_tail=tuple(self.tail.lines)[-SNAPSHOT_TAIL:] if self.tail else (),
            output_lines=self.tail.count if self.tail else 0,
            output_events=tuple(self.events),
            steps=self.steps.stats(),
            visible_gpus=visible,
            slurm=self.slurm,
            slurm_stale_s=self._slurm_stale(),
            problem="; ".join(problems) or None,
        )


def _slurm_job_of(environ: dict | None) -> str | None:
    """The Slurm job a process runs in, from its environment (SLURM_JOB_ID)."""
    v = (environ or {}).get("SLURM_JOB_ID", "").strip()
    return v if v.isdigit() else None


def _ended(s: SchedulerEvidence) -> SchedulerEvidence:
    from dataclasses import replace

    return replace(s, state="COMPLETED" if s.state.upper() in S.ACTIVE_STATES else s.state)
