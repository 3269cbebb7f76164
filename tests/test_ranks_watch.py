"""`gputop-diag watch --probe` on distributed jobs, as a user runs them: three ranks under
torchrun, one rank 50 ms slower a step, named as the straggler with its cause (three ranks name
it as four do: the others' median is the baseline; each rank torchrun starts imports torch, about
3.5 s of CPU); and four ranks, one of which stops stepping, named with the collective the others
wait in and its stack (the product's own floor: 10 s of no step, its stack asked for at 5 s;
bench/ranks.py times it from the rank's last step)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAUNCHER = REPO / "tests" / "data" / "jobs" / "fork_ranks.py"
sys.path.insert(0, str(LAUNCHER.parent))
from fork_ranks import free_port  # noqa: E402


def _watch(tmp_path: Path, seconds: int | None, job: list[str]) -> tuple[dict, float]:
    """`watch --probe --json` for `seconds` (None: until the job ends)."""
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env.pop("PYTHONPATH", None)
    argv = [sys.executable, "-m", "gputop_diag", "watch", "--probe", "--json"]
    if seconds is not None:
        argv += ["--seconds", str(seconds)]
    argv += ["--", *job]
    started = time.monotonic()
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=(seconds or 60) + 60,
        check=False,
    )
    took = time.monotonic() - started
    _kill_left_running(proc.stderr)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout), took


def _kill_left_running(stderr: str) -> None:
    """`watch --seconds` leaves the job running in its own session: stop it."""
    for line in stderr.splitlines():
        if "kill -INT -" in line:
            pgid = int(line.rsplit("kill -INT -", 1)[1].split(")")[0])
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not on PATH")
def test_watch_names_the_straggler_of_a_torchrun_job_and_its_cause(tmp_path):
    job = ["torchrun", "--standalone", "--nproc-per-node", "3", "examples/ranks.py"]
    job += ["--seconds", "6", "--slow-rank", "2", "--slow-ms", "50"]
    # watched until the job ends: 6 s of steps after the three ranks' torch imports
    # (bench/ranks.py times the naming itself: about 1 s after every rank's first step)
    doc, took = _watch(tmp_path, None, job)
    ranks = doc["ranks"]
    assert ranks is not None, doc["measured"]
    assert [r["rank"] for r in ranks["rows"]] == [0, 1, 2]
    s = ranks["straggler"]
    assert s is not None, ranks["verdict"]
    assert (s["rank"], s["cause"]) == (2, "compute")
    assert 0.035 <= s["gap_s"] <= 0.065
    assert ranks["hang"] is None
    assert {r["state"] for r in ranks["rows"]} == {"ended"}  # each said goodbye
    assert all(r["node"] for r in ranks["rows"])
    assert doc["watch_ended_by"] == "ended"
    split = doc["measured"]["step_split"]
    assert split["t_comm_total_s"] is not None  # DDP's all-reduce is measured: t_comm is known
    assert "t_comm" in split["measured"]


def test_watch_says_a_rank_stopped_as_it_happens_and_sums_it_up_with_the_stack(tmp_path):
    """The hang is said on stderr the tick it is named (not at the status line's pace); the
    watch is then stopped (SIGTERM) and its summary carries the collective and the stacks."""
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    env.pop("PYTHONPATH", None)
    job = [sys.executable, str(LAUNCHER), "4", str(free_port()), "--"]
    job += ["--seconds", "120", "--stop-rank", "1", "--stop-after", "20"]
    argv = [sys.executable, "-m", "gputop_diag", "watch", "--probe", "--json", "--seconds", "90"]
    watch = subprocess.Popen(
        [*argv, "--", *job],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said, lines = None, []
    try:
        for line in watch.stderr:
            lines.append(line)
            if line.startswith("gputop-diag: hang: "):
                said = line
                break
        assert said is not None, "".join(lines[-20:])
        time.sleep(2.5)  # the stacks, asked for at 5 s of stall, read by the next ticks
        watch.send_signal(signal.SIGTERM)
        out, err = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
    _kill_left_running("".join(lines) + err)
    assert watch.returncode == 143, err[-2000:]
    assert said.startswith("gputop-diag: hang: rank 1 took no step for 1")  # 10 s and on
    assert "ranks 0, 2, 3 wait for it in all_reduce (DDP bucket) #" in said
    doc = json.loads(out)
    hang = doc["ranks"]["hang"]
    assert hang is not None, doc["ranks"]["verdict"]
    assert hang["missing"] == [1] and hang["waiting"] == [0, 2, 3]
    assert hang["collective"].startswith("all_reduce (DDP bucket) #")
    stacks = dict((rank, text) for rank, text in hang["stacks"])
    assert "examples/ranks.py" in stacks[1] and "in main" in stacks[1]
    assert doc["ranks"]["straggler"] is None
    assert doc["ranks"]["verdict"].startswith("hang: rank 1 took no step for")
    # the Flight Recorder wrote no dump (gloo dumps only when asked): said, with how to get one
    (fr,) = doc["ranks"]["flight_recorder"]
    assert fr.startswith("flight recorder: no dump from this job")
