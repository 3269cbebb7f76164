"""Reading the kernel log wherever it is: the journal (`journalctl`, or a journal file), the
kern.log / syslog / messages families with their rotated and gzipped files, `dmesg`, and any
file named with `--log`. The only module of the Xid triage that does I/O.

Huge logs are read from the end, in chunks, keeping only the lines that can matter (a cheap
byte search for the driver's tags), within a byte budget per file and a time budget for the whole
scan, so a 2 GB syslog costs a bounded time and memory. A source that cannot be read (missing,
permission denied, `dmesg_restrict`, a damaged file) is reported with the way to get access, and
the others are still read.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from dataclasses import dataclass, replace

from ...xid.events import BOOKKEEPING_KINDS, ParsedLog, parse_lines, parse_records
from ...xid.kernlog import LogRecord, ParseStats, clean_line
from .files import Budget, LogRead, access_hint, candidates, count_dirty, read_gzip, read_tail

DEFAULT_BUDGET = Budget()
SYSTEM_LOGS = ("/var/log/kern.log", "/var/log/syslog", "/var/log/messages")
JOURNAL_GREP = (
    "NVRM|SXid|NVML|nvml error|AER:|Killed process|Kill process|nvidia-peermem|in libnccl|"
    "mlx5_core.*(?:Link (?:down|up)|Port module event|insufficient power|temperature)"
)

JOURNAL_ACCESS = (
    "add your user to the systemd-journal group (sudo usermod -aG systemd-journal $USER, then "
    "log in again), or run with sudo"
)
DMESG_ACCESS = (
    "kernel.dmesg_restrict=1 keeps the kernel ring buffer from users: run with sudo, or read "
    "the journal (systemd-journal group)"
)


def older_event_count(events, since: float | None) -> int:
    """The device events read that are older than `since` (what the window leaves out)."""
    if since is None:
        return 0
    return sum(
        e.kind not in BOOKKEEPING_KINDS and e.timestamp is not None and e.timestamp < since
        for e in events
    )


def device_event_count(events, since: float | None = None) -> int:
    """The events a source report counts: device events (not the driver's GPU announcements or
    loads), within the window where `since` is given (an event without a time is kept)."""
    return sum(
        e.kind not in BOOKKEEPING_KINDS
        and (since is None or e.timestamp is None or e.timestamp >= since)
        for e in events
    )


@dataclass(frozen=True, slots=True)
class SourceReport:
    """How one source went."""

    name: str  # "journal", "journal file PATH", a file path, "dmesg"
    kind: str  # "journal", "file", "dmesg"
    status: str  # "ok", "partial", "denied", "missing", "empty", "error", "skipped"
    events: int = 0
    older: int = 0  # device events read that are older than `--since`, left out of `events`
    lines: int = 0  # candidate lines (or journal entries) parsed
    bytes_read: int = 0
    size: int | None = None
    binary_skipped: int = 0
    invalid_utf8: int = 0
    message: str = ""  # what happened, in words
    next_step: str = ""  # how to get access, or how to read more

    @property
    def usable(self) -> bool:
        return self.status in ("ok", "partial", "empty")


def read_file(
    path: str, since: float | None, budget: Budget, deadline: float, name: str | None = None
) -> tuple[ParsedLog, SourceReport]:
    """One log file (plain or .gz), parsed; never raises."""
    name = name or path
    parsed = ParsedLog()
    try:
        if os.path.isdir(path):
            return parsed, SourceReport(name, "file", "error", message="is a directory")
        mtime = os.stat(path).st_mtime
        if path.endswith(".gz"):
            r = read_gzip(path, budget, deadline)
        else:
            r = read_tail(path, since, budget, deadline)
    except FileNotFoundError:
        return parsed, SourceReport(name, "file", "missing", message="no such file")
    except PermissionError:
        return parsed, SourceReport(
            name, "file", "denied", message="permission denied", next_step=access_hint(path)
        )
    except OSError as e:
        return parsed, SourceReport(name, "file", "error", message=f"cannot read: {e}")
    parse_lines(r.lines, name, ref_time=mtime, parsed=parsed)
    return parsed, report_of(name, "file", r, parsed)


def report_of(name: str, kind: str, r: LogRead, parsed: ParsedLog) -> SourceReport:
    st = parsed.stats
    status = "partial" if r.cut_short else ("ok" if st.lines or r.bytes_read else "empty")
    binary = r.binary + st.binary_skipped
    invalid = r.invalid + st.invalid_utf8
    notes = []
    if r.cut_short:
        notes.append(r.cut_short)
    if binary:
        notes.append(f"{binary} lines of binary data skipped")
    if invalid:
        notes.append(f"{invalid} lines of invalid UTF-8")
    return SourceReport(
        name,
        kind,
        status,
        events=device_event_count(parsed.events),
        lines=st.lines,
        bytes_read=r.bytes_read,
        size=r.size,
        binary_skipped=binary,
        invalid_utf8=invalid,
        message="; ".join(notes),
        next_step=(
            "check the file (gzip -t); the events after the damage are lost, the ones before "
            "are triaged"
            if r.damaged
            else "narrow the window with --since, or grep the older part"
            if r.cut_short
            else ""
        ),
    )


# --- the journal --------------------------------------------------------------------------------
# Every journal file starts with this signature (systemd's journal-def.h, the header's
# `signature`: https://systemd.io/JOURNAL_FILE_FORMAT/).
JOURNAL_SIGNATURE = b"LPKSHHRH"


def not_a_journal(path: str) -> str | None:
    """What `path` is when it is not a journal file ("a text log", "gzip-compressed", "empty",
    "binary data"), None when it is one (or cannot be opened: journalctl will say why)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if head.startswith(JOURNAL_SIGNATURE):
        return None
    if not head:
        return "an empty file"
    if head.startswith(b"\x1f\x8b"):
        return "a gzip-compressed file"
    stats = ParseStats()
    lines = head.split(b"\n")[:-1] or [head]
    text = [line for line in lines if clean_line(line, stats) is not None]
    return "a text log" if text and not stats.binary_skipped else "binary data, not a journal"


def journal_file_step(path: str, what: str) -> str:
    """The next step for `--journal-file PATH` given what the file is (`not_a_journal`)."""
    if what in ("a text log", "a gzip-compressed file"):
        return f"read it with --log {shlex.quote(path)}"
    return "give a journal file written by systemd-journald (*.journal), or a log with --log"


def journal_argv(
    since: float | None,
    entries: int,
    file: str | None = None,
    grep: bool = True,
    this_boot: bool = False,
) -> list[str]:
    argv = ["journalctl", "--no-pager", "-o", "json", "-n", str(entries)]
    if file is not None:
        argv += ["--file", file]
    elif this_boot:
        argv.append("-k")
    else:
        argv.append("_TRANSPORT=kernel")  # every boot, not only this one (`-k` is `-b`)
    if since is not None:
        argv += ["--since", f"@{int(since)}"]
    if grep:
        argv += ["-g", JOURNAL_GREP]
    return argv


def journal_records(stdout: str, r: LogRead) -> None:
    """`journalctl -o json` lines → records, oldest first (a MESSAGE journald stored as bytes
    comes as a list of numbers; an entry of binary junk, or a line that is not JSON, is counted
    once, never fatal)."""
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            msg = entry.get("MESSAGE")
            stamp = int(entry.get("__REALTIME_TIMESTAMP")) / 1e6
        except (ValueError, TypeError, AttributeError):
            r.invalid += 1
            continue
        if isinstance(msg, list):
            try:
                msg = bytes(msg)
            except (ValueError, TypeError):
                r.binary += 1
                continue
        if msg is None:
            continue
        # A message may hold several lines (a multi-line printk): keep them together.
        stats = ParseStats()
        lines = msg.split(b"\n" if isinstance(msg, bytes) else "\n")
        parts = [p for p in (clean_line(x, stats) for x in lines) if p is not None and p.strip()]
        if stats.binary_skipped and not any(p.isprintable() and len(p) > 8 for p in parts):
            r.binary += 1  # the entry is junk
            continue
        r.invalid += 1 if stats.invalid_utf8 else 0
        if parts:
            text = "\n".join(p.strip() for p in parts)
            r.records.append(LogRecord(text, stamp, None, text))
    r.records.sort(key=lambda rec: rec.timestamp)  # `-g` may answer newest first


def read_journal(
    run_command,
    since: float | None,
    budget: Budget,
    deadline: float,
    file: str | None = None,
    this_boot: bool = False,
    probe_empty: bool = False,
) -> tuple[ParsedLog, SourceReport]:
    """The journal's kernel messages (or a journal file's), through `journalctl`. With
    `probe_empty`, an empty answer is checked against the journal as a whole: no entry at all
    means no journal here, not a quiet one."""
    name = "journal" if file is None else f"journal file {file}"
    parsed = ParsedLog()
    what = not_a_journal(file) if file is not None else None
    if what is not None:  # journalctl would only say "Failed to open files: No data available"
        return parsed, SourceReport(
            name,
            "journal",
            "error",
            message=f"not a journal file: {what}",
            next_step=journal_file_step(file, what),
        )
    timeout = max(1.0, deadline - time.monotonic())
    n = budget.journal_entries
    try:
        res = run_command(journal_argv(since, n, file, this_boot=this_boot), timeout)
        if res.returncode != 0 and "pattern matching" in res.stderr:  # built without PCRE2
            argv = journal_argv(since, n, file, grep=False, this_boot=this_boot)
            res = run_command(argv, timeout)
    except FileNotFoundError:
        return parsed, SourceReport(
            name, "journal", "missing", message="journalctl is not installed"
        )
    except Exception as e:  # noqa: BLE001 - a timeout, a failure to start: said, not fatal
        return parsed, SourceReport(
            name,
            "journal",
            "error",
            message=f"journalctl failed: {type(e).__name__}: {e}",
            next_step="narrow the window with --since",
        )
    err = res.stderr.strip()
    if "insufficient permissions" in err or "Permission denied" in err:
        return parsed, SourceReport(
            name,
            "journal",
            "denied",
            message="permission denied",
            next_step=JOURNAL_ACCESS if file is None else access_hint(file),
        )
    if res.returncode != 0 and (err or res.stdout.strip()):
        status = "missing" if "No such file" in err else "error"
        return parsed, SourceReport(name, "journal", status, message=err.splitlines()[0])
    if "No journal files were found" in err:
        return parsed, SourceReport(
            name, "journal", "missing", message="no journal files (journald is not running here)"
        )
    r = LogRead()
    journal_records(res.stdout, r)
    parse_records(r.records, name, parsed)
    parsed.stats.lines = len(r.records)
    hidden = "not seeing messages from other users and the system" in err
    report = report_of(name, "journal", r, parsed)
    if hidden:  # journalctl answered, but with the user's own journal only
        return parsed, SourceReport(
            name,
            "journal",
            "denied",
            message="only your own journal is readable",
            next_step=JOURNAL_ACCESS,
        )
    if probe_empty and not r.records and file is None and not _journal_has_entries(run_command):
        return parsed, SourceReport(
            name,
            "journal",
            "missing",
            message="the journal holds no entries (journald is not running or keeps no files)",
        )
    if len(r.records) >= budget.journal_entries:
        report = replace(
            report,
            status="partial",
            message=f"kept the newest {len(r.records)} entries",
            next_step="narrow the window with --since",
        )
    return parsed, report


def _journal_has_entries(run_command) -> bool:
    try:
        res = run_command(["journalctl", "--no-pager", "-q", "-o", "json", "-n", "1"], 5.0)
    except Exception:  # noqa: BLE001 - the main query answered; this is only a check
        return True
    return bool(res.stdout.strip())


# --- dmesg --------------------------------------------------------------------------------------
def read_dmesg(
    run_command, boot_time: float | None, deadline: float
) -> tuple[ParsedLog, SourceReport]:
    """The kernel ring buffer (this boot only), uptimes turned into times with the boot time."""
    parsed = ParsedLog()
    try:
        res = run_command(["dmesg"], max(1.0, deadline - time.monotonic()))
    except FileNotFoundError:
        return parsed, SourceReport("dmesg", "dmesg", "missing", message="dmesg is not installed")
    except Exception as e:  # noqa: BLE001
        return parsed, SourceReport("dmesg", "dmesg", "error", message=f"dmesg failed: {e}")
    if res.returncode != 0:
        err = res.stderr.strip()
        if "not permitted" in err or "Permission denied" in err:
            return parsed, SourceReport(
                "dmesg", "dmesg", "denied", message="not permitted", next_step=DMESG_ACCESS
            )
        return parsed, SourceReport("dmesg", "dmesg", "error", message=err or "dmesg failed")
    data = res.stdout.encode("utf-8", "surrogateescape")
    lines = candidates(data)
    r = LogRead(lines=lines, bytes_read=len(data), size=len(data))
    count_dirty(data, lines, r)
    parse_lines(lines, "dmesg", boot_time=boot_time, parsed=parsed)
    return parsed, report_of("dmesg", "dmesg", r, parsed)


def boot_time_of(sources) -> float | None:
    try:
        return float(sources.psutil.boot_time())
    except Exception:  # noqa: BLE001 - without it dmesg times stay uptimes
        return None
