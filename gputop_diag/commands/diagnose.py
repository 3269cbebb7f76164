"""`gputop-diag diagnose`: sample for N seconds (or replay a recording), name the bottleneck."""

from __future__ import annotations

import argparse
import json

from ..collect.owners import PID_NAMESPACE_SOURCE
from ..diagnose.classify import with_plan
from ..diagnose.render import render_text, to_json
from ..model.exits import EXIT_NO_GPU, EXIT_USAGE
from ..monitor.core import WINDOW_S
from ..monitor.core import run as run_monitor
from ..recording.store import Recording
from ..sources import Sources
from .common import (
    add_sanitize,
    no_driver_error,
    render_snapshot,
    sanitized_output,
    say,
    stop_without_nvml,
    stopped_early,
)
from .options import add_time_options, capped, time_problem, with_progress

DEFAULT_SECONDS = 30.0
REPLAY = True  # reads `--replay FILE`


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_time_options(
        p,
        f"how long to sample (default {DEFAULT_SECONDS:g}; instant under --demo); with "
        "--replay, the first N seconds of the recording (default: all of it)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (schema gputop-diag.diagnosis/1, see docs/diagnosis.md)",
    )
    p.add_argument(
        "--model-config",
        metavar="FILE",
        default=argparse.SUPPRESS,  # the top-level option of the same name stands otherwise
        help="a model's config.json (Hugging Face; a local file, never downloaded): where the "
        "verdict is capacity, the checks are the memory plan of this model (its terms and what "
        "would make it fit) instead of the advice read from the job's command line",
    )
    add_sanitize(p)


def run(args: argparse.Namespace, feed: Sources | Recording) -> int:
    seconds = args.seconds
    problem = time_problem(seconds, args.interval)
    if problem is not None:
        say(problem)
        return EXIT_USAGE
    config = None
    if getattr(args, "model_config", None):  # the plan of the job's model in the checks
        from ..collect.model_config import ModelConfigError, read_config_file

        try:
            config = read_config_file(args.model_config)
        except ModelConfigError as e:
            say(f"--model-config {e}")
            return EXIT_USAGE
    replay = isinstance(feed, Recording)
    if seconds is None and not replay:
        seconds = DEFAULT_SECONDS
    seconds, note = capped(seconds, not replay and feed.simulated, args.interval)
    if note is not None:
        say(note)
    on_tick = with_progress(
        None if replay else stop_without_nvml, seconds, not replay and feed.simulated
    )
    monitor = run_monitor(feed, interval=args.interval, seconds=seconds, on_tick=on_tick)
    if monitor.last is None:
        say(f"{feed.shown} holds no snapshots")
        return EXIT_USAGE
    early = stopped_early(monitor)
    diag, snap = monitor.last.diagnosis, monitor.last.snapshot
    if config is not None:
        window = monitor.history.snapshots(WINDOW_S * monitor.tick_s)
        diag = with_plan(diag, window, config.read, tick_s=monitor.tick_s)
    err = no_driver_error(snap)
    sanitizer = None
    if getattr(args, "sanitize", False):
        from .common import seeded_sanitizer

        sanitizer = seeded_sanitizer(feed, monitor.history.snapshots())
        diag, snap = sanitizer.model(diag), sanitizer.model(snap)
        if err is not None:
            err = no_driver_error(snap)
    if args.json:
        text = json.dumps(to_json(diag), indent=2)
    else:
        text = render_text(diag)
        if err is not None:
            text += "\n\n" + render_snapshot(snap)
    if sanitizer is not None:
        text = sanitized_output(text, sanitizer)
        if text is None:
            return 1
    print(text)
    for note in snap.errors:  # what the verdict cannot show: this program sees other pids
        if note.source == PID_NAMESPACE_SOURCE:
            say(f"{note.message}; next: {note.next_step}")
    if err is not None:
        if args.json:  # the reason still reaches a person reading the terminal
            say(f"{err.message}; next: {err.next_step}")
        return EXIT_NO_GPU
    return early or 0
