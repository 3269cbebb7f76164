"""The checks every command makes on its time options: a clear usage error, never a traceback."""

from __future__ import annotations

import math

# Ours: a simulated run advances its clock instantly, one tick per interval; past a day of
# simulated time it only burns CPU.
MAX_SIMULATED_S = 24 * 3600.0


def time_problem(seconds: float | None, interval: float) -> str | None:
    """Why --seconds or --interval cannot be used, or None."""
    if not math.isfinite(interval) or interval <= 0:
        return f"--interval must be a positive number of seconds, not {interval:g}"
    if seconds is not None and (not math.isfinite(seconds) or seconds <= 0):
        return f"--seconds must be a positive number of seconds, not {seconds:g}"
    return None


def capped(seconds: float | None, simulated: bool) -> tuple[float | None, str | None]:
    """(seconds to run, a note when they were cut): a simulated run stops at a day."""
    if simulated and seconds is not None and seconds > MAX_SIMULATED_S:
        return MAX_SIMULATED_S, (
            f"--seconds {seconds:g} under --demo is capped at {MAX_SIMULATED_S:g} s of "
            "simulated time"
        )
    return seconds, None
