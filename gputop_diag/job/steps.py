"""Step time from a job's output: tqdm bars (`it/s` and `s/it`), PyTorch Lightning's bar,
Hugging Face Trainer's bar and its log dicts, Megatron's `elapsed time per iteration (ms)`, a plain
`step N ... loss`, or the user's `--step-regex`.

A printed rate is the bar's own (tqdm smooths it; Lightning's training bar prints the epoch
average). A counter without a rate (`step 120 loss 2.31`) is differenced against the time the
lines were read: (seconds between reads) / (steps between reads). The first `WARMUP_STEPS`
steps (compilation, cache warm-up) are left out of the history.
"""

from __future__ import annotations

import math
import re
from collections import deque
from statistics import median

from ..model import StepStats

HISTORY = 240  # step times kept
WARMUP_STEPS = 2

# ` 35%|███▌      | 350/1000 [00:12<00:22, 28.91it/s]` or `350it [00:12, 28.91it/s]`; tqdm prints
# `s/it` below one step a second. Lightning: `Epoch 3:  35%|...| 350/1000 [..., 28.9it/s, loss=..]`
_TQDM = re.compile(
    r"(?P<n>\d+)(?:/(?P<total>\d+))?(?:it)?\s*\[[\d:]+(?:<[\d:?]+)?,\s*"
    r"(?P<rate>[\d.]+)\s*(?P<unit>it/s|s/it)"
)
_LIGHTNING = re.compile(r"^\s*(?:Epoch \d+|Validation|Training)\b.*:")
# Hugging Face Trainer's closing metrics: {'train_runtime': 12.3, 'train_steps_per_second': 4.1}
_HF_SPEED = re.compile(r"""['"]train_steps_per_second['"]:\s*([\d.]+)""")
_HF_LOG = re.compile(r"""^\s*\{.*['"]loss['"]:\s*[\d.e+-]+.*['"]epoch['"]:""")
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
    """Feed it the job's output lines with the time they were read; `stats()` is the summary."""

    def __init__(self, regex: re.Pattern | None = None, history: int = HISTORY) -> None:
        self.regex = regex
        self.source: str | None = None
        self.step: int | None = None
        self.total: int | None = None
        self.times: deque[float] = deque(maxlen=history)
        self._seen = 0  # step figures seen (the warm-up is skipped)
        self._mark: tuple[int, float] | None = None  # (counter, read time) of the last read
        self._pending: tuple[int, float] | None = None  # the newest counter of this read
        self._timed = False  # the lines print their own step time or rate
        self._last_timed: int | None = None  # the counter of the last printed time

    # -- lines -------------------------------------------------------------------------------
    def feed(self, line: str, t: float) -> bool:
        """One line read at `t` (epoch s); True when it told something about steps."""
        if self.regex is not None:
            return self._custom(line, t)
        m = _MEGATRON.search(line)
        if m:
            self._count("iteration-ms", int(m["n"]), int(m["total"]), t, float(m["ms"]) / 1e3)
            return True
        m = _TQDM.search(line)
        if m:
            rate = float(m["rate"])
            secs = None
            if rate > 0:
                secs = rate if m["unit"] == "s/it" else 1.0 / rate
            source = "lightning" if _LIGHTNING.search(line) else "tqdm"
            total = int(m["total"]) if m["total"] else None
            self._count(source, int(m["n"]), total, t, secs, rate_printed=True)
            return True
        m = _HF_SPEED.search(line)
        if m:
            rate = float(m.group(1))
            if rate > 0:
                self.source = self.source or "hf-trainer"
                self._add(1.0 / rate)
            return True
        if _HF_LOG.search(line):
            self.source = self.source or "hf-trainer"
            return True
        m = _STEP_LOSS.search(line)
        if m:
            total = int(m["total"]) if m["total"] else None
            self._count("step-loss", int(m["n"]), total, t, _time_in(line))
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
            self.source = "regex"
            self._add(secs)
            return True
        self._count("regex", n, None, t, secs)
        return True

    def _count(
        self,
        source: str,
        n: int,
        total: int | None,
        t: float,
        secs: float | None,
        rate_printed: bool = False,
    ) -> None:
        self.source = source if self.source in (None, "hf-trainer", "tqdm") else self.source
        if source == "lightning":
            self.source = "lightning"
        back = self.step is not None and n < self.step  # a new epoch, a new bar, a restart
        self.step, self.total = n, total if total is not None else self.total
        if back:
            self._mark = None
            self._last_timed = None
        self._pending = (n, t)
        if secs is not None:
            self._timed = True
            if rate_printed and self._last_timed == n:
                return  # the same step printed again (a bar refreshed without progress)
            self._last_timed = n
            self._add(secs)

    def end_read(self, t: float) -> None:
        """The end of one read of the output: a counter without a printed time is differenced
        against the last read that advanced it."""
        if self._pending is None:
            return
        n, _ = self._pending
        if self._mark is not None and not self._timed:
            n0, t0 = self._mark
            if n > n0 and t > t0:
                per = (t - t0) / (n - n0)
                for _ in range(min(n - n0, 8)):  # weight by steps, bounded
                    self._add(per)
        if self._mark is None or n != self._mark[0]:
            self._mark = (n, t)

    def _add(self, secs: float) -> None:
        self._seen += 1
        if self._seen <= WARMUP_STEPS and self.source not in ("hf-trainer",):
            return
        if secs > 0:
            self.times.append(secs)

    # -- summary -----------------------------------------------------------------------------
    def stats(self) -> StepStats | None:
        if self.source is None:
            return None
        return StepStats(
            source=self.source, step=self.step, total=self.total, step_times_s=tuple(self.times)
        )


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
    return median(s.step_times_s) if s is not None and s.step_times_s else None


def step_p95(s: StepStats | None) -> float | None:
    return percentile(s.step_times_s, 95) if s is not None else None


def steps_per_s(s: StepStats | None) -> float | None:
    m = step_median(s)
    return 1.0 / m if m else None
