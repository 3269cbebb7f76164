"""OOM kills read from the journal: `journalctl -k` since a time, parsed by `parse_oom_kills`."""

from __future__ import annotations

from ...model import OomKill
from ...xid.oom import parse_oom_kills

JOURNAL_TIMEOUT_S = 5.0


def collect_oom_kills(sources, since: float) -> list[OomKill]:
    """OOM kills in the kernel log since `since` (epoch s); empty when the log cannot be read."""
    argv = ["journalctl", "-k", "-o", "short-iso", "--no-pager", "--since", f"@{int(since)}"]
    try:
        r = sources.run_command(argv, JOURNAL_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - no journalctl, a timeout: the diagnosis goes on without it
        return []
    if r.returncode != 0:
        return []
    return parse_oom_kills(r.stdout)
