"""Exporter cost at 8 GPUs: CPU per scrape (target: under 20 ms) and per tick.

    python bench/exporter.py [--scenario NAME] [--seconds S]

Prints
- in-process: the CPU time of rendering one scrape (what prometheus-client's handler does per
  request) and of one tick (sample, classify, build the families), median of many;
- whole process: a real `gputop-diag exporter --demo SCENARIO` is started, left alone for S
  seconds (its ticks only), then scraped over HTTP as fast as one client can for S seconds; the
  process's extra CPU time divided by the scrapes is the CPU of one scrape, HTTP included.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.request

import psutil
from prometheus_client import CollectorRegistry, generate_latest

from gputop_diag import sim
from gputop_diag.monitor.core import Monitor
from gputop_diag.prometheus.export import TickMetrics, window_of

TARGET_MS = 20.0


def in_process(scenario: str) -> tuple[float, float, int, int]:
    """(ms CPU per render, ms CPU per tick, bytes per scrape, samples per scrape)."""
    sources = sim.build(scenario)
    monitor = Monitor(sources)
    metrics = TickMetrics(window=window_of(monitor), source=f"simulator:{scenario}")
    monitor.run_for(30, metrics.update)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    renders = []
    for _ in range(300):
        t0 = time.process_time()
        body = generate_latest(registry)
        renders.append(time.process_time() - t0)
    ticks = []
    for _ in range(60):
        sources.clock.sleep(1.0)
        t0 = time.process_time()
        metrics.update(monitor.tick())
        ticks.append(time.process_time() - t0)
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return 1000 * statistics.mean(renders), 1000 * statistics.median(ticks), len(body), samples


def whole_process(scenario: str, seconds: float) -> tuple[float, int, float]:
    """(ms CPU per scrape over HTTP, scrapes, ms CPU per second while idle)."""
    entry = ["-m", "gputop_diag"]
    p = subprocess.Popen(
        [sys.executable, *entry, "--demo", scenario, "exporter", "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = p.stderr.readline()
        port = int(line.split("serving http://")[1].split("/")[0].rsplit(":", 1)[1])
        proc = psutil.Process(p.pid)
        url = f"http://127.0.0.1:{port}/metrics"
        time.sleep(2.0)  # start-up done
        c0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
        time.sleep(seconds)
        c1, t1 = sum(proc.cpu_times()[:2]), time.monotonic()
        idle_rate = (c1 - c0) / (t1 - t0)
        n = 0
        while time.monotonic() - t1 < seconds:
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()
            n += 1
        c2, t2 = sum(proc.cpu_times()[:2]), time.monotonic()
        extra = (c2 - c1) - idle_rate * (t2 - t1)
        return 1000 * extra / n, n, 1000 * idle_rate
    finally:
        p.terminate()
        p.wait(timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="input-starved", help="simulator scenario (8 GPUs)")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    args = ap.parse_args()
    render_ms, tick_ms, size, samples = in_process(args.scenario)
    print(f"exporter, {args.scenario}, 8 GPUs: {samples} samples, {size / 1024:.0f} KiB a scrape")
    print(f"  in-process render of one scrape: {render_ms:.1f} ms CPU (target < {TARGET_MS:g})")
    print(f"  one tick (sample, classify, build families): {tick_ms:.1f} ms CPU")
    scrape_ms, n, idle_ms = whole_process(args.scenario, args.seconds)
    print(
        f"  whole process over HTTP: {scrape_ms:.1f} ms CPU per scrape ({n} scrapes); "
        f"{idle_ms:.0f} ms CPU per second between scrapes (the ticks)"
    )
    ok = scrape_ms < TARGET_MS and render_ms < TARGET_MS
    print("  " + ("within" if ok else "OVER") + f" the {TARGET_MS:g} ms target")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
