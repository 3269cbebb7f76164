"""Every command on an ASCII-only standard output and error (PYTHONIOENCODING=ascii, as a
Latin-1 or C locale without UTF-8 gives): what it prints is spelled in ASCII, never an
"unexpected failure: UnicodeEncodeError". One run of the program per command; files written
(reports) stay UTF-8."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys

import pytest

from gputop_diag.cli import COMMANDS

SHAPE = ["--hidden", "4096", "--heads", "32", "--intermediate", "11008", "--vocab", "32000"]
# command -> (argv, exit status); each prints what its users read, non-ASCII text included
RUNS = {
    "": (["--demo", "xid-79"], 0),  # not a terminal: one snapshot
    "snapshot": (["--demo", "mig", "snapshot"], 0),
    "diagnose": (["--demo", "driver-mismatch", "diagnose", "--seconds", "20"], 0),
    "record": (["--demo", "idle", "record", "-o", "{tmp}/r.jsonl", "--seconds", "2"], 0),
    "xid": (["--demo", "xid-79", "xid"], 0),
    "mapping": (["--demo", "mig", "mapping"], 0),
    "driver": (["--demo", "driver-mismatch", "driver"], 0),
    "health": (["--demo", "dataloader-d-state", "health"], 0),
    "report": (["--demo", "xid-79", "report", "--seconds", "40"], 0),
    "compare": (["compare", "{tmp}/a.jsonl", "{tmp}/a.jsonl"], 0),  # a recording made below
    "memory": (["memory", *SHAPE, "--layers", "32"], 0),
    "exporter": (["--demo", "idle", "exporter", "--listen", "127.0.0.1:0"], 0),
    "fleet": (["fleet", "--prometheus", "http://127.0.0.1:9", "--timeout", "2"], 4),
    "watch": (["--demo", "input-starved", "watch", "--pid", "41200", "--seconds", "20"], 0),
    "demo": (["demo", "--list"], 0),
}
ASCII_ENV = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"}


def _run(argv: list[str]) -> tuple[int, bytes, bytes]:
    env = {**os.environ, **ASCII_ENV}
    cmd = [sys.executable, "-m", "gputop_diag", *argv]
    if "exporter" not in argv:
        r = subprocess.run(cmd, capture_output=True, timeout=60, env=env, check=False)
        return r.returncode, r.stdout, r.stderr
    # the exporter serves until stopped: once it says where, SIGTERM (its usual end)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    first = p.stderr.readline()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    return p.returncode, out, first + err


def test_every_command_has_a_run():
    assert set(RUNS) == {*COMMANDS, ""}


@pytest.mark.parametrize("command", sorted(RUNS), ids=lambda c: c or "live-view")
def test_every_command_prints_on_an_ascii_only_output(command, tmp_path):
    argv, status = RUNS[command]
    if command == "compare":
        from gputop_diag.cli import main

        rec = ["--demo", "thermal-throttle", "record", "-o", f"{tmp_path}/a.jsonl"]
        with contextlib.redirect_stderr(io.StringIO()):
            assert main([*rec, "--seconds", "20"]) == 0
    code, out, err = _run([a.format(tmp=tmp_path) for a in argv])
    assert b"unexpected failure" not in err and b"Traceback" not in err, err
    assert code == status, err
    assert out or err
    for stream in (out, err):
        stream.decode("ascii")  # every byte ASCII: a UnicodeDecodeError names the first other


def test_spellings_keep_the_meaning_and_json_stays_json(monkeypatch, capsys):
    """The ASCII spellings of the characters the output uses; a JSON document stays one."""
    import json

    from gputop_diag import cli

    raw = io.BytesIO()
    ascii_out = io.TextIOWrapper(raw, encoding="ascii", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", ascii_out)
    cli.ascii_safe_streams()
    print("driver -> CUDA \u2192 torch \u2014 12\u00d74 \u2265 3\u2026", end=" ")
    print("\u201cquoted\u201d caf\u00e9 \u2588")
    doc = {"text": "\u201cok\u201d \u2192 \u00e9 \u20ac \U0001f600"}
    print(json.dumps(doc, ensure_ascii=False))
    lines = raw.getvalue().decode("ascii").splitlines()
    # the tool's own characters spelled; data (a name, a path) escaped, never another name
    assert lines[0] == "driver -> CUDA -> torch -- 12x4 >= 3... 'quoted' caf\\u00e9 #"
    assert json.loads(lines[1]) == {"text": "'ok' -> \u00e9 \u20ac \U0001f600"}


def test_a_report_file_stays_utf8_when_the_terminal_takes_only_ascii(tmp_path, monkeypatch):
    from gputop_diag import cli

    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii"))
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(io.BytesIO(), encoding="ascii"))
    path = tmp_path / "r.md"
    assert cli.main(["--demo", "idle", "report", "--seconds", "5", "-o", str(path)]) == 0
    text = path.read_bytes().decode("utf-8")
    assert any(ord(ch) > 127 for ch in text)  # its own spellings (an em dash, an arrow), kept


@pytest.mark.parametrize(
    "name, shown",
    [("n\u00f6.json", "n\\u00f6.json"), ("nx\u20ac.json", "nx\\u20ac.json")],
)
def test_a_non_ascii_file_name_is_escaped_never_named_as_another_file(
    name, shown, tmp_path, monkeypatch
):
    """`n\u00f6.json` on an ASCII-only stderr is `n\\u00f6.json`: `no.json` would name a
    different file, `nx?.json` a pattern."""
    from gputop_diag import cli

    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw, encoding="ascii", write_through=True))
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BytesIO(), encoding="ascii"))
    config = tmp_path / name
    config.write_text("not json", encoding="utf-8")
    assert cli.main(["memory", "--config", str(config)]) == 2
    err = raw.getvalue().decode("ascii")
    assert shown in err and "Traceback" not in err, err
