"""The probe's file (writer.py) and its post-import hook (imports.py), in this process."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys

import pytest

from gputop_diag.probe.imports import after_import
from gputop_diag.probe.schema import MAX_BYTES, SCHEMA, file_name, parse_file_name
from gputop_diag.probe.writer import ProbeFile, ensure_private_dir


def _hello() -> dict:
    return {"kind": "hello", "schema": SCHEMA, "t": 1.0}


def _lines(path) -> list[dict]:  # noqa: ANN001
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def umask_zero():
    old = os.umask(0)
    yield
    os.umask(old)


def test_directory_0700_and_file_0600_whatever_the_umask(tmp_path, umask_zero):
    directory = tmp_path / "gputop-diag"
    probe_file = ProbeFile(str(directory), 4242, 777, _hello)
    probe_file.write(_hello())
    probe_file.write({"kind": "bye", "t": 2.0})
    probe_file.close()
    path = directory / file_name(4242, 777)
    assert [r["kind"] for r in _lines(path)] == ["hello", "bye"]
    assert (directory.stat().st_mode & 0o777, path.stat().st_mode & 0o777) == (0o700, 0o600)
    assert parse_file_name(path.name) == (4242, 777)


def test_a_reused_pid_is_another_file_and_the_old_one_is_left_alone(tmp_path):
    old = ProbeFile(str(tmp_path), 100, 5000, _hello)
    old.write({"kind": "step", "step": 1, "t": 1.0})
    old.close()
    new = ProbeFile(str(tmp_path), 100, 9000, _hello)
    new.write({"kind": "step", "step": 7, "t": 2.0})
    new.close()
    assert _lines(tmp_path / file_name(100, 5000)) == [{"kind": "step", "step": 1, "t": 1.0}]
    assert _lines(tmp_path / file_name(100, 9000))[0]["step"] == 7


def test_past_max_bytes_one_old_generation_is_kept_and_the_new_file_says_hello(tmp_path):
    probe_file = ProbeFile(str(tmp_path), 1, 2, _hello, max_bytes=2000, flush_s=60)
    for n in range(200):
        probe_file.write({"kind": "step", "step": n, "t": float(n)})
        probe_file.flush()  # what the background thread does every half second
    probe_file.close()
    path = tmp_path / file_name(1, 2)
    current, previous = _lines(path), _lines(tmp_path / (file_name(1, 2) + ".1"))
    assert path.stat().st_size <= 2000 and current[0]["kind"] == "hello"
    assert previous[0]["kind"] == "hello" and current[-1]["step"] == 199
    assert current[1]["step"] == previous[-1]["step"] + 1  # nothing lost at the rotation
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.name + ".1"]
    assert MAX_BYTES == 4 * 1024 * 1024


def test_the_background_thread_writes_without_a_flush_from_the_caller(tmp_path):
    probe_file = ProbeFile(str(tmp_path), 3, 4, _hello, flush_s=0.05)
    probe_file.write({"kind": "note", "text": "x", "t": 1.0})
    path = tmp_path / file_name(3, 4)
    for _ in range(200):
        if path.exists() and path.read_text():
            break
        probe_file.wake.wait(0.05)
    assert _lines(path) == [{"kind": "note", "text": "x", "t": 1.0}]
    probe_file.close()
    assert probe_file.stopped.is_set()


def test_a_symlink_in_place_of_the_file_is_not_followed_and_nothing_raises(tmp_path):
    target = tmp_path / "precious"
    target.write_text("keep\n")
    (tmp_path / file_name(5, 6)).symlink_to(target)
    probe_file = ProbeFile(str(tmp_path), 5, 6, _hello)
    probe_file.write(_hello())
    probe_file.close()
    assert target.read_text() == "keep\n" and probe_file.broken
    probe_file.write(_hello())  # off for good, quietly


def test_a_directory_of_another_user_is_refused(tmp_path):
    if os.getuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    directory = tmp_path / "theirs"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    with pytest.raises(PermissionError):
        ensure_private_dir(str(directory))
    probe_file = ProbeFile(str(directory), 1, 1, _hello)
    probe_file.write(_hello())
    probe_file.close()
    assert probe_file.broken and list(directory.iterdir()) == []


def test_a_loose_directory_of_ours_is_closed_to_others(tmp_path):
    directory = tmp_path / "ours"
    directory.mkdir()
    directory.chmod(0o755)
    ensure_private_dir(str(directory))
    assert directory.stat().st_mode & 0o777 == 0o700


def test_after_import_calls_back_once_the_module_has_run(tmp_path, monkeypatch):
    (tmp_path / "probe_target_mod.py").write_text("VALUE = 41 + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    hook = after_import("probe_target_mod", lambda module: seen.append(module.VALUE))
    try:
        assert importlib.util.find_spec("probe_target_mod") is not None  # a look, not an import
        assert seen == [] and hook in sys.meta_path
        module = importlib.import_module("probe_target_mod")
        assert seen == [42] and hook not in sys.meta_path
        assert type(module.__loader__).__name__ == "SourceFileLoader"
        assert module.__spec__.loader is module.__loader__
        after_import("probe_target_mod", lambda m: seen.append("now"))  # already imported
        assert seen == [42, "now"]
    finally:
        hook.remove()
        sys.modules.pop("probe_target_mod", None)
