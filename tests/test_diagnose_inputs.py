"""The classifier's two small collectors: Slurm's queue and the kernel log's OOM kills."""

from __future__ import annotations

from datetime import timezone

from gputop_diag.collect.kernlog.oom import collect_oom_kills
from gputop_diag.collect.slurm import (
    collect_scheduler_evidence,
    parse_duration,
    parse_slurm_time,
    parse_squeue,
)
from gputop_diag.sources import CommandResult
from gputop_diag.xid.oom import parse_oom_kills

UTC = timezone.utc


class FakeSources:
    """A Sources stand-in whose run_command answers (or raises) what the test says."""

    def __init__(self, answer):
        self.answer, self.calls = answer, []
        self.clock = type("C", (), {"now": staticmethod(lambda: 1_768_471_200.0)})()

    def run_command(self, argv, timeout):
        self.calls.append((list(argv), timeout))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def test_slurm_time_formats():
    assert parse_slurm_time("2026-01-15T09:12:00", UTC) == 1_768_468_320.0
    for text in ("N/A", "Unknown", "None", "", "(null)", "garbage"):
        assert parse_slurm_time(text, UTC) is None
    # without a zone Slurm's times are the local time of the machine that printed them
    assert parse_slurm_time("2026-01-15T09:12:00") is not None


def test_slurm_durations():
    assert parse_duration("1-00:00:00") == 86_400
    assert parse_duration("2-03:04:05") == 2 * 86_400 + 3 * 3600 + 4 * 60 + 5
    assert parse_duration("30:00") == 1800
    assert parse_duration("1:00:00") == 3600
    assert parse_duration("0:00") == 0
    assert parse_duration("UNLIMITED") is None
    assert parse_duration("Partition_limit") is None


def test_squeue_lines_become_scheduler_evidence():
    text = (
        "48213|PENDING|Resources|2026-01-15T08:00:00|N/A|2-00:00:00|0:00|llm-pretrain|alice\n"
        "not|enough\n"
        "48214|RUNNING|None|2026-01-15T07:00:00|2026-01-15T07:05:00|1:00:00|55:00|eval|alice\n"
        "48215|PENDING|QOSMaxGRESPerUser|2026-01-15T09:59:00|N/A|UNLIMITED|0:00|big|alice\n"
    )
    now = parse_slurm_time("2026-01-15T10:00:00", UTC)
    pend, run, qos = parse_squeue(text, now, UTC)
    assert pend.pending and pend.reason == "Resources" and pend.wait_s == 7200
    assert pend.time_limit_s == 172_800 and pend.name == "llm-pretrain" and pend.user == "alice"
    assert not run.pending and run.reason is None and run.wait_s == 300
    assert run.time_left_s == 300
    assert qos.time_limit_s is None and qos.time_left_s is None and qos.wait_s == 60


def test_collect_runs_squeue_for_this_user():
    src = FakeSources(CommandResult(0, "1|PENDING|Priority|N/A|N/A|30:00|0:00|j|u\n"))
    jobs = collect_scheduler_evidence(src)
    assert [j.job_id for j in jobs] == ["1"] and jobs[0].wait_s is None
    argv, timeout = src.calls[0]
    assert argv == ["squeue", "-h", "--me", "-o", "%i|%T|%r|%V|%S|%l|%M|%j|%u"]
    assert timeout > 0


def test_no_slurm_or_a_failing_squeue_is_no_evidence():
    assert collect_scheduler_evidence(FakeSources(FileNotFoundError(2, "squeue"))) == []
    assert collect_scheduler_evidence(FakeSources(CommandResult(1, "", "slurm down"))) == []
    assert collect_scheduler_evidence(FakeSources(TimeoutError())) == []


KERNEL_LOG = (
    "2026-01-15T10:00:40+0000 node kernel: Out of memory: Killed process 41280 "
    "(pt_data_worker) total-vm:81234567kB, anon-rss:2345678kB\n"
    "2026-01-15T10:01:00+0000 node kernel: NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off\n"
    "2026-01-15T10:02:00+0000 node kernel: Memory cgroup out of memory: Killed process 4242 "
    "(python) total-vm:1kB\n"
    "Jan 15 10:03:00 node kernel: Out of memory: Kill process 77 (java) score 900\n"
    "\x00\xff binary junk\n"
)


def test_oom_kills_are_parsed_from_the_kernel_log():
    kills = parse_oom_kills(KERNEL_LOG)
    assert [(k.pid, k.process_name, k.cgroup) for k in kills] == [
        (41280, "pt_data_worker", False),
        (4242, "python", True),
        (77, "java", False),
    ]
    assert kills[0].timestamp == 1_768_471_240.0 and kills[2].timestamp is None


def test_collect_oom_kills_reads_journalctl_since_the_window():
    src = FakeSources(CommandResult(0, KERNEL_LOG))
    assert len(collect_oom_kills(src, since=1_768_471_000.0)) == 3
    argv = src.calls[0][0]
    assert argv[:2] == ["journalctl", "-k"] and argv[-2:] == ["--since", "@1768471000"]
    assert collect_oom_kills(FakeSources(FileNotFoundError()), 0.0) == []
    assert collect_oom_kills(FakeSources(CommandResult(1, "", "no permission")), 0.0) == []
