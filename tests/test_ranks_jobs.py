"""Real distributed jobs (PyTorch, gloo, CPU), four ranks each, measured by the probe and judged
by diagnose/ranks.py: balanced, one rank slower by compute, one starved by its own loader, one
that stops stepping (the hang), one killed; DistributedDataParallel and a plain all_reduce loop.

The ranks are examples/ranks.py forked from one process that imported torch once
(tests/data/jobs/fork_ranks.py: the environment torchrun gives, without four torch imports on a
two-core machine), each job's from a launcher forked from the one `fork_ranks.py serve` of this
module (one torch import, about 3.5 s of CPU, for every job: the tests share a worker);
test_ranks_watch.py runs the same job under torchrun and `watch --probe`.
The reader and the judgement are the ones every surface uses; only the hang's floor is lowered
here (10 s in the product) so that the test waits seconds, not tens of them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop_diag.collect import probe as probe_reader
from gputop_diag.collect.probe import ProbeReader
from gputop_diag.diagnose import ranks as R
from gputop_diag.diagnose.ranks import judge_ranks
from gputop_diag.probe.launch import probe_environment
from gputop_diag.sources import RealProcFS

REPO = Path(__file__).resolve().parent.parent
LAUNCHER = REPO / "tests" / "data" / "jobs" / "fork_ranks.py"
sys.path.insert(0, str(LAUNCHER.parent))
from fork_ranks import free_port  # noqa: E402

pytestmark = pytest.mark.xdist_group("ranks-jobs")  # one launcher server for every job


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`fork_ranks.py serve` under the probe's environment, as `watch --probe` gives it: torch
    imported once; each job's launcher forked from it."""
    runtime = tmp_path_factory.mktemp("ranks-run")
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(
        [sys.executable, str(LAUNCHER), "serve"],
        cwd=REPO,
        env=probe_environment(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    yield proc, runtime
    proc.stdin.close()  # the server waits for its launchers, which the tests stopped
    proc.wait(30)
    proc.stdout.close()


class Job:
    def __init__(self, server, tmp_path: Path, args: list[str]) -> None:
        proc, runtime = server
        # 30 ms of work a step (not the example's 10): half the steps, half the CPU of four
        # ranks on two cores, and every gap asserted below is still over the 20 % gate
        job = {"world": 4, "port": free_port(), "args": ["--step-ms", "30", *args]}
        job["log"] = str(tmp_path / "job.log")
        proc.stdin.write(json.dumps(job) + "\n")
        proc.stdin.flush()
        self.launcher, *self.pids = (int(p) for p in proc.stdout.readline().split())
        assert len(self.pids) == 4, (self.launcher, self.pids)
        self.reader = ProbeReader({"XDG_RUNTIME_DIR": str(runtime)}, RealProcFS())

    def view(self):
        return judge_ranks(self.reader.read(self.pids).states, at=time.time())

    def ended(self) -> bool:
        """The launcher has exited (its ranks have): gone, or a zombie the server has not
        waited for yet."""
        try:
            with open(f"/proc/{self.launcher}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    def until(self, done, timeout: float):
        """Read every half second until `done(view)`; the last view either way."""
        deadline = time.monotonic() + timeout
        view = None
        while time.monotonic() < deadline:
            view = self.view()
            if view is not None and done(view):
                return view
            if self.ended() and view is not None:
                return self.view()
            time.sleep(0.5)
        return view

    def stop(self) -> None:
        for pid in [*self.pids, self.launcher]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def job(server, tmp_path):
    started = []

    def start(*args: str) -> Job:
        j = Job(server, tmp_path, list(args))
        started.append(j)
        return j

    yield start
    for j in started:
        j.stop()


@pytest.fixture
def quick_hang(monkeypatch):
    monkeypatch.setattr(R, "HANG_FLOOR_S", 3.0)
    monkeypatch.setattr(probe_reader, "STACK_AFTER_S", 3.0)


def _named(view) -> bool:
    return view.straggler is not None


def test_a_rank_slower_by_compute_is_the_straggler_with_its_cause(job):
    j = job("--seconds", "60", "--slow-rank", "2", "--slow-ms", "50")
    view = j.until(_named, 40)
    assert view is not None and view.straggler is not None, view and view.verdict
    s = view.straggler
    assert (s.rank, s.cause) == (2, "compute")
    assert 0.035 <= s.gap_s <= 0.065  # 50 ms of extra work a step
    assert s.explained >= R.STRAGGLER_EXPLAINED
    slow, others = view.row(2), [r for r in view.rows if r.rank != 2]
    assert all(slow.wait_s < r.wait_s - 0.03 for r in others)  # it waits least
    assert all(slow.own_s > r.own_s + 0.03 for r in others)  # and works most
    assert all(r.lag_s < 0.01 for r in others) and slow.lag_s > 0.035
    assert "rank 2" in view.verdict and "compute" in view.verdict


def test_a_rank_starved_by_its_own_loader_is_the_straggler_of_the_input_pipeline(job):
    j = job("--seconds", "60", "--starve-rank", "1", "--starve-ms", "40")
    view = j.until(_named, 40)
    assert view is not None and view.straggler is not None, view and view.verdict
    assert (view.straggler.rank, view.straggler.cause) == (1, "input pipeline")
    assert view.row(1).input_s > 0.03 > max(r.input_s for r in view.rows if r.rank != 1)


def test_a_plain_all_reduce_loop_names_its_straggler_too(job):
    j = job("--seconds", "60", "--mode", "allreduce", "--slow-rank", "3", "--slow-ms", "30")
    view = j.until(_named, 40)
    assert view is not None and view.straggler is not None, view and view.verdict
    assert (view.straggler.rank, view.straggler.cause) == (3, "compute")


def test_a_balanced_job_names_no_straggler(job):
    j = job("--seconds", "60")
    view = j.until(lambda v: min(r.steps for r in v.rows) >= 40, 40)
    assert view is not None and view.straggler is None
    assert view.verdict.startswith("no straggler: every rank's own work within"), view.verdict
    assert view.hang is None
    assert all(r.state == "stepping" for r in view.rows)


def test_a_rank_that_stops_stepping_is_the_hang_with_the_collective_and_its_stack(job, quick_hang):
    j = job("--seconds", "120", "--stop-rank", "3", "--stop-after", "30")
    view = j.until(lambda v: v.hang is not None and len(v.hang.stacks) == 4, 40)
    assert view is not None and view.hang is not None
    h = view.hang
    assert h.missing == (3,) and h.waiting == (0, 1, 2) and not h.gone
    assert h.collective.startswith("all_reduce (DDP bucket) #")
    assert view.row(3).state == "stalled"
    assert {view.row(r).state for r in (0, 1, 2)} == {"waiting"}
    assert view.row(3).entered < h.seq == view.row(0).entered
    stacks = dict(h.stacks)
    line = next(
        n
        for n, text in enumerate((REPO / "examples/ranks.py").read_text().splitlines(), 1)
        if "time.sleep(1)" in text
    )
    assert f'examples/ranks.py", line {line} in main' in stacks[3]  # where it is stuck
    assert "in backward" in stacks[0]  # the others: in DDP's backward, waiting for it
    assert "rank 3 took no step" in view.verdict and "never entered" in view.verdict


def test_a_killed_rank_is_named_and_the_ranks_that_fail_after_it_are_told_apart(job):
    j = job("--seconds", "120", "--die-rank", "3", "--die-after", "30")
    # the reader keeps the ranks that died without a goodbye, as gone
    view = j.until(lambda v: all(r.state == "gone" for r in v.rows), 60)
    assert view is not None and view.hang is not None, view and view.verdict
    assert view.hang.missing == (3,) == view.hang.gone
    assert view.row(3).state == "gone" and view.row(3).error is None
    failed = [r for r in view.rows if r.rank != 3]
    assert all(r.state == "gone" and r.error for r in failed)  # each its own exception
    assert "rank 3 ended without a goodbye" in view.verdict
    assert "then ranks 0, 1, 2 failed" in view.verdict
