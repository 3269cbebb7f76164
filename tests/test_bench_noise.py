"""The probe bench says its noise: the spread of the rounds, a bootstrap interval of the pair
median (the headline), whether it holds zero; and every option of `bench/probe.py` has help."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from noise import median_ci_pct, paired_ratios, spread_pct, within_noise  # noqa: E402


def test_quiet_rounds_have_little_spread_and_a_noisy_one_more():
    quiet = [10.0, 10.1, 9.9, 10.0, 10.05, 9.95, 10.0, 10.02]
    assert spread_pct(quiet) < 0.5
    noisy = [10.0, 15.0, 9.0, 12.0, 10.5, 14.0, 9.5, 11.0]
    assert spread_pct(noisy) > 10
    assert spread_pct([10.0]) == 0.0


def test_a_noisy_overhead_s_interval_holds_zero_and_a_real_one_does_not():
    off = [10.0, 10.2, 9.8, 10.1, 9.9, 10.0, 10.3, 9.7, 10.0, 10.1]
    jitter = [0.05, -0.04, 0.03, -0.06, 0.02, -0.01, 0.04, -0.03, 0.01, -0.02]
    noisy_on = [a * (1 + j) for a, j in zip(off, jitter, strict=True)]
    median, low, high = median_ci_pct(paired_ratios(off, noisy_on))
    assert low < 0 < high and within_noise(low, high)
    real_on = [a * (1.03 + j / 10) for a, j in zip(off, jitter, strict=True)]
    median, low, high = median_ci_pct(paired_ratios(off, real_on))
    assert 2.5 < low <= median <= high < 3.5 and not within_noise(low, high)
    assert median_ci_pct(paired_ratios(off, real_on)) == (median, low, high)  # seeded


def test_every_option_of_the_probe_bench_has_help():
    tree = ast.parse((BENCH / "probe.py").read_text(encoding="utf-8"))
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "add_argument"
    ]
    names = [c.args[0].value for c in calls]
    assert {"--rounds", "--steps", "--calls", "--part"} <= set(names)
    missing = [
        name
        for name, c in zip(names, calls, strict=True)
        if not any(k.arg == "help" for k in c.keywords)
    ]
    assert not missing
