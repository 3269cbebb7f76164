"""`--probe-python` with an interpreter that does not answer: the whole process group goes, not
only the interpreter (a wrapper script's children would otherwise stay behind)."""

from __future__ import annotations

import os
import time

from gputop_diag.collect.cuda_libs import probe_python
from gputop_diag.sources import Sources, run_real_command


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_a_timed_out_probe_leaves_no_grandchild(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    wrapper = tmp_path / "python-wrapper"
    # a wrapper script, as conda or module systems install: it starts a child and waits on it
    wrapper.write_text(f'#!/bin/sh\nsleep 300 &\necho $! > "{pidfile}"\nwait\n')
    wrapper.chmod(0o755)
    p = probe_python(Sources.real(), str(wrapper), timeout=0.5)
    assert not p.ok and "did not answer in 0.5 s" in p.error
    grandchild = int(pidfile.read_text())
    for _ in range(100):  # the kill is sent before probe_python returns; reaping may lag
        if not _alive(grandchild):
            break
        time.sleep(0.02)
    alive = _alive(grandchild)
    if alive:
        os.kill(grandchild, 9)  # leave nothing behind, whatever the outcome
    assert not alive, "the wrapper's child outlived the timeout"


def test_run_real_command_still_returns_output_and_status():
    r = run_real_command(["sh", "-c", "echo out; echo err >&2; exit 3"], 5)
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")


def test_a_program_not_on_path_is_not_forked_for(monkeypatch, tmp_path):
    """`squeue` on a machine without Slurm (asked every 10 s by the live view): the same
    FileNotFoundError Popen raises, without a fork; a program on PATH, or named by a path, still
    runs."""
    import subprocess

    import pytest

    tool = tmp_path / "squeue"
    tool.write_text("#!/bin/sh\necho queued\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    forks = []
    popen = subprocess.Popen

    def counted(*a, **k):
        forks.append(a[0])
        return popen(*a, **k)

    monkeypatch.setattr(subprocess, "Popen", counted)
    with pytest.raises(FileNotFoundError):
        run_real_command(["squeue", "-h"], 5)
    assert forks == []
    assert run_real_command([str(tool)], 5).stdout == "queued\n"  # a path: not looked up
    monkeypatch.setenv("PATH", str(tmp_path))
    assert run_real_command(["squeue"], 5).stdout == "queued\n"
    assert len(forks) == 2
