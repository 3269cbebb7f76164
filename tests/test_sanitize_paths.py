"""Paths on sanitized surfaces: every path a run under --sanitize prints (stderr included) is
its pseudonym, and one path is one pseudonym in every line of the run: watch's start line, its
errors and its summary; a replayed recording's warnings and messages."""

from __future__ import annotations

import contextlib
import io
import re
import sys

import pytest

from gputop_diag.cli import main


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.slow
def test_watch_names_its_log_by_one_pseudonym_from_start_to_summary(tmp_path):
    log = tmp_path / "home" / "orionproj" / "job.log"
    log.parent.mkdir(parents=True)
    argv = ["watch", "--sanitize", "--no-tui", "--interval", "0.1", "--output", str(log)]
    rc, out, err = cli([*argv, "--", sys.executable, "-c", "print('step 1 loss 2.0')"])
    assert rc == 0, err
    assert "orionproj" not in out + err and str(tmp_path) not in out + err
    started = re.search(r"output: (\S+)", err).group(1)
    summary = re.search(r"output: (\S+) \(", out).group(1)
    assert started == summary and "path-" in started  # before: two keys, two pseudonyms


def test_watch_errors_name_the_output_by_its_pseudonym(tmp_path):
    log = tmp_path / "orionproj" / "missing" / "job.log"  # its folder does not exist
    rc, _, err = cli(["watch", "--sanitize", "--output", str(log), "--", "true"])
    assert rc == 2 and "cannot write" in err, err  # a usage error: said before the job starts
    assert "orionproj" not in err and str(tmp_path) not in err and "path-" in err


def test_a_replayed_recordings_warnings_name_it_by_its_pseudonym(tmp_path):
    rec = tmp_path / "orionproj" / "run.jsonl"
    rec.parent.mkdir()
    rc, _, err = cli(["--demo", "idle", "record", "-o", str(rec), "--seconds", "3"])
    assert rc == 0, err
    with open(rec, "ab") as f:
        f.write(b'{"timestamp": 1')  # cut off while writing its last line
    rc, out, err = cli(["--replay", str(rec), "--sanitize", "diagnose"])
    assert rc == 0 and "cut off or damaged" in err, err
    assert "orionproj" not in out + err and str(tmp_path) not in out + err
    assert re.search(r"warning: \S*path-\w+: the last line", err), err
    rc, _, err = cli(["--replay", str(rec), "diagnose"])  # not sanitized: the path as given
    assert str(rec) in err


@pytest.mark.slow
async def test_the_watch_view_names_the_log_as_stderr_does(tmp_path):
    """`watch --sanitize` on a terminal: the quit question names the job's log by the pseudonym
    its start line and the lines after quitting give (the run's key reaches the view)."""
    from test_tui_support import screen_text

    from gputop_diag import sim
    from gputop_diag.collect.job import JobWatch
    from gputop_diag.commands.common import shown_path
    from gputop_diag.monitor.run import session_key
    from gputop_diag.tui import GpuTopApp
    from gputop_diag.tui.job_quit import QuitJobScreen

    s = sim.build("idle")
    log = str(tmp_path / "orionproj" / "job.log")
    (tmp_path / "orionproj").mkdir()
    code = "import time; time.sleep(30)"
    w = JobWatch.for_command(s, [sys.executable, "-c", code], log_path=log)
    w.sanitize_key = session_key()  # as `watch.run` gives it
    try:
        app = GpuTopApp(s, start_collectors=False, job_watch=w, sanitize=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("q")
            await pilot.pause()
            assert isinstance(app.screen, QuitJobScreen)
            text = screen_text(app)
            assert shown_path(log) in text and "orionproj" not in text
            await pilot.press("n")
    finally:
        w.popen.kill()
        w.popen.wait()


def _relative_paths(n: int, seed: int = 20240611) -> list[tuple[str, list[str]]]:
    """`n` made-up relative paths (`./`, `../` or none before them, 1 to 3 named parts, an
    extension or not) with the names in each that must not show."""
    import random
    import string

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        names = [
            rng.choice(string.ascii_lowercase)
            + "".join(
                rng.choices(string.ascii_lowercase + string.digits + "_-", k=rng.randint(5, 11))
            )
            for _ in range(rng.randint(1, 3))
        ]
        ext = rng.choice(["", ".jsonl", ".jsonl.gz", ".log", ".md"])
        lead = rng.choice(["", "./", "../", "../../"])
        out.append((lead + "/".join(names) + ext, names))
    return out


def test_a_relative_path_stays_relative_with_its_names_replaced():
    from gputop_diag.sanitize.sanitizer import Sanitizer

    s = Sanitizer()
    for path, names in _relative_paths(300):
        shown = s.path(path)
        lead = re.match(r"(?:\.\.?/)*", path).group(0)
        assert shown.startswith(lead) and not shown.startswith("/"), (path, shown)
        assert re.fullmatch(re.escape(lead) + r"path-\w+", shown), (path, shown)
        assert not any(n.lower() in shown.lower() for n in names), (path, shown)
        assert s.path(path) == shown  # one path, one pseudonym
    assert s.path(".") == "." and s.path("..") == ".."


def test_record_names_a_relative_output_by_a_relative_pseudonym(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = cli(["--demo", "idle", "record", "-o", "orionproj.jsonl", "--seconds", "2",
                      "--sanitize"])  # fmt: skip
    assert rc == 0, err
    shown = re.search(r"\) to (\S+)", err).group(1)
    assert re.fullmatch(r"path-\w+", shown), err  # before: "to /"
    assert "orionproj" not in err
