"""Whether a difference between two runs exceeds the runs' own variation: pure arithmetic over
the figures of each run, one rule for every row of `gputop-diag compare` (docs/compare.md).

A figure of a run is either samples (one per step, or one per tick: `samples`, in time order)
or a summary (a value and, where the source gave one, a spread). The rule, in order:

1. A change under `FLOOR` of the larger value (or under the row's own floor) is within noise:
   too small to matter, however sure.
2. Both runs have `MIN_SAMPLES` samples: the change is beyond the runs' variation when both
   - the test of the row's figure says the two sets differ at `ALPHA`: for a median (or a
     peak) the Mann–Whitney U test (two-sided, normal approximation with the tie
     correction), for a mean Welch's t-test, and
   - the change is larger than each run's own drift: the distance between its first half's
     figure (median, or mean) and its second half's. Steps and ticks are not independent
     draws (a run warms up, a neighbour comes and goes); a run whose median moves that much
     on its own says nothing by moving that much against another.
3. Otherwise both runs have a spread (the interquartile range of their samples; p95 − median
   where a document holds only those two; the range of the probe's means over the run): the
   change is beyond the runs' variation when it is larger than the larger spread.
4. Otherwise one figure per run: not judged (a single number carries no variation).

The Mann–Whitney U test is Mann and Whitney (1947), https://doi.org/10.1214/aoms/1177730491;
its normal approximation with ties as in
https://en.wikipedia.org/wiki/Mann%E2%80%93Whitney_U_test#Normal_approximation_and_tie_correction.
Welch's t-test is Welch (1947), https://doi.org/10.1093/biomet/34.1-2.28.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_SAMPLES = 8  # per run, for the test (below it the normal approximation is poor)
ALPHA = 0.01  # the test's level: one comparison in a hundred of two alike runs called different
FLOOR = 0.01  # a change under 1 % of the larger value is within noise whatever the test says

BEYOND = "beyond"  # the change exceeds the runs' variation
WITHIN = "within"  # it does not
NOT_JUDGED = "not_judged"  # one figure per run: no variation to judge against
SAME = "same"  # no change at all
MISSING = "missing"  # the figure is not in one of the runs


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure of one run. `value` is what the row shows (the median of `samples` unless
    the row says otherwise); `spread` its noise scale, None where unknown."""

    value: float
    samples: tuple[float, ...] = ()  # in time order
    spread: float | None = None
    spread_kind: str | None = None  # "IQR", "p95 - median", "range over the run"
    basis: str = ""  # what the figure is read from, in words
    statistic: str = "median"  # what `value` is of the samples: "median", "mean", "peak"

    @property
    def n(self) -> int:
        return len(self.samples)


@dataclass(frozen=True, slots=True)
class Judgement:
    """How a change of one row was judged: `call` one of BEYOND, WITHIN, NOT_JUDGED, SAME,
    MISSING; `how` what decided it, in words."""

    call: str
    how: str
    p_value: float | None = None  # the test's (Mann–Whitney U, or Welch's t), where it ran
    drift: float | None = None  # the larger of the two runs' own drift of the median
    noise: float | None = None  # the spread the change was held against (rule 3)


def iqr(values: Sequence[float]) -> float | None:
    """The interquartile range (statistics.quantiles, exclusive method); None under 2 values."""
    if len(values) < 2:
        return None
    q1, _, q3 = statistics.quantiles(values, n=4)
    return q3 - q1


def from_samples(samples: Sequence[float], basis: str, statistic: str = "median") -> Figure | None:
    """A figure read from samples, its value their `statistic` ("median"; "mean": a busy
    time that swings between 0 and 100 % has a median of either; "peak"); None without any."""
    s = tuple(float(v) for v in samples if v is not None and math.isfinite(v))
    if not s:
        return None
    spread = iqr(s)
    return Figure(
        value=center(s, statistic),
        samples=s,
        spread=spread,
        spread_kind="IQR" if spread is not None else None,
        basis=basis,
        statistic=statistic,
    )


def center(values: Sequence[float], statistic: str = "median") -> float:
    if statistic == "mean":
        return statistics.fmean(values)
    if statistic == "peak":
        return max(values)
    return statistics.median(values)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """The two-sided p-value of the Mann–Whitney U test that `a` and `b` come from one
    distribution: normal approximation, tie correction, continuity correction. 1.0 where every
    value is tied."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2 + 1  # the mean rank of a group of ties
        for k in range(i, j + 1):
            ranks[k] = rank
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    r1 = sum(r for r, (_, side) in zip(ranks, pooled, strict=True) if side == 0)
    u1 = r1 - n1 * (n1 + 1) / 2
    n = n1 + n2
    mean = n1 * n2 / 2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = max(0.0, abs(u1 - mean) - 0.5) / math.sqrt(var)
    return math.erfc(z / math.sqrt(2))


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """The two-sided p-value of Welch's t-test that `a` and `b` have one mean (Student's t with
    the Welch–Satterthwaite degrees of freedom). Both without variance: 0.0 where the means
    differ, 1.0 where they do not."""
    n1, n2 = len(a), len(b)
    if n1 < 2 or n2 < 2:
        return 1.0
    m1, m2 = statistics.fmean(a), statistics.fmean(b)
    s1, s2 = statistics.variance(a, m1) / n1, statistics.variance(b, m2) / n2
    if s1 + s2 == 0:
        return 0.0 if m1 != m2 else 1.0
    t = (m2 - m1) / math.sqrt(s1 + s2)
    df = (s1 + s2) ** 2 / (s1**2 / (n1 - 1) + s2**2 / (n2 - 1))
    return _incomplete_beta(df / 2, 0.5, df / (df + t * t))


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction
    (https://dlmf.nist.gov/8.17#v, eq. 8.17.22, evaluated by the modified Lentz method); the
    two-sided tail of Student's t with df degrees of freedom is I_{df/(df+t²)}(df/2, 1/2)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast below this point
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return front * f / a


def drift(samples: Sequence[float], statistic: str = "median") -> float:
    """How far a run's figure moves on its own: |its second half's − its first half's| (in
    time order; the median of each, or the mean for a mean; a peak's series by its median)."""
    half = len(samples) // 2
    if half == 0:
        return 0.0
    how = "mean" if statistic == "mean" else "median"
    return abs(center(samples[-half:], how) - center(samples[:half], how))


def judge(
    a: Figure | None, b: Figure | None, floor: float = 0.0, floor_words: str = ""
) -> Judgement:
    """The rule of this module's docstring, for a change from `a` to `b`. `floor`: the row's
    own smallest change that matters (in its unit; `floor_words` says what it is), beside
    FLOOR of the larger value."""
    if a is None or b is None:
        return Judgement(MISSING, "not in both runs")
    delta = b.value - a.value
    if delta == 0:
        return Judgement(SAME, "no change")
    relative = FLOOR * max(abs(a.value), abs(b.value))
    if abs(delta) < max(relative, floor):
        what = f"{FLOOR * 100:g} % of the figure"
        if floor > relative and floor_words:
            what = floor_words
        return Judgement(WITHIN, f"under {what}: too small to matter")
    if a.n >= MIN_SAMPLES and b.n >= MIN_SAMPLES:
        means = a.statistic == b.statistic == "mean"
        test = "Welch's t-test" if means else "Mann–Whitney"
        p = welch_p(a.samples, b.samples) if means else mann_whitney_p(a.samples, b.samples)
        moved = max(drift(a.samples, a.statistic), drift(b.samples, b.statistic))
        if p >= ALPHA:
            how = f"{test} p = {p:.2g} over {a.n} and {b.n} samples (needs < {ALPHA:g})"
            return Judgement(WITHIN, how, p_value=p, drift=moved)
        if abs(delta) <= moved:
            how = (
                f"{test} p = {p:.2g}, but a run's {a.statistic} moves as much on its own "
                "(first half against second)"
            )
            return Judgement(WITHIN, how, p_value=p, drift=moved)
        how = (
            f"{test} p = {p:.2g} over {a.n} and {b.n} samples, and larger than either "
            "run's own drift"
        )
        return Judgement(BEYOND, how, p_value=p, drift=moved)
    spreads = [f.spread for f in (a, b) if f.spread is not None]
    if len(spreads) < 2:
        return Judgement(NOT_JUDGED, "one figure per run: no variation to judge against")
    noise = max(spreads)
    kinds = sorted({f.spread_kind for f in (a, b) if f.spread_kind})
    spread_words = " / ".join(kinds) or "spread"
    if abs(delta) > noise:
        return Judgement(BEYOND, f"larger than the runs' {spread_words}", noise=noise)
    return Judgement(WITHIN, f"not larger than the runs' {spread_words}", noise=noise)
