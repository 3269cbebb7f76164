"""`gputop-diag snapshot`: one sample of everything (or a recording's last), as text or JSON.

One reading, as `nvidia-smi` and `nvitop --once` take: what a reading gives (memory, utilization,
clocks, power, the processes, the host) and the host's CPU % and disk rates, averaged from the
command's start (`collect/host_head.py`: taken by `cli.main` as soon as the command line says
`snapshot`, before the model and the collectors load; on another feed (`--demo`) by `run`).
The rates that need a second reading of the GPUs and processes (each process's CPU %, NVLink
throughput) and NVML's GPM figures (two samples at least 0.1 s apart) come with `--rates`: two
readings, whose GPM samples are taken first (`collect/nvml/head.py`) so that NVML's wait overlaps
the loading. Keep this module's own imports light (`tests/test_lazy_imports.py`)."""

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
# the text's last line after one reading: why the processes' CPU % reads n/a
ONE_READING_NOTE = "\none reading: the processes' CPU % needs two (--rates)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document")
    one = p.add_mutually_exclusive_group()
    one.add_argument(
        "--rates",
        action="store_true",
        help="two readings 0.1 s apart: also each process's CPU %%, NVLink throughput and "
        "NVML's GPM figures (SM activity, DRAM bandwidth, tensor pipes), null in one reading",
    )
    # one reading is the default: `--fast` (its name before) is still taken, unlisted
    one.add_argument("--fast", action="store_true", help=argparse.SUPPRESS)
    add_sanitize(p)


def head_start(args: argparse.Namespace) -> GpmHeadStart | None:
    """On this machine (not `--demo` or `--replay`), as soon as the command line is read, before
    anything else loads: the host's first readings (`args.host_head`) for one reading, or with
    `--rates` NVML's first GPM samples (`args.gpm_head`, returned: `cli.main` closes what no
    collector took over). `run` finds them on `args`. None without GPM samples."""
    if args.demo or args.replay is not None:
        return None
    if not args.rates:
        from ..collect.host_head import HostHead

        args.host_head = HostHead.here()
        return None
    from ..collect.nvml.head import GpmHeadStart

    args.gpm_head = GpmHeadStart.here()
    return args.gpm_head


def run(args: argparse.Namespace, feed: Sources | Recording) -> int:
    one_reading = False
    if is_recording(feed):
        snap = feed.last()
        if snap is None:
            from ..model.exits import EXIT_USAGE

            say(f"{feed.shown} holds no snapshots")
            return EXIT_USAGE
    elif getattr(args, "rates", False):  # the slow sources (Slurm, the kernel log) are the
        # diagnosis's: not asked here
        head = getattr(args, "gpm_head", None)  # begun by `cli.main` on this machine
        if head is None:  # first, before the model loads (the module's docstring)
            from ..collect.nvml.head import GpmHeadStart

            head = GpmHeadStart(feed.nvml, feed.clock).begin()
        snap = sample_once(feed, False, head)
    else:
        host_head = getattr(args, "host_head", None)  # begun by `cli.main` on this machine
        if host_head is None:
            from ..collect.host_head import HostHead

            host_head = HostHead(feed.psutil, feed.clock).begin()
        snap = sample_once(feed, True, host_head=host_head)
        one_reading = bool(snap.processes)  # the note where a process CPU % reads n/a
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
        print(text + (ONE_READING_NOTE if one_reading and not args.json else ""))
    elif args.json:
        print(json.dumps(snapshot_to_json(snap), indent=2))
    else:
        print(render_snapshot(snap) + (ONE_READING_NOTE if one_reading else ""))
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
    return run(argparse.Namespace(json=False, sanitize=sanitize, rates=False), feed)
