"""What a cold review found in the verdicts' words: compare leads with work a second and says
when the batch differs, and which run lacks a lead figure; watch takes --model-config after the
command; documents keep small seconds; the driver chain's lead says its next step once."""

from __future__ import annotations

from gputop_diag.compare.judge import compare
from gputop_diag.compare.runs import WATCH, RunFigures
from gputop_diag.compare.stats import BEYOND, from_samples


def run(name: str, step_s: float, samples: int | None, **more) -> RunFigures:
    """A run of 40 steps of `step_s` (1 % noise), with `samples` a step."""
    steps = [step_s * (1 + 0.01 * ((i % 5) - 2)) for i in range(40)]
    figures = {"step_time_s": from_samples(steps, "steps")}
    per_step = {}
    if samples:
        figures["samples_per_s"] = from_samples([samples / s for s in steps], "batch")
        per_step["samples"] = float(samples)
    return RunFigures(name, WATCH, {**figures, **more}, per_step=per_step)


def test_shorter_steps_of_a_smaller_batch_are_slower_work_not_a_faster_run():
    cmp = compare(run("a", 1.2, 2048), run("b", 0.8, 64))
    assert cmp.verdict.startswith("B is slower than A: samples/s 1,707 \u2192 80 (\u221295 %)")
    assert "the batch differs (2,048 vs 64 samples a step): step times are not comparable" in (
        cmp.verdict
    )
    assert "faster" not in cmp.verdict
    step = cmp.row("step_time_s")
    assert step.judgement.call == BEYOND and step.short_words == "not comparable: another batch"


def test_the_same_batch_leads_with_work_a_second_and_gives_the_step_times_beside_it():
    cmp = compare(run("a", 1.2, 2048), run("b", 0.8, 2048))
    assert cmp.verdict.startswith(
        "B is faster than A: samples/s 1,707 \u2192 2,560 (+50 %; step time 1.20 s \u2192 800 ms, "
        "the same batch), beyond the runs' variation"
    )
    assert "batch differs" not in cmp.verdict
    assert cmp.row("step_time_s").short_words == "faster, beyond variation"


def test_without_a_batch_in_one_run_the_step_time_leads():
    cmp = compare(run("a", 1.2, None), run("b", 0.8, 2048))
    assert cmp.verdict.startswith("B is faster than A: step time 1.20 s \u2192 800 ms")


def test_a_missing_lead_figure_says_which_run_lacks_it():
    gpu = from_samples([40.0] * 10, "ticks")
    a = RunFigures("a", WATCH, {"memory_bytes": gpu})
    b = run("b", 0.8, None)
    assert compare(a, b).verdict.startswith(
        "No step time, throughput or GPU busy time in A (B has step time)"
    )
    assert compare(b, a).verdict.startswith(
        "No step time, throughput or GPU busy time in B (A has step time)"
    )
    assert compare(a, a).verdict.startswith(
        "No step time, throughput or GPU busy time in either run"
    )


# -- watch --model-config after the command -----------------------------------------------------


def test_watch_takes_model_config_after_the_command_as_well_as_before_it():
    from gputop_diag.cli import build_parser

    after = build_parser().parse_args(["watch", "--model-config", "c.json", "--pid", "1"])
    before = build_parser().parse_args(["--model-config", "c.json", "watch", "--pid", "1"])
    assert after.model_config == before.model_config == "c.json"
    assert build_parser().parse_args(["watch", "--pid", "1"]).model_config is None


# -- small seconds in the documents -------------------------------------------------------------


def test_documents_keep_three_significant_digits_of_small_seconds():
    from gputop_diag.model.codec import rounded

    doc = {
        "transfers": {"t_transfer_s": 8.4e-05, "h2d": {"seconds": 8.4123e-05, "count": 2}},
        "parts": {"t_transfer": 0.0000841, "t_host": 0.44312},
        "step_times_s": [0.0123456, 1.23456],
        "share": 0.0000841,  # not seconds: three decimals
        "at": 1712345678.123456,
    }
    assert rounded(doc) == {
        "transfers": {"t_transfer_s": 8.4e-05, "h2d": {"seconds": 8.41e-05, "count": 2}},
        "parts": {"t_transfer": 8.41e-05, "t_host": 0.443},
        "step_times_s": [0.0123, 1.235],
        "share": 0.0,
        "at": 1712345678.123,
    }


# -- the lead's next step, once -----------------------------------------------------------------


def test_the_driver_chain_lead_says_its_next_step_once():
    from gputop_diag.diagnose.render import render_text
    from gputop_diag.diagnose.types import Alert, Diagnosis

    chain = Alert(
        "driver_chain",
        "critical",
        "driver chain broken at the framework build: torch is built for sm_70; next: install a "
        "torch build that lists sm_90",
    )
    text = render_text(Diagnosis("idle", 0.9, alerts=(chain,)))
    head = text.split("Bottleneck:", 1)[0]  # the lead, above the class (the alerts list it all)
    assert head.count("next: install a torch build that lists sm_90") == 1, text
    assert text.startswith(
        "DRIVER CHAIN: driver chain broken at the framework build: torch is built for sm_70\n"
        "  next: install a torch build that lists sm_90\n"
    )
