"""`gputop-diag compare A B`: two runs side by side, before and after a change (docs/compare.md).

A and B are each a recording (`record -o`, `watch --record`) or a `watch --json` document, told
apart by content. Exit 0 with the comparison; 2 for a file that is missing, damaged or neither
(one line, before anything is printed); 128 + N when signal N stopped the replay of a recording
(what was read is compared, and stderr says so)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from ..compare.judge import compare
from ..compare.load import CompareError, load
from ..compare.render import SCHEMA, render_text, to_json
from ..model.exits import EXIT_USAGE
from ..monitor.run import session_key
from ..sources import Sources
from .common import (
    add_sanitize,
    input_problem,
    is_recording,
    sanitized_output,
    say,
    stopped_early,
)

REPLAY = True  # takes `--replay FILE` only to say that it reads the two files it is given


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "a",
        metavar="A",
        help="the run before: a recording (record -o FILE, watch --record FILE; .gz or plain) "
        "or a `watch --json` document",
    )
    p.add_argument("b", metavar="B", help="the run after, of either kind")
    p.add_argument(
        "--json",
        action="store_true",
        help=f"print one JSON document (schema {SCHEMA}, see docs/compare.md)",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="say for each row how it was judged (the test, its p-value, the drift or spread) "
        "and what each run's figure was read from",
    )
    add_sanitize(p)


def run(args: argparse.Namespace, feed: Sources | None = None) -> int:
    if getattr(args, "demo", None):
        say(
            "compare reads two files (recordings or watch --json documents); "
            "--demo has no machine to replace here: record the scenarios first "
            "(gputop-diag --demo NAME record -o FILE)"
        )
        return EXIT_USAGE
    if is_recording(feed):
        say(
            "compare reads the two files it is given (gputop-diag compare A B), "
            "recordings or watch --json documents, not --replay FILE"
        )
        return EXIT_USAGE
    sanitizer = None
    if getattr(args, "sanitize", False):
        from ..sanitize.sanitizer import Sanitizer

        sanitizer = Sanitizer(session_key())  # the key every path of this run is named by
    shown = [p if sanitizer is None else sanitizer.path(p) for p in (args.a, args.b)]
    for path in (args.a, args.b):
        problem = input_problem(path, "compare", sanitizer is not None)
        if problem is not None:
            say(problem)
            return EXIT_USAGE
    try:
        a = load(args.a, shown[0])
        b = load(args.b, shown[1])
    except CompareError as e:
        say(e)
        return EXIT_USAGE
    early = None
    for side in (a, b):
        if side.ending is not None and side.ending.early:
            early = stopped_early(side) or early
    runs = [a.run, b.run]
    if sanitizer is not None:
        runs = [
            replace(
                r,
                hostname=sanitizer.hostname(r.hostname),
                gpu_models=tuple(sanitizer.text(m) or "" for m in r.gpu_models),
            )
            for r in runs
        ]
    result = compare(*runs)
    if args.json:
        out = json.dumps(to_json(result), indent=2, ensure_ascii=False)
    else:
        out = render_text(result, verbose=args.explain)
    if sanitizer is not None:
        out = sanitized_output(out, sanitizer)
        if out is None:
            return 1
    print(out)
    return early or 0
