"""Headless `watch --model-config FILE`: the model's plan reaches the Monitor (a capacity
verdict's checks are its terms and what-ifs) and MFU from the model's FLOPs a token is said
beside the counted one, in text and JSON; a config that cannot be read is a usage error before
anything is watched. MFU under one percent keeps its digits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputop_diag.cli import main
from gputop_diag.diagnose.measured_render import mfu_text
from gputop_diag.model.exits import EXIT_USAGE

CONFIGS = Path(__file__).parent / "data" / "configs"
GPT2 = str(CONFIGS / "gpt2.json")


def _watch(capsys, scenario: str, *extra: str, config: str | None = None) -> str:
    top = ["--demo", scenario] + (["--model-config", config] if config else [])
    code = main([*top, "watch", "--pid", "41200", "--seconds", "6", *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def test_the_plan_of_the_job_s_model_gives_capacity_its_checks(capsys):
    config = str(CONFIGS / "qwen2-0.5b.json")
    planned = _watch(capsys, "capacity-fragmented", config=config)
    assert "Where the memory goes (training, qwen2 0.49 B parameters" in planned
    assert "What would make it fit" in planned
    plain = _watch(capsys, "capacity-fragmented")
    assert "Where the memory goes (training" not in plain  # from the command line only


def test_mfu_from_the_model_s_config_is_said_beside_the_counted_one(capsys):
    text = _watch(capsys, "precision-measured", config=GPT2)
    (work,) = [line for line in text.splitlines() if line.startswith("work (measured")]
    assert "counted in the sampled step" in work
    # GPT-2 at s 1024: 6 · 123.65 M + 12 · 12 · 768 · 1024 = 855 MFLOP a token
    assert "from the model's config (6N + 12·L·d·s: 855 MFLOP a token at s 1024)" in work
    assert "of 67 TFLOP/s" in work  # fp32 without TF32: the CUDA cores' peak
    doc = json.loads(_watch(capsys, "precision-measured", "--json", config=GPT2))
    w = doc["measured"]["work"]
    assert w["model_flops_per_token"] == 6 * 123_653_376 + 12 * 12 * 768 * 1024
    assert w["model_flops_formula"] == "6N + 12·L·d·s"
    assert w["model_mfu"] == pytest.approx(w["model_tflops"] / 67, rel=1e-3)
    assert w["model_tflops"] == pytest.approx(w["tokens_per_s"] * 855_007_232 / 1e12, rel=1e-3)
    without = json.loads(_watch(capsys, "precision-measured", "--json"))["measured"]["work"]
    assert without["model_mfu"] is None and without["model_flops_per_token"] is None


def test_images_have_no_tokens_so_no_mfu_from_the_config(capsys):
    text = _watch(capsys, "input-measured", config=GPT2)
    (work,) = [line for line in text.splitlines() if line.startswith("work (measured")]
    assert "n/a from the model's config (no token ids in the sampled batch" in work


def test_a_config_that_cannot_be_read_is_a_usage_error(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    code = main(["--demo", "precision-measured", "--model-config", str(bad), "watch", "--pid", "1"])
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("gputop-diag: --model-config") and "Traceback" not in err


@pytest.mark.parametrize(
    ("share", "text"),
    [(0.46, "46 %"), (0.034, "3 %"), (0.01, "1 %"), (0.0042, "0.42 %"), (4.2e-5, "0.0042 %")],
)
def test_a_small_mfu_keeps_its_digits(share, text):
    assert mfu_text(share) == text
    assert mfu_text(None) == "n/a" and mfu_text(0.0) == "0 %"


def test_the_job_pane_says_mfu_from_the_model_s_config_where_the_view_was_given_one():
    from gputop_diag import sim
    from gputop_diag.collect.job import JobWatch
    from gputop_diag.diagnose.job_view import job_view
    from gputop_diag.monitor.core import Monitor
    from gputop_diag.planner.configs import shape_from_config

    s = sim.build("precision-measured", gpu_count=1)
    shape = shape_from_config(json.loads(Path(GPT2).read_text())).shape
    m = Monitor(s, job=JobWatch.for_pid(s, 41200))
    window = []
    m.run_for(3, lambda t: window.append(t.snapshot))
    job = window[-1].job
    (given,) = [
        x for x in job_view(job, window, None, model=shape).measured.work_lines if "MFU" in x
    ]
    assert "counted in the sampled step" in given and "855 MFLOP a token at s 1024" in given
    (plain,) = [x for x in job_view(job, window, None).measured.work_lines if "MFU" in x]
    assert "from the model's config" not in plain
