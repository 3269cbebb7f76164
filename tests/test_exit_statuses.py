"""The exit statuses: one table in the README, `model/exits.py` and the `--help` epilog agree,
and each command ends with the status the table gives it for a bad input, said before any work
(in-process: `main` as the entry point runs it, no interpreter start per command)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gputop_diag.cli import COMMANDS, build_parser, main
from gputop_diag.model import exits

README = Path(__file__).resolve().parent.parent / "README.md"
LIVE_VIEW = "the live view"


def readme_table() -> dict[str, tuple[str, set[str]]]:
    """The README's "Exit statuses" table: status -> (means, the commands it names)."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Exit statuses") :]
    section = section[: section.index("\n\n", section.index("| status"))]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 4 or cells[0] in ("status", "---"):
            continue
        status, means, commands = cells[0].strip("`"), cells[1], cells[2]
        if commands == "every command":
            named = {*COMMANDS, LIVE_VIEW}
        else:
            named = {c.strip() for c in commands.split(",")}
        rows[status] = (means, named)
    return rows


def test_the_readme_table_is_model_exits():
    rows = readme_table()
    numbered = {int(s): v for s, v in rows.items() if s.isdigit() and int(s) < 128}
    assert sorted(numbered) == sorted(exits.MEANING)
    for code, (means, named) in numbered.items():
        assert means == exits.MEANING[code], code
        assert named <= {*COMMANDS, LIVE_VIEW}, named - {*COMMANDS, LIVE_VIEW}
    for command in [*COMMANDS, ""]:
        name = command or LIVE_VIEW
        said = {code for code, (_, named) in numbered.items() if name in named}
        assert said == set(exits.COMMAND_EXITS[command]), name
    assert set(exits.COMMAND_EXITS) == {*COMMANDS, ""}


def test_the_help_epilog_says_each_status():
    epilog = " ".join(build_parser().epilog.split())
    for code, means in exits.MEANING.items():
        assert f"{code} {means}" in epilog, code
    assert "128+N" in epilog and "141" in epilog


def _alive_pid() -> str:
    return str(os.getpid())


# command -> (argv, status, what stderr says); each a bad input but the no-GPU and partial ones
CASES = {
    "": (["--demo", ""], exits.EXIT_USAGE, "--demo takes a scenario's name"),
    "snapshot": (["--demo", "no-gpu", "snapshot"], exits.EXIT_NO_GPU, "no NVIDIA driver"),
    "diagnose": (["--demo", "idle", "diagnose", "--seconds", "-1"], exits.EXIT_USAGE, "--seconds"),
    "record": (["--demo", "idle", "record", "-o", "{nodir}/r.jsonl"], exits.EXIT_USAGE, "cannot"),
    "xid": (["xid", "--log", "{nodir}/kern.log"], exits.EXIT_USAGE, "no such file"),
    "mapping": (["--demo", "no-gpu", "mapping"], exits.EXIT_NO_GPU, "no NVIDIA driver"),
    "driver": (["--demo", "no-gpu", "driver"], exits.EXIT_NO_GPU, ""),
    "health": (["--demo", "no-gpu", "health"], exits.EXIT_NO_GPU, ""),
    "report": (["--demo", "idle", "report", "-o", "{nodir}/r.md"], exits.EXIT_USAGE, "cannot"),
    "compare": (["--demo", "idle", "compare", "a", "b"], exits.EXIT_USAGE, "two files"),
    "memory": (["memory", "--layers", "2"], exits.EXIT_USAGE, "give --config FILE"),
    "exporter": (["exporter", "--listen", "nonsense"], exits.EXIT_USAGE, "--listen"),
    "fleet": (
        ["fleet", "--prometheus", "http://127.0.0.1:9", "--timeout", "2"],
        exits.EXIT_PROMETHEUS,
        "cannot reach Prometheus",
    ),
    "watch": (
        ["watch", "--pid", "{pid}", "--log", "{nodir}/train.log", "--no-tui"],
        exits.EXIT_USAGE,
        "no such file",
    ),
    "demo": (["demo", "--list", "--replay", "{nodir}/r.jsonl"], exits.EXIT_USAGE, "--replay"),
}


@pytest.mark.parametrize("command", sorted(CASES), ids=lambda c: c or "live-view")
def test_each_command_ends_with_a_status_of_its_row(command, tmp_path, capsys):
    argv, status, said = CASES[command]
    argv = [a.format(nodir=tmp_path / "no", pid=_alive_pid()) for a in argv]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    out = capsys.readouterr()
    assert code == status, out.err
    assert code in exits.COMMAND_EXITS[command]
    assert said in out.err + out.out
    assert "Traceback" not in out.err and "unexpected failure" not in out.err
    if status == exits.EXIT_USAGE:
        assert out.out == ""  # said before any work: nothing sampled, nothing printed
        assert not (tmp_path / "no").exists()


def test_report_checks_the_private_map_before_it_samples(tmp_path, capsys):
    """It used to print the whole report, then fail on the map; now it says so first, as
    record does for its -o (the same status for the same unwritable file)."""
    bad = str(tmp_path / "no" / "map.json")
    assert main(["--demo", "idle", "report", "--private-map", bad]) == exits.EXIT_USAGE
    out = capsys.readouterr()
    assert out.out == "" and f"--private-map {bad}: cannot write" in out.err
    assert main(["--demo", "idle", "record", "-o", bad]) == exits.EXIT_USAGE
    assert main(["--demo", "idle", "report", "-o", str(tmp_path)]) == exits.EXIT_USAGE
    assert "is a directory" in capsys.readouterr().err


def test_a_file_named_to_xid_and_not_read_is_a_partial_answer(tmp_path, capsys):
    log = tmp_path / "kern.log"
    log.write_text(
        "Jan 15 10:00:00 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen "
        "off the bus.\n"
    )
    unreadable = tmp_path / "a-directory"
    unreadable.mkdir()
    args = ["xid", "--since", "all", "--log", str(log)]
    assert main(args) == exits.EXIT_OK
    assert "Xid 79" in capsys.readouterr().out
    assert main([*args, "--log", str(unreadable)]) == exits.EXIT_PARTIAL
    out = capsys.readouterr()
    assert "Xid 79" in out.out  # the answer is printed
    assert f"could not be read ({unreadable})" in out.err


# Each status beyond 0, 1 and 2 that a command's row lists, and how it is reached: in-process
# here (on the simulated machine without a driver, or a Prometheus nobody serves), ...
REACHED = {
    ("", exits.EXIT_NO_GPU): ["--demo", "no-gpu"],  # not a terminal: one snapshot, then 3
    ("snapshot", exits.EXIT_NO_GPU): ["--demo", "no-gpu", "snapshot"],
    ("diagnose", exits.EXIT_NO_GPU): ["--demo", "no-gpu", "diagnose", "--seconds", "1"],
    ("record", exits.EXIT_NO_GPU): ["--demo", "no-gpu", "record", "-o", "{tmp}/r.jsonl"],
    ("report", exits.EXIT_NO_GPU): ["--demo", "no-gpu", "report", "-o", "{tmp}/r.md"],
    ("mapping", exits.EXIT_NO_GPU): ["--demo", "no-gpu", "mapping"],
    ("driver", exits.EXIT_NO_GPU): ["--demo", "no-gpu", "driver"],
    ("health", exits.EXIT_NO_GPU): ["--demo", "no-gpu", "health"],
    ("exporter", exits.EXIT_NO_GPU): ["--demo", "no-gpu", "exporter", "--listen", "127.0.0.1:0"],
    ("", exits.EXIT_PROMETHEUS): ["--prometheus", "http://127.0.0.1:9"],
    ("fleet", exits.EXIT_PROMETHEUS): CASES["fleet"][0],
}
# ... in another test (it needs a Prometheus that answers, or a file it writes) ...
ELSEWHERE = {
    ("fleet", exits.EXIT_NO_GPU): "test_fleet_prometheus.py::test_no_matching_series_is_exit_3",
    ("xid", exits.EXIT_PARTIAL): "test_exit_statuses.py::test_a_file_named_to_xid_and_not_read",
}
# ... or only in the command's code (a sanitizer that holds back a snapshot, health checks that
# cannot be read: the simulator has neither on demand), which returns the status by name.
BY_CODE = {
    ("record", exits.EXIT_PARTIAL): "gputop_diag/commands/record.py",
    ("report", exits.EXIT_PARTIAL): "gputop_diag/commands/report.py",
}
# A command whose row leaves out 3 ends otherwise on the machine without a driver.
WITHOUT_A_GPU = {
    "memory": (
        [
            "--demo",
            "no-gpu",
            "memory",
            "--params",
            "7e9",
            "--layers",
            "32",
            "--hidden",
            "4096",
            "--heads",
            "32",
            "--intermediate",
            "11008",
            "--vocab",
            "32000",
        ],
        exits.EXIT_OK,
    ),
}


def test_every_listed_status_is_reached_by_a_named_way():
    listed = {
        (command, code)
        for command, codes in exits.COMMAND_EXITS.items()
        for code in codes
        if code not in (exits.EXIT_OK, exits.EXIT_FAILURE, exits.EXIT_USAGE)
    }
    assert listed == {*REACHED, *ELSEWHERE, *BY_CODE}
    tests = Path(__file__).resolve().parent
    for where in ELSEWHERE.values():
        file, name = where.split("::")
        assert f"def {name}" in (tests / file).read_text(encoding="utf-8"), where
    for (_, code), path in BY_CODE.items():
        source = (tests.parent / path).read_text(encoding="utf-8")
        name = {exits.EXIT_PARTIAL: "EXIT_PARTIAL"}[code]
        assert re.search(rf"return\b.*\b{name}\b", source), path


@pytest.mark.parametrize("key", sorted(REACHED), ids=lambda k: f"{k[0] or 'live-view'}-{k[1]}")
def test_each_listed_status_is_reached(key, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    argv = [a.format(tmp=tmp_path) for a in REACHED[key]]
    assert main(argv) == key[1], capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(WITHOUT_A_GPU))
def test_a_command_that_leaves_out_3_ends_otherwise_without_a_gpu(command, capsys):
    argv, status = WITHOUT_A_GPU[command]
    assert exits.EXIT_NO_GPU not in exits.COMMAND_EXITS[command]
    assert main(argv) == status, capsys.readouterr().err


def test_an_unwritable_output_is_said_in_one_form_by_record_and_report(tmp_path, capsys):
    bad = str(tmp_path / "no" / "x")
    said = []
    for command in ("record", "report"):
        assert main(["--demo", "idle", command, "-o", bad]) == exits.EXIT_USAGE
        said.append(capsys.readouterr().err)
    assert said == [f"gputop-diag: -o {bad}: cannot write: No such file or directory\n"] * 2
