"""`gputop-diag report`: sample for N seconds (or replay a recording) and write the sanitized
report, safe to paste into a public issue (docs/report.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..model import formats
from ..model.exits import EXIT_NO_GPU, EXIT_PARTIAL, EXIT_USAGE
from ..model.health import HealthReport
from ..monitor.core import run as run_monitor
from ..recording.store import Recording
from ..report.build import ReportSource, make_report
from ..report.private_map import write_private_map
from ..sources import Sources
from .common import (
    no_driver_error,
    output_problem,
    said_path,
    said_text,
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
        "--format",
        choices=("md", "json"),
        default=None,
        help="Markdown for a GitHub issue (default) or JSON (schema gputop-diag.report/1)",
    )
    p.add_argument("--json", action="store_true", help="the same as --format json")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        default=None,
        help="write the report to FILE instead of standard output",
    )
    p.add_argument(
        "--private-map",
        metavar="FILE",
        default=None,
        help="also write the reverse map of the pseudonyms to FILE (mode 0600): for your own "
        "use, never to be shared",
    )
    p.add_argument(
        "--sanitize",
        action="store_true",
        default=argparse.SUPPRESS,
        help="accepted for symmetry: a report is always sanitized",
    )


def _source(feed: Sources | Recording, interval: float) -> ReportSource:
    if isinstance(feed, Recording):
        return ReportSource("recording", interval_s=feed.header.interval_s)
    if feed.simulated:
        return ReportSource("simulator", scenario=feed.scenario, interval_s=interval)
    return ReportSource("live", interval_s=interval)


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def run(args: argparse.Namespace, feed: Sources | Recording) -> int:
    seconds = args.seconds
    interval = getattr(args, "interval", 1.0)
    problem = time_problem(seconds, interval)
    if problem is not None:
        say(problem)
        return EXIT_USAGE
    fmt = "json" if args.json else (args.format or "md")
    if args.json and args.format == "md":
        say("--json and --format md contradict each other")
        return EXIT_USAGE
    out, private = args.output, args.private_map
    # The report is always sanitized; what stderr says beside it names the files the user chose
    # as they wrote them, and under --sanitize (a shared screen) by their pseudonyms, as every
    # command's stderr does (docs/report.md, "Paths on the terminal").
    sanitize = bool(getattr(args, "sanitize", False))
    if private is not None and (private == "-" or (out is not None and _same_file(out, private))):
        say(
            "--private-map needs a file of its own (it must never end up in the "
            "report or on the terminal)"
        )
        return EXIT_USAGE
    for path, option in ((out, "-o"), (private, "--private-map")):
        problem = None if path is None else output_problem(path, option, sanitize)
        if problem is not None:  # before the sampling, not after it
            say(problem)
            return EXIT_USAGE
    config = None
    if getattr(args, "model_config", None):  # the memory plan beside what the job holds
        from ..collect.model_config import ModelConfigError, read_config_file

        try:
            config = read_config_file(args.model_config)
        except ModelConfigError as e:
            said = said_text(f"--model-config {e}", sanitize, (args.model_config,))
            say(said)
            return EXIT_USAGE
    replay = isinstance(feed, Recording)
    if seconds is None and not replay:
        seconds = DEFAULT_SECONDS
    simulated = not replay and feed.simulated
    seconds, note = capped(seconds, simulated, interval)
    if note is not None:
        say(note)
    if not replay and not feed.simulated:
        say(f"sampling for {seconds:g} s for the report")
    on_tick = with_progress(None if replay else stop_without_nvml, seconds, simulated)
    monitor = run_monitor(feed, interval=interval, seconds=seconds, on_tick=on_tick)
    if monitor.last is None:
        say(f"{feed.shown} holds no snapshots")
        return EXIT_USAGE
    early = stopped_early(monitor)
    snaps = monitor.history.snapshots()
    health = None if replay else read_health_once(feed, monitor.last.snapshot)
    report = make_report(
        snaps,
        monitor.last.diagnosis,
        source=_source(feed, interval),
        environ=None if replay else feed.environ,
        sources=None if replay else feed,
        model_config=config,
        health=health,
    )
    text = (
        json.dumps(report.doc, indent=2, ensure_ascii=False) + "\n"
        if fmt == "json"
        else report.markdown
    )
    if out is None or out == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        try:
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            said = said_path(out, sanitize)
            say(f"cannot write {said}: {e.strerror or e}")
            return 1
    replaced = sum(c["replaced"] for c in report.doc["redactions"]["classes"].values())
    if out not in (None, "-"):
        say(
            f"wrote the sanitized report to {said_path(out, sanitize)} "
            f"({formats.count(replaced, 'identifier')} replaced{_left_out(report.left_out)}); "
            "read it once before you share it"
        )
    elif report.left_out:
        say(f"{_left_out(report.left_out).lstrip('; ')}")
    if private is not None:
        try:
            write_private_map(report.sanitizer, private)
        except OSError as e:
            said = said_path(private, sanitize)
            say(f"cannot write {said}: {e.strerror or e}")
            return 1
        say(
            f"the private map is in {said_path(private, sanitize)} (mode 0600): "
            "keep it, never share it"
        )
    err = no_driver_error(monitor.last.snapshot)
    if err is not None:
        say(f"{err.message}; next: {err.next_step}")
        return EXIT_NO_GPU
    if early:
        return early
    return EXIT_PARTIAL if health is None and not replay else 0  # without its Health section


def read_health_once(feed: Sources, snap) -> HealthReport | None:
    """The health checks at the end of the window (`gputop-diag health`); None, said on stderr,
    when the read fails (the report goes on without its Health section)."""
    from ..collect.health import read_health
    from ..health import judge

    try:
        return judge(read_health(feed, snap))
    except Exception as e:  # noqa: BLE001 - the rest of the report stands
        say(
            f"the health checks could not be read ({type(e).__name__}): the "
            "report is written without its Health section"
        )
        return None


def _left_out(left_out: list[dict[str, str]]) -> str:
    if not left_out:
        return ""
    names = ", ".join(x["section"] for x in left_out)
    return f"; left out as not safe to share: {names}"
