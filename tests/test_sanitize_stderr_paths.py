"""Every path the user names, as a sanitized command prints it (README: what a `--sanitize` run
prints on stderr names each path by its pseudonym): user-like names generated from a fixed
seed, bare relative (`jsmith-runs`, `k.log`), relative with a directory and absolute, through
the usage errors and messages of `record`, `watch`, `report`, `xid`, `compare` and
`driver --probe-python`. Without --sanitize, `report` names the files it wrote as given."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from gputop_diag.cli import main
from gputop_diag.commands.common import said_path, said_text
from gputop_diag.model.exits import EXIT_USAGE
from tests.test_sanitize_planted import Gen

PSEUDONYM = re.compile(r"(?:~user-\w{4}/|/tmp/|\./)?path-\w{4}")


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def names(tmp_path, monkeypatch):
    """A directory named like a person's runs (as given: bare, under a project, absolute) and
    a project's log file, in the test's own working directory."""
    monkeypatch.chdir(tmp_path)
    g = Gen(2024)
    person, project = g.word(), g.word()
    runs = tmp_path / f"{person}-runs"
    (tmp_path / project / runs.name).mkdir(parents=True)
    runs.mkdir()
    log = tmp_path / project / f"{g.word(3, 4)}.log"
    log.write_text("Jan 15 10:00:01 n kernel: [ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1\n")
    bare_log = tmp_path / log.name
    bare_log.write_text(log.read_text())
    return {
        "person": person,
        "project": project,
        "dirs": [runs.name, f"{project}/{runs.name}", str(runs)],
        "logs": [log.name, f"{project}/{log.name}", str(log)],
        "missing": [f"{person}-x.jsonl", f"{project}/{person}.jsonl", str(runs / "gone.jsonl")],
    }


def _clean(text: str, names: dict) -> None:
    for word in (names["person"], names["project"]):
        assert word not in text, (word, text)


def test_a_path_said_on_stderr_is_its_pseudonym_in_every_form(names):
    for path in [*names["dirs"], *names["logs"]]:
        shown = said_path(path, True)
        assert PSEUDONYM.fullmatch(shown), (path, shown)
        assert said_path(path, False) == path
        # the same pseudonym wherever this run says it; the text around it sanitized once
        said = said_text(f"cannot write {path}: Is a directory", True, [path])
        assert said == f"cannot write {shown}: Is a directory", said


def test_record_watch_and_report_name_a_directory_by_its_pseudonym(names):
    for d in names["dirs"]:
        for argv in (
            ["--sanitize", "--demo", "idle", "record", "-o", d, "--seconds", "1"],
            ["--demo", "idle", "watch", "--sanitize", "--record", d, "--", "true"],
            ["--demo", "idle", "watch", "--sanitize", "--output", d, "--", "true"],
            ["--demo", "idle", "report", "--sanitize", "-o", d],
            ["--demo", "idle", "report", "--sanitize", "--private-map", d],
        ):
            rc, out, err = _run(argv)
            assert rc == EXIT_USAGE and "directory" in err.lower(), (argv, err)
            assert PSEUDONYM.search(err), (argv, err)
            _clean(out + err, names)


def test_xid_and_compare_name_what_they_read_by_a_pseudonym(names):
    for log in names["logs"]:
        rc, out, err = _run(["--sanitize", "xid", "--log", log])
        assert rc == 0 and "file-1" in out, (log, out, err)
        _clean(out + err, names)
    for missing in names["missing"]:
        for argv in (["--sanitize", "xid", "--log", missing], ["compare", "--sanitize", missing]):
            argv = [*argv, names["logs"][0]] if argv[0] == "compare" else argv
            rc, out, err = _run(argv)
            assert rc == EXIT_USAGE and "no such file" in err, (argv, err)
            assert PSEUDONYM.search(err), (argv, err)
            _clean(out + err, names)
    for d in names["dirs"]:
        rc, out, err = _run(["compare", "--sanitize", names["logs"][0], d])
        assert rc == EXIT_USAGE and "is a directory" in err, err
        _clean(out + err, names)


def test_driver_probe_python_names_the_interpreter_by_a_pseudonym(names):
    for d in names["dirs"]:
        interpreter = f"{d}/bin/python"
        rc, out, err = _run(
            ["--demo", "idle", "driver", "--sanitize", "--probe-python", interpreter]
        )
        assert rc == 0 and "framework" in out, err
        _clean(out + err, names)


def test_report_names_the_files_it_wrote_by_pseudonym_only_under_sanitize(names):
    d = names["dirs"][1]
    out_md, private = f"{d}/r.md", f"{d}/m.json"
    argv = ["--demo", "idle", "report", "-o", out_md, "--private-map", private]
    rc, _, err = _run(argv)
    assert rc == 0 and out_md in err and private in err, err  # the user's own terminal
    rc, _, err = _run([*argv, "--sanitize"])
    assert rc == 0 and "wrote the sanitized report to path-" in err, err
    assert "the private map is in path-" in err, err
    _clean(err, names)
