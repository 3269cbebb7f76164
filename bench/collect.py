"""Collection cost: median time of one tick, and the snapshot command's whole-process time.

    python bench/collect.py [--extra-processes N]

Prints
- the median wall time of one Sampler tick over the simulator for 8 and 64 GPUs with 10 and
  1,000 GPU processes;
- the real psutil and /proc path on this machine: N extra processes (default 2,000) are spawned,
  plus 8 stand-ins for GPU ranks with 4 children each; the process collector's tick (one parent
  map shared by the 8) is timed against psutil's `children(recursive=True)` per rank (what it
  did before);
- the median whole-process wall time of `gputop-diag snapshot --json --demo idle` (target: under
  0.35 s).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import psutil

from gputop_diag import sim
from gputop_diag.collect.procs import ProcessCollector
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.sources import RealClock, RealProcFS

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


RANK = """
import os, sys, time
for _ in range(4):
    if os.fork() == 0:
        time.sleep(600); os._exit(0)
print("ready", flush=True)
time.sleep(600)
"""


def real_proc_ticks(extra: int, ranks: int = 8) -> tuple[int, float, float]:
    """(processes on the machine, median ms of the process collector's tick, median ms of
    psutil children(recursive=True) per rank) over the real /proc."""
    spawned = [subprocess.Popen(["sleep", "600"]) for _ in range(extra)]
    gpu = [subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE, text=True)]
    gpu += [
        subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE, text=True)
        for _ in range(ranks - 1)
    ]
    try:
        for p in gpu:
            p.stdout.readline()
        pids = [p.pid for p in gpu]
        collector = ProcessCollector(psutil, RealProcFS(), RealClock())
        collector.collect(pids)
        ours, before = [], []
        for _ in range(TICKS // 3):
            t0 = time.perf_counter()
            infos = collector.collect(pids)
            ours.append(time.perf_counter() - t0)
            assert all(len(i.children) == 4 for i in infos), "a rank lost its children"
            t0 = time.perf_counter()
            for pid in pids:
                psutil.Process(pid).children(recursive=True)
            before.append(time.perf_counter() - t0)
        return len(psutil.pids()), statistics.median(ours), statistics.median(before)
    finally:
        for p in gpu:
            for c in psutil.Process(p.pid).children(recursive=True):
                c.kill()
        for p in spawned + gpu:
            p.kill()
        for p in spawned + gpu:
            p.wait()


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--extra-processes", type=int, default=2000, metavar="N")
    args = ap.parse_args()
    print(f"{'GPUs':>5} {'processes':>10} {'median tick':>12}")
    for gpus, procs in ((8, 10), (8, 1000), (64, 10), (64, 1000)):
        print(f"{gpus:>5} {procs:>10} {tick_median(gpus, procs) * 1000:>9.2f} ms")
    n, ours, before = real_proc_ticks(args.extra_processes)
    print(
        f"real /proc, {n} processes, 8 GPU ranks x 4 children: process tick {ours * 1000:.1f} ms"
        f" median (one parent map); children(recursive=True) per rank {before * 1000:.1f} ms"
    )
    t = process_median()
    verdict = "ok" if t < 0.35 else "over the 0.35 s target"
    print(f"snapshot --json --demo idle, whole process: {t:.3f} s median of {RUNS} ({verdict})")


if __name__ == "__main__":
    main()
