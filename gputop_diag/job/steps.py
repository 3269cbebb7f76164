"""Step time from a job's output: tqdm bars (`it/s` and `s/it`), PyTorch Lightning's bar,
Hugging Face Trainer's bar, its log dicts and its closing metrics, DeepSpeed's `step=N` and
throughput lines, Megatron's `elapsed time per iteration (ms)`, a plain `step N ... loss`, or the
user's `--step-regex`.

A printed rate or time is the job's own (tqdm smooths its rate; Lightning's training bar prints
the epoch average): the step times are those, the first `WARMUP_STEPS` left out (compilation,
cache warm-up). A counter without one (`step 120 loss 2.31`, logged every N steps) is timed by
its steps over the time they took across the window (`window_rate`): the counter's advance
against the time each read found it at, over the newest `WINDOW_S` (at least `MIN_POINTS` reads
that advanced it), a pause (an evaluation, a checkpoint) left out. A median of
per-read ratios would not do: a job logging every 10 steps at 14 steps/s read every second has
reads of 10 steps and reads of 20, and the median picks one of the two.

One counter is followed at a time: the first kind seen, replaced by a kind that says more (a
printed time beats a bare counter; Trainer's bar beats its epoch fractions).
"""

from __future__ import annotations

import math
import re
from collections import deque
from statistics import median

from ..model import StepStats

HISTORY = 240  # step times kept, and reads that advanced a counter
WARMUP_STEPS = 2
WINDOW_S = 120.0  # the counter's rate over the newest this long ...
MIN_POINTS = 16  # ... or over at least this many reads that advanced it (a slow job)
# A gap between two reads that advanced the counter over PAUSE_FACTOR times the typical one and
# PAUSE_MIN_S longer than it is a pause (an evaluation, a checkpoint, a stall): left out of the
# rate, which is the job's while it steps.
PAUSE_FACTOR = 4.0
PAUSE_MIN_S = 5.0

# ` 35%|███▌      | 350/1000 [00:12<00:22, 28.91it/s]` or `350it [00:12, 28.91it/s]`; tqdm prints
# `s/it` below one step a second. Lightning: `Epoch 3:  35%|...| 350/1000 [..., 28.9it/s, loss=..]`
_TQDM = re.compile(
    r"(?P<n>\d+)(?:/(?P<total>\d+))?(?:it)?\s*\[[\d:]+(?:<[\d:?]+)?,\s*"
    r"(?P<rate>[\d.]+)\s*(?P<unit>it/s|s/it)"
)
_LIGHTNING = re.compile(r"^\s*(?:Epoch \d+|Validation|Training)\b.*:")
# Lightning's evaluation bars: not training steps
_EVAL_BAR = re.compile(r"^\s*(?:Validation|Sanity Checking|Testing|Predicting)\b")
# Hugging Face Trainer (https://github.com/huggingface/transformers, trainer_callback.py
# ProgressCallback.on_log / PrinterCallback): its log dict every `logging_steps`, with the
# fractional epoch; transformers 5 prints the floats as strings ('epoch': '0.3125').
_HF_LOG = re.compile(r"""^\s*\{.*['"]loss['"]:\s*['"]?[-\d.]""")
_HF_EPOCH = re.compile(r"""['"]epoch['"]:\s*['"]?(?P<e>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)""")
# its closing metrics: {'train_runtime': 12.3, ..., 'train_steps_per_second': 4.1, ...}
_HF_SPEED = re.compile(r"""['"]train_steps_per_second['"]:\s*['"]?([\d.]+)""")
# its banner, at INFO: "  Num update steps per epoch = 1,250" (transformers 5), else
# "  Num Epochs = 3" and "  Total optimization steps = 3,750"
_HF_PER_EPOCH = re.compile(r"Num update steps per epoch = (?P<n>[\d,]+)")
_HF_EPOCHS = re.compile(r"\bNum Epochs = (?P<n>[\d,]+)")
_HF_TOTAL = re.compile(r"\bTotal optimization steps = (?P<n>[\d,]+)")
# DeepSpeed (https://github.com/deepspeedai/DeepSpeed): the engine's `_report_progress` every
# `steps_per_print` steps, `log_dist(f"step={step}, skipped=..., lr=..., mom=...", ranks=[0])`
# (runtime/engine.py), which prefixes "[Rank 0] " (utils/logging.py get_dist_msg); and its
# ThroughputTimer (utils/timer.py): "epoch=0/micro_step=40/global_step=10,
# RunningAvgSamplesPerSec=..., CurrSamplesPerSec=..., MemAllocated=...GB, ...".
_DEEPSPEED = re.compile(r"\[Rank \d+\] step=(?P<n>\d+), skipped=\d+")
_DEEPSPEED_TIMER = re.compile(
    r"epoch=\d+/micro_step=\d+/global_step=(?P<n>\d+),\s*RunningAvgSamplesPerSec="
)
# Megatron-LM: `iteration 200/ 1000 | ... | elapsed time per iteration (ms): 430.0 | ...`
_MEGATRON = re.compile(
    r"iteration\s+(?P<n>\d+)\s*/\s*(?P<total>\d+).*?elapsed time per iteration \(ms\):\s*"
    r"(?P<ms>[\d.]+)"
)
# `step 120 loss 2.31`, `Step: 120, loss=2.31`, `[step 120/5000] loss 2.31 (0.41 s/step)`
_STEP_LOSS = re.compile(
    r"\b(?:global[_ ])?(?:step|iter|iteration)\b[\s:=#\[]*(?P<n>\d+)(?:\s*/\s*(?P<total>\d+))?"
    r".*?\bloss\b",
    re.IGNORECASE,
)
_TIME_IN_LINE = re.compile(
    r"(?:\b(?:step[_ ]?time|time|dt)\b[\s:=]*(?P<v>[\d.]+)\s*(?P<u>ms|s)\b)|"
    r"(?P<v2>[\d.]+)\s*(?P<u2>ms|s)\s*/\s*(?:step|it)\b",
    re.IGNORECASE,
)

# Which counter is followed: a kind that says more replaces one that says less.
_RANK = {
    "hf-epoch": 1,
    "step-loss": 2,
    "deepspeed-timer": 3,
    "deepspeed": 4,
    "tqdm": 5,
    "lightning": 5,
    "iteration-ms": 6,
    "regex": 7,
}


class StepRegexError(ValueError):
    """A `--step-regex` that cannot be used, said for the user."""


def compile_step_regex(text: str) -> re.Pattern:
    """The user's pattern; it needs a group `step` (a counter) or `seconds`/`ms` (a step time),
    or one unnamed group (a counter)."""
    try:
        rx = re.compile(text)
    except re.error as e:
        raise StepRegexError(f"--step-regex {text!r} is not a regular expression: {e}") from None
    names = set(rx.groupindex)
    if not names & {"step", "seconds", "ms"} and rx.groups != 1:
        raise StepRegexError(
            f"--step-regex {text!r} needs a group for the step counter, (?P<step>\\d+), or for "
            "the step time, (?P<seconds>[\\d.]+) or (?P<ms>[\\d.]+), or exactly one group"
        )
    return rx


class StepParser:
    """Feed it the job's output lines with the time they were read, and `end_read` after each
    read of the output; `stats()` is the summary."""

    def __init__(self, regex: re.Pattern | None = None, history: int = HISTORY) -> None:
        self.regex = regex
        self.kind: str | None = None  # the counter followed (`_RANK`)
        self.step: int | None = None
        self.total: int | None = None
        self.times: deque[float] = deque(maxlen=history)
        self.points: deque[tuple[float, float, int]] = deque(maxlen=history)  # (n, t, segment)
        self.hf = False  # Hugging Face Trainer's lines seen
        self.per_epoch: int | None = None  # Trainer's steps per epoch, from its banner or bar
        self.summary_rate: float | None = None  # Trainer's closing train_steps_per_second
        self._epochs: int | None = None  # Trainer's banner: Num Epochs
        self._epoch: float | None = None  # Trainer's newest epoch fraction
        self._seen = 0  # step figures seen (the warm-up is skipped)
        self._segment = 0  # a counter going back starts another
        self._pending: float | None = None  # the newest counter of this read
        self._timed = False  # the lines print their own step time or rate
        self._last_timed: float | None = None  # the counter of the last printed time

    @property
    def source(self) -> str | None:
        if self.kind is None:
            return "hf-trainer" if self.hf else None
        if self.hf and self.kind in ("tqdm", "hf-epoch"):
            return "hf-trainer"  # its bar, its log dicts
        return "deepspeed" if self.kind == "deepspeed-timer" else self.kind

    # -- lines -------------------------------------------------------------------------------
    def feed(self, line: str, t: float) -> bool:
        """One line read at `t` (epoch s); True when it told something about steps."""
        if self.regex is not None:
            return self._custom(line, t)
        m = _MEGATRON.search(line)
        if m:
            self._count("iteration-ms", int(m["n"]), int(m["total"]), float(m["ms"]) / 1e3)
            return True
        m = _TQDM.search(line)
        if m:
            self._bar(line, m)
            return True
        if self._trainer(line):
            return True
        m = _DEEPSPEED.search(line) or _DEEPSPEED_TIMER.search(line)
        if m:
            kind = "deepspeed" if m.re is _DEEPSPEED else "deepspeed-timer"
            self._count(kind, int(m["n"]), None, None)
            return True
        m = _STEP_LOSS.search(line)
        if m:
            total = int(m["total"]) if m["total"] else None
            self._count("step-loss", int(m["n"]), total, _time_in(line))
            return True
        return False

    def feed_redraw(self, text: str, t: float) -> bool:
        """A bar as it is drawn now, its line not ended yet (`OutputTail.redraw`): read as a
        bar only where it is a whole one (a bar cut by the read has no rate after its count),
        so the newest step is the one just drawn, not the one before it."""
        m = _TQDM.search(text) if self.regex is None else None
        if m:
            self._bar(text, m)
        return m is not None

    def _bar(self, line: str, m: re.Match) -> None:
        if _EVAL_BAR.search(line):
            return  # Lightning's validation bar: not training steps
        n, total = int(m["n"]), (int(m["total"]) if m["total"] else None)
        kind = "lightning" if _LIGHTNING.search(line) else "tqdm"
        if (
            self.kind == kind
            and total is not None
            and self.total is not None
            and total != self.total
            and self.step is not None
            and self.step < self.total
        ):
            return  # another bar while the training bar runs: an evaluation's
        rate = float(m["rate"])
        secs = None
        if rate > 0:
            secs = rate if m["unit"] == "s/it" else 1.0 / rate
        self._count(kind, n, total, secs, rate_printed=True)

    def _trainer(self, line: str) -> bool:
        """Hugging Face Trainer's log dicts, closing metrics and banner."""
        m = _HF_SPEED.search(line)
        if m:
            self.hf = True
            rate = _number(m.group(1))
            if rate:
                self.summary_rate = rate
            return True
        if _HF_LOG.search(line):
            self.hf = True
            e = _HF_EPOCH.search(line)
            epoch = _number(e["e"]) if e else None
            if epoch:
                self._epoch = epoch
                self._count("hf-epoch", epoch, None, None)
            return True
        m = _HF_PER_EPOCH.search(line)
        if m:
            self.per_epoch = int(m["n"].replace(",", "")) or None
            return True
        m = _HF_EPOCHS.search(line)
        if m:
            self._epochs = int(m["n"].replace(",", "")) or None
            return True
        m = _HF_TOTAL.search(line)
        if m:
            total = int(m["n"].replace(",", ""))
            if self.per_epoch is None and self._epochs and total % self._epochs == 0:
                self.per_epoch = total // self._epochs or None  # exact only when it divides
            return True
        return False

    def _custom(self, line: str, t: float) -> bool:
        m = self.regex.search(line)
        if not m:
            return False
        g = m.groupdict()
        secs = None
        if g.get("seconds"):
            secs = _number(g["seconds"])
        elif g.get("ms"):
            ms = _number(g["ms"])
            secs = None if ms is None else ms / 1e3
        step = g.get("step") if "step" in g else (m.group(1) if not g and m.groups() else None)
        n = int(_number(step) or 0) if step is not None else None
        if n is None:
            if secs is None:
                return False
            self.kind = "regex"
            self._add(secs)
            return True
        self._count("regex", n, None, secs)
        return True

    def _count(
        self,
        kind: str,
        n: float,
        total: int | None,
        secs: float | None,
        rate_printed: bool = False,
    ) -> None:
        if self.kind is not None and kind != self.kind:
            if _RANK[kind] <= _RANK[self.kind]:
                return  # another counter, saying less than the one followed
            self._switch()
        self.kind = kind
        last = self._pending if self._pending is not None else self._newest()
        back = last is not None and n < last  # a new epoch, a new bar, a restart
        if back:
            self._segment += 1
            self._last_timed = None
        if kind != "hf-epoch":
            self.step = int(n)
        self.total = total if total is not None else self.total
        self._pending = n
        if secs is not None:
            self._timed = True
            if rate_printed and self._last_timed == n:
                return  # the same step printed again (a bar refreshed without progress)
            self._last_timed = n
            self._add(secs)

    def _switch(self) -> None:
        """Another kind of counter is followed from now on: the last one's figures go."""
        self.times.clear()
        self.points.clear()
        self.step = self.total = None
        self._seen, self._pending, self._timed, self._last_timed = 0, None, False, None

    def _newest(self) -> float | None:
        return self.points[-1][0] if self.points else None

    def end_read(self, t: float, stamp: float | None = None) -> None:
        """The end of one read of the output, at `t`; `stamp` is when its newest line was
        written where that is known better than `t` (the file's modification time). A counter
        without a printed time is timed against the reads that advanced it."""
        n = self._pending
        self._pending = None
        if n is None:
            return
        at = t if stamp is None else stamp
        prev = self.points[-1] if self.points else None
        if prev is not None and prev[2] == self._segment and n <= prev[0]:
            return  # no progress since the last read (a bar redrawn)
        if prev is not None and prev[2] == self._segment and not self._timed and at > prev[1]:
            per = (at - prev[1]) / (n - prev[0])
            for _ in range(min(math.ceil(n - prev[0]), 8)):  # weight by steps, bounded
                self._add(per)
        self.points.append((n, at, self._segment))

    def _add(self, secs: float) -> None:
        self._seen += 1
        if self._seen <= WARMUP_STEPS and self.kind not in ("hf-epoch",):
            return
        if secs > 0:
            self.times.append(secs)

    # -- summary -----------------------------------------------------------------------------
    def rate(self) -> float | None:
        """Steps a second over the window: the counter's steps over the time they took; where
        the lines print their own times, once the window holds `MIN_POINTS` reads that
        advanced the counter (before that, and for a log read all at once, the printed times
        say it: `step_median`)."""
        r, used = window_rate_used(self.points)
        if self._timed and used < MIN_POINTS:
            return None
        if self.kind == "hf-epoch":  # epochs a second
            return r * self.per_epoch if r is not None and self.per_epoch else None
        return r

    def problem(self) -> str | None:
        """Why the step lines seen give no step rate, said for the user; None when they do."""
        if self.kind == "hf-epoch" and not self.per_epoch and self.summary_rate is None:
            return (
                "the Trainer's log lines give the epoch, not the step, and its steps per epoch "
                "are not in the output (its progress bar is: stderr, or set "
                "TRANSFORMERS_VERBOSITY=info for its banner)"
            )
        return None

    def stats(self) -> StepStats | None:
        source = self.source
        if source is None:
            return None
        step, total, times, rate = self.step, self.total, tuple(self.times), self.rate()
        if self.kind == "hf-epoch":  # seconds an epoch: a step is that over its steps
            times = tuple(x / self.per_epoch for x in times) if self.per_epoch else ()
            if self.per_epoch and self._epoch is not None:
                step = round(self._epoch * self.per_epoch)
        if rate is None and not times and self.summary_rate:
            rate = self.summary_rate  # the Trainer's own figure over the whole run
        return StepStats(
            source=source, step=step, total=total, step_times_s=times, steps_per_s=rate
        )


def window_rate(
    points,
    window_s: float = WINDOW_S,
    min_points: int = MIN_POINTS,
) -> float | None:
    """Counter units a second over `points` ((counter, time, segment), oldest first): the
    newest `window_s` of them (at least `min_points`), split where the segment changes (the
    counter went back) and at a pause; the steps of the runs over their time (each run from its
    first read to its last: a step's jitter adds up to the time it took, and only the two reads
    at its ends are early or late). None with too little to go on."""
    return window_rate_used(points, window_s, min_points)[0]


def window_rate_used(
    points,
    window_s: float = WINDOW_S,
    min_points: int = MIN_POINTS,
) -> tuple[float | None, int]:
    """`window_rate`, and how many points it used (those in runs of two or more)."""
    pts = list(points)
    if len(pts) < 2:
        return None, 0
    newest = pts[-1][1]
    start = 0
    while start < len(pts) - min_points and pts[start][1] < newest - window_s:
        start += 1
    pts = pts[start:]
    gaps = [b[1] - a[1] for a, b in zip(pts, pts[1:], strict=False) if a[2] == b[2]]
    if not gaps:
        return None, 0
    typical = median(gaps)
    runs: list[list[tuple[float, float, int]]] = [[pts[0]]]
    for a, b in zip(pts, pts[1:], strict=False):
        gap = b[1] - a[1]
        if b[2] != a[2] or (gap > PAUSE_FACTOR * typical and gap > typical + PAUSE_MIN_S):
            runs.append([b])
        else:
            runs[-1].append(b)
    steps = secs = 0.0
    used = 0
    for run in runs:
        if len(run) < 2:
            continue
        used += len(run)
        steps += run[-1][0] - run[0][0]
        secs += run[-1][1] - run[0][1]
    if secs <= 0 or steps <= 0:
        return None, used
    return steps / secs, used


def _time_in(line: str) -> float | None:
    m = _TIME_IN_LINE.search(line)
    if not m:
        return None
    v, u = (m["v"], m["u"]) if m["v"] else (m["v2"], m["u2"])
    x = _number(v)
    if x is None:
        return None
    return x / 1e3 if u.lower() == "ms" else x


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


# -- figures over the history ----------------------------------------------------------------
def percentile(values, q: float) -> float | None:
    """The q-th percentile (0..100), nearest rank."""
    v = sorted(values)
    if not v:
        return None
    k = max(0, min(len(v) - 1, math.ceil(q / 100.0 * len(v)) - 1))
    return v[k]


def step_median(s: StepStats | None) -> float | None:
    """The typical step: the median of the printed step times, or for a counter without
    them, the window's time over its steps (`StepStats.steps_per_s`)."""
    if s is None:
        return None
    if s.steps_per_s:
        return 1.0 / s.steps_per_s
    return median(s.step_times_s) if s.step_times_s else None


def step_p95(s: StepStats | None) -> float | None:
    """The 95th percentile of the step times (a counter's: of each interval between its
    reads), never under the typical step."""
    if s is None:
        return None
    p = percentile(s.step_times_s, 95)
    typical = step_median(s)
    if p is None or typical is None:
        return p if p is not None else typical
    return max(p, typical)


def steps_per_s(s: StepStats | None) -> float | None:
    if s is not None and s.steps_per_s:
        return s.steps_per_s
    m = step_median(s)
    return 1.0 / m if m else None
