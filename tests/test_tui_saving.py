"""Where `s` and `S` write without `--save-dir` (the state directory, never the current one),
and the header's "saved …" note: it gives way before the program's name and goes after a while."""

from __future__ import annotations

import os

import pytest
from test_tui_support import FedApp

from gputop_diag.report.saving import save_dirs, write_json
from gputop_diag.tui import saver as saver_module
from gputop_diag.tui.header import HeaderFacts, header_runs


def header(app) -> str:
    return app.query_one("#header").plain


async def wait_for(pilot, folder, pattern: str) -> list:
    for _ in range(200):
        found = sorted(folder.glob(pattern))
        if found:
            return found
        await pilot.pause(0.05)
    return []


def test_without_a_save_dir_the_state_directory_comes_first(tmp_path):
    env = {"HOME": str(tmp_path)}
    dirs = save_dirs(None, env)
    assert dirs[0] == str(tmp_path / ".local/state/gputop-diag") and dirs[-1] == "/tmp"
    assert "." not in dirs and all(os.path.isabs(d) for d in dirs)
    rel = save_dirs("out", env)  # a relative --save-dir is named absolutely in every message
    assert rel[0] == os.path.abspath("out")
    saved = write_json({"a": 1}, dirs)  # the state directory is made when missing
    assert saved.path.startswith(dirs[0]) and not saved.problems


def test_a_missing_save_dir_is_reported_not_created(tmp_path):
    missing = tmp_path / "typo"
    saved = write_json({}, [str(missing), str(tmp_path / "state")], create_first=False)
    assert not missing.exists() and saved.path.startswith(str(tmp_path / "state"))
    assert saved.problems[0].startswith(str(missing))  # absolute, never "."


async def test_capital_s_without_save_dir_writes_to_the_state_dir_not_the_cwd(
    tmp_path, monkeypatch
):
    cwd = tmp_path / "project"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(saver_module, "SAVED_SHOWN_S", 0.3)
    app = FedApp()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.feed(3)
        await pilot.pause()
        await pilot.press("S")
        found = await wait_for(pilot, tmp_path / "state" / "gputop-diag", "gputop-diag-*.json")
        assert found and not list(cwd.iterdir())
        await pilot.pause()
        shown = header(app)
        assert shown.lstrip().startswith("gputop-diag")  # the name stays at 80 columns
        await pilot.pause(0.6)  # SAVED_SHOWN_S later the note is gone
        app.feed(1)
        await pilot.pause()
        assert "saved" not in header(app) and app.saver.last_saved is None


@pytest.mark.parametrize("width", [80, 120])
def test_the_saved_note_gives_way_before_the_programs_name(width):
    facts = HeaderFacts(
        host="gpu-node-07",
        driver="570.124.06",
        cuda="12.8",
        gpu_count=8,
        selected_gpu=0,
        saved="/home/alice/.local/state/gputop-diag/gputop-diag-snapshot-20301231-235959.json",
    )
    text = "".join(t for t, _ in header_runs(facts, width))
    assert "gputop-diag " in text and len(text) <= width
    assert "/home/alice" not in text  # the header names the file; the toast gives the path


async def test_a_long_save_path_breaks_at_a_slash_and_never_inside_the_file_name(
    tmp_path, monkeypatch
):
    """A home directory of a long user name makes the path wider than 80 columns: the toast
    breaks it after a `/`, and the file name (what a person copies) is one piece on its line."""
    from test_tui_support import screen_lines

    state = tmp_path / "home" / "firstname.lastname-verylongusername" / ".local" / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    app = FedApp()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.feed(3)
        await pilot.pause()
        await pilot.press("S")
        found = await wait_for(pilot, state / "gputop-diag", "gputop-diag-*.json")
        assert found and len(str(found[0])) > 78
        await pilot.pause()
        lines = [line.rstrip() for line in screen_lines(app)]
        named = [i for i, line in enumerate(lines) if found[0].name in line]
        assert named, "\n".join(lines)
        above = lines[named[0] - 1]
        assert above.endswith("/"), "\n".join(lines)  # the directory, cut after a slash
        shown = "".join(line.split()[-1] for line in lines[named[0] - 2 : named[0] + 1])
        assert shown.endswith(str(found[0])[-60:])


def test_a_file_name_wider_than_the_toast_is_kept_whole():
    name = "gputop-diag-snapshot-20301231-235959.json"
    lines = saver_module.path_lines("/home/someone/.local/state/gputop-diag/" + name, 30)
    assert name not in "".join(lines[:-1]) and lines[-1] == name
    assert all(len(line) <= 30 for line in lines[:-1])
    assert all(line.endswith("/") for line in lines[:-1])
    assert saver_module.path_lines("/tmp/" + name, 80) == ["/tmp/" + name]
