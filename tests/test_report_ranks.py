"""The report's Ranks section: a distributed job's ranks from the probe states the window's
snapshots carry, judged as watch and the Job pane judge them, in JSON and Markdown, sanitized
(ranks kept; nodes, pids and the stacks' paths pseudonyms); no section for a job of one rank."""

from __future__ import annotations

import json

from test_sanitize_ranks import made_up_names, rank_probes, rank_snapshot

from gputop_diag.monitor.core import Monitor
from gputop_diag.report.build import ReportSource, make_report


def _report(names, **probes):
    monitor = Monitor(None, interval=1.0)
    snaps = []
    for k in range(5):
        at = 3000.0 + k
        snaps.append(rank_snapshot(names, at, rank_probes(names, at, **probes)))
        t = monitor.feed(snaps[-1])
    return make_report(snaps, t.diagnosis, source=ReportSource("simulator", "ranks"))


def test_the_report_holds_the_ranks_sanitized():
    names = made_up_names()
    r = _report(names, straggler=None, stalled=1)
    why = f"(seed {names.seed})"
    assert not r.left_out, why
    ranks = r.doc["ranks"]
    assert [row["rank"] for row in ranks["rows"]] == [0, 1, 2, 3]
    assert ranks["hang"]["missing"] == [1] and ranks["verdict"].startswith("hang: rank 1")
    assert all(row["pid"].startswith("pid-") for row in ranks["rows"])
    assert all(row["node"].startswith("host-") for row in ranks["rows"])
    md = r.markdown
    assert "## Ranks" in md and "Stack of rank 1 (most recent call first):" in md
    assert "line 88 in read_shard" in md and "**hang: rank 1 took no step for 40 s" in md
    blob = (md + json.dumps(r.doc)).lower()
    assert not [x for x in names.secrets() if x.lower() in blob], why
    section = md.split("## Ranks")[1].split("\n## ")[0]  # the GPU processes list pids, as ever
    assert not [p for p in names.pids if str(p) in json.dumps(ranks) + section], why
    assert r.doc["redactions"]["classes"]["pid"]["distinct"] == 4


def test_the_straggler_in_the_report():
    names = made_up_names()
    r = _report(names)
    ranks = r.doc["ranks"]
    assert ranks["straggler"]["rank"] == 2 and ranks["hang"] is None
    assert ranks["straggler"]["node"] == ranks["rows"][2]["node"]
    assert "straggler: rank 2 on host-" in r.markdown and "- next: rank 2" in r.markdown


def test_no_ranks_section_for_one_rank():
    r = _report(made_up_names(1))
    assert "ranks" not in r.doc and "## Ranks" not in r.markdown
    assert not r.left_out
