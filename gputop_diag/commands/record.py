"""`gputop-diag record -o FILE`: snapshots as JSON lines, for `gputop-diag --replay FILE`.

It runs the same Monitor loop as `diagnose` (sample, attach the slow sources, classify), so
`--replay FILE diagnose` reaches the verdict the live run would have. With `--replay` it
re-records a recording: cut to its first N seconds, or sanitized.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from ..model.exits import EXIT_NO_GPU, EXIT_PARTIAL, EXIT_USAGE
from ..model.formats import count
from ..monitor.core import Tick
from ..monitor.core import run as run_monitor
from ..monitor.run import OutputClosed, is_closed_pipe
from ..recording.store import Recording, RecordingError, RecordingWriteError
from ..recording.writer import RecordingWriter
from ..sources import Sources
from .common import no_driver_error, said_path, said_text, say, seeded_sanitizer
from .options import add_time_options, capped, time_problem, with_progress

REPLAY = True  # reads `--replay FILE`: writes its (first N seconds of) snapshots again


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="where to write (JSON lines; gzip when FILE ends in .gz; - for standard output)",
    )
    add_time_options(
        p,
        "how long to record (default: until Ctrl-C; under --demo: the scenario's length; "
        "with --replay: all of the recording)",
    )
    p.add_argument(
        "--sanitize",
        action="store_true",
        default=argparse.SUPPRESS,  # or the top-level --sanitize
        help="write pseudonyms instead of host and user names, GPU UUIDs, serials, PCI bus ids, "
        "paths and command-line arguments (the same pseudonym on every line); no minor numbers "
        "or raw kernel-log text",
    )


def _remove_output(path: str) -> None:
    """Remove what was written to `path`, when it is a plain file (not /dev/null or a pipe)."""
    if os.path.isfile(path):
        with contextlib.suppress(OSError):
            os.remove(path)


def _scenario_seconds(sources: Sources) -> float | None:
    from ..sim import list_scenarios

    for info in list_scenarios():
        if info.name == sources.scenario:
            return info.duration_s
    return None


def run(args: argparse.Namespace, feed: Sources | Recording) -> int:
    if args.output == "-":  # the usual spelling of standard output, not a file named "-"
        args.output = "/dev/stdout"
    seconds = args.seconds
    problem = time_problem(seconds, args.interval)
    if problem is not None:
        say(problem)
        return EXIT_USAGE
    replay = isinstance(feed, Recording)
    interval = feed.header.interval_s if replay else args.interval
    seconds, note = capped(seconds, not replay and feed.simulated, interval)
    if note is not None:
        say(note)
    if replay and os.path.realpath(feed.path) == os.path.realpath(args.output):
        say("-o names the recording being replayed")
        return EXIT_USAGE
    if seconds is None and not replay and feed.simulated:
        seconds = _scenario_seconds(feed)
    sanitize = bool(getattr(args, "sanitize", False)) or (replay and feed.header.sanitized)
    sanitizer = None
    if sanitize:  # the machine's names (a recording's: all of its snapshots) before line one
        sanitizer = seeded_sanitizer(feed, feed.snapshots() if replay else ())
    try:
        writer = RecordingWriter(
            args.output, interval_s=interval, sanitize=sanitize, sanitizer=sanitizer, option="-o"
        )
    except RecordingError as e:
        say(f"{_said(args, e)}")
        return EXIT_USAGE
    if not replay and not feed.simulated:
        until = "Ctrl-C stops" if seconds is None else f"for {seconds:g} s"
        say(f"recording to {_shown(args, args.output)} every {interval:g} s ({until})")

    def write(tick: Tick) -> None:
        try:
            writer.write(tick.snapshot)
        except RecordingWriteError as e:
            if is_closed_pipe(e):  # -o /dev/stdout and its reader is gone
                raise OutputClosed from None
            raise

    try:
        on_tick = with_progress(write, seconds, not replay and feed.simulated)
        monitor = run_monitor(feed, interval=interval, seconds=seconds, on_tick=on_tick)
    except KeyboardInterrupt:  # before the first tick: nothing recorded
        monitor = None
    except RecordingWriteError as e:  # the disk filled up, a write failed
        say(f"{_said(args, e)} (kept {writer.count} snapshots)")
        return 1
    except RecordingError as e:  # the recording being replayed is damaged part-way
        with contextlib.suppress(RecordingError):
            writer.close()
        _remove_output(args.output)
        say(f"{_said(args, e)}; {_shown(args, args.output)} not written")
        return EXIT_USAGE
    finally:
        with contextlib.suppress(RecordingError):
            writer.close()
    ending = monitor.ending if monitor is not None else None
    if ending is not None and ending.reason == "closed":  # nobody reads on: say nothing more
        return ending.exit_status()
    if writer.withheld:
        say(
            f"{count(writer.withheld, 'snapshot')} not written: they could not be "
            "sanitized with confidence"
        )
    if writer.count == 0:
        _remove_output(args.output)
        if monitor is None:
            return 130
        if writer.withheld:
            return 1
        say(f"{feed.shown} holds no snapshots; nothing written")
        return EXIT_USAGE
    span = (writer.last or 0.0) - (writer.first or 0.0)
    gpus = writer.header.gpu_count if writer.header else 0
    stopped = " (stopped early)" if ending is not None and ending.early else ""
    # On stderr: the recording itself may be going to stdout (-o /dev/stdout).
    print(
        f"recorded {count(writer.count, 'snapshot')} ({span:,.0f} s, {count(gpus, 'GPU')}"
        f"{', sanitized' if sanitize else ''}) to {_shown(args, args.output)}{stopped}",
        file=sys.stderr,
    )
    err = no_driver_error(monitor.last.snapshot) if monitor and monitor.last else None
    if err is not None:
        say(f"{err.message}; next: {err.next_step}")
        return EXIT_NO_GPU
    status = ending.exit_status(until_stopped=args.seconds is None) if ending else None
    return status or (EXIT_PARTIAL if writer.withheld else 0)  # some snapshots held back


def _shown(args: argparse.Namespace, path: str) -> str:
    """A path as stderr names it: under --sanitize its pseudonym, as every other message of
    this run names it (`common.shown_path`)."""
    return said_path(path, getattr(args, "sanitize", False))


def _said(args: argparse.Namespace, e: Exception) -> str:
    """An error's text (it names a file) as stderr says it: under --sanitize the recording's
    path and the one replayed as their pseudonyms (`common.said_text`), the rest sanitized."""
    return said_text(
        str(e), getattr(args, "sanitize", False), (args.output, getattr(args, "replay", None))
    )
