from datetime import timezone

from gputop_diag import sim
from gputop_diag.diagnose.slurm import (
    collect_scheduler_evidence,
    parse_duration,
    parse_slurm_time,
    parse_squeue,
)


def test_durations():
    assert parse_duration("1-00:00:00") == 86400
    assert parse_duration("2:30:00") == 9000
    assert parse_duration("30:00") == 1800
    assert parse_duration("45") == 2700
    assert parse_duration("2-12") == 216000
    assert parse_duration("UNLIMITED") is None
    assert parse_duration("garbage") is None


def test_times():
    assert parse_slurm_time("N/A") is None
    assert parse_slurm_time("2026-01-15T09:00:00", timezone.utc) == 1768467600.0


def test_parse_squeue_skips_malformed_lines():
    text = (
        "123|PENDING|Resources|2026-01-15T09:00:00|N/A|1-00:00:00|0:00|train|alice\n"
        "garbage line\n\x00\xff\n"
        "124|RUNNING|None|2026-01-15T08:00:00|2026-01-15T08:10:00|1:00:00|55:00|eval|alice\n"
    )
    jobs = parse_squeue(text, now=1768467600.0 + 3600, tz=timezone.utc)
    assert [j.job_id for j in jobs] == ["123", "124"]
    assert jobs[0].pending and jobs[0].wait_s == 3600 and jobs[0].reason == "Resources"
    assert not jobs[1].pending and jobs[1].wait_s == 600 and jobs[1].time_left_s == 300


def test_collect_through_the_command_runner():
    jobs = collect_scheduler_evidence(sim.build("scheduler-wait"))
    assert jobs[0].job_id == "48213" and jobs[0].pending and jobs[0].wait_s > 7000


def test_no_slurm_installed_is_no_evidence():
    assert collect_scheduler_evidence(sim.build("idle")) == []
