"""How well the distributed-job judgement works on real four-rank gloo jobs.

    python bench/ranks.py [--runs N] [--straggler-runs M] [--hang-runs H] [--hold S] [--busy B]

Each job is examples/ranks.py as four ranks forked from one process that imported torch once
(tests/data/jobs/fork_ranks.py, run as a script, under the environment of
`gputop_diag.probe.launch.probe_environment`, as `watch --probe` gives it), its probe files in a
temporary XDG_RUNTIME_DIR. Every half second the probe files are read with
`gputop_diag.collect.probe.ProbeReader` and judged with `gputop_diag.diagnose.ranks.judge_ranks`,
as every surface reads and judges them; the product's floors are left as they are (10 s for the
hang, 5 s for the stack request). Every job is killed at the end of its run (SIGKILL to the
ranks and the launcher).

Printed:

- balanced runs (N, default 10): `--seconds 12`, every rank equal, read until the job stops
  itself. For each run: whether a straggler (or a hang) was named at any read (a false
  positive), and the verdict of the last read; then "balanced: K of N runs named no straggler".
- straggler runs (M, default 3): `--slow-rank R --slow-ms 50`, R = 0, 1, 2, 3, 0, ... For each:
  the time from the job's start (its launch) until rank R was named the straggler with the
  cause "compute", whether a wrong rank was named at any read (until S seconds after the right
  name, `--hold`, default 5), and the verdict; then the median time-to-name (target: 20 s).
- hang runs (H, default 2): `--stop-rank R --stop-after 40`, R = 3, 1, ... For each: the time
  from rank R's last step (the read's time less the stall the probe reports for R) until the
  hang was named with missing == (R,), and until it was named with R's stack too (target: 30 s
  for both), and the verdict.

`--busy B` runs B processes that spin on the CPU for the whole bench (a shared, busy host: on two
cores, B = 2 takes them both), so the balanced runs show whether a rank that gets less of the
CPU for a while is named a straggler.

Figures only: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gputop_diag.collect.probe import ProbeReader  # noqa: E402
from gputop_diag.diagnose.ranks import RanksView, judge_ranks  # noqa: E402
from gputop_diag.probe.launch import probe_environment  # noqa: E402
from gputop_diag.sources import RealProcFS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ROOT / "tests" / "data" / "jobs" / "fork_ranks.py"
WORLD = 4
READ_EVERY_S = 0.5
STRAGGLER_TARGET_S = 20.0
HANG_TARGET_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """One four-rank job under the probe, in its own XDG_RUNTIME_DIR."""

    def __init__(self, args: list[str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="gputop-bench-ranks-")
        env = dict(os.environ, XDG_RUNTIME_DIR=self.dir, OMP_NUM_THREADS="1")
        env.pop("PYTHONPATH", None)
        env = probe_environment(env)
        argv = [sys.executable, str(LAUNCHER), str(WORLD), str(free_port()), "--", *args]
        self.stderr = open(os.path.join(self.dir, "stderr.txt"), "w")  # noqa: SIM115
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        self.pids = [int(p) for p in self.proc.stdout.readline().split()]
        self.reader = ProbeReader({"XDG_RUNTIME_DIR": self.dir}, RealProcFS())

    def view(self) -> RanksView | None:
        return judge_ranks(self.reader.read(self.pids).states, at=time.time())

    def reads(self, timeout: float):
        """(seconds since the launch, view) every half second, until `timeout` or one read
        after the job ended."""
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            ended = self.proc.poll() is not None
            yield time.monotonic() - self.started, self.view()
            if ended:
                return
            time.sleep(READ_EVERY_S)

    def stop(self) -> None:
        for pid in [*self.pids, self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(10)
        self.proc.stdout.close()
        self.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _stepping(view: RanksView) -> bool:
    """Every rank of the job has a step record."""
    return len(view.rows) == WORLD and all(r.last_step is not None for r in view.rows)


def _short(text: str | None, width: int = 150) -> str:
    if text is None:
        return "(no view: fewer than two ranks with probe records)"
    return text if len(text) <= width else text[: width - 3] + "..."


def balanced(runs: int) -> None:
    print(f"balanced runs: {runs} x examples/ranks.py --seconds 12, all ranks equal")
    clean = 0
    for n in range(1, runs + 1):
        job = Job(["--seconds", "12"])
        try:
            named: list[tuple[float, str]] = []
            hangs: list[tuple[float, str]] = []
            last, reads, first = None, 0, None
            for t, view in job.reads(90):
                reads += 1
                if view is None:
                    continue
                last = view
                if first is None and _stepping(view):
                    first = t
                if view.straggler is not None:
                    named.append((t, view.verdict))
                if view.hang is not None:
                    hangs.append((t, view.verdict))
            code = job.proc.poll()
        finally:
            job.stop()
        if not named:
            clean += 1
        fp = "no" if not named else f"YES, {len(named)} of {reads} reads"
        hang = "no" if not hangs else f"YES, {len(hangs)} reads (first at {hangs[0][0]:.1f} s)"
        steps = "" if last is None else f", {max(r.last_step or 0 for r in last.rows)} steps"
        since = "never" if first is None else f"{first:.1f} s"
        print(
            f"  run {n:2d}: exit {code}, every rank stepping at {since}{steps}, {reads} reads; "
            f"straggler named: {fp}; hang named: {hang}"
        )
        if named:
            t, verdict = named[0]
            print(f"          first false positive at {t:.1f} s: {_short(verdict)}")
        print(f"          verdict at the end: {_short(last.verdict if last else None)}")
    print(f"balanced: {clean} of {runs} runs named no straggler")


def stragglers(runs: int, hold: float) -> None:
    print(
        f"straggler runs: {runs} x examples/ranks.py --seconds 90 --slow-rank R --slow-ms 50 "
        f"(target: named within {STRAGGLER_TARGET_S:.0f} s of the start)"
    )
    times = []
    for n in range(runs):
        rank = n % WORLD
        job = Job(["--seconds", "90", "--slow-rank", str(rank), "--slow-ms", "50"])
        try:
            found = None
            wrong: list[tuple[float, int]] = []
            other_cause = 0
            last = first = None
            for t, view in job.reads(60):
                if view is None:
                    continue
                last = view
                if first is None and _stepping(view):
                    first = t
                s = view.straggler
                if s is not None and s.rank != rank:
                    wrong.append((t, s.rank))
                elif s is not None and s.cause != "compute":
                    other_cause += 1
                elif s is not None and found is None:
                    found = (t, view)
                if found is not None and t >= found[0] + hold:
                    break
        finally:
            job.stop()
        bad = "no" if not wrong else f"YES, {len(wrong)} reads (first: rank {wrong[0][1]})"
        if other_cause:
            bad += f"; rank {rank} named with another cause at {other_cause} reads"
        if found is None:
            print(f"  rank {rank}: NOT named within 60 s; wrong rank named: {bad}")
            print(f"          verdict: {_short(last.verdict if last else None)}")
            continue
        t, view = found
        times.append(t)
        mark = "ok" if t <= STRAGGLER_TARGET_S else "OVER TARGET"
        since = "" if first is None else f", {t - first:.1f} s after every rank's first step"
        print(f"  rank {rank}: named after {t:.1f} s ({mark}{since}); wrong rank named: {bad}")
        print(f"          verdict: {_short(view.verdict)}")
    if times:
        med = statistics.median(times)
        mark = "ok" if med <= STRAGGLER_TARGET_S else "OVER TARGET"
        print(
            f"stragglers: {len(times)} of {runs} named; median time-to-name {med:.1f} s "
            f"(slowest {max(times):.1f} s; target {STRAGGLER_TARGET_S:.0f} s: {mark})"
        )
    else:
        print(f"stragglers: 0 of {runs} named")


def hangs(runs: int) -> None:
    print(
        f"hang runs: {runs} x examples/ranks.py --seconds 120 --stop-rank R --stop-after 40 "
        f"(target: named with its stack within {HANG_TARGET_S:.0f} s of the rank's last step)"
    )
    times = []
    for n in range(runs):
        rank = (WORLD - 1 - 2 * n) % WORLD  # 3, 1, 3, 1, ...
        job = Job(["--seconds", "120", "--stop-rank", str(rank), "--stop-after", "40"])
        try:
            last_at = named = stacked = None
            last = None
            for t, view in job.reads(90):
                if view is None:
                    continue
                last = view
                row = view.row(rank)
                if row is not None and row.stalled_s is not None:
                    last_at = t - row.stalled_s  # the probe's own clock of the stall
                h = view.hang
                if h is not None and h.missing == (rank,):
                    named = named if named is not None else t
                    if rank in dict(h.stacks):
                        stacked = (t, view)
                        break
        finally:
            job.stop()
        if stacked is None or last_at is None:
            print(f"  rank {rank}: hang NOT named with its stack within 90 s")
            print(f"          verdict: {_short(last.verdict if last else None)}")
            continue
        t, view = stacked
        times.append(t - last_at)
        mark = "ok" if t - last_at <= HANG_TARGET_S else "OVER TARGET"
        print(
            f"  rank {rank}: last step at {last_at:.1f} s after the start; missing == ({rank},) "
            f"named {named - last_at:.1f} s after it, with rank {rank}'s stack "
            f"{t - last_at:.1f} s after it ({mark}); stacks of ranks "
            f"{sorted(r for r, _ in view.hang.stacks)}"
        )
        print(f"          verdict: {_short(view.verdict)}")
    if times:
        mark = "ok" if max(times) <= HANG_TARGET_S else "OVER TARGET"
        print(
            f"hangs: {len(times)} of {runs} named with the stack; slowest {max(times):.1f} s "
            f"after the last step (target {HANG_TARGET_S:.0f} s: {mark})"
        )
    else:
        print(f"hangs: 0 of {runs} named with the stack")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="balanced runs")
    ap.add_argument("--straggler-runs", type=int, default=3)
    ap.add_argument("--hang-runs", type=int, default=2)
    ap.add_argument(
        "--hold", type=float, default=5.0, help="reads kept after the straggler is named (s)"
    )
    ap.add_argument("--busy", type=int, default=0, help="processes spinning on the CPU meanwhile")
    args = ap.parse_args()
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)
    ]
    if spinners:
        print(f"{args.busy} processes spin on the CPU throughout ({os.cpu_count()} CPUs)")
    try:
        _run(args)
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def _run(args: argparse.Namespace) -> None:
    started = time.monotonic()
    if args.runs:
        balanced(args.runs)
    if args.straggler_runs:
        stragglers(args.straggler_runs, args.hold)
    if args.hang_runs:
        hangs(args.hang_runs)
    print(f"total: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
