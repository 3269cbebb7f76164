import dataclasses
import os
import subprocess
from datetime import timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from gputop_diag import sim
from gputop_diag.collect.job import JobWatch, TreeReader
from gputop_diag.collect.slurm import (
    collect_scheduler_evidence,
    evidence_from_scontrol,
    explain_failure,
    gpus_in,
    list_pids,
    parse_duration,
    parse_listpids,
    parse_scontrol_fields,
    parse_slurm_time,
    parse_squeue,
    resolve_job,
)
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.sources import CommandResult


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


# -- one job, by id (watch --slurm) --------------------------------------------------------------
WATCH_DATA = Path(__file__).parent / "data" / "watch"


def test_scontrol_one_line_of_slurm_22_05():
    fields = parse_scontrol_fields((WATCH_DATA / "slurm-22.05-pending.txt").read_text())
    assert fields["JobState"] == "PENDING" and fields["NodeList"] == ""
    assert fields["AllocNode:Sid"] == "localhost:19760" and fields["CPUs/Task"] == "2"
    now = parse_slurm_time("2026-12-03T05:20:20", timezone.utc)
    j = evidence_from_scontrol(fields, now, timezone.utc)
    assert j.pending and j.reason == "Resources" and j.wait_s == 90
    assert j.start_time is None and j.time_limit_s is None and j.nodes is None
    assert j.partition == "debug" and j.user == "root" and j.gpus_requested is None
    assert j.tres == "cpu=2,mem=1M,node=1,billing=2" and j.restarts == 0
    assert j.stdout_path == "/tmp/slurm-2.out"


def test_scontrol_multi_line_running_with_gpus_and_restarts():
    fields = parse_scontrol_fields((WATCH_DATA / "slurm-running-gpus.txt").read_text())
    assert fields["JobName"] == "llm pretrain"  # a value with a space
    now = parse_slurm_time("2026-01-15T10:20:00", timezone.utc)
    j = evidence_from_scontrol(fields, now, timezone.utc)
    assert j.state == "RUNNING" and j.wait_s == 1800 and j.time_left_s == 600
    assert j.gpus_requested == 8 and j.restarts == 2 and j.nodes == "gpu-node-07"
    assert j.user == "alice" and j.name == "llm pretrain"


def test_gpus_in_tres_and_gres():
    assert gpus_in("cpu=64,mem=500G,node=1,billing=64,gres/gpu=8") == 8
    assert gpus_in("cpu=8,gres/gpu:a100=4") == 4
    assert gpus_in("gres/gpu:h100:2") == 2 and gpus_in("gres:gpu:3") == 3
    assert gpus_in("cpu=2,node=1") is None and gpus_in("(null)") is None


def test_listpids():
    pids = parse_listpids((WATCH_DATA / "listpids.txt").read_text())
    assert pids == [25727, 25728]


class _Runner:
    def __init__(self, result=None, exc=None):
        self.result, self.exc, self.calls = result, exc, []

    def __call__(self, argv, timeout):
        self.calls.append(list(argv))
        if self.exc is not None:
            raise self.exc
        return self.result


def _sources(runner):
    s = sim.build("scheduler-wait")
    s.run_command = runner
    return s


@pytest.mark.parametrize(
    ("result", "exc", "words"),
    [
        (CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n"), None,
         "Slurm does not know job 17"),
        (CommandResult(1, "", "slurm_load_jobs error: Unable to contact slurm controller "
                              "(connect failure)\n"), None, "the Slurm controller does not answer"),
        (CommandResult(1, "", "scontrol: error: Socket timed out on send/recv operation\n"), None,
         "is slurmctld up?"),
        (None, FileNotFoundError("scontrol"), "not installed on this machine"),
        (None, subprocess.TimeoutExpired(["scontrol"], 5), "did not answer in 5 s"),
        (CommandResult(1, "", "scontrol: error: something odd\n"), None,
         "scontrol failed: scontrol: error: something odd"),
    ],
)  # fmt: skip
def test_resolve_job_failures_are_explained_not_raised(result, exc, words):
    found, problem = resolve_job(_sources(_Runner(result, exc)), "17")
    assert found is None and words in problem


def test_resolve_job_through_the_simulator():
    s = sim.build("scheduler-wait")
    found, problem = resolve_job(s, "48213")
    assert problem is None and found.pending and found.reason == "Resources"
    assert found.gpus_requested == 16 and found.wait_s == pytest.approx(7260, abs=2)
    found, problem = resolve_job(s, "999")
    assert found is None and "Slurm does not know job 999" in problem


def test_list_pids_failures():
    pids, problem = list_pids(_sources(_Runner(exc=FileNotFoundError("scontrol"))), "1")
    assert pids == [] and "not installed" in problem
    r = CommandResult(1, "", "slurm_pid2jobid: no processes\n")
    want = "scontrol listpids failed: slurm_pid2jobid: no processes"
    assert list_pids(_sources(_Runner(r)), "1") == ([], want)
    assert "Slurm does not know" not in explain_failure("x", None, r)


def test_cgroup_membership_finds_a_jobs_processes():
    cgroups = {
        10: "0::/system.slice/slurmstepd.scope/job_17/step_batch/user/task_0\n",
        11: "4:memory:/slurm/uid_1000/job_17/step_0/task_1\n",
        12: "0::/system.slice/slurmstepd.scope/job_170/step_batch\n",
        13: "0::/user.slice\n",
    }

    class PS:
        Error = NoSuchProcess = ZombieProcess = AccessDenied = Exception

        @staticmethod
        def pids():
            return [*cgroups, 14]

    class FS:
        @staticmethod
        def read_text(path):
            pid = int(path.split("/")[2])
            if pid not in cgroups:
                raise OSError("gone")
            return cgroups[pid]

    assert TreeReader(PS, FS).pids_in_cgroup_of_job("17") == [10, 11]


def test_output_lines_are_stamped_when_read_not_before_a_slow_scontrol(tmp_path):
    # one tick a second; scontrol listpids takes 4 s (the simulated clock) on the fourth: the
    # lines read after it are stamped with the time they were read, so the step times are the
    # times between reads
    log = tmp_path / "slurm-48213.out"
    log.write_text("")
    record = (WATCH_DATA / "slurm-running-gpus.txt").read_text()
    record = record.replace("/home/alice/llm/slurm-48213.out", str(log))
    s = sim.build("scheduler-wait")
    calls = {"listpids": 0}

    def runner(argv, timeout):
        if argv[1] == "listpids":
            calls["listpids"] += 1
            if calls["listpids"] == 4:
                s.clock.sleep(4.0)  # a slow controller
            return CommandResult(1, "", "slurm_pid2jobid: no processes\n")
        return CommandResult(0, record, "")

    s.run_command = runner
    w = JobWatch.for_slurm(s, "48213")
    t0 = s.clock.now()
    for step in range(1, 6):
        snap_t = s.clock.now()  # the snapshot's time, taken before scontrol runs
        with log.open("a") as f:
            f.write(f"step {step} loss 0.5\n")
            if step == 4:
                f.write("torch.OutOfMemoryError: CUDA out of memory.\n")
        st = w.sample(SimpleNamespace(timestamp=snap_t))
        s.clock.sleep(1.0)
    assert calls["listpids"] == 5
    # read at t0, +1, +2, +7 (after the slow call), +8
    assert st.output_events[-1].timestamp - t0 == pytest.approx(7.0, abs=1e-3)
    assert st.steps.step == 5 and st.steps.step_times_s == pytest.approx((5.0, 1.0), abs=1e-3)


def _fake_scontrol(tmp_path, record: str) -> Path:
    """An `scontrol` on the PATH that prints `record`, or hangs while the file `hang` exists."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "record.txt").write_text(record)
    script = bindir / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f"if [ -e {tmp_path}/hang ]; then exec sleep 30; fi\n"
        f'if [ "$1" = listpids ]; then echo "slurm_pid2jobid: no processes" >&2; exit 1; fi\n'
        f"cat {tmp_path}/record.txt\n"
    )
    script.chmod(0o755)
    return bindir


def test_a_hung_scontrol_is_explained_with_the_hint(tmp_path, monkeypatch):
    import gputop_diag.collect.slurm as S
    from gputop_diag.sources import run_real_command

    bindir = _fake_scontrol(tmp_path, "")
    (tmp_path / "hang").touch()
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setattr(S, "SCONTROL_TIMEOUT_S", 0.3)
    s = sim.build("idle")
    s.run_command = run_real_command
    found, problem = resolve_job(s, "17")
    assert found is None
    assert "scontrol did not answer in 0.3 s: the controller is slow or down" in problem
    assert "is slurmctld up? `scontrol ping` says" in problem


def test_a_state_repeated_after_the_controller_stopped_answering_says_how_old(
    tmp_path, monkeypatch
):
    import gputop_diag.collect.slurm as S
    from gputop_diag.job.state import state_words
    from gputop_diag.sources import run_real_command

    record = (WATCH_DATA / "slurm-running-gpus.txt").read_text()
    bindir = _fake_scontrol(tmp_path, record.replace("\n   ", " "))
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setattr(S, "SCONTROL_TIMEOUT_S", 0.3)
    s = sim.build("idle")
    s.run_command = run_real_command
    w = JobWatch.for_slurm(s, "48213")
    st = w.sample()
    assert st.slurm.state == "RUNNING" and "stopped answering" not in state_words(st)
    (tmp_path / "hang").touch()  # the controller goes away
    s.clock.sleep(95.0)
    w.scheduler_evidence()
    st = w.sample()
    words = state_words(st)
    assert words.startswith("RUNNING") and st.slurm_stale_s == pytest.approx(95, abs=1)
    assert "as of 1:35 ago: the controller stopped answering" in words
    assert "is slurmctld up?" in st.problem


@pytest.mark.parametrize(
    ("state", "exit_field", "code", "sig", "words"),
    [
        ("FAILED", "3:0", 3, None, "FAILED; exited with code 3; requeued 2 times (Restarts=2)"),
        (
            "CANCELLED",
            "0:9",
            137,
            "SIGKILL",
            "CANCELLED; killed by SIGKILL (exit code 137); requeued 2 times (Restarts=2)",
        ),
        ("COMPLETED", "0:0", 0, None, "COMPLETED; requeued 2 times (Restarts=2)"),
    ],
)
def test_an_ended_slurm_jobs_exit_code_is_kept(state, exit_field, code, sig, words):
    from gputop_diag.commands.watch import _exit_code
    from gputop_diag.diagnose.alerts import job_alerts
    from gputop_diag.job.state import state_words

    record = (WATCH_DATA / "slurm-running-gpus.txt").read_text()
    record = record.replace("JobState=RUNNING", f"JobState={state}")
    record = record.replace("ExitCode=0:0", f"ExitCode={exit_field}")
    s = sim.build("idle")
    s.run_command = lambda argv, timeout: CommandResult(0, record, "")
    w = JobWatch.for_slurm(s, "48213")
    st = w.sample()
    assert (st.exit_code, st.exit_signal) == (code, sig) and w.finished
    assert state_words(st) == words
    assert _exit_code(w) == code  # ours follows the job's, as for a started command
    snap = dataclasses.replace(Sampler(s, interval=1.0).sample(), job=st)
    kinds = {a.kind for a in job_alerts(snap)}
    assert bool(kinds & {"job_exit", "job_signal"}) == (code != 0)
