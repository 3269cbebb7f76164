"""Statistics over a series with gaps (`None` where a sample gave nothing): what the classifier,
the job's figures, the report and the fleet all compute, one definition each."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def present(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def median(values: Sequence[float | None]) -> float | None:
    v = present(values)
    return statistics.median(v) if v else None


def percentile(values: Sequence[float | None], q: float) -> float | None:
    """The q-th percentile (0-100), nearest-rank on the present values."""
    v = sorted(present(values))
    if not v:
        return None
    k = max(0, min(len(v) - 1, round(q / 100.0 * (len(v) - 1))))
    return v[k]


def slope_per_s(times: Sequence[float], values: Sequence[float | None]) -> float | None:
    """Least-squares slope of values over times (units per second); None under 3 points."""
    pts = [(t, v) for t, v in zip(times, values, strict=False) if v is not None]
    if len(pts) < 3:
        return None
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    den = sum((t - mt) ** 2 for t, _ in pts)
    if den == 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in pts) / den
