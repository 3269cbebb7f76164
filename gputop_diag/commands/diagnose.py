"""`gputop-diag diagnose`: sample for N seconds and name what limits the workload."""

from __future__ import annotations

import argparse
import json
import sys

from ..diagnose import classify, collect_scheduler_evidence, render_text, to_json
from ..sampler import Sampler
from ..sources import Sources
from .snapshot import EXIT_NO_GPU, no_driver_error
from .snapshot import render_text as render_snapshot

SCHEDULER_EVERY_S = 10.0  # squeue is a round trip to the controller: not every tick
WINDOW_S = 60.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--seconds",
        type=float,
        default=30.0,
        metavar="N",
        help="how long to sample (default 30; instant under --demo)",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between samples (default 1)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace, sources: Sources) -> int:
    if args.seconds < 0 or args.interval <= 0:
        print("gputop-diag: --seconds must be >= 0 and --interval > 0", file=sys.stderr)
        return 2
    sampler = Sampler(sources, interval=args.interval)
    diag = None
    sched: list = []
    sched_at = None
    try:
        ticks = max(1, round(args.seconds / args.interval)) + 1
        for k in range(ticks):
            if k:
                sources.clock.sleep(args.interval)
            snap = sampler.sample()
            if sched_at is None or snap.timestamp - sched_at >= SCHEDULER_EVERY_S:
                sched, sched_at = collect_scheduler_evidence(sources), snap.timestamp
            diag = classify(sampler.history.snapshots(WINDOW_S), diag, sched)
    finally:
        sampler.close()
    if args.json:
        print(json.dumps(to_json(diag), indent=2))
    else:
        print(render_text(diag))
    err = no_driver_error(snap)
    if err is not None:
        if args.json:
            print(f"gputop-diag: {err.message}; next: {err.next_step}", file=sys.stderr)
        else:
            print("\n" + render_snapshot(snap))
        return EXIT_NO_GPU
    return 0
