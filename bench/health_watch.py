"""The cost of the health checks as the Monitor's slow source (`monitor/health.py`).

    python bench/health_watch.py [--passes 20]

Prints, over the simulator, the wall time of `HealthWatch.poll` when a pass is due: the first
pass (with the node's static parts: the PCI scan, lspci, the fabric manager), the passes after
it (median and slowest: processes, NVML, links, ports; each environment already read), and a
poll between passes. Target: a pass under 30 ms on the 8-GPU demo, so a tick is never held up.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gputop_diag import sim
from gputop_diag.commands.common import sample_once
from gputop_diag.monitor.health import HEALTH_EVERY_S, HealthWatch

TARGET_S = 0.030


def measure(scenario: str, passes: int, **kw) -> None:
    src = sim.build(scenario, **kw)
    w = HealthWatch(src)
    w.poll(sample_once(src, fast=True))
    first = w.last_pass_s
    costs, between = [], []
    for _ in range(passes):
        src.clock.sleep(HEALTH_EVERY_S)
        snap = sample_once(src, fast=True)
        w.poll(snap)
        costs.append(w.last_pass_s)
        t0 = time.perf_counter()
        w.poll(snap)  # not due: the last report
        between.append(time.perf_counter() - t0)
    med = statistics.median(costs)
    mark = "ok" if med <= TARGET_S else "OVER TARGET"
    label = f"{scenario}" + (f" ({kw})" if kw else "")
    print(
        f"{label:<52} first {first * 1000:6.1f} ms  pass median {med * 1000:6.1f} ms  "
        f"max {max(costs) * 1000:6.1f} ms  between {statistics.median(between) * 1e6:5.1f} us  "
        f"{mark}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passes", type=int, default=20)
    args = ap.parse_args()
    for scenario in ("dataloader-d-state", "fabric-manager-down", "launch-blocking"):
        measure(scenario, args.passes)
    measure("compute-bound", max(3, args.passes // 4), gpu_count=8, process_count=2000)


if __name__ == "__main__":
    main()
