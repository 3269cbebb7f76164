"""The step rate read from a job's output: a counter logged every N steps is timed by its steps
over the time they took across the window, within 2 % of the truth, for generated logs (every
7/10/50/100 steps, 0.05 to 200 steps/s, jitter, a pause, reads that split lines) and for the
held-out logs of real processes under tests/data/steps/ (`make_fixtures.py` there); Hugging
Face Trainer's log dicts and DeepSpeed's lines; the clock a started command's lines are timed
by; the job's measured steps are one count everywhere."""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gputop_diag.collect.job import JobWatch
from gputop_diag.collect.job_output import OutputTail
from gputop_diag.diagnose.measured import measured_split
from gputop_diag.diagnose.measured_render import measured_lines
from gputop_diag.job.steps import (
    MIN_POINTS,
    WINDOW_S,
    StepParser,
    step_median,
    steps_per_s,
    window_rate,
)
from gputop_diag.model import ProbeState, ProbeSteps

STEPS_DATA = Path(__file__).parent / "data" / "steps"


def job(rate, every, lines, jitter=0.2, pause=None, seed=0):
    """Step lines of a job at `rate` steps/s (each step +-jitter), one every `every` steps:
    [(time printed, step)]; `pause` = (after line k, seconds) stops it once."""
    rnd = random.Random(seed)
    t, n, out = 0.0, 0, []
    while len(out) < lines:
        t += (1 + jitter * (2 * rnd.random() - 1)) / rate
        n += 1
        if n % every == 0:
            out.append((t, n))
            if pause is not None and len(out) == pause[0]:
                t += pause[1]
    return out


def read_every(printed, dt=1.0, phase=0.37, text="step {n} | loss 1.25"):
    """The parser fed as the watcher reads: every `dt` s, the lines printed since."""
    p = StepParser()
    reads: dict[float, list[int]] = {}
    for t, n in printed:
        reads.setdefault(phase + math.ceil((t - phase) / dt) * dt, []).append(n)
    for t in sorted(reads):
        for n in reads[t]:
            p.feed(text.format(n=n), t)
        p.end_read(t)
    return p.stats()


def true_rate(printed, pause_after=None):
    """Steps a second between the first and the last line, a pause left out."""
    steps = secs = 0.0
    for k in range(1, len(printed)):
        if pause_after is not None and k == pause_after:
            continue  # the interval after line `pause_after` holds the pause
        steps += printed[k][1] - printed[k - 1][1]
        secs += printed[k][0] - printed[k - 1][0]
    return steps / secs


# every 7/10/50/100 steps, at 0.05 to 200 steps/s (a geometric sweep), with jitter; the lines a
# window holds (at least MIN_POINTS, at most WINDOW_S of reads), so the truth is its own
RATES = [0.05 * (200 / 0.05) ** (k / 9) for k in range(10)]


@pytest.mark.parametrize("every", [7, 10, 50, 100])
def test_a_counter_logged_every_n_steps_within_2_percent(every):
    for k, rate in enumerate(RATES):
        lines = max(MIN_POINTS, int(WINDOW_S * rate / every))
        printed = job(rate, every, lines, seed=every * 100 + k)
        s = read_every(printed, phase=random.Random(k).random())
        truth = true_rate(printed)
        assert steps_per_s(s) == pytest.approx(truth, rel=0.02), (every, rate)
        assert step_median(s) == pytest.approx(1 / truth, rel=0.02)


def test_the_filed_case_every_10_steps_at_14_24_steps_per_s():
    printed = job(14.24, 10, 150, jitter=0.0)
    s = read_every(printed)
    assert steps_per_s(s) == pytest.approx(14.24, rel=0.02)  # was 9.97: a median of reads
    # every 1, 5 or 30 steps too
    for every in (1, 5, 30):
        s = read_every(job(14.24, every, max(16, 1500 // every), jitter=0.0))
        assert steps_per_s(s) == pytest.approx(14.24, rel=0.02), every


@pytest.mark.parametrize(("rate", "every"), [(14.24, 10), (2.0, 7), (0.3, 1), (150.0, 100)])
def test_a_pause_is_left_out(rate, every):
    # an evaluation of 30 s (or ten of its lines, if longer) in the middle of what the window
    # holds
    gap = max(30.0, 10 * every / rate)
    lines = max(MIN_POINTS, min(40, int((WINDOW_S - gap) * rate / every)))
    printed = job(rate, every, lines, jitter=0.3, pause=(lines // 2, gap), seed=7)
    s = read_every(printed, phase=0.8)
    assert steps_per_s(s) == pytest.approx(true_rate(printed, pause_after=lines // 2), rel=0.02)


def test_jittered_reads_and_a_slow_tick():
    # reads 0.5 to 1.5 s apart, one of 6 s (a tick held up): the slope does not care
    printed = job(14.24, 10, 200, jitter=0.3, seed=3)
    rnd = random.Random(5)
    p, k, t = StepParser(), 0, 0.0
    while k < len(printed):
        t += 6.0 if 50 < t < 51.5 else 0.5 + rnd.random()
        while k < len(printed) and printed[k][0] <= t:
            p.feed(f"step {printed[k][1]} loss 1.0", t)
            k += 1
        p.end_read(t)
    window = [x for x in printed if x[0] >= printed[-1][0] - WINDOW_S - 2]
    assert steps_per_s(p.stats()) == pytest.approx(true_rate(window), rel=0.02)


def test_the_window_follows_a_change_of_rate():
    fast = job(20.0, 10, 200, jitter=0.1, seed=1)
    t0 = fast[-1][0]
    slow = [(t0 + t, fast[-1][1] + n) for t, n in job(5.0, 10, 100, jitter=0.1, seed=2)]
    s = read_every(fast + slow)
    assert steps_per_s(s) == pytest.approx(5.0, rel=0.03)  # the newest 120 s: all slow


def test_window_rate_pieces():
    assert window_rate([]) is None and window_rate([(10, 1.0, 0)]) is None
    # two segments (a counter that went back) each with its own start: 5 steps/s in both
    pts = [(5 * k, float(k), 0) for k in range(10)] + [(5 * k, 20.0 + k, 1) for k in range(10)]
    assert window_rate(pts) == pytest.approx(5.0)
    # no time between the points, or a counter that does not advance: no rate
    assert window_rate([(1, 1.0, 0), (2, 1.0, 0)]) is None
    assert window_rate([(3, 1.0, 0), (3, 2.0, 0), (3, 3.0, 0)]) is None


def replay(chunks, path, dt=1.0, phase=0.5, split_every=5):
    """A captured output replayed into a file and read as JobWatch reads it: every `dt` s, the
    chunks that had come by then (one in `split_every` cut in two, its second half a read
    later: a read that ends inside a line), the newest line stamped when it was written (as
    the file's modification time stamps it)."""
    tail, p = OutputTail(str(path), from_start=True), StepParser()
    pieces = []
    for k, (t, text) in enumerate(chunks):
        if split_every and k % split_every == 2 and len(text) > 3:
            cut = len(text) // 2
            pieces += [(t, text[:cut]), (t + dt, text[cut:])]
        else:
            pieces.append((t, text))
    pieces.sort(key=lambda x: x[0])
    end = pieces[-1][0] + 2 * dt
    t, k, written = phase, 0, None
    snapshots = []
    with open(path, "w", encoding="utf-8") as f:
        while t <= end:
            while k < len(pieces) and pieces[k][0] <= t:
                f.write(pieces[k][1])
                written = pieces[k][0]
                k += 1
            f.flush()
            for _, line in tail.read():
                p.feed(line, t)
            if tail.redraw is not None:  # as JobWatch.sample: the bar drawn now
                p.feed_redraw(tail.redraw, t)
            p.end_read(t, written)
            snapshots.append((t, p.stats(), p.problem()))
            t += dt
    return p.stats(), snapshots


def fixture(name):
    doc = json.loads((STEPS_DATA / f"{name}.json").read_text())
    ends, pauses = doc["step_ends"], set(doc["pause_steps"])
    durations = [ends[i] - ends[i - 1] for i in range(1, len(ends)) if i + 1 not in pauses]
    return doc, len(durations) / sum(durations)  # steps a second while it steps


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("print-every10", "step-loss"),
        ("print-every7-pause", "step-loss"),
        ("tqdm-fast", "tqdm"),
        ("tqdm-slow-pause", "tqdm"),
        ("deepspeed-every10", "deepspeed"),
        ("hf-bar", "hf-trainer"),
        ("hf-dicts-banner", "hf-trainer"),
    ],
)
def test_held_out_logs_of_real_processes_within_2_percent(tmp_path, name, source):
    doc, truth = fixture(name)
    s, _ = replay(doc["chunks"], tmp_path / "out.log")
    assert s.source == source
    assert steps_per_s(s) == pytest.approx(truth, rel=0.02), doc["about"]
    assert 0 < s.step <= len(doc["step_ends"])


def test_trainer_log_dicts_alone_say_why_until_their_closing_metrics(tmp_path):
    doc, truth = fixture("hf-dicts-only")
    s, snapshots = replay(doc["chunks"], tmp_path / "out.log")
    middle = [x for x in snapshots if x[1] is not None and x[1].steps_per_s is None]
    assert middle, "the dicts come before the end"
    t, stats, problem = middle[len(middle) // 2]
    assert stats.source == "hf-trainer" and stats.step is None
    assert "give the epoch, not the step" in problem
    # the closing metrics: the Trainer's own train_steps_per_second over the whole run
    assert s.steps_per_s == pytest.approx(truth, rel=0.05)


TRAINER_V4 = [
    "{'loss': 1.9, 'grad_norm': 3.1, 'learning_rate': 4.9e-05, 'epoch': 0.08}",
    "{'loss': 1.7, 'grad_norm': 2.9, 'learning_rate': 4.8e-05, 'epoch': 0.16}",
]


def test_trainer_dicts_v4_and_v5_and_eval_lines():
    # transformers 4's floats and 5's strings; steps per epoch from the banner of either
    for banner in (
        ["  Num update steps per epoch = 125"],
        ["  Num Epochs = 3", "  Total optimization steps = 375"],
    ):
        p = StepParser()
        for line in banner:
            assert p.feed(line, 0.0)
        for k in range(1, 21):  # every 10 steps, 4 steps/s: a line every 2.5 s
            e = f"{10 * k / 125:.4g}"
            line = (
                TRAINER_V4[0].replace("0.08", e) if k % 2 else f"{{'loss': '1.5', 'epoch': '{e}'}}"
            )
            p.feed(line, 2.5 * k)
            p.end_read(2.5 * k)
        s = p.stats()
        assert s.source == "hf-trainer" and s.step == 200
        assert steps_per_s(s) == pytest.approx(4.0, rel=0.02)
    # an evaluation's dict is not a training log; its steps per second are not training steps
    p = StepParser()
    assert p.feed("{'eval_loss': '0.51', 'eval_runtime': '2.1', 'eval_steps_per_second': "
                  "'9.5', 'epoch': '1'}", 0.0) is False  # fmt: skip
    assert p.stats() is None
    # Total optimization steps that the epochs do not divide (max_steps): unknown, said
    p = StepParser()
    for line in ["  Num Epochs = 3", "  Total optimization steps = 1,000", *TRAINER_V4]:
        p.feed(line, 0.0)
    assert p.per_epoch is None and p.problem() is not None


def test_an_evaluation_bar_is_not_the_training_bar():
    p = StepParser()
    t = 0.0
    for n in range(1, 41):
        t += 0.25
        p.feed(f" {n}/200 [00:{int(t):02d}<00:40,  4.00it/s]", t)
        p.end_read(t)
    for n in range(1, 30):  # the Trainer's evaluation bar, mid-training
        p.feed(f" {n}/30 [00:01<00:00, 60.00it/s]", t)
    p.feed("Validation DataLoader 0:  50%|█████     | 5/10 [00:00<00:00, 80.00it/s]", t)
    s = p.stats()
    assert s.step == 40 and s.total == 200 and steps_per_s(s) == pytest.approx(4.0)


def test_deepspeed_lines():
    # https://github.com/deepspeedai/DeepSpeed runtime/engine.py _report_progress, via log_dist
    head = "[2025-01-06 10:00:00,000] [INFO] [logging.py:128:log_dist] [Rank 0] "
    p = StepParser()
    for k in range(1, 31):
        t = 5.0 * k  # steps_per_print 10 at 2 steps/s
        assert p.feed(f"{head}step={10 * k}, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]", t)
        assert p.feed(
            f"{head}epoch=0/micro_step={40 * k}/global_step={10 * k - 1}, "
            "RunningAvgSamplesPerSec=64.0, CurrSamplesPerSec=64.1, MemAllocated=1.2GB, "
            "MaxMemAllocated=3.4GB",
            t,
        )  # one less: the timer's count is not followed beside step=
        p.end_read(t)
    s = p.stats()
    assert s.source == "deepspeed" and s.step == 300
    assert steps_per_s(s) == pytest.approx(2.0, rel=0.01)
    # the throughput lines alone are a counter too
    p = StepParser()
    for k in range(1, 31):
        p.feed(f"[Rank 0] epoch=1/micro_step={4 * k}/global_step={k}, RunningAvgSamplesPerSec=3", k)
        p.end_read(float(k))
    assert p.stats().source == "deepspeed" and steps_per_s(p.stats()) == pytest.approx(1.0)


def test_a_started_command_is_timed_on_the_wall_clock_under_the_simulator(tmp_path):
    """`watch --demo -- CMD`: the simulated clock jumps a second a tick whatever the real time;
    the command is a real process, its lines are timed on the wall clock."""
    from gputop_diag import sim

    s = sim.build("tour")
    log = tmp_path / "job.log"
    code = (
        "import time\n"
        "for i in range(1, 21):\n"
        "    time.sleep(0.01)\n"
        "    print(f'step {i} loss 1.0', flush=True) if i % 2 == 0 else None\n"
    )
    w = JobWatch.for_command(s, [sys.executable, "-c", code], log_path=str(log))
    assert w.wall_clock_lines
    st = None
    while w.popen.poll() is None or st is None or st.steps is None or st.steps.step != 20:
        st = w.sample(SimpleNamespace(timestamp=s.clock.now()))
        s.clock.sleep(1.0)  # a second of the simulated clock, no time at all of the wall's
        time.sleep(0.02)
    assert st.steps.step == 20
    rate = steps_per_s(st.steps)
    assert rate is not None and rate > 5  # 100 steps/s less its start; one a second if simulated


def test_written_at_bounds_the_stamp(tmp_path):
    """The newest line is stamped by the file's modification time, within the last read and
    this one; a job watched by pid on the simulated machine keeps the simulated clock."""
    from gputop_diag import sim

    s = sim.build("tour")
    w = JobWatch(s, "pid", "pid 1", log=str(tmp_path / "x.log"))
    assert not w.wall_clock_lines and w._written_at(10.0) is None
    w.popen = object()  # a started command's
    w.tail.written_at = 5.0
    assert w._written_at(10.0) == 5.0
    w._line_read_t = 8.0  # another machine's clock: kept within the span since the last read
    assert w._written_at(10.0) == 8.0
    w.tail.written_at = 12.0
    assert w._written_at(10.0) == 10.0


def _probe(pid, rank, steps):
    return ProbeState(
        pid=pid,
        start_ticks=1,
        rank=rank,
        world=2,
        steps=ProbeSteps(steps=steps, last_step=300, last_at=1.0, wall_s=0.024, t_input_s=0.001),
    )


def test_the_measured_steps_are_the_jobs_not_processes_times_steps():
    probes = [_probe(10, 0, 100), _probe(11, 1, 100)]
    m = measured_split(probes)
    assert m.steps == 100 and m.steps_all == 200  # two ranks of 100 steps: 100 steps of the job
    lines = measured_lines(probes, [], ranks=2)
    assert "100 steps" in lines[0] and "200" not in lines[0]
    one = measured_split(probes[:1])
    assert one.steps == m.steps  # one process of the two: the same count
    slow = measured_split([_probe(10, 0, 100), _probe(11, 1, 90)])
    assert slow.steps == 90  # as many as its slowest
