"""`gputop-diag diagnose`: sample for N seconds and name what limits the workload."""

from __future__ import annotations

import argparse
import json
import sys

from ..diagnose import (
    classify,
    collect_oom_kills,
    collect_scheduler_evidence,
    render_text,
    to_json,
)
from ..sampler import Sampler
from ..sources import Sources
from .snapshot import EXIT_NO_GPU, no_driver_error
from .snapshot import render_text as render_snapshot

EXIT_USAGE = 2
# squeue is a round trip to the controller and journalctl reads the journal: every 10 s, not
# every tick.
SLOW_SOURCES_EVERY_S = 10.0
WINDOW_S = 60.0  # the classifier's window: the last minute


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
        default=argparse.SUPPRESS,  # falls back to the top-level --interval (default 1)
        metavar="S",
        help="seconds between samples (default 1)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (schema gputop-diag.diagnosis/1, see docs/diagnosis.md)",
    )


def run(args: argparse.Namespace, sources: Sources) -> int:
    if args.seconds < 0 or args.interval <= 0:
        print("gputop-diag: --seconds must be >= 0 and --interval > 0", file=sys.stderr)
        return EXIT_USAGE
    sampler = Sampler(sources, interval=args.interval)
    diag = snap = None
    sched: list = []
    ooms: list = []
    slow_at: float | None = None
    ticks = max(1, round(args.seconds / args.interval)) + 1
    try:
        for k in range(ticks):
            if k:
                sources.clock.sleep(args.interval)
            snap = sampler.sample()
            if slow_at is None or snap.timestamp - slow_at >= SLOW_SOURCES_EVERY_S:
                slow_at = snap.timestamp
                sched = collect_scheduler_evidence(sources)
                ooms = collect_oom_kills(sources, since=snap.timestamp - WINDOW_S)
            diag = classify(sampler.history.snapshots(WINDOW_S), diag, sched, ooms)
    except KeyboardInterrupt:  # Ctrl-C: report what was seen so far
        if diag is None:
            raise
    finally:
        sampler.close()
    if args.json:
        print(json.dumps(to_json(diag), indent=2))
    else:
        print(render_text(diag))
    err = no_driver_error(snap)
    if err is not None:
        if args.json:  # the reason still reaches a person reading the terminal
            print(f"gputop-diag: {err.message}; next: {err.next_step}", file=sys.stderr)
        else:
            print("\n" + render_snapshot(snap))
        return EXIT_NO_GPU
    return 0
