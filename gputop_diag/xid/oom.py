"""OOM kills from the kernel log: `journalctl -k` lines as frozen facts for the classifier.

`parse_oom_kills` reads `journalctl -k -o short-iso` text; `oom_kill_in` reads one kernel
message whatever its source (the kernel-log reader in `xid/kernlog.py` calls it for every message,
so one read of the log yields both the OOM kills and the GPU driver events)."""

from __future__ import annotations

import re
from datetime import datetime

from ..model import OomKill  # noqa: F401 - re-exported

# "Out of memory: Killed process 1234 (python) total-vm:…" (older kernels: "Kill process");
# "Memory cgroup out of memory: Killed process 1234 (pt_data_worker) …" (mm/oom_kill.c).
_KILL = re.compile(
    r"(?P<cg>Memory cgroup out of memory|Out of memory)[^:]*:\s*Kill(?:ed)? process "
    r"(?P<pid>\d+) \((?P<name>[^)]*)\)"
)
# journalctl -o short-iso: "2026-01-15T09:12:00+0000 host kernel: …"
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[+-]\d\d:?\d\d|Z)?)\s")


def _stamp(line: str) -> float | None:
    m = _STAMP.match(line)
    if not m:
        return None
    text = m.group(1).replace("Z", "+0000")
    for fmt in ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"):
        try:
            return datetime.strptime(text, fmt).timestamp()
        except ValueError:
            continue
    return None


def oom_kill_in(message: str, timestamp: float | None) -> OomKill | None:
    """The OOM kill one kernel message reports, if it reports one."""
    m = _KILL.search(message)
    if not m:
        return None
    return OomKill(
        timestamp=timestamp,
        pid=int(m.group("pid")),
        process_name=m.group("name"),
        cgroup=m.group("cg").startswith("Memory cgroup"),
    )


def parse_oom_kills(text: str) -> list[OomKill]:
    """Every OOM kill in kernel-log text; other lines (and binary junk) are ignored."""
    out = []
    for line in text.splitlines():
        m = _KILL.search(line)
        if m:
            out.append(
                OomKill(
                    timestamp=_stamp(line),
                    pid=int(m.group("pid")),
                    process_name=m.group("name"),
                    cgroup=m.group("cg").startswith("Memory cgroup"),
                )
            )
    return out
