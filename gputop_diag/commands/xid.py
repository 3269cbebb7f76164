"""`gputop-diag xid`: read the kernel log wherever it is, find every Xid, SXid and driver error,
and triage them — the next question first, then the action.

Sources: this machine's journal, kern.log / syslog / messages (rotations and .gz included) and,
when the journal cannot give this boot, dmesg; or only the files named with `--log` /
`--journal-file` (`--system` adds this machine's too). GPUs are named through NVML's bus ids when
this machine's log is read. `--replay FILE` triages a recording's Xid events with its sampled
history (and any files named). Exit 0 with a triage (even "nothing found"), 1 when no source
could be read, 2 for a usage error, 5 when a file named (`--log`, `--journal-file`) could not be
read while others were (the triage covers those).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from datetime import datetime, timezone

from ..collect.kernlog.files import Budget
from ..collect.kernlog.scan import XidScan, scan
from ..model.exits import EXIT_FAILURE as EXIT_UNREADABLE
from ..model.exits import EXIT_PARTIAL, EXIT_USAGE
from ..monitor.core import run as run_monitor
from ..recording.store import Recording
from ..sources import Sources
from ..xid.triage import triage
from ..xid.types import TriageContext, gpu_refs, map_gpus, sanitized
from .common import said_path, sample_once, sanitized_output, say, seeded_sanitizer
from .xid_render import render_text, to_json

REPLAY = True  # `--replay FILE`: the recording's Xid events, joined with its sampled history

DEFAULT_SINCE = "7d"
WARMUP_S = 0.25
_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="FILE",
        help="a kernel-log file to read (any format: dmesg, dmesg -T, journalctl, kern.log, "
        "syslog, .gz); repeat for more; - reads standard input",
    )
    p.add_argument(
        "--journal-file",
        action="append",
        default=[],
        metavar="FILE",
        help="a journal file to read with journalctl --file; repeat for more",
    )
    p.add_argument(
        "--since",
        default=None,
        metavar="AGE",
        help="how far back: 30m, 24h, 7d, 2w, a date (2026-01-15) or time (2026-01-15T09:00), "
        f"boot (this boot), or all (default {DEFAULT_SINCE}; all when only files named with "
        "--log/--journal-file are read)",
    )
    p.add_argument(
        "--system",
        action="store_true",
        help="with --log/--journal-file, also read this machine's kernel log (read by default "
        "when no file is named)",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=30,
        metavar="N",
        help="events listed in the text output, newest first (default 30; 0: all)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (schema gputop-diag.xid/1, see docs/xid.md)",
    )
    p.add_argument(
        "--sanitize",
        action="store_true",
        default=argparse.SUPPRESS,  # also taken before the command: gputop-diag --sanitize xid
        help="no kernel text, process names, pids, UUIDs or bus ids: codes, classes, counts "
        "and the route only, safe for a public note",
    )


def parse_since(text: str, now: float, boot_time: float | None) -> float | None:
    """`--since` as epoch seconds (None: everything); ValueError for what it cannot read."""
    t = text.strip().lower()
    if t in ("all", "ever"):
        return None
    if t == "boot":
        if boot_time is None:
            raise ValueError("the boot time is not known here; give an age such as 24h")
        return boot_time
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)", t)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--since {text!r}: give an age (30m, 24h, 7d, 2w), a date or time "
            "(2026-01-15, 2026-01-15T09:00), boot or all"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def run(args: argparse.Namespace, feed: Sources | Recording) -> int:
    sanitize = bool(getattr(args, "sanitize", False))
    for path in [*args.log, *args.journal_file]:
        if path != "-" and not os.path.lexists(path):
            say(f"{said_path(path, sanitize)}: no such file")
            return EXIT_USAGE
    if args.limit < 0:
        say("--limit must be 0 or more")
        return EXIT_USAGE
    files_only = bool(args.log or args.journal_file) and not args.system
    if isinstance(feed, Recording):
        found, result, context_note = _from_recording(args, feed, sanitize)
    else:
        found, result, context_note = _from_machine(args, feed, sanitize, files_only)
    if found is None:
        return EXIT_USAGE
    if args.json:
        text = json.dumps(to_json(found, result, sanitize, context_note), indent=2)
    else:
        text = render_text(found, result, sanitize, args.limit, context_note)
    if sanitize:  # what the scan said in words (sources, notes) through the one sanitizer too
        sanitizer = seeded_sanitizer(feed, _snapshots(feed))
        text = sanitized_output(sanitizer.text(text) or text, sanitizer)
        if text is None:
            return 1
    print(text)
    if not found.readable and found.sources:
        if args.json:
            say("no kernel-log source could be read; see sources")
        return EXIT_UNREADABLE
    named = {*args.log, *args.journal_file}  # a file asked for by name and not read: partial
    unread = [
        r for r in found.sources if not r.usable and r.name.removeprefix("journal file ") in named
    ]
    if unread:
        which = "" if sanitize else f" ({', '.join(r.name for r in unread)})"
        say(f"partial: a file named could not be read{which}")
        return EXIT_PARTIAL
    return 0


def _snapshots(feed) -> list:
    """The snapshots whose names seed the sanitizer: a recording's, or one sample here."""
    if isinstance(feed, Recording):
        return list(feed.snapshots())
    return [sample_once(feed, fast=True)]


def since_text(args) -> str:
    """The window asked for: `--since` as given, else everything in the files named when only
    they are read (an old log read after a failure is why one names a file), else 7 days."""
    if args.since is not None:
        return args.since
    files_only = bool(args.log or args.journal_file) and not args.system
    return "all" if files_only else DEFAULT_SINCE


def _since(args, now: float, boot: float | None) -> float | None:
    try:
        return parse_since(since_text(args), now, boot)
    except ValueError as e:
        say(e)
        raise


def _from_machine(args, sources: Sources, sanitize: bool, files_only: bool):
    if sources.simulated and sources.sim is not None:
        # Headless commands advance simulated time instantly: play the scenario to its end so
        # its kernel log holds what it is about.
        sources.clock.sleep(float(sources.sim.spec.get("duration", 0.0)))
    try:
        boot = float(sources.psutil.boot_time())
    except Exception:  # noqa: BLE001 - `--since boot` says so
        boot = None
    try:
        since = _since(args, sources.clock.now(), boot)
    except ValueError:
        return None, None, ""
    found = scan(
        sources,
        since=since,
        logs=args.log,
        journal_files=args.journal_file,
        system=not files_only,
        budget=Budget(),
        stdin=sys.stdin.buffer if "-" in args.log else None,
    )
    snap = None
    note = ""
    if not files_only:  # name the GPUs as this machine's NVML does
        snap = run_monitor(sources, interval=WARMUP_S, seconds=0, slow_sources=False).last.snapshot
        if not snap.nvml_available:
            note = "NVML is not available here: GPUs are named by their bus id"
    else:
        note = "files only: GPUs are named by bus id (and UUID where the log names it)"
    ctx = TriageContext(
        gpus=gpu_refs(snap),
        module_version=found.module_version,
        library_version=snap.system.driver_version if snap else None,
        nvml_mismatch=bool(snap)
        and any(e.code == "NVMLError_LibRmVersionMismatch" for e in snap.errors),
        private=not sanitize,
    )
    if sanitize:
        found = _label_files(found, [*args.log, *args.journal_file])
    # GPUs are named through NVML's bus ids before the ids are replaced by pseudonyms
    events = sanitized(map_gpus(found.events, ctx.gpus)) if sanitize else found.events
    return found, triage(events, ctx), note


def _label_files(found: XidScan, named: list[str]) -> XidScan:
    """A log file the user named is `file-1`, `file-2`, …: its path may carry a host or a user
    name, a bare relative name (`k.log`) as much as any other. The system's own logs
    (/var/log/…) and the journal keep their names."""
    labels: dict[str, str] = {}
    for r in found.sources:
        for name in (r.name, r.name.removeprefix("journal file ")):
            mine = "/" in name or name in named
            if mine and name != "-" and not name.startswith("/var/log/") and name not in labels:
                labels[name] = f"file-{len(labels) + 1}"
    if not labels:
        return found
    # a name stands as itself, never inside another word (`k.log` in `kk.log`)
    named_rx = re.compile(
        "|".join(rf"(?<![\w./-]){re.escape(p)}(?![\w/-])" for p in sorted(labels, key=len)[::-1])
    )

    def label(text: str) -> str:
        return named_rx.sub(lambda m: labels[m.group(0)], text)

    return dataclasses.replace(
        found,
        sources=tuple(
            dataclasses.replace(
                r, name=label(r.name), message=label(r.message), next_step=label(r.next_step)
            )
            for r in found.sources
        ),
        events=tuple(
            dataclasses.replace(e, sources=tuple(label(x) for x in e.sources)) for e in found.events
        ),
    )


def _from_recording(args, rec: Recording, sanitize: bool):
    snaps = list(rec.snapshots())
    if not snaps:
        say(f"{rec.path} holds no snapshots")
        return None, None, ""
    try:
        since = _since(args, snaps[-1].timestamp, None)
    except ValueError:
        return None, None, ""
    start = time.monotonic()
    found = scan(
        None,
        since=since,
        logs=args.log,
        journal_files=args.journal_file,
        system=False,
        stdin=sys.stdin.buffer if "-" in args.log else None,
        now=snaps[-1].timestamp,
    )
    xids = [x for s in snaps for x in s.xid_events if since is None or x.timestamp >= since]
    ctx = TriageContext(
        gpus=gpu_refs(snaps[-1]),
        history=snaps,
        library_version=snaps[-1].system.driver_version,
        private=not sanitize and not rec.header.sanitized,
    )
    if sanitize:
        found = _label_files(found, [*args.log, *args.journal_file])
    events = sanitized(map_gpus(found.events, ctx.gpus)) if sanitize else found.events
    if sanitize:  # what the recording holds of kernel text and processes stays out too
        xids = [
            dataclasses.replace(x, pci_bus_id=None, pid=None, process_name=None, message="")
            for x in xids
        ]
    result = triage(events, ctx, nvml_events=xids)
    note = f"recording {rec.path}: {len(snaps)} snapshots, {len(xids)} Xid events"
    found = XidScan(
        found.events,
        found.ooms,
        found.sources,
        since,
        snaps[-1].timestamp,
        time.monotonic() - start,
    )
    return found, result, note
