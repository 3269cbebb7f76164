"""Collection cost: median time of one tick, and the snapshot command's whole-process time.

    python bench/collect.py

Prints the median wall time of one Sampler tick over the simulator for 8 and 64 GPUs with 10
and 1,000 GPU processes, and the median whole-process wall time of
`gputop-diag snapshot --json --demo idle` (target: under 0.35 s).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from gputop_diag import sim
from gputop_diag.sampler import Sampler

TICKS = 30
RUNS = 7


def tick_median(gpus: int, procs: int) -> float:
    sources = sim.build("compute-bound", gpu_count=gpus, process_count=procs)
    sampler = Sampler(sources, interval=1.0)
    sampler.sample()  # first tick primes rates and GPM
    times = []
    for _ in range(TICKS):
        sources.clock.sleep(1.0)
        t0 = time.perf_counter()
        sampler.sample()
        times.append(time.perf_counter() - t0)
    sampler.close()
    return statistics.median(times)


def process_median() -> float:
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gputop_diag", "snapshot", "--json", "--demo", "idle"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    print(f"{'GPUs':>5} {'processes':>10} {'median tick':>12}")
    for gpus, procs in ((8, 10), (8, 1000), (64, 10), (64, 1000)):
        print(f"{gpus:>5} {procs:>10} {tick_median(gpus, procs) * 1000:>9.2f} ms")
    t = process_median()
    verdict = "ok" if t < 0.35 else "over the 0.35 s target"
    print(f"snapshot --json --demo idle, whole process: {t:.3f} s median of {RUNS} ({verdict})")


if __name__ == "__main__":
    main()
