"""`gputop-diag demo --list`: the simulator's scenarios."""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--list", action="store_true", help="list the simulator scenarios")
    p.add_argument("--json", action="store_true", help="print the list as JSON")


def run(args: argparse.Namespace, sources=None) -> int:
    from .. import sim

    infos = sim.list_scenarios()
    if args.json:
        rows = [
            {
                "name": s.name,
                "description": s.description,
                "expected_class": s.expected_class,
                "gpu_count": s.gpu_count,
                "gpu_model": s.gpu_model,
                "duration_s": s.duration_s,
            }
            for s in infos
        ]
        print(json.dumps({"schema": "gputop-diag.scenarios/1", "scenarios": rows}, indent=2))
        return 0
    width = max(len(s.name) for s in infos)
    for s in infos:
        print(f"{s.name:<{width}}  {s.expected_class:<17} {s.description}")
    print("\nrun one: gputop-diag --demo NAME   (any subcommand takes --demo NAME)")
    return 0
