"""Collection cost: one tick over the simulator, one tick over real processes, and the snapshot
command's whole-process time.

    python bench/collect.py [--others 100,2000,10000] [--ticks 30] [--no-sim] [--no-snapshot]

Prints
- the median wall time of one Sampler tick over the simulator for 8 and 64 GPUs with 10 and
  1,000 GPU processes;
- real processes: for each count of other processes (`sleep`s spawned here: 100, 2,000 and
  10,000 by default), with 8 stand-ins for GPU ranks of 4 children each, the CPU time of one
  tick (`time.process_time`, median and mean over `--ticks` ticks a simulated second apart):
  the process collector's, and the whole Sampler's (simulated GPUs whose processes are the 8
  ranks; the real psutil and /proc for the host and the processes). Once with the kernel's
  `children` files, once with them hidden (a kernel built without CONFIG_PROC_CHILDREN: a parent
  map of every process every 10 s, which the mean carries). Then the cost of psutil's
  `children(recursive=True)` per rank, which scans all of /proc (what this replaced), and the
  CPU time of a fixed pure-Python workload, to tell the machine's own slowdown from the tick's;
- the median whole-process wall time of `gputop-diag snapshot --json --demo idle` (target: under
  0.35 s).

Targets: a tick at 2,000 other processes <= 10 ms of CPU; at 10,000, within 1.5x of its cost at
100. `bench/tui.py --others ...` measures the live view over the same processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import statistics
import subprocess
import sys
import time

import psutil

from gputop_diag import sim
from gputop_diag.collect.procs import ProcessCollector
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.sources import RealProcFS, Sources

SIM_TICKS = 30
RUNS = 7
RANKS = 8
RANK_CHILDREN = 4
OTHERS = (100, 2000, 10000)

RANK = f"""
import os, time
for _ in range({RANK_CHILDREN}):
    if os.fork() == 0:
        time.sleep(3600); os._exit(0)
print("ready", flush=True)
time.sleep(3600)
"""


class HiddenChildren(RealProcFS):
    """This machine's /proc without the `children` files: a kernel built without them."""

    def read_text(self, path: str) -> str:
        if path.endswith("/children"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return super().read_text(path)


class Spawned:
    """Real processes: `ranks` stand-ins for GPU ranks (Python, `RANK_CHILDREN` forked children
    each) and any number of idle others (`sleep`). Kill them with `close()`."""

    def __init__(self, ranks: int = RANKS) -> None:
        self.others: list[subprocess.Popen] = []
        self.ranks = [
            subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE, text=True)
            for _ in range(ranks)
        ]
        for p in self.ranks:
            p.stdout.readline()

    @property
    def rank_pids(self) -> list[int]:
        return [p.pid for p in self.ranks]

    def grow_to(self, others: int) -> None:
        while len(self.others) < others:
            self.others.append(subprocess.Popen(["sleep", "3600"]))

    def close(self) -> None:
        for p in self.ranks:
            try:
                for c in psutil.Process(p.pid).children():
                    c.kill()
            except psutil.Error:
                pass
        for p in self.ranks + self.others:
            p.send_signal(signal.SIGKILL)
        for p in self.ranks + self.others:
            p.wait()


def processes_here() -> int:
    return sum(1 for n in os.listdir("/proc") if n.isdigit())


def sources_for_ranks(pids: list[int], *, realtime: bool, procfs=None) -> Sources:
    """The `compute-bound` machine (8 simulated GPUs) whose ranks are the real processes `pids`:
    NVML lists them on the GPUs, and psutil and /proc are this machine's."""
    sources = sim.build("compute-bound", realtime=realtime)
    m = sources.sim
    ranks = sorted((p for p in m.procs.values() if p.role == "rank"), key=lambda p: p.pid)
    for p, pid in zip(ranks, pids, strict=False):
        p.pid = pid
    m.procs = {p.pid: p for p in m.procs.values()}
    m.by_gpu = {}
    for p in ranks[: len(pids)]:  # only the ranks: no simulated co-tenant on the GPUs
        m.by_gpu.setdefault(p.gpu, []).append(p)
    return dataclasses.replace(sources, psutil=psutil, procfs=procfs or RealProcFS())


def tick_median(gpus: int, procs: int) -> float:
    sources = sim.build("compute-bound", gpu_count=gpus, process_count=procs)
    sampler = Sampler(sources, interval=1.0)
    sampler.sample()  # first tick primes rates and GPM
    times = []
    for _ in range(SIM_TICKS):
        sources.clock.sleep(1.0)
        t0 = time.perf_counter()
        sampler.sample()
        times.append(time.perf_counter() - t0)
    sampler.close()
    return statistics.median(times)


def cpu_ticks(tick, clock, n: int) -> list[float]:
    """CPU seconds of each of `n` calls of `tick`, a simulated second apart, after a first."""
    tick()
    out = []
    for _ in range(n):
        clock.sleep(1.0)
        t0 = time.process_time()
        tick()
        out.append(time.process_time() - t0)
    return out


def control_ms(n: int = 30) -> float:
    """CPU ms of a fixed pure-Python workload (no /proc): how much slower the machine itself
    runs code at this count of processes (caches, other load), to read the ticks against."""
    times = []
    for _ in range(n):
        t0 = time.process_time()
        sum(i * i for i in range(20000))
        times.append(time.process_time() - t0)
    return statistics.median(times) * 1000


def real_ticks(pids: list[int], n: int, children_files: bool) -> dict:
    procfs = RealProcFS() if children_files else HiddenChildren()
    sources = sources_for_ranks(pids, realtime=False, procfs=procfs)
    collector = ProcessCollector(psutil, procfs, sources.clock)
    infos = collector.collect(pids)
    assert all(len(i.children) == RANK_CHILDREN for i in infos), "a rank lost its children"
    proc = cpu_ticks(lambda: collector.collect(pids), sources.clock, n)
    sampler = Sampler(sources, interval=1.0)
    whole = cpu_ticks(sampler.sample, sources.clock, n)
    snap = sampler.history.snapshots(10)[-1]
    assert len(snap.processes) == len(pids), "the simulated GPUs lost a rank"
    sampler.close()
    return {"proc": proc, "whole": whole, "scans": collector.tree.scans}


def psutil_children_ms(pids: list[int], n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.process_time()
        for pid in pids:
            psutil.Process(pid).children(recursive=True)
        times.append(time.process_time() - t0)
    return statistics.median(times) * 1000


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


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:6.2f} {statistics.mean(xs) * 1000:6.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--others",
        default=",".join(map(str, OTHERS)),
        help="counts of other processes to spawn, comma-separated (default %(default)s)",
    )
    ap.add_argument("--ticks", type=int, default=30, help="ticks timed per count (default 30)")
    ap.add_argument("--no-sim", action="store_true", help="skip the simulator's ticks")
    ap.add_argument("--no-snapshot", action="store_true", help="skip the snapshot command")
    args = ap.parse_args()
    if not args.no_sim:
        print(f"{'GPUs':>5} {'processes':>10} {'median tick':>12}")
        for gpus, procs in ((8, 10), (8, 1000), (64, 10), (64, 1000)):
            print(f"{gpus:>5} {procs:>10} {tick_median(gpus, procs) * 1000:>9.2f} ms")
    counts = sorted(int(x) for x in args.others.split(",") if x)
    kernel = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    print(
        f"\nreal processes: {RANKS} GPU ranks x {RANK_CHILDREN} children and N others; CPU ms "
        f"of one tick, median and mean of {args.ticks} (this kernel "
        f"{'has' if kernel else 'lacks'} the children files)"
    )
    print(
        f"{'others':>7} {'on /proc':>8} | {'children files':^33} | {'no children files':^40} |"
        f" {'psutil children':>15} | {'control':>7}"
    )
    print(
        f"{'':>7} {'':>8} | {'processes':^13} {'whole tick':^19} | {'processes':^13} "
        f"{'whole tick':^19} {'scans':>6} | {'per rank, ms':>15} | {'ms':>7}"
    )
    spawned = Spawned()
    first = None
    try:
        for n in counts:
            spawned.grow_to(n)
            pids = spawned.rank_pids
            rows = [real_ticks(pids, args.ticks, cf) for cf in (True, False)]
            if first is None:
                first = rows
            line = f"{n:>7} {processes_here():>8} |"
            for r in rows:
                line += f" {_ms(r['proc'])} {_ms(r['whole'])}    "
            line += f"{rows[1]['scans']:>3} | {psutil_children_ms(pids) / len(pids):>15.2f} |"
            print(line + f" {control_ms():>7.2f}")
            for name, r, r0 in zip(
                ("children files", "no children files"), rows, first, strict=True
            ):
                ratio = statistics.mean(r["whole"]) / statistics.mean(r0["whole"])
                print(f"{'':>17} {name}: whole tick (mean) {ratio:.2f}x its cost at {counts[0]}")
    finally:
        spawned.close()
    if not args.no_snapshot:
        t = process_median()
        verdict = "ok" if t < 0.35 else "over the 0.35 s target"
        print(f"snapshot --json --demo idle, whole process: {t:.3f} s median of {RUNS} ({verdict})")


if __name__ == "__main__":
    main()
