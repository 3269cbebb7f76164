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
