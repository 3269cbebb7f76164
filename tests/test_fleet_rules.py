"""The recording rules the project ships for the fleet (`gputop_diag/fleet/rules/`): promtool
accepts them and their unit tests pass, they are package data, and the rule that names the
fleet's nodes records exactly the query the reader otherwise runs ad hoc."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources

import pytest

from gputop_diag.fleet.query import NODES_RULE, presence_query

PROMTOOL = shutil.which("promtool")
RULES = resources.files("gputop_diag.fleet") / "rules"


@pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not installed (Debian: apt-get install prometheus)",
)
def test_the_shipped_rules_pass_promtool_check_and_test():
    with resources.as_file(RULES) as rules:
        check = subprocess.run(
            [PROMTOOL, "check", "rules", str(rules / "gputop-diag.rules.yml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        assert "SUCCESS: 7 rules found" in check.stdout
        test = subprocess.run(
            [PROMTOOL, "test", "rules", "gputop-diag.rules.test.yml"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=rules,
        )
        assert test.returncode == 0, test.stdout + test.stderr
        assert "SUCCESS" in test.stdout


def test_the_nodes_rule_records_the_query_the_reader_counts_nodes_with():
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load((RULES / "gputop-diag.rules.yml").read_text())
    rules = {r["record"]: r["expr"] for g in doc["groups"] for r in g["rules"]}
    assert " ".join(rules[NODES_RULE].split()) == presence_query("")
    # every rule keeps the host name under both spellings of its label, or no host at all
    for name, expr in rules.items():
        if "by (instance" in expr:
            assert "hostname, Hostname" in expr, name
