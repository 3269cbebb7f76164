"""The cost of `gputop-diag health`: one read of every health check, and the judgement.

    python bench/health.py [--others 2000] [--runs 15] [--no-real]

Prints the median wall time (and the slowest) of
- the health read (`collect.health.read_health`) and the judgement over the simulator: 8 GPUs
  with an 8-rank job and its 20 data-loader workers in D state (`dataloader-d-state`), and
  8 GPUs with 2,000 GPU processes (each one's environment and state is read: the worst case);
- over real processes: 8 stand-ins for GPU ranks (4 forked children each, started with
  CUDA_LAUNCH_BLOCKING=1) among `--others` idle `sleep`s, read through this machine's /proc and
  /sys (simulated GPUs whose processes are the ranks, as bench/collect.py builds them);
- the whole command as a user runs it: the warm-up sample, the read and the judgement.

Target: the read at most 0.3 s with 8 GPUs and 2,000 processes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from collect import RANK_CHILDREN, Spawned, sources_for_ranks  # noqa: E402

from gputop_diag import sim  # noqa: E402
from gputop_diag.collect.health import read_health  # noqa: E402
from gputop_diag.commands.common import sample_once  # noqa: E402
from gputop_diag.health import judge  # noqa: E402

TARGET_S = 0.3


def timed(sources, runs: int) -> tuple[list[float], list[float], object]:
    """Wall seconds of the read (with the judgement) and of the whole command, `runs` times."""
    reads, whole, report = [], [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        snap = sample_once(sources, fast=True)
        t1 = time.perf_counter()
        report = judge(read_health(sources, snap))
        t2 = time.perf_counter()
        reads.append(t2 - t1)
        whole.append(t2 - t0)
        sources.clock.sleep(1.0)
    return reads, whole, report


def line(label: str, xs: list[float]) -> str:
    med = statistics.median(xs)
    mark = "ok" if med <= TARGET_S else "OVER TARGET"
    return f"{label:<58} median {med * 1000:7.1f} ms  max {max(xs) * 1000:7.1f} ms  {mark}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--others", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--no-real", action="store_true", help="the simulator only")
    args = ap.parse_args()

    src = sim.build("dataloader-d-state")
    reads, whole, report = timed(src, args.runs)
    stuck = len(report.facts.processes.stuck)
    print(line(f"sim: 8 GPUs, a job of 8 ranks + workers ({stuck} in D state)", reads))
    print(line("sim: the whole command (warm-up sample, read, judgement)", whole))
    src = sim.build("compute-bound", gpu_count=8, process_count=2000)
    reads, whole, report = timed(src, max(3, args.runs // 3))
    envs = len(report.facts.processes.envs)
    print(line(f"sim: 8 GPUs, 2,000 GPU processes ({envs} environments read)", reads))
    print(line("sim: the whole command, 2,000 GPU processes", whole))
    if args.no_real:
        return
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    os.environ.update(env)  # the rank stand-ins inherit it
    spawned = Spawned()
    try:
        spawned.grow_to(args.others)
        here = sum(1 for n in os.listdir("/proc") if n.isdigit())
        src = sources_for_ranks(spawned.rank_pids, realtime=False)
        reads, whole, report = timed(src, args.runs)
        f = {x.id: x for x in report.findings}
        named = len(f["env.cuda_launch_blocking"].pids) if "env.cuda_launch_blocking" in f else 0
        walked = report.facts.processes.examined
        print(
            line(
                f"real /proc: 8 ranks x {RANK_CHILDREN} children, {here} processes here "
                f"({walked} read, {named} with CUDA_LAUNCH_BLOCKING)",
                reads,
            )
        )
        print(line("real /proc: the whole command", whole))
    finally:
        spawned.close()


if __name__ == "__main__":
    main()
