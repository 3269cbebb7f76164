"""`gputop-diag compare A B`: the call "beyond the runs' variation" or "within noise" on
synthetic steps with a known shift and noise (both ways), on simulated recordings where B is
truly faster and where A and B are one scenario, on watch --json documents and a mix, and
its one-line errors. In-process (`main`), short recordings with two GPUs."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import random
import re

import pytest

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.compare.judge import compare
from gputop_diag.compare.runs import WATCH, RunFigures
from gputop_diag.compare.stats import (
    ALPHA,
    BEYOND,
    NOT_JUDGED,
    SAME,
    WITHIN,
    Figure,
    from_samples,
    judge,
    mann_whitney_p,
)
from gputop_diag.compare.watch_doc import watch_figures
from gputop_diag.monitor.core import Monitor
from gputop_diag.recording.writer import RecordingWriter


def run_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def steps(rng: random.Random, n: int, median: float, noise: float) -> list[float]:
    """`n` step times around `median`, normal noise of `noise` (a fraction of it)."""
    return [median * (1 + rng.gauss(0, noise)) for _ in range(n)]


# -- the call on synthetic steps ----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_a_3_percent_shift_in_10_percent_noise_is_within_noise_and_30_percent_is_beyond(seed):
    rng = random.Random(seed)
    a = from_samples(steps(rng, 40, 1.0, 0.10), "steps")
    small = from_samples(steps(rng, 40, 0.97, 0.10), "steps")
    large = from_samples(steps(rng, 40, 0.70, 0.10), "steps")
    assert judge(a, small).call == WITHIN
    big = judge(a, large)
    assert big.call == BEYOND and big.p_value < ALPHA


def test_the_same_3_percent_shift_is_beyond_at_low_noise():
    """The call follows the runs' noise, not a fixed percentage."""
    rng = random.Random(11)
    a = from_samples(steps(rng, 200, 1.0, 0.005), "steps")
    b = from_samples(steps(rng, 200, 0.97, 0.005), "steps")
    j = judge(a, b)
    assert j.call == BEYOND and j.p_value < 1e-10


def test_alike_runs_are_rarely_called_different():
    rng = random.Random(3)
    calls = [
        judge(
            from_samples(steps(rng, 40, 1.0, 0.10), "steps"),
            from_samples(steps(rng, 40, 1.0, 0.10), "steps"),
        ).call
        for _ in range(300)
    ]
    assert calls.count(BEYOND) <= 3  # the test's level is 1 in 100; the drift holds back more


def test_a_shift_a_run_makes_on_its_own_is_within_noise():
    """A run that warms up by 10 % over its steps against one 3 % faster: the sets differ
    (the test alone would say so), but each run's median moves more than that on its own."""
    a = [1.0 + 0.1 * i / 99 for i in range(100)]
    b = [v * 1.03 for v in a]
    fa, fb = from_samples(a, "steps"), from_samples(b, "steps")
    assert mann_whitney_p(a, b) < ALPHA
    j = judge(fa, fb)
    assert j.call == WITHIN and j.drift > abs(fb.value - fa.value)


def test_mann_whitney_p_matches_the_worked_normal_approximation():
    # U = 0 of 9; mean 4.5, variance 3*3*7/12 = 5.25; z = (4.5 - 0.5) / sqrt(5.25) = 1.746
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.0809, abs=1e-3)
    # ties: ranks 1, 2.5, 2.5, 4; U1 = 3.5 - 3 = 0.5, mean 2; variance 4/12 * (5 - 6/12) = 1.5
    # (one pair tied: t^3 - t = 6); z = (|0.5 - 2| - 0.5) / sqrt(1.5) = 0.816
    assert mann_whitney_p([1, 2], [2, 3]) == pytest.approx(0.4142, abs=1e-3)
    assert mann_whitney_p([5] * 10, [5] * 10) == 1.0


def test_one_figure_per_run_is_not_judged_and_a_spread_is_held_against_the_change():
    assert judge(Figure(1.0), Figure(0.7)).call == NOT_JUDGED
    tight = judge(Figure(1.0, spread=0.05, spread_kind="IQR"), Figure(0.7, spread=0.04))
    assert tight.call == BEYOND and tight.noise == 0.05
    wide = judge(Figure(1.0, spread=0.5, spread_kind="IQR"), Figure(0.7, spread=0.1))
    assert wide.call == WITHIN
    assert judge(Figure(1.0), Figure(1.0)).call == SAME
    assert judge(Figure(100.0), Figure(100.5)).call == WITHIN  # under 1 %: too small


# -- watch --json documents ---------------------------------------------------------------------


def watch_doc(times: list[float], primary: str) -> dict:
    """A `watch --json` document of a job whose output printed `times` as its step times."""
    return {
        "schema": "gputop-diag.watch/1",
        "job": {"steps": {"source": "tqdm", "step_times_s": times}},
        "steps": {"median_s": sorted(times)[len(times) // 2]},
        "gpu_memory": [{"gpu": 0, "peak_bytes": 40 * 2**30}],
        "diagnosis": {"primary": primary},
        "measured": None,
    }


def test_watch_documents_with_a_known_shift_are_called_both_ways():
    rng = random.Random(5)
    a = watch_figures(watch_doc(steps(rng, 60, 0.5, 0.08), "input_pipeline"), "a.json")
    near = watch_figures(watch_doc(steps(rng, 60, 0.485, 0.08), "input_pipeline"), "b.json")
    far = watch_figures(watch_doc(steps(rng, 60, 0.35, 0.08), "compute"), "c.json")
    same = compare(a, near)
    assert same.row("step_time_s").judgement.call == WITHIN
    assert same.verdict.startswith("No change beyond the runs' variation")
    assert same.row("memory_bytes").judgement.call == SAME
    faster = compare(a, far)
    assert faster.row("step_time_s").judgement.call == BEYOND
    assert faster.verdict.startswith("B is faster than A: step time")
    assert "beyond the runs' variation" in faster.verdict
    assert "bottleneck moved from input pipeline to compute" in faster.verdict
    assert faster.row("steps_per_s").words.startswith("faster by")


def test_a_watch_summary_without_steps_is_judged_by_its_spread_or_not_at_all():
    probe = {"steps": {"wall_p50_s": 1.2, "wall_p95_s": 1.23}}
    doc = {"schema": "gputop-diag.watch/1", "measured": {"processes": [probe]}}
    a = watch_figures(doc, "a.json")
    assert a.figure("step_time_s").spread == pytest.approx(0.03)
    probe_b = {"steps": {"wall_p50_s": 0.8, "wall_p95_s": 0.82}}
    b = watch_figures({**doc, "measured": {"processes": [probe_b]}}, "b.json")
    assert compare(a, b).row("step_time_s").judgement.call == BEYOND
    bare = {"schema": "gputop-diag.watch/1", "steps": {"median_s": 0.8}}
    c = watch_figures(bare, "c.json")
    row = compare(a, c).row("step_time_s")
    assert row.judgement.call == NOT_JUDGED and "not judged" in row.words


# -- recordings of the simulator ---------------------------------------------------------------


def record(path, scenario: str, seconds: float, **options) -> str:
    monitor = Monitor(sim.build(scenario, **options))
    with RecordingWriter(str(path), interval_s=1.0) as w:
        monitor.run_for(seconds, lambda t: w.write(t.snapshot))
    return str(path)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    return {
        "input": record(d / "input.jsonl", "input-measured", 14, gpu_count=2),
        # the same scenario with other noise, longer, compressed
        "input-again": record(d / "again.jsonl.gz", "input-measured", 17, gpu_count=2, seed=7),
        "sync": record(d / "sync.jsonl", "sync-measured", 12, gpu_count=2),
        "a100": record(d / "mig.jsonl", "mig", 6),
        "h100": record(d / "compute.jsonl", "compute-bound", 6, gpu_count=2),
    }


def test_b_truly_faster_is_faster_beyond_the_runs_variation(recordings):
    rc, out, err = run_main("compare", recordings["input"], recordings["sync"], "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "gputop-diag.compare/1"
    rows = {r["key"]: r for r in doc["rows"]}
    step = rows["step_time_s"]
    assert step["call"] == "beyond" and step["change_pct"] == pytest.approx(-33.3, abs=1)
    assert step["a"]["samples"] >= 8 and step["p_value"] < ALPHA
    assert rows["t_input_s"]["call"] == "beyond" and rows["t_input_s"]["change"] < -0.5
    # B's steps are shorter but of 16 samples, not 512 (two GPUs): it does less work a second
    assert doc["verdict"].startswith("B is slower than A: samples/s 427 \u2192 20 (\u221295 %)")
    assert "the batch differs (512 vs 16 samples a step)" in doc["verdict"]
    assert step["words"] == "not comparable: another batch"
    assert doc["bottleneck"]["a"]["class"] == "input_pipeline"
    assert doc["bottleneck"]["b"]["class"] == "synchronization"
    assert doc["bottleneck"]["changed"] is True
    assert doc["a"]["kind"] == "recording" and doc["mismatches"] == []


def test_the_same_scenario_twice_is_within_noise_in_text(recordings):
    rc, out, err = run_main("compare", recordings["input"], recordings["input-again"])
    assert rc == 0, err
    first = out.splitlines()[0]
    assert first.startswith("verdict: No change beyond the runs' variation: samples/s 427")
    assert "step time 1.20 s \u2192 1.20 s, the same batch" in first
    assert "input pipeline in both" in first
    assert "beyond variation" not in out  # no row of one scenario against itself
    assert "GPU busy (NVML)" in out and "SM activity (GPM)" in out


def test_a_recording_against_a_watch_document(recordings, tmp_path):
    doc = watch_doc([1.2] * 30, "input_pipeline")
    path = tmp_path / "before.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    rc, out, err = run_main("compare", str(path), recordings["sync"], "--json")
    assert rc == 0, err
    got = json.loads(out)
    rows = {r["key"]: r for r in got["rows"]}
    assert got["a"]["kind"] == "watch" and got["b"]["kind"] == "recording"
    assert rows["step_time_s"]["call"] == "beyond"
    assert rows["gpu_util_pct"]["a"] is None and rows["gpu_util_pct"]["call"] == "missing"


def test_different_gpu_models_are_said_and_still_compared(recordings):
    rc, out, err = run_main("compare", recordings["a100"], recordings["h100"])
    assert rc == 0, err
    assert "note: different GPU models: A ran on NVIDIA A100" in out
    assert "GPU memory, peak" in out and "bottleneck: A compute" in out


def test_sanitize_names_the_files_and_the_host_by_pseudonyms(recordings):
    rc, out, err = run_main("compare", recordings["input"], recordings["sync"], "--sanitize")
    assert rc == 0, err
    assert "gpu-node-07" not in out and "input.jsonl" not in out and "sync.jsonl" not in out
    runs = [line for line in out.splitlines() if line.startswith(("A  ", "B  "))]
    assert len(runs) == 2 and all("path-" in r and "on host-" in r for r in runs), runs
    assert "B is slower than A" in out
    missing = recordings["input"].replace("input.jsonl", "gone.jsonl")
    rc, out, err = run_main("--sanitize", "compare", missing, recordings["sync"])
    assert rc == 2 and "no such file" in err and "gone.jsonl" not in err


# -- what cannot be compared --------------------------------------------------------------------


def test_files_that_cannot_be_compared_get_one_line_and_exit_2(recordings, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 4)
    diagnosis = tmp_path / "diagnosis.json"
    diagnosis.write_text(json.dumps({"schema": "gputop-diag.diagnosis/1"}))
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"schema": "gputop-diag.watch/2"}))
    cut = tmp_path / "cut.jsonl.gz"
    data = open(recordings["input-again"], "rb").read()
    cut.write_bytes(data[:60])
    cases = {
        str(tmp_path / "missing.jsonl"): "no such file",
        str(tmp_path): "is a directory",
        str(empty): "is empty",
        str(garbage): "is not a gputop-diag recording or watch --json document",
        str(diagnosis): "is a gputop-diag.diagnosis/1 document",
        str(newer): "a newer gputop-diag may read it",
        str(cut): "is damaged",
    }
    for path, said in cases.items():
        rc, out, err = run_main("compare", path, recordings["input"])
        assert rc == 2, (path, err)
        assert out == "" and err.count("\n") == 1 and "Traceback" not in err, (path, err)
        assert said in err, (path, err)


def test_demo_and_replay_are_usage_errors(recordings):
    for argv in (
        ("--demo", "idle", "compare", recordings["input"], recordings["sync"]),
        ("--replay", recordings["input"], "compare", recordings["input"], recordings["sync"]),
    ):
        rc, out, err = run_main(*argv)
        assert rc == 2 and out == "" and "compare reads" in err


def test_a_comparison_holds_only_rows_either_run_has():
    a = RunFigures("a", WATCH, {"step_time_s": Figure(1.0)})
    b = RunFigures("b", WATCH, {"step_time_s": Figure(0.5)})
    cmp = compare(a, b)
    assert [r.spec.key for r in cmp.rows] == ["step_time_s"]
    assert cmp.verdict.startswith("B is faster than A") and "not judged" in cmp.verdict


def test_docs_compare_names_every_key_of_the_document():
    from pathlib import Path

    from gputop_diag.compare.render import to_json
    from gputop_diag.compare.runs import ROWS

    text = (Path(__file__).resolve().parent.parent / "docs" / "compare.md").read_text()
    section = text[text.index("## `--json`") :]
    named = set(re.findall(r"`([a-z_0-9]+)`", section))
    a = RunFigures("a", WATCH, {"step_time_s": Figure(1.0, spread=0.1)})
    doc = to_json(compare(a, RunFigures("b", WATCH, {"step_time_s": Figure(0.5, spread=0.1)})))
    keys = set(doc) | set(doc["a"]) | set(doc["method"]) | set(doc["bottleneck"])
    keys |= set(doc["rows"][0]) | set(doc["rows"][0]["a"]) | {r.key for r in ROWS}
    assert keys - named == set()


def test_throughput_is_read_where_the_probe_sampled_a_batch(tmp_path):
    """samples/s and tokens/s: the sampled step's batch of every process over each tick's
    step time (a recording), the document's `measured.work` (a watch --json)."""
    import dataclasses

    from gputop_diag import model
    from gputop_diag.compare.replayed import ReplayedRun

    monitor = Monitor(sim.build("input-measured", gpu_count=2))
    run = ReplayedRun()

    def add(t):
        sample = model.ProbeSample(step=1, at=t.snapshot.timestamp, wall_s=1.3, samples=64)
        probes = tuple(dataclasses.replace(p, sample=sample) for p in t.snapshot.probes or ())
        run.add(dataclasses.replace(t.snapshot, probes=probes), t.diagnosis.primary)

    monitor.run_for(12, add)
    figures = run.figures("a.jsonl", 1.0, False)
    # two ranks of 64 samples each every 1.2 s step
    assert figures.figure("samples_per_s").value == pytest.approx(128 / 1.2, rel=0.01)
    assert figures.figure("tokens_per_s") is None
    work = {"samples_per_step": 128, "samples_per_s": 100.0, "tokens_per_s": 5000.0}
    doc = {**watch_doc([1.28] * 20, "input_pipeline"), "measured": {"work": work}}
    b = watch_figures(doc, "b.json")
    assert b.figure("samples_per_s").value == pytest.approx(100.0)
    assert b.figure("tokens_per_s").value == 5000.0 and b.figure("tokens_per_s").spread is None
    row = compare(figures, b).row("samples_per_s")
    assert row.judgement.call == BEYOND and row.direction == "slower"


def test_a_busy_time_that_swings_is_read_by_its_mean():
    """Busy 0 % three ticks in five and 100 % the other two: 40 % of the time, whose median
    would say 0 %; against a steady 40 % it is within noise."""
    swinging = from_samples([0.0, 0.0, 0.0, 100.0, 100.0] * 8, "ticks", "mean")
    rng = random.Random(2)
    steady = from_samples([40 + rng.uniform(-2, 2) for _ in range(40)], "ticks", "mean")
    assert swinging.value == pytest.approx(40.0)
    assert judge(swinging, steady, 1.0).call == WITHIN
    assert judge(swinging, from_samples([80.0] * 40, "ticks", "mean"), 1.0).call == BEYOND


def test_welch_p_matches_students_t_table():
    """Two-sided tails of Student's t (any table): t 2.228 at 10 degrees of freedom is 0.05,
    2.0 is 0.0734, 3.0 at 5 is 0.0301; Welch's equal-size equal-variance case has n1+n2-2."""
    from gputop_diag.compare.stats import _incomplete_beta, welch_p

    def tail(t: float, df: float) -> float:
        return _incomplete_beta(df / 2, 0.5, df / (df + t * t))

    assert tail(2.228, 10) == pytest.approx(0.05, abs=1e-3)
    assert tail(2.0, 10) == pytest.approx(0.0734, abs=1e-3)
    assert tail(3.0, 5) == pytest.approx(0.0301, abs=1e-3)
    # means 2 and 4, variances 0.8 and 0.8, n 6 each: t = 2 / sqrt(1.6/6) = 3.873, df 10:
    # 0.0031 (t 3.581 is 0.005, 4.144 is 0.002)
    assert welch_p([1, 1, 2, 2, 3, 3], [3, 3, 4, 4, 5, 5]) == pytest.approx(0.0031, abs=2e-4)
    assert welch_p([5.0] * 9, [5.0] * 9) == 1.0 and welch_p([5.0] * 9, [6.0] * 9) == 0.0
