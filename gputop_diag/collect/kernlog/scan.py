"""One scan of every kernel-log source (`scan`): the files and journal files named, this
machine's journal, kern.log / syslog / messages families and, when the journal cannot give this
boot, dmesg — within one time budget — with the same line seen in several sources merged into
one event that names them all (`merge`). Never raises for a source that fails: each has its
`SourceReport`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ...model import OomKill
from ...sources import Sources, run_real_command
from ...xid.events import KernelEvent, ParsedLog, parse_lines
from .files import Budget, read_stream, rotated
from .sources import (
    DEFAULT_BUDGET,
    SYSTEM_LOGS,
    SourceReport,
    boot_time_of,
    device_event_count,
    older_event_count,
    read_dmesg,
    read_file,
    read_journal,
    report_of,
)

# --- merging ------------------------------------------------------------------------------------
MERGE_WINDOW_S = 2.0  # the same line in the journal and in kern.log is stamped within this


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def line_key(e: KernelEvent) -> tuple:
    """What two sources' copies of one kernel message share: kind, code, bus id and text
    (whitespace aside); their stamps may differ (`same_time`)."""
    return (e.kind, e.code, e.pci, _norm(e.detail))


def same_time(a: KernelEvent, b: KernelEvent) -> bool:
    """Stamped as one message is in two sources: within MERGE_WINDOW_S (kern.log stamps to
    the second, the journal to the microsecond), or, undated, at the same uptime."""
    if a.timestamp is not None and b.timestamp is not None:
        return abs(a.timestamp - b.timestamp) <= MERGE_WINDOW_S
    return a.uptime_s is not None and a.uptime_s == b.uptime_s


def merge(events: Sequence[KernelEvent]) -> list[KernelEvent]:
    """One event per line seen in several sources (the journal and kern.log hold the same
    kernel messages), with every source named; oldest first, undated ones last."""
    ordered = sorted(
        events, key=lambda e: (e.timestamp is None, e.timestamp or 0.0, e.uptime_s or 0.0)
    )
    out: list[KernelEvent] = []
    recent: dict[tuple, list[int]] = {}
    for ev in ordered:
        key = line_key(ev)
        hit = None
        for k in recent.get(key, ()):
            other = out[k]
            if ev.source in other.sources:
                continue
            if same_time(ev, other):
                hit = k
                break
        if hit is not None:
            other = out[hit]
            out[hit] = replace(other, sources=other.sources + (ev.source,))
            continue
        recent.setdefault(key, []).append(len(out))
        out.append(ev)
    return out


# --- one scan of every source -------------------------------------------------------------------
@dataclass(frozen=True)
class XidScan:
    """What one read of the kernel log found."""

    events: tuple[KernelEvent, ...]  # merged across sources, oldest first, undated last
    ooms: tuple[OomKill, ...]
    sources: tuple[SourceReport, ...]
    since: float | None  # epoch seconds; None: everything the sources hold
    read_at: float  # the sources' clock when read
    elapsed_s: float
    failure: str = ""  # the scan itself failed (a bug): said where the events would be
    module_version: str | None = None  # the loaded kernel module, from /proc
    older: int = 0  # device events read older than `since`, one per line seen in several sources

    @property
    def readable(self) -> bool:
        return any(r.usable for r in self.sources)


_MODULE = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def module_version(sources) -> str | None:
    """The loaded kernel module's version (/proc/driver/nvidia/version), None without one."""
    try:
        m = _MODULE.search(sources.procfs.read_text("/proc/driver/nvidia/version"))
    except (OSError, ValueError):
        return None
    return m.group(1) if m else None


def read_stdin(
    stream, budget: Budget, deadline: float, now: float | None = None
) -> tuple[ParsedLog, SourceReport]:
    """`--log -`: lines piped in (`dmesg | gputop-diag xid --log -`), the newest kept; a
    syslog time without a year is read as the latest such time not after `now`."""
    parsed = ParsedLog()
    r = read_stream(stream, budget, deadline)
    parse_lines(r.lines, "stdin", ref_time=now if now is not None else time.time(), parsed=parsed)
    return parsed, report_of("stdin", "file", r, parsed)


def scan(
    sources: Sources | None,
    *,
    since: float | None,
    logs: Sequence[str] = (),
    journal_files: Sequence[str] = (),
    system: bool = True,
    budget: Budget = DEFAULT_BUDGET,
    stdin=None,
    now: float | None = None,
) -> XidScan:
    """Read every source: the files and journal files named, then (with `system`) the journal,
    the kern.log / syslog / messages families (a real machine only) and, when the journal cannot
    give this boot's kernel messages, dmesg. `sources` None: files only (a recording's triage),
    journal files read with the real journalctl. Never raises for a source that fails."""
    run_command = sources.run_command if sources is not None else run_real_command
    start = time.monotonic()
    deadline = start + budget.seconds
    found: list[tuple[ParsedLog, SourceReport]] = []

    def late(name: str, kind: str) -> bool:
        if time.monotonic() <= deadline:
            return False
        found.append(
            (
                ParsedLog(),
                SourceReport(
                    name, kind, "skipped", message="time budget spent before this source was read"
                ),
            )
        )
        return True

    for f in journal_files:
        if not late(f"journal file {f}", "journal"):
            found.append(read_journal(run_command, since, budget, deadline, file=f))
    for f in logs:
        if f == "-":
            if not late("stdin", "file"):
                found.append(read_stdin(stdin, budget, deadline, now))
        elif not late(f, "file"):
            found.append(read_file(f, since, budget, deadline))
    if system and sources is not None:
        journal = read_journal(run_command, since, budget, deadline, probe_empty=True)
        found.append(journal)
        if not sources.simulated:
            for base in SYSTEM_LOGS:
                paths = rotated(base)
                if not paths:
                    found.append(
                        (ParsedLog(), SourceReport(base, "file", "missing", message="not present"))
                    )
                for path in paths:
                    if since is not None and _mtime(path) < since:
                        continue  # rotated before the window began
                    if not late(path, "file"):
                        found.append(read_file(path, since, budget, deadline))
        if journal[1].usable:
            found.append(
                (
                    ParsedLog(),
                    SourceReport(
                        "dmesg",
                        "dmesg",
                        "skipped",
                        message="not needed: the journal holds this boot's kernel messages",
                    ),
                )
            )
        elif not late("dmesg", "dmesg"):
            found.append(read_dmesg(run_command, boot_time_of(sources), deadline))
    events = [e for p, _ in found for e in p.events]
    ooms = [k for p, _ in found for k in p.ooms]
    older = 0
    if since is not None:
        older = len(merge([e for p, _ in found for e in p.events if older_event_count([e], since)]))
        events = [e for e in events if e.timestamp is None or e.timestamp >= since]
        ooms = [k for k in ooms if k.timestamp is None or k.timestamp >= since]
        # each source's count is of the window too, so the counts add up to what is triaged
        # and what it leaves out is counted, so an old log read with the default window says so
        found = [
            (
                p,
                replace(
                    r,
                    events=device_event_count(p.events, since),
                    older=older_event_count(p.events, since),
                ),
            )
            for p, r in found
        ]
    return XidScan(
        events=tuple(merge(events)),
        ooms=tuple(ooms),
        sources=tuple(r for _, r in found),
        since=since,
        read_at=now if now is not None else sources.clock.now() if sources else time.time(),
        elapsed_s=time.monotonic() - start,
        module_version=module_version(sources) if system and sources is not None else None,
        older=older,
    )


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
