"""`gputop-diag snapshot`: one sample of everything (or a recording's last), as text or JSON.

Start-up: the GPM figures need two NVML samples 0.1 s apart, so the first ones are taken
(`collect/nvml/head.py`) before the model, the collectors and the JSON codec load: on this
machine by `cli.main` as soon as the command line says `snapshot` (`args.gpm_head`), on another
feed (`--demo`) by `run` itself. The wait overlaps that work. Keep this module's own imports
light (`tests/test_lazy_imports.py`)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from .common import (
    add_sanitize,
    is_recording,
    no_driver_error,
    render_snapshot,
    sample_once,
    sanitized_output,
    say,
    seeded_sanitizer,
)

if TYPE_CHECKING:
    from ..collect.nvml.head import GpmHeadStart
    from ..recording.store import Recording
    from ..sources import Sources

REPLAY = True  # reads `--replay FILE`: shows its last snapshot


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--fast",
        action="store_true",
        help="one reading, no warm-up: rates (CPU %%, NVLink, GPM) are null",
    )
    add_sanitize(p)


def head_start(args: argparse.Namespace) -> GpmHeadStart | None:
    """On this machine (not `--fast`, `--demo` or `--replay`): NVML's first GPM samples, taken
    by `cli.main` as soon as the command line is read, before anything else loads; `run` finds
    them as `args.gpm_head`, and `cli.main` closes what no collector took over. None otherwise."""
    if args.demo or args.replay is not None or args.fast:
        return None
    from ..collect.nvml.head import GpmHeadStart

    args.gpm_head = GpmHeadStart.here()
    return args.gpm_head


def run(args: argparse.Namespace, feed: Sources | Recording) -> int:
    if is_recording(feed):
        snap = feed.last()
        if snap is None:
            from ..model.exits import EXIT_USAGE

            say(f"{feed.shown} holds no snapshots")
            return EXIT_USAGE
    else:  # the slow sources (Slurm, the kernel log) are the diagnosis's: not asked here
        fast = getattr(args, "fast", False)
        head = getattr(args, "gpm_head", None)  # begun by `cli.main` on this machine
        if head is None and not fast:  # first, before the model loads (the module's docstring)
            from ..collect.nvml.head import GpmHeadStart

            head = GpmHeadStart(feed.nvml, feed.clock).begin()
        snap = sample_once(feed, fast, head)
    from ..model.codec import snapshot_to_json
    from ..model.exits import EXIT_NO_GPU

    if getattr(args, "sanitize", False):
        from ..sanitize.snapshot import sanitized_snapshot_json

        sanitizer = seeded_sanitizer(feed, [snap])
        if args.json:
            text = json.dumps(sanitized_snapshot_json(snap, sanitizer), indent=2)
        else:
            text = render_snapshot(sanitizer.model(snap))
        text = sanitized_output(text, sanitizer)
        if text is None:
            return 1
        print(text)
    elif args.json:
        print(json.dumps(snapshot_to_json(snap), indent=2))
    else:
        print(render_snapshot(snap))
    err = no_driver_error(snap)
    if err is not None:
        # The reason reaches a person reading the terminal: under --json, or when it sums up
        # several errors (every GPU lost) rather than repeating one printed above.
        if args.json or err not in snap.errors:
            say(f"{err.message}; next: {err.next_step}")
        return EXIT_NO_GPU
    return 0


def print_one_snapshot(feed, sanitize: bool = False) -> int:
    """No terminal to draw the live view on (`gputop-diag --demo > file`): print one snapshot as
    `gputop-diag snapshot [--sanitize]` does, say so on stderr; the exit code."""
    say(
        "not a terminal: printing one snapshot and exiting (the live view needs "
        "a terminal; `gputop-diag snapshot --json` for JSON)"
    )
    return run(argparse.Namespace(json=False, sanitize=sanitize), feed)
