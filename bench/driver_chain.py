"""What reading the driver chain costs: the kernel module, the library directories and every
readable process's /proc/<pid>/maps (the Monitor does it every 10 s, with the slow sources).

Prints the wall time of `read_chain` on this machine's real /proc (once, then with the memo the
Monitor keeps, which reads a process's maps again only after 60 s), and on the simulator with
2,000 processes. A report, not a test: always exits 0.
"""

from __future__ import annotations

import statistics
import time

from gputop_diag import sim
from gputop_diag.collect.cuda_libs import ChainMemo, read_chain
from gputop_diag.sources import Sources


def timed(fn, runs: int = 5) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    real = Sources.real()
    t, scan = timed(lambda: read_chain(real))
    n = scan.scanned + scan.unreadable
    print(
        f"this machine: {n} processes, {scan.scanned} maps read, {len(scan.processes)} with CUDA"
        f" libraries: {t * 1000:.1f} ms per read ({t / max(n, 1) * 1e6:.0f} us per process)"
    )
    memo = ChainMemo()
    read_chain(real, memo=memo)
    t, _ = timed(lambda: read_chain(real, memo=memo))
    print(f"this machine, with the memo (within 60 s of the last read): {t * 1000:.1f} ms")
    src = sim.build("compute-bound", process_count=2000)
    t, scan = timed(lambda: read_chain(src), runs=3)
    print(
        f"simulator, {scan.scanned} processes ({len(scan.processes)} with CUDA libraries): "
        f"{t * 1000:.0f} ms per read"
    )
    memo = ChainMemo()
    read_chain(src, memo=memo)
    t, _ = timed(lambda: read_chain(src, memo=memo), runs=3)
    print(f"simulator, with the memo: {t * 1000:.1f} ms per read")


if __name__ == "__main__":
    main()
