"""Under --demo, the variables that choose devices come from the real environment (so the
forms can be tried on the simulator); everything else of the shell stays simulated."""

from __future__ import annotations

import os

from gputop_diag import sim
from gputop_diag.cli import main

PASSED = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GPU_DEVICE_ORDINAL")


def test_device_variables_pass_through_to_the_simulated_shell(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_GPUS", "0,1")
    monkeypatch.setenv("GPU_DEVICE_ORDINAL", "1,0")
    monkeypatch.setenv("HOME", "/home/somebody-real")
    env = sim.build("compute-bound", host_env=os.environ).environ
    assert env["CUDA_VISIBLE_DEVICES"] == "1,0" and env["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"
    assert env["SLURM_JOB_ID"] == "4242" and env["SLURM_JOB_GPUS"] == "0,1"
    assert env["GPU_DEVICE_ORDINAL"] == "1,0"
    assert env["HOME"] != "/home/somebody-real"  # the rest stays simulated
    assert main(["--demo", "compute-bound", "mapping"]) == 0
    out = capsys.readouterr().out
    assert "this shell: CUDA_VISIBLE_DEVICES=1,0  CUDA_DEVICE_ORDER=FASTEST_FIRST" in out
    assert "Slurm job 4242" in out


def test_without_them_the_simulated_shell_is_the_scenarios(monkeypatch):
    for k in PASSED + ("SLURM_JOB_ID", "SLURM_JOB_GPUS"):
        monkeypatch.delenv(k, raising=False)
    env = sim.build("compute-bound").environ
    assert "CUDA_VISIBLE_DEVICES" not in env and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert not [k for k in env if k.startswith("SLURM_")]
    # sim.build alone (tests, benchmarks, the panes' tests) never reads the real shell: only
    # the CLI's --demo passes it
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert "CUDA_VISIBLE_DEVICES" not in sim.build("compute-bound").environ
    assert (
        sim.build("compute-bound", host_env={"CUDA_VISIBLE_DEVICES": "3"}).environ[
            "CUDA_VISIBLE_DEVICES"
        ]
        == "3"
    )
