"""`gputop-diag driver --clean-env`: the CUDA initialisation probe in your environment and in a
scrubbed one, and which layer a failure follows. The probe runs for real in a subprocess against
fake `libcuda.so.1` libraries built here with gcc (cuInit returning a chosen CUresult), picked by
LD_LIBRARY_PATH exactly as a project's environment picks another libcuda; the host's own
library is played by an interpreter wrapper that appends its directory to the search path, as
the system's library directory would be searched after LD_LIBRARY_PATH."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from gputop_diag.cli import main
from gputop_diag.collect.cuda_init import clean_argv, run_init_probe
from gputop_diag.driver.clean_env import InitRun, compare_runs, with_framework
from gputop_diag.sources import Sources

FAKE_LIBCUDA = r"""
#include <stdlib.h>
#include <string.h>
int cuDriverGetVersion(int *v) { *v = DRIVER_CUDA; return 0; }
int cuInit(unsigned int flags) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible && (!*visible || !strcmp(visible, "-1"))) return 100; /* CUDA_ERROR_NO_DEVICE */
    return INIT_RESULT;
}
int cuDeviceGetCount(int *n) { *n = DEVICES; return 0; }
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """Directories each holding a fake libcuda.so.1: "good" (8 GPUs, CUDA 12.8), "mismatch"
    (cuInit 803, CUDA 12.2), "stub" (34, the toolkit's stub)."""
    if shutil.which("gcc") is None:
        pytest.skip("no C compiler to build a fake libcuda.so.1")
    root = tmp_path_factory.mktemp("libcuda")
    src = root / "fake.c"
    src.write_text(FAKE_LIBCUDA)
    out = {}
    for name, result, cuda in (("good", 0, 12080), ("mismatch", 803, 12020), ("stub", 34, 0)):
        d = root / name
        d.mkdir()
        subprocess.run(
            ["gcc", "-shared", "-fPIC", f"-DINIT_RESULT={result}", f"-DDRIVER_CUDA={cuda}",
             "-DDEVICES=8", "-Wl,-soname,libcuda.so.1", "-o", str(d / "libcuda.so.1"), str(src)],
            check=True,
        )  # fmt: skip
        out[name] = d
    return out


@pytest.fixture
def host_python(tmp_path, libs):
    """An interpreter whose library search ends in the "good" libcuda: the host's driver."""
    wrapper = tmp_path / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'LD_LIBRARY_PATH="${{LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}}{libs["good"]}"\n'
        f'export LD_LIBRARY_PATH\nexec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def _runs(python: str) -> tuple[InitRun, InitRun]:
    src = Sources.real()
    return run_init_probe(src, python, clean=False), run_init_probe(src, python, clean=True)


def test_another_libcuda_on_ld_library_path_is_the_projects_environment(
    libs, host_python, monkeypatch
):
    monkeypatch.setenv("LD_LIBRARY_PATH", str(libs["mismatch"]))
    monkeypatch.setenv("CONDA_PREFIX", "/opt/conda/envs/x")
    yours, clean = _runs(host_python)
    assert yours.state == "failed" and yours.code == 803
    assert yours.library == str(libs["mismatch"] / "libcuda.so.1") and yours.driver_cuda == 12020
    assert clean.state == "ok" and clean.device_count == 8
    assert clean.library == str(libs["good"] / "libcuda.so.1")
    # only the host's own directory (the wrapper's) is searched in the clean run
    assert clean.variables == {"LD_LIBRARY_PATH": str(libs["good"])}
    v = compare_runs(yours, clean)
    assert v.follows == "environment"
    [(name, value)] = v.variables
    assert name == "LD_LIBRARY_PATH" and value.startswith(f"{libs['mismatch']}:")
    assert "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)" in v.text
    assert f"take {libs['mismatch']} out of LD_LIBRARY_PATH" in v.next_step


def test_cuda_visible_devices_that_hides_every_gpu_is_named(host_python, monkeypatch):
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    yours, clean = _runs(host_python)
    assert yours.code == 100 and clean.state == "ok"
    v = compare_runs(yours, clean)
    assert v.follows == "environment" and v.variables == (("CUDA_VISIBLE_DEVICES", "-1"),)
    assert "CUDA_ERROR_NO_DEVICE (100)" in v.text and "env -u CUDA_VISIBLE_DEVICES" in v.next_step


def test_a_failure_in_both_environments_is_the_hosts(libs, tmp_path, monkeypatch):
    # the host's search ends in the toolkit's stub: it fails however the project sets things up
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f'#!/bin/sh\nLD_LIBRARY_PATH="{libs["stub"]}" exec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    yours, clean = _runs(str(wrapper))
    assert yours.code == clean.code == 34
    v = compare_runs(yours, clean)
    assert v.follows == "host" and "CUDA_ERROR_STUB_LIBRARY (34)" in v.text
    assert "stubs" in v.next_step


def test_on_this_machine_without_libcuda_both_runs_say_so_cleanly(libs, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", str(libs["good"]))
    yours, clean = _runs(sys.executable)
    assert yours.state == "ok"  # the environment's libcuda...
    if clean.state == "ok":
        pytest.skip("this machine has a libcuda of its own")
    assert clean.state == "no_library"  # ...and none where the host looks
    v = compare_runs(yours, clean)
    assert v.follows == "host" and "only in your environment" in v.text
    assert "ldconfig" in v.next_step


def test_the_command_without_a_driver_says_the_host(capsys, monkeypatch):
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    if run_init_probe(Sources.real(), sys.executable, clean=True).loaded:
        pytest.skip("this machine has a libcuda of its own")
    assert main(["driver", "--clean-env", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    ce = doc["layers"]["clean_env"]
    assert [r["state"] for r in ce["runs"]] == ["no_library", "no_library"]
    assert ce["follows"] == "host" and ce["clean_environment"]["PATH"] == "/usr/bin:/bin"
    assert doc["problems"][-1]["code"] == "clean_env_host"


def test_clean_argv_keeps_only_path_home_and_lang():
    argv = clean_argv(["python", "-c", "x"], {"HOME": "/h", "LANG": "C", "LD_PRELOAD": "/x.so"})
    assert argv == ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/h", "LANG=C", "python", "-c", "x"]


def test_probe_that_does_not_answer_and_verdicts_without_subprocesses(tmp_path):
    silent = tmp_path / "python"
    silent.write_text("#!/bin/sh\nkill -SEGV $$\n")
    silent.chmod(0o755)
    run = run_init_probe(Sources.real(), str(silent), clean=False)
    assert run.state == "no_answer" and "signal 11" in run.error
    ok = InitRun("a", True, True, "/usr/lib/libcuda.so.1", 12080, 0, device_count=2)
    assert compare_runs(ok, ok).follows == "nothing"
    assert compare_runs(run, ok).follows == "unknown"
    # the driver initialises both ways: torch failing only in yours is the environment's
    env = InitRun("y", True, True, "/usr/lib/libcuda.so.1", 12080, 0, device_count=2,
                  variables={"PYTHONPATH": "/old/torch"})  # fmt: skip
    v = with_framework(compare_runs(env, ok), env, False, True)
    assert v.follows == "environment" and v.variables == (("PYTHONPATH", "/old/torch"),)
    assert with_framework(compare_runs(env, ok), env, False, False).follows == "framework"


def test_the_simulated_project_environment_with_another_libcuda(capsys, monkeypatch):
    monkeypatch.setenv("GPUTOP_DIAG_SIM_FAULTS", "env-libcuda:535.104.05")
    argv = ["--demo", "compute-bound", "driver", "--clean-env", "--probe-python", "python3"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ce = doc["layers"]["clean_env"]
    assert ce["follows"] == "environment"
    assert ce["runs"][0]["code"] == 803 and ce["runs"][1]["state"] == "ok"
    assert ce["torch_initialises"] == {"yours": False, "clean": True}
    assert ce["variables"] == [
        {"name": "LD_LIBRARY_PATH", "value": "/opt/site/nvidia-535.104.05/lib"}
    ]
    assert doc["problems"][-1]["code"] == "clean_env_environment"
    assert main([*argv, "--sanitize"]) == 0
    out = capsys.readouterr().out
    assert "follows: environment" in out and "alice" not in out


def test_the_clean_environment_is_refused_on_a_recording(tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    assert main(["--demo", "idle", "record", "-o", str(rec), "--seconds", "1"]) == 0
    capsys.readouterr()
    assert main(["--replay", str(rec), "driver", "--clean-env"]) == 2
    assert "--clean-env runs on this machine" in capsys.readouterr().err
