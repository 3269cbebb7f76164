"""Counts in what the commands print read as English: "1 event on 1 device", "1,201 snapshots"
(`model.formats.count`), never "event(s)" or a figure without its thousands separator."""

from __future__ import annotations

import contextlib
import io
import re

from gputop_diag.cli import main
from gputop_diag.model.formats import count


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_count_says_one_in_the_singular_and_thousands_with_separators():
    assert count(1, "event") == "1 event" and count(2, "device") == "2 devices"
    assert count(1201, "snapshot") == "1,201 snapshots"
    assert count(3, "process", "processes") == "3 processes"


def test_xid_triage_counts_in_words():
    rc, out, _ = run(["--demo", "xid-79", "xid"])
    assert rc == 0 and "(s)" not in out, out
    assert re.search(r"Xid triage: \d+ events? on \d+ devices?", out), out
