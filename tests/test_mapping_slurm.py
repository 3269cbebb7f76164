"""Slurm's renumbering (ConstrainDevices) in the mapping table, the JSON and the conclusions:
the table's CUDA column and the conclusion resolve step-local ids the same way."""

from __future__ import annotations

import dataclasses
import os

import pytest

from gputop_diag import sim
from gputop_diag.collect.mapping import collect_mapping
from gputop_diag.commands.common import sample_once
from gputop_diag.commands.mapping import render_text, to_json


@pytest.fixture(autouse=True)
def _known_shell(monkeypatch):
    """Under --demo the simulated shell takes CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER,
    GPU_DEVICE_ORDINAL and SLURM_* from the real one: these tests need the scenario's."""
    for k in list(os.environ):
        if k in sim.PASSED_ENV or k.startswith(sim.PASSED_ENV_PREFIX):
            monkeypatch.delenv(k)


SLURM = ("SLURM_JOB_ID", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "GPU_DEVICE_ORDINAL")


def _mapping(**env):
    src = sim.build("compute-bound")
    base = {k: v for k, v in src.environ.items() if k not in SLURM}
    src = dataclasses.replace(src, environ={**base, **env})
    return collect_mapping(sample_once(src, True), src)


def _cuda_column(text: str) -> dict[int, str]:
    """NVML index -> the CUDA cell of the table's row."""
    rows = text.split("\nNVML  CUDA")[1].split("\nCUDA:")[0].splitlines()[1:]
    return {int(r.split()[0]): r.split()[1] for r in rows}


def test_constrained_job_table_agrees_with_its_conclusion():
    m = _mapping(
        SLURM_JOB_ID="4242",
        SLURM_JOB_GPUS="2,3",
        SLURM_STEP_GPUS="2,3",
        GPU_DEVICE_ORDINAL="0,1",
        CUDA_VISIBLE_DEVICES="0,1",
    )
    [c] = [c for c in m.conclusions if c.startswith("this shell's job")]
    assert "cuda:0=GPU 2, cuda:1=GPU 3" in c and "ConstrainDevices" in c
    cells = _cuda_column(render_text(m))
    assert cells[2] == "0" and cells[3] == "1"
    assert all(cells[k] == "-" for k in (0, 1, 4, 5, 6, 7))
    doc = to_json(m)
    assert [d["cuda_ordinal"] for d in doc["devices"][:4]] == [None, None, 0, 1]


def test_global_cuda_visible_devices_is_not_called_step_local():
    m = _mapping(SLURM_JOB_ID="4242", SLURM_JOB_GPUS="2,3", CUDA_VISIBLE_DEVICES="2,3")
    [c] = [c for c in m.conclusions if c.startswith("this shell's job")]
    assert "step-local" not in c and "global ids" in c and "cuda:0=GPU 2, cuda:1=GPU 3" in c
    cells = _cuda_column(render_text(m))
    assert (cells[2], cells[3], cells[0]) == ("0", "1", "-")


@pytest.mark.parametrize("cvd", ["1,0", "5,6"])
def test_ids_that_cannot_be_resolved_show_a_question_mark(cvd):
    # given GPUs 2,3 and told 1,0 (or 5,6): renumbered or not, the variables cannot tell
    m = _mapping(SLURM_JOB_ID="4242", SLURM_JOB_GPUS="2,3", CUDA_VISIBLE_DEVICES=cvd)
    cells = _cuda_column(render_text(m))
    assert cells[2] == "?" and cells[3] == "?"
    assert all(cells[k] in ("?", "-") for k in cells)
    [c] = [c for c in m.conclusions if c.startswith("this shell's job")]
    assert "cannot tell" in c
