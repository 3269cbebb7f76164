"""A kernel module and a user-space library of different versions: the mismatch leads, both
versions are named with which is newer, and runtimes are judged against one version."""

from __future__ import annotations

import pytest

from gputop_diag.cli import main
from gputop_diag.driver.compat import ChainFacts, LoadedRuntime, judge_chain

TORCH_CU130 = LoadedRuntime(52011, "python", "13", "13.0")


def _facts(module: str, library: str = "550.54.15") -> ChainFacts:
    return ChainFacts(
        module_loaded=True,
        module_version=module,
        library_version=library,
        library_found=True,
        nvml_error="LIB_RM_VERSION_MISMATCH",
        driver_max=(12, 4),  # the 550 library's
        processes=(TORCH_CU130,),
    )


@pytest.mark.parametrize(("module", "older"), [("535.104.05", "module"), ("570.124.06", "library")])
def test_mismatch_leads_and_names_which_is_newer(module, older):
    first, *rest = judge_chain(_facts(module))
    assert first.code == "mismatch" and "Driver/library version mismatch" in first.error_text
    assert module in first.text and "550.54.15" in first.text
    if older == "module":
        assert f"kernel module {module} is older than the user-space library" in first.text
        assert "upgraded" in first.text
    else:
        assert f"kernel module {module} is newer than the user-space library" in first.text
        assert "upgraded while the old module" not in first.text
    [rt] = [p for p in rest if p.code == "runtime_too_new"]
    # judged against the library and its CUDA (550 -> 12.4), never the module with the library's
    assert "550.54.15" in rt.text and "12.4" in rt.text and module not in rt.text
    assert "mismatch" in rt.text  # no runtime starts before the mismatch is fixed


@pytest.mark.parametrize("module", ["535.104.05", "570.124.06"])
def test_demo_driver_command(module, monkeypatch, capsys):
    monkeypatch.setenv("GPUTOP_DIAG_SIM_FAULTS", f"module:{module}")
    assert main(["--demo", "driver-mismatch", "driver"]) == 3
    out = capsys.readouterr().out
    assert f"newer than the driver {module} supports" not in out
    assert "newer than the driver library 550.54.15 supports (CUDA 12.4)" in out
    problems = out.split("Problems")[1]
    assert problems.index("[critical] kernel module") < problems.index("CUDA runtime")


def test_the_library_line_says_what_nvml_says(monkeypatch, capsys):
    monkeypatch.setenv("GPUTOP_DIAG_SIM_FAULTS", "module:570.124.06")
    main(["--demo", "driver-mismatch", "driver"])
    out = capsys.readouterr().out
    assert "NVML: Failed to initialize NVML: Driver/library version mismatch" in out
    assert "library was upgraded while the old kernel module" not in out
