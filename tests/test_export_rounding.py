"""JSON a person reads has no float noise; recordings keep full precision."""

from __future__ import annotations

import json
import re

from gputop_diag.cli import main

NOISE = re.compile(r"\d+\.\d{4,}")


def run(capsys, *argv: str) -> str:
    main(list(argv))
    return capsys.readouterr().out


def test_snapshot_and_diagnosis_json_are_rounded_to_three_decimals(capsys):
    snap = run(capsys, "--demo", "compute-bound", "snapshot", "--json")
    diag = run(capsys, "--demo", "compute-bound", "diagnose", "--seconds", "20", "--json")
    assert not NOISE.findall(snap) and not NOISE.findall(diag)
    assert json.loads(snap)["gpus"][0]["power_w"] is not None


def test_a_recording_keeps_full_precision(capsys, tmp_path):
    f = tmp_path / "r.jsonl"
    main(["--demo", "compute-bound", "record", "-o", str(f), "--seconds", "3"])
    assert NOISE.findall(f.read_text())  # the figures a replay judges are the live ones
