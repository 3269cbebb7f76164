"""Wording of `gputop-diag driver` and `mapping` where it read badly: the first step said once,
no dangling table source under --sanitize, singulars, and a missing NVML said as missing."""

from __future__ import annotations

from gputop_diag.cli import main


def test_check_first_is_said_once(capsys):
    assert main(["--demo", "no-gpu", "driver"]) == 3
    out = capsys.readouterr().out
    assert "Check first: make sure this machine has an NVIDIA GPU" in out
    assert "check first" not in out.lower().replace("check first:", "")


def test_sanitized_text_has_no_dangling_source_line(capsys):
    main(["--demo", "driver-mismatch", "driver", "--sanitize"])
    lines = capsys.readouterr().out.splitlines()
    [k] = [k for k, x in enumerate(lines) if "source: NVIDIA CUDA Toolkit Release Notes" in x]
    assert lines[k - 1].strip(), "the source line follows a blank line: no table above it"
    assert "Minimum driver" in lines[k - 1] or "Minimum driver" in lines[k]


def test_one_process_is_one_process(capsys):
    main(["--demo", "driver-mismatch", "driver"])
    out = capsys.readouterr().out
    assert "1 process with CUDA libraries" in out and "process(es)" not in out
    assert "maps of 1 processes" not in out


def test_mapping_without_nvml_says_nvml_is_missing(capsys):
    assert main(["--demo", "no-gpu", "mapping"]) == 3
    out = capsys.readouterr().out
    assert "NVML lists none" not in out
    assert (
        "no GPU to map: no NVIDIA driver: the NVML library libnvidia-ml.so.1 was not found" in out
    )
