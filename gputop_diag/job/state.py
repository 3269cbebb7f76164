"""How a watched job stands, in words: running, exited N, killed by SIG, Slurm's state with its
queue and time figures. One text for `watch`'s lines and JSON and the live view's Job pane."""

from __future__ import annotations

from ..model import JobState
from ..model.formats import clock as _clock


def state_words(job: JobState) -> str:
    """How the job stands, in words: running, exited N, killed by SIG, Slurm's state."""
    if job.exit_code is not None and job.target != "slurm":
        how = (
            f"killed by {job.exit_signal} (exit code {job.exit_code})"
            if job.exit_signal
            else f"exited with code {job.exit_code}"
        )
        if job.running and job.processes:  # processes it started outlive it
            n = len(job.processes)
            return f"the main process {how}; {n} of its processes still run{'s' if n == 1 else ''}"
        return how
    s = job.slurm
    if s is not None:
        words = s.state
        if s.pending:
            words += f" (reason {s.reason or 'none given'}), in the queue for {_clock(s.wait_s)}"
        elif s.state.upper() == "RUNNING":
            left = s.time_left_s
            limit = (
                "no time limit"
                if s.time_limit_s is None
                else (f"{_clock(left)} left of {_clock(s.time_limit_s)}")
            )
            words += f" on {s.nodes or '?'} for {_clock(s.time_used_s)}, {limit}"
            if s.wait_s is not None:
                words += f"; waited {_clock(s.wait_s)} in the queue"
        if job.exit_signal:
            words += f"; killed by {job.exit_signal} (exit code {job.exit_code})"
        elif job.exit_code:
            words += f"; exited with code {job.exit_code}"
        if s.restarts:
            times = "time" if s.restarts == 1 else "times"
            words += f"; requeued {s.restarts} {times} (Restarts={s.restarts})"
        if s.state.upper() in ("PREEMPTED", "REQUEUED", "REQUEUE_HOLD"):
            words += "; the scheduler took its resources back"
        if job.slurm_stale_s is not None:
            words += f"; as of {_clock(job.slurm_stale_s)} ago: the controller stopped answering"
        return words
    return "running" if job.running else "ended"
