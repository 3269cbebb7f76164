"""Scheduler evidence from Slurm: parse `squeue` output into frozen facts the classifier takes."""

from __future__ import annotations

import re
from datetime import datetime, tzinfo

from ..model import SchedulerEvidence  # noqa: F401 - re-exported

SQUEUE_FORMAT = "%i|%T|%r|%V|%S|%l|%M|%j|%u"
SQUEUE_TIMEOUT_S = 5.0


def parse_slurm_time(text: str, tz: tzinfo | None = None) -> float | None:
    """`2026-01-15T09:12:00` to epoch seconds; None for `N/A`, `Unknown` and the like.

    Slurm prints times without a zone, in the local time of the host running the command; `tz`
    None reads them so, a `tzinfo` reads them in that zone.
    """
    text = text.strip()
    try:
        t = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return (t if tz is None else t.replace(tzinfo=tz)).timestamp()


_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+)(?::(\d+))?$")


def parse_duration(text: str) -> float | None:
    """Slurm durations: `1-00:00:00`, `2:30:00`, `30:00`, `45`, `UNLIMITED`."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE", "N/A", "NOT_SET", ""):
        return None
    m = _DURATION.match(text)
    if not m:
        return None
    days, a, b, c = m.groups()
    if c is not None:  # [d-]h:m:s
        h, mi, s = int(a or 0), int(b), int(c)
    elif a is not None:  # m:s, or d-h:m when a day is given
        h, mi, s = (int(a), int(b), 0) if days else (0, int(a), int(b))
    else:  # minutes, or d-h
        h, mi, s = (int(b), 0, 0) if days else (0, int(b), 0)
    return ((int(days or 0) * 24 + h) * 60 + mi) * 60 + s


def parse_squeue(text: str, now: float, tz: tzinfo | None = None) -> list[SchedulerEvidence]:
    """Parse `squeue -h -o "%i|%T|%r|%V|%S|%l|%M|%j|%u"`; malformed lines are skipped.

    `now` (epoch s) measures the wait of pending jobs; `tz` is as in `parse_slurm_time`.
    """
    out = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 7 or not parts[0]:
            continue
        job, state, reason, submit, start, limit, used = parts[:7]
        name = parts[7] if len(parts) > 7 else None
        user = parts[8] if len(parts) > 8 else None
        sub_t, start_t = parse_slurm_time(submit, tz), parse_slurm_time(start, tz)
        pending = state.upper() in ("PENDING", "PD")
        wait = None
        if sub_t is not None:
            end = now if pending or start_t is None else start_t
            wait = max(0.0, end - sub_t)
        out.append(
            SchedulerEvidence(
                job_id=job,
                state=state,
                reason=None if reason in ("None", "") else reason,
                wait_s=wait,
                time_limit_s=parse_duration(limit),
                time_used_s=parse_duration(used),
                name=name,
                user=user,
            )
        )
    return out


def collect_scheduler_evidence(sources, tz: tzinfo | None = None) -> list[SchedulerEvidence]:
    """The current user's Slurm jobs; empty where Slurm is not installed or does not answer."""
    argv = ["squeue", "-h", "--me", "-o", SQUEUE_FORMAT]
    try:
        r = sources.run_command(argv, SQUEUE_TIMEOUT_S)
    except FileNotFoundError:  # no Slurm on this machine: not an error
        return []
    except Exception:  # noqa: BLE001 - a hung or broken squeue must not stop the diagnosis
        return []
    if r.returncode != 0:
        return []
    return parse_squeue(r.stdout, sources.clock.now(), tz)


# -- one job, by id: `scontrol show job -o`, else `squeue -j` ----------------------------------
SCONTROL_TIMEOUT_S = 5.0
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "RESIZING",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
ENDED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
_KV = re.compile(r"(?:^|\s)([A-Za-z][\w:/.]*)=(.*?)(?=\s+[A-Za-z][\w:/.]*=|\s*$)")
_GPUS_IN_TRES = re.compile(r"gres/gpu(?::[\w.-]+)?=(\d+)")
_GPUS_IN_GRES = re.compile(r"gpu(?::[\w.-]+)?:(\d+)")
# What scontrol/squeue print when the controller is out of reach, and when the id is unknown.
_DOWN = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Connection refused|"
    r"Communication connection failure|Zero Bytes were transmitted|slurmctld.*not responding|"
    r"Unable to establish controller|Invalid authentication credential|Munge",
    re.IGNORECASE,
)
_UNKNOWN = re.compile(r"Invalid job id specified|Invalid job id", re.IGNORECASE)


def parse_scontrol_fields(text: str) -> dict[str, str]:
    """`scontrol show job -o` (one line; the multi-line form too) as a dict of its fields."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        for m in _KV.finditer(line.strip()):
            out.setdefault(m.group(1), m.group(2).strip())
    return out


def gpus_in(tres: str | None) -> int | None:
    """The GPU count in a TRES string (`cpu=8,gres/gpu=4`) or a GRES one (`gres/gpu:a100:4`)."""
    if not tres or tres == "(null)":
        return None
    m = _GPUS_IN_TRES.search(tres)
    if m:
        return int(m.group(1))
    m = _GPUS_IN_GRES.search(tres.replace("gres/", "").replace("gres:", ""))
    return int(m.group(1)) if m else None


def _null(v: str | None) -> str | None:
    return None if v in (None, "", "(null)", "None", "N/A", "Unknown") else v


def evidence_from_scontrol(
    fields: dict[str, str], now: float, tz: tzinfo | None = None
) -> SchedulerEvidence:
    """One job's SchedulerEvidence from `scontrol show job` fields."""
    state = fields.get("JobState", "UNKNOWN")
    pending = state.upper() == "PENDING"
    submit = parse_slurm_time(fields.get("SubmitTime", ""), tz)
    start = parse_slurm_time(fields.get("StartTime", ""), tz)
    wait = None
    if submit is not None:
        end = now if pending or start is None else start
        wait = max(0.0, end - submit)
    alloc = _null(fields.get("AllocTRES")) or _null(fields.get("TRES"))
    req = _null(fields.get("ReqTRES"))
    gpus = gpus_in(req) or gpus_in(alloc)
    for key in ("TresPerNode", "TresPerJob", "Gres", "TresPerTask"):
        if gpus is None:
            gpus = gpus_in(_null(fields.get(key)))
    user = _null(fields.get("UserId"))
    restarts = fields.get("Restarts")
    reason = _null(fields.get("Reason"))
    return SchedulerEvidence(
        job_id=fields.get("JobId", "?"),
        state=state,
        reason=reason,
        wait_s=wait,
        time_limit_s=parse_duration(fields.get("TimeLimit", "")),
        time_used_s=parse_duration(fields.get("RunTime", "")),
        name=_null(fields.get("JobName")),
        user=user.split("(")[0] if user else None,
        submit_time=submit,
        start_time=start,
        nodes=_null(fields.get("NodeList")),
        partition=_null(fields.get("Partition")),
        gpus_requested=gpus,
        tres=alloc or req,
        restarts=int(restarts) if restarts and restarts.isdigit() else None,
        exit_code=_null(fields.get("ExitCode")),
        stdout_path=_null(fields.get("StdOut")),
    )


def explain_failure(prog: str, job_id: str | None, r) -> str:
    """A failed Slurm command's answer, said for the user."""
    err = (r.stderr or r.stdout or "").strip().splitlines()
    last = err[-1] if err else f"exit code {r.returncode}"
    text = "\n".join(err)
    if job_id is not None and _UNKNOWN.search(text):
        return (
            f"Slurm does not know job {job_id}: a typo, or it ended more than MinJobAge "
            "(default 300 s) ago (`sacct -j` has finished jobs where accounting is set up)"
        )
    if _DOWN.search(text):
        return (
            f"the Slurm controller does not answer ({prog}: {last}): is slurmctld up? "
            "`scontrol ping` says; so does `systemctl status slurmctld` on the controller"
        )
    return f"{prog} failed: {last}"


def resolve_job(
    sources, job_id: str, tz: tzinfo | None = None
) -> tuple[SchedulerEvidence | None, str | None]:
    """(the job's record, None) or (None, why not, in words): never raises for Slurm's own
    failures (not installed, controller down, unknown id, a hung command)."""
    argv = ["scontrol", "show", "job", "-o", job_id]
    try:
        r = sources.run_command(argv, SCONTROL_TIMEOUT_S)
    except FileNotFoundError:
        return _by_squeue(sources, job_id, tz)
    except Exception as e:  # noqa: BLE001 - a hung scontrol is a message, not a crash
        return None, _hung("scontrol", e)
    if r.returncode != 0:
        return None, explain_failure("scontrol", job_id, r)
    fields = parse_scontrol_fields(r.stdout)
    if "JobState" not in fields:
        return None, f"Slurm does not know job {job_id} (scontrol printed no job)"
    return evidence_from_scontrol(fields, sources.clock.now(), tz), None


def _by_squeue(sources, job_id: str, tz) -> tuple[SchedulerEvidence | None, str | None]:
    try:
        r = sources.run_command(["squeue", "-h", "-j", job_id, "-o", SQUEUE_FORMAT], 5.0)
    except FileNotFoundError:
        return None, (
            "Slurm's commands (scontrol, squeue) are not installed on this machine: run "
            "watch --slurm on a node of the cluster, or watch the job's processes with --pid"
        )
    except Exception as e:  # noqa: BLE001
        return None, _hung("squeue", e)
    if r.returncode != 0:
        return None, explain_failure("squeue", job_id, r)
    jobs = parse_squeue(r.stdout, sources.clock.now(), tz)
    if not jobs:
        return None, f"Slurm does not know job {job_id} (squeue lists no such job)"
    return jobs[0], None


def _hung(prog: str, e: Exception) -> str:
    import subprocess

    if isinstance(e, subprocess.TimeoutExpired):
        return (
            f"{prog} did not answer in {SCONTROL_TIMEOUT_S:g} s: the controller is slow or down "
            "(is slurmctld up? `scontrol ping` says)"
        )
    return f"{prog} could not run: {type(e).__name__}: {e}"


def parse_listpids(text: str) -> list[int]:
    """`scontrol listpids`: a header (PID JOBID STEPID LOCALID GLOBALID), then one row a
    process; the pids."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].isdigit():
            out.append(int(parts[0]))
    return sorted(set(out))


def list_pids(sources, job_id: str) -> tuple[list[int], str | None]:
    """The job's processes on this machine (`scontrol listpids`, answered by the local slurmd);
    ([], why) when it cannot say."""
    try:
        r = sources.run_command(["scontrol", "listpids", job_id], SCONTROL_TIMEOUT_S)
    except FileNotFoundError:
        return [], "scontrol is not installed here"
    except Exception as e:  # noqa: BLE001
        return [], _hung("scontrol listpids", e)
    if r.returncode != 0:
        return [], explain_failure("scontrol listpids", None, r)
    return parse_listpids(r.stdout), None
