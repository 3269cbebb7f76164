"""The live view's kernel-log source: each Monitor poll reads the last window of this boot's
kernel messages from the first source that answers — the journal (one `journalctl -k` call),
else dmesg, else the lines appended to kern.log / syslog / messages since the last poll — and
remembers which one did. Every failure is a `SourceReport` the Monitor turns into a visible
state with the way to get access. It keeps the messages the health findings read (a network
port, GPUDirect RDMA, NVLink training, a crash in NCCL: `xid/health.py`) for `KEEP_S`, so a
port that flaps across polls is seen flapping (`health_findings`); `read_kernel_health` is the
same read once, since boot, for `gputop-diag health`.
"""

from __future__ import annotations

import os
import time

from ...model.health import Finding
from ...xid.events import KernelEvent, ParsedLog, parse_lines
from ...xid.health import HEALTH_KINDS, RECENT_S, is_fall, kernel_findings
from ...xid.types import GpuRef
from .files import Budget, LogRead, access_hint, candidates
from .sources import SYSTEM_LOGS, SourceReport, boot_time_of, read_dmesg, read_journal, report_of

LIVE_BUDGET = Budget(
    seconds=5.0, bytes_per_file=1024 * 1024, lines_per_source=5000, journal_entries=5000
)
KEEP_S = RECENT_S  # how long the messages the health findings read are kept
MAX_KEPT = 2000  # ... and how many of them, the newest
# Where journald keeps its files (volatile, then persistent), each machine's in a folder of its
# own: https://www.freedesktop.org/software/systemd/man/latest/systemd-journald.service.html
JOURNAL_DIRS = ("/run/log/journal", "/var/log/journal")
# A journal file's header, from its start: its counts of objects and entries and its tail
# entry's sequence number and time change with each entry appended
# (https://systemd.io/JOURNAL_FILE_FORMAT/, "Header")
JOURNAL_HEADER_BYTES = 256
JOURNAL_RECHECK_S = 300.0  # an unchanged journal is asked again after this long all the same


def journal_state(dirs: tuple[str, ...] | None = None) -> tuple | None:
    """What says whether journald wrote since the last look: the journal files' names, and the
    inode, size and header of each file it still writes (an archived file, `name@…journal`,
    never changes). journald appends through a shared mapping, so the header read here through
    the page cache is the one it wrote, before any sync to disk. None where a folder cannot be
    read: then the journal is asked each time."""
    names: list[str] = []
    state: list[tuple] = []
    seen: set[str] = set()
    for top in JOURNAL_DIRS if dirs is None else dirs:
        try:
            entries = sorted(os.scandir(top), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        except OSError:
            return None
        # a machine's folder may be a link (a container's /var/log/journal/<machine-id> to the
        # host's): journalctl reads through it, so its files are watched through it too (each
        # folder once: a link back to the top, or two links to one folder, read once)
        folders = [top] + [e.path for e in entries if e.is_dir()]
        for folder in folders:
            real = os.path.realpath(folder)
            if real in seen:
                continue
            seen.add(real)
            try:
                files = sorted(e.name for e in os.scandir(folder) if e.is_file())
            except OSError:
                return None
            for name in files:
                if not name.endswith((".journal", ".journal~")):
                    continue
                path = os.path.join(folder, name)
                names.append(path)
                if "@" in name:
                    continue
                try:
                    with open(path, "rb") as f:
                        st = os.fstat(f.fileno())
                        state.append((path, st.st_ino, st.st_size, f.read(JOURNAL_HEADER_BYTES)))
                except OSError:
                    return None
    return tuple(names), tuple(state)


class KernelLogWatch:
    """The Monitor's kernel-log source: each poll reads the last window of this boot's kernel
    messages from the first source that answers — the journal (one `journalctl -k` call), else
    dmesg, else the new lines of kern.log / syslog / messages — and remembers which one did."""

    def __init__(self, sources) -> None:
        self.sources = sources
        self.reports: tuple[SourceReport, ...] = ()  # the last poll's, failures included
        self._order = ["journal", "dmesg", "files"]
        self._offsets: dict[str, tuple[int, int]] = {}  # path -> (inode, bytes read)
        self._kept: dict[tuple, KernelEvent] = {}  # the health findings' messages, by line
        self.gpus: tuple[GpuRef, ...] = ()  # NVML's at the last poll: a fallen GPU's index
        # the journal's last answer, with its files' state then and when it was asked
        self._journal: tuple[tuple, ParsedLog, SourceReport, float] | None = None
        self.journal_reads = 0  # the times `journalctl` was run

    def _keep(self, events, now: float) -> None:
        for e in events:
            if (e.kind in HEALTH_KINDS or is_fall(e)) and e.timestamp is not None:
                self._kept[(e.timestamp, e.kind, e.pci, e.device, e.detail)] = e
        old = [k for k, e in self._kept.items() if now - e.timestamp > KEEP_S]
        for k in old:
            del self._kept[k]
        if len(self._kept) > MAX_KEPT:
            newest = sorted(self._kept.items(), key=lambda kv: kv[1].timestamp)[-MAX_KEPT:]
            self._kept = dict(newest)

    def health_findings(
        self, now: float, since: str = "", whole: bool = False
    ) -> tuple[Finding, ...]:
        """The health findings of the messages kept (none before the first poll). `whole`: also
        the one that says nothing was found, or that the log could not be read (the live view
        says the latter in its banner, and adds no finding where nothing happened)."""
        if not self.reports:
            return ()
        found = kernel_findings(
            list(self._kept.values()),
            now,
            since=since,
            readable=self.readable,
            problem="; ".join(f"{r.name}: {r.message or r.status}" for r in self.reports),
            next_step=next((r.next_step for r in self.reports if r.next_step), ""),
            gpus=self.gpus,
        )
        if whole:
            return found
        return tuple(f for f in found if f.id not in ("kernel.neighbours", "kernel.unreadable"))

    @property
    def readable(self) -> bool:
        return any(r.usable for r in self.reports)

    def poll(self, since: float, gpus: tuple[GpuRef, ...] | None = None) -> ParsedLog:
        """The kernel messages since `since`; `gpus` (NVML's) name a GPU that fell off the bus
        in the health findings."""
        if gpus is not None:
            self.gpus = gpus
        deadline = time.monotonic() + LIVE_BUDGET.seconds
        reports = []
        for kind in list(self._order):
            parsed, report = self._read(kind, since, deadline)
            reports.append(report)
            if report.usable:
                self._order.remove(kind)
                self._order.insert(0, kind)  # ask it first next time
                self.reports = tuple(reports)
                parsed.events = [
                    e for e in parsed.events if e.timestamp is None or e.timestamp >= since
                ]
                parsed.ooms = [
                    k for k in parsed.ooms if k.timestamp is None or k.timestamp >= since
                ]
                self._keep(parsed.events, self.sources.clock.now())
                return parsed
        self.reports = tuple(reports)
        return ParsedLog()

    def _read(self, kind: str, since: float, deadline: float):
        if kind == "journal":
            return self._read_journal(since, deadline)
        if kind == "dmesg":
            return read_dmesg(self.sources.run_command, boot_time_of(self.sources), deadline)
        if self.sources.simulated:
            return ParsedLog(), SourceReport(
                "kernel log files", "file", "missing", message="not simulated"
            )
        parsed = ParsedLog()
        reports = []
        for base in SYSTEM_LOGS:
            p, rep = self._follow(base, since, deadline)
            parsed.events += p.events
            parsed.ooms += p.ooms
            reports.append(rep)
        usable = [r for r in reports if r.usable]
        if usable:
            return parsed, usable[0]
        return parsed, (next((r for r in reports if r.status == "denied"), reports[0]))

    def _read_journal(self, since: float, deadline: float) -> tuple[ParsedLog, SourceReport]:
        """This boot's kernel messages from the journal: its last answer again while no journal
        file changed since (one `journalctl` less every poll on a quiet node; the answer's
        messages older than `since` are left out by `poll` as they would have been by
        `--since`), else `journalctl`, at least every `JOURNAL_RECHECK_S`."""
        state = None if self.sources.simulated else journal_state()
        now = time.monotonic()
        last = self._journal
        if (
            state is not None
            and last is not None
            and last[0] == state
            and 0 <= now - last[3] < JOURNAL_RECHECK_S
        ):
            parsed = last[1]
            return ParsedLog(list(parsed.events), list(parsed.ooms), parsed.stats), last[2]
        self.journal_reads += 1
        parsed, report = read_journal(
            self.sources.run_command, since, LIVE_BUDGET, deadline, this_boot=True
        )
        kept = ParsedLog(list(parsed.events), list(parsed.ooms), parsed.stats)
        self._journal = (state, kept, report, now) if state is not None and report.usable else None
        return parsed, report

    def _follow(self, path: str, since: float, deadline: float):
        """The lines appended to `path` since the last poll (a rotated file starts over)."""
        parsed = ParsedLog()
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                inode, offset = self._offsets.get(path, (st.st_ino, None))
                if offset is None or inode != st.st_ino or offset > st.st_size:
                    offset = max(0, st.st_size - LIVE_BUDGET.bytes_per_file)
                    if offset:  # start at a whole line
                        f.seek(offset)
                        offset += len(f.readline())
                f.seek(offset)
                data = f.read(min(st.st_size - offset, 16 * LIVE_BUDGET.bytes_per_file))
        except FileNotFoundError:
            return parsed, SourceReport(path, "file", "missing", message="not present")
        except PermissionError:
            return parsed, SourceReport(
                path, "file", "denied", message="permission denied", next_step=access_hint(path)
            )
        except OSError as e:
            return parsed, SourceReport(path, "file", "error", message=str(e))
        cut = data.rfind(b"\n") + 1  # a line still being written waits for the next poll
        self._offsets[path] = (st.st_ino, offset + cut)
        r = LogRead(lines=candidates(data[:cut]), bytes_read=cut, size=st.st_size)
        parse_lines(r.lines, path, ref_time=st.st_mtime, parsed=parsed)
        return parsed, report_of(path, "file", r, parsed)


def read_kernel_health(sources, gpus: tuple[GpuRef, ...] = ()) -> tuple[Finding, ...]:
    """`gputop-diag health`'s kernel-log findings: this boot's messages (the last day where the
    boot time is not known), read once the way the live view reads them; `gpus` (NVML's) name
    a GPU that fell off the bus."""
    now = sources.clock.now()
    boot = boot_time_of(sources)
    since, label = (boot, "since boot") if boot is not None else (now - RECENT_S, "in a day")
    watch = KernelLogWatch(sources)
    watch.poll(since, gpus)
    return watch.health_findings(now, label, whole=True)
