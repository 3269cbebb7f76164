"""How fast the kernel-log reader gets through big logs, and how much memory it takes.

Prints, for a dense 2 GiB syslog (one Xid at the very end) and a ~30 MB one (an Xid every
1.5 MB): wall time and the child's peak RSS of `gputop-diag xid --log FILE --since all --json`.
Targets: a 2 GiB log in under 10 s and 300 MiB (it reads only the newest 256 MiB). A report, not
a test: always exits 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

XID = "NVRM: Xid (PCI:0000:3b:00): 31, pid=4242, name=python3, Ch 00000008, MMU Fault"
FILLER = "Jan 15 10:11:00 node7 CRON[123]: (root) CMD (run-parts /etc/cron.hourly)\n"
CHILD = (
    "import resource, sys\n"
    "from gputop_diag.cli import main\n"
    "rc = main(['xid', *sys.argv[1:]])\n"
    "print('MAXRSS_KIB=%d' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def write_log(path: str, size: int, xid_every: int | None) -> None:
    block = FILLER * (1_500_000 // len(FILLER))
    with open(path, "w") as f:
        written, k = 0, 0
        while written < size:
            f.write(block)
            written += len(block)
            if xid_every and written // xid_every > k:
                k = written // xid_every
                f.write(f"Jan 15 10:12:{k % 60:02d} node7 kernel: {XID}\n")
        f.write(f"Jan 15 10:13:00 node7 kernel: {XID}\n")


def measure(path: str) -> tuple[float, int, int]:
    start = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-c", CHILD, "--log", path, "--since", "all", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.monotonic() - start
    rss = int(p.stderr.rsplit("MAXRSS_KIB=", 1)[1]) if "MAXRSS_KIB=" in p.stderr else -1
    events = len(json.loads(p.stdout)["events"]) if p.returncode == 0 else -1
    return wall, rss, events


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        for label, size, every in (
            ("30 MB, an Xid every 1.5 MB", 30_000_000, 1_500_000),
            ("2 GiB dense, one Xid at the end", 2 * 1024**3, None),
        ):
            path = os.path.join(d, "syslog")
            write_log(path, size, every)
            wall, rss, events = measure(path)
            print(f"{label}: {wall:.2f} s wall, peak RSS {rss / 1024:.0f} MiB, {events} event(s)")
            os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
