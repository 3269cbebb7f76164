"""One way of wording what the commands print: every line of ours on stderr starts
`gputop-diag: ` whatever the command; a count says its noun in the singular or the plural,
never "(s)"; health lays a finding's fields out one a line, none that says only "-"; and
`watch --record` names its option when the recording cannot be opened, as `record -o` does."""

from __future__ import annotations

import socket

import pytest

from gputop_diag.cli import main
from gputop_diag.commands.health import render_text
from gputop_diag.model.exits import EXIT_USAGE


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "argv",
    [
        ("--demo", "idle", "memory", "--config", "/nonexistent/config.json"),
        ("--demo", "idle", "memory", "--params", "7B", "--gpu", "H100", "--tp", "0"),
        ("--demo", "idle", "watch", "--record", "/nonexistent/dir/rec.jsonl", "--", "true"),
        ("--demo", "idle", "report", "-o", "/nonexistent/dir/report.md"),
        ("--demo", "idle", "record", "-o", "/nonexistent/dir/rec.jsonl"),
        ("--demo", "idle", "diagnose", "--seconds", "-1"),
        ("--demo", "idle", "driver", "--timeout", "0"),
        ("--interval", "0", "snapshot"),
    ],
)
def test_every_usage_error_says_the_one_prefix(capsys, argv):
    code, _, err = _run(capsys, *argv)
    assert code == EXIT_USAGE, err
    lines = err.splitlines()
    assert lines and all(line.startswith("gputop-diag: ") for line in lines), err
    assert "Traceback" not in err


def _finding(**kw) -> dict:
    base = {
        "severity": "info",
        "title": "GSP firmware enabled",
        "id": "nvml.gsp_firmware",
        "bears_on": [],
        "layer": None,
        "evidence": [{"text": "enabled on GPU 0", "source": "nvmlDeviceGetGspFirmwareMode"}],
        "next_step": "nvidia-smi -q",
    }
    return {**base, **kw}


def _doc(*findings: dict, warnings: int = 1) -> dict:
    counts = {"critical": 0, "warning": warnings, "info": len(findings), "ok": 0}
    return {"hostname": "node", "timestamp": "t", "counts": counts, "findings": list(findings)}


def test_health_says_one_field_a_line_and_no_dash():
    text = render_text(_doc(_finding(layer="driver"), _finding(bears_on=["communication"])))
    lines = [line.strip() for line in text.splitlines()]
    assert "driver-chain layer: driver" in lines  # a line of its own
    assert "bears on: communication" in lines
    assert not any("bears on: -" in line for line in lines)
    both = render_text(_doc(_finding(bears_on=["synchronization"], layer="fabric_manager")))
    fields = [line.strip() for line in both.splitlines()[3:5]]
    assert fields == ["bears on: synchronization", "driver-chain layer: fabric manager"]
    assert "1 warning," in text.splitlines()[0]
    assert "2 warnings," in render_text(_doc(warnings=2))


@pytest.mark.parametrize("scenario", ["tour", "nccl-p2p-disabled", "acs-enabled"])
def test_no_demo_output_says_a_plural_with_s_in_brackets(capsys, scenario):
    said = []
    for command in (
        ["snapshot", "--fast"],
        ["xid"],
        ["health"],
        ["mapping"],
        ["diagnose", "--seconds", "6"],
        ["report", "--seconds", "6"],
    ):
        _, out, err = _run(capsys, "--demo", scenario, *command)
        said.append(out + err)
    text = "\n".join(said)
    assert "GPU" in text and "(s)" not in text, [
        line for line in text.splitlines() if "(s)" in line
    ]


def test_watch_record_that_cannot_be_opened_names_its_option(capsys, tmp_path):
    # A socket passes the check before the job (not a regular file: left to the open itself),
    # then cannot be opened for writing (ENXIO, https://man7.org/linux/man-pages/man2/open.2.html).
    path = tmp_path / "rec.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        code, _, err = _run(
            capsys, "--demo", "idle", "watch", "--json", "--record", str(path), "--", "true"
        )
    assert code != 0
    (line,) = [line for line in err.splitlines() if "cannot write" in line]
    assert line.startswith(f"gputop-diag: --record {path}: cannot write: "), err
