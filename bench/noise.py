"""How far a benchmark's figure can be trusted on a shared machine: the noise beside each figure.

Pure functions over the rounds' times (no torch), so that `bench/probe.py` can say whether an
overhead is above its noise: the spread of the rounds without the probe (how far two rounds of
the same code are apart) and a bootstrap confidence interval of the median of the paired
differences (Efron and Tibshirani, "An Introduction to the Bootstrap", 1993, ch. 13: the
percentile interval), the headline figure.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


def spread_pct(times: Sequence[float]) -> float:
    """Half the interquartile range of `times` over their median, in percent: how far a round
    of the same code typically lands from the middle (0 with fewer than two rounds)."""
    if len(times) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return 100 * (q3 - q1) / 2 / statistics.median(times)


def paired_ratios(without: Sequence[float], with_probe: Sequence[float]) -> list[float]:
    """Each round with the probe against the round without it beside it: b / a - 1."""
    return [b / a - 1 for a, b in zip(without, with_probe, strict=True)]


def median_ci_pct(
    ratios: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float, float, float]:
    """(median, low, high) in percent: the median of `ratios` and its bootstrap percentile
    interval at `CONFIDENCE` (resampled with a fixed seed: the same rounds give the same
    interval)."""
    if not ratios:
        raise ValueError("no rounds")
    rng = random.Random(seed)
    n = len(ratios)
    medians = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(resamples))
    tail = (1 - CONFIDENCE) / 2
    low = medians[int(tail * (resamples - 1))]
    high = medians[int((1 - tail) * (resamples - 1))]
    return 100 * statistics.median(ratios), 100 * low, 100 * high


def within_noise(low_pct: float, high_pct: float) -> bool:
    """Whether an interval holds zero: no overhead is measured beyond the noise."""
    return low_pct <= 0 <= high_pct
