"""The ways into the probe without PyTorch: `python -m gputop_diag.probe`, the environment of
`watch --probe` (a user's own sitecustomize still runs, another Python without gputop_diag
installed is probed), a job without torch marking its steps by hand, and the file's key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gputop_diag.probe import boot
from gputop_diag.probe.launch import HOME_VARIABLE, package_home, probe_environment
from gputop_diag.probe.schema import file_name, probe_dir, start_ticks_of

REPO = Path(__file__).resolve().parent.parent


def _env(runtime: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), **extra)
    if "PYTHONPATH" not in extra:
        env.pop("PYTHONPATH", None)
    return env


def _records(runtime: Path) -> list[list[dict]]:
    directory = Path(probe_dir({"XDG_RUNTIME_DIR": str(runtime)}))
    return [
        [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(directory.glob("probe-*.jsonl"))
    ]


def _script(tmp_path: Path, text: str, name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_the_script_runs_as_main_with_its_own_argv_and_path(tmp_path):
    (tmp_path / "scripts").mkdir()
    script = _script(
        tmp_path / "scripts",
        """
        import sys
        print(__name__, sys.argv, sys.path[0], "torch" in sys.modules)
        """,
    )
    result = subprocess.run(
        [sys.executable, "-m", "gputop_diag.probe", str(script), "--lr", "3", "x y"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    expected = f"__main__ {[str(script), '--lr', '3', 'x y']} {script.parent} False\n"
    assert result.stdout == expected
    # started by hand: a file even without a step, saying what it can measure (nothing)
    ((hello, bye),) = _records(tmp_path)
    assert hello["kind"] == "hello" and hello["torch"] is None and hello["cuda"] is False
    assert not any(hello["measures"].values())
    assert bye["kind"] == "bye"


@pytest.mark.parametrize(
    "body, code, last_line",
    [
        ("raise SystemExit(3)", 3, None),
        ("raise ValueError('boom')", 1, "ValueError: boom"),
        ("import sys; sys.exit('bad input')", 1, "bad input"),
        ("import os; os._exit(5)", 5, None),
        ("print('fine')", 0, None),
    ],
)
def test_exit_codes_and_exceptions_pass_through(tmp_path, body, code, last_line):
    script = _script(tmp_path, body + "\n")
    plain = subprocess.run(
        [sys.executable, str(script)], env=_env(tmp_path), capture_output=True, text=True
    )
    probed = subprocess.run(
        [sys.executable, "-m", "gputop_diag.probe", str(script)],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert plain.returncode == probed.returncode == code
    assert probed.stdout == plain.stdout
    if last_line:
        assert probed.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1] == last_line
    kinds = [[r["kind"] for r in records] for records in _records(tmp_path)]
    if "ValueError" in body:  # an uncaught exception is not a normal exit: no bye
        assert kinds == [["hello"]]
    elif "_exit" in body:  # no exit handlers at all, and nothing to write
        assert kinds == []
    else:
        assert kinds == [["hello", "bye"]]


def test_a_module_runs_with_dash_m_and_a_missing_script_is_an_error(tmp_path):
    _script(tmp_path, "import sys\nprint(__name__, sys.argv[1:])\n", name="jobmod.py")
    result = subprocess.run(
        [sys.executable, "-m", "gputop_diag.probe", "-m", "jobmod", "a"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert (result.returncode, result.stdout) == (0, "__main__ ['a']\n"), result.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "gputop_diag.probe", str(tmp_path / "nope.py")],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "nope.py" in missing.stderr


def test_a_job_without_torch_records_wall_clock_steps(tmp_path):
    code = textwrap.dedent(
        """
        import sys, time
        sys.modules["torch"] = None  # as if torch were not installed: `import torch` fails
        import gputop_diag.probe as probe
        probe.start()
        for _ in range(4):
            time.sleep(0.02)
            probe.step()
        print("done")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "done\n", "")
    ((hello, *rest),) = _records(tmp_path)
    assert hello["torch"] is None and hello["argv"] == ["-c"]
    assert hello["measures"] == dict.fromkeys(
        ["t_input", "t_sync", "t_comm", "t_gpu", "memory"], False
    )
    steps = [r for r in rest if r["kind"] == "step"]
    assert [s["step"] for s in steps] == [2, 3, 4]  # the first boundary only starts a step
    for s in steps:
        assert s["measured"] == [] and s["t_host_s"] == s["wall_s"] >= 0.02
        assert s["t_input_s"] is s["t_sync_s"] is s["sync_count"] is s["t_comm_s"] is None
    assert rest[-1]["kind"] == "bye"


def _other_python() -> str:
    """The interpreter this virtual environment was made from (no gputop_diag there), or ours."""
    base = getattr(sys, "_base_executable", None)
    if base and os.path.exists(base) and os.path.realpath(base) != os.path.realpath(sys.executable):
        return base
    return sys.executable


def test_a_user_sitecustomize_still_runs_and_another_python_is_probed(tmp_path):
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nprint('user sitecustomize', flush=True)\n")
    env = probe_environment(_env(tmp_path, PYTHONPATH=str(site)))
    assert env["PYTHONPATH"].split(os.pathsep)[1:] == [str(site)]
    assert probe_environment(env)["PYTHONPATH"] == env["PYTHONPATH"]  # not added twice
    job = _script(
        tmp_path,
        """
        import sys, time
        import gputop_diag.probe as probe
        for _ in range(3):
            time.sleep(0.01)
            probe.step()
        print(sys.modules["sitecustomize"].__file__)
        print(any("site-packages" in p and "venv" in p for p in sys.path))
        """,
    )
    python = _other_python()
    result = subprocess.run([python, str(job)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "user sitecustomize"
    assert lines[1] == str(site / "sitecustomize.py")
    if python != sys.executable:
        assert lines[2] == "False"  # our virtual environment's packages are not on its path
    ((hello, *rest),) = _records(tmp_path)
    assert hello["argv"] == [str(job)] and [r["step"] for r in rest if r["kind"] == "step"] == [
        2,
        3,
    ]


def test_a_failing_user_sitecustomize_is_reported_as_usual_and_the_probe_still_starts(tmp_path):
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text("raise RuntimeError('user site broken')\n")
    env = probe_environment(_env(tmp_path, PYTHONPATH=str(site)))
    code = "import gputop_diag.probe as p; p.step(); p.step(); print('ran')"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "ran\n"
    assert "Error in sitecustomize" in result.stderr and "user site broken" in result.stderr
    assert len(_records(tmp_path)) == 1


def test_a_python_that_never_steps_writes_nothing_under_watch_probe(tmp_path):
    env = probe_environment(_env(tmp_path))
    result = subprocess.run([sys.executable, "-c", "print(1)"], env=env, capture_output=True)
    assert result.returncode == 0 and result.stdout == b"1\n" and result.stderr == b""
    assert _records(tmp_path) == []


def test_the_boot_directory_holds_only_the_boot_code_and_is_private(tmp_path):
    env = probe_environment(_env(tmp_path))
    boot_dir = Path(env["PYTHONPATH"].split(os.pathsep)[0])
    assert boot_dir.parent == Path(probe_dir({"XDG_RUNTIME_DIR": str(tmp_path)}))
    assert [p.name for p in boot_dir.iterdir()] == ["sitecustomize.py"]
    assert (boot_dir / "sitecustomize.py").read_text() == Path(boot.__file__).read_text()
    assert (boot_dir.stat().st_mode & 0o777, boot_dir.parent.stat().st_mode & 0o777) == (
        0o700,
        0o700,
    )
    assert env[HOME_VARIABLE] == package_home() == str(REPO / "gputop_diag")
    assert boot._HOME_VARIABLE == HOME_VARIABLE


def test_the_file_is_keyed_by_pid_and_start_time_read_from_proc(tmp_path):
    """A pid reused after the job ended has another start time, so another file."""
    job = _script(
        tmp_path,
        """
        import sys
        import gputop_diag.probe as probe
        probe.step(); probe.step(); probe.step()
        sys.stdin.readline()
        """,
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gputop_diag.probe", str(job)],
        env=_env(tmp_path),
        stdin=subprocess.PIPE,
    )
    try:
        ticks = start_ticks_of(Path(f"/proc/{process.pid}/stat").read_text())
        expected = Path(probe_dir({"XDG_RUNTIME_DIR": str(tmp_path)})) / file_name(
            process.pid, ticks
        )
        deadline = time.monotonic() + 20
        while not expected.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert expected.exists()  # written by the background flush while the job runs
        assert expected.stat().st_mode & 0o777 == 0o600
    finally:
        process.communicate(b"\n", timeout=30)
    hello = json.loads(expected.read_text().splitlines()[0])
    assert (hello["pid"], hello["start_ticks"]) == (process.pid, ticks)
