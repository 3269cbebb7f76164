"""How often the classifier names the class a held-out case was built to show.

    python bench/accuracy.py [--seeds 1000-1599] [--tuning] [--verbose]

Generates the cases (`tests/heldout`, an independent generator labelled by
construction), runs `judge(window)` on each and prints the confusion matrix (rows: label,
columns: the primary named), the accuracy (primary among the acceptable answers), secondary
accuracy where a case expects one, fault and alert recall, every miss, and the classifier's
time per call, then the launch-bound family's figure on its own seeds (held out 11000-11099,
tuning 10000-10099 under `--tuning`). `--tuning` runs the tuning seeds 0-599 instead of the
held-out ones. Always exits
0: it is a report, not a test (tests/test_heldout.py holds the bar).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the held-out generator

from heldout import (  # noqa: E402
    HELDOUT_SEEDS,
    LAUNCH_HELDOUT_SEEDS,
    LAUNCH_TUNING_SEEDS,
    TUNING_SEEDS,
    cases,
)

from gputop_diag.diagnose.classify import (
    classify,
    judge,  # noqa: E402
)
from gputop_diag.diagnose.types import ALL_PRIMARY

ABBREV = {
    "capacity": "cap",
    "bandwidth": "bw",
    "compute": "comp",
    "input_pipeline": "input",
    "synchronization": "sync",
    "communication": "comm",
    "scheduler": "sched",
    "idle": "idle",
    "balanced": "bal",
    "undetermined": "undet",
    "insufficient_data": "nodata",
}


def parse_seeds(text: str) -> range:
    lo, _, hi = text.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def evaluate(seeds) -> dict:
    """Run the classifier on every case; the figures the report prints."""
    rows = []
    gen_s = judge_s = 0.0
    for seed in seeds:
        t = time.perf_counter()
        case = next(cases([seed]))
        t1 = time.perf_counter()
        d = judge(case.window)
        t2 = time.perf_counter()
        gen_s += t1 - t
        judge_s += t2 - t1
        rows.append((case, d, t2 - t1))
    return dict(rows=rows, gen_s=gen_s, judge_s=judge_s)


def _fault_kinds(d) -> bool:
    return bool(d.faults)


def report(result: dict, verbose: bool = False, out=print) -> float:
    rows = result["rows"]
    n = len(rows)
    labels = [c for c in ALL_PRIMARY if any(case.label == c for case, _, _ in rows)]
    cols = [c for c in ALL_PRIMARY if any(d.primary == c for _, d, _ in rows)] + [
        c for c in {d.primary for _, d, _ in rows} if c not in ALL_PRIMARY
    ]
    cells = Counter((case.label, d.primary) for case, d, _ in rows)
    ok = [case for case, d, _ in rows if d.primary in case.accept]
    out(f"{n} cases ({result['gen_s'] / max(1, n) * 1000:.1f} ms to generate, "
        f"{result['judge_s'] / max(1, n) * 1000:.1f} ms to judge, per case)")  # fmt: skip
    out("")
    out("confusion (rows: label, columns: primary)")
    width = max(len(ABBREV.get(c, c)) for c in cols + labels) + 1
    out(" " * 8 + "".join(f"{ABBREV.get(c, c):>{width}}" for c in cols) + f"{'n':>5}{'acc':>6}")
    for lab in labels:
        total = sum(cells[(lab, c)] for c in cols)
        good = sum(1 for case, d, _ in rows if case.label == lab and d.primary in case.accept)
        line = "".join(f"{cells[(lab, c)] or '.':>{width}}" for c in cols)
        out(f"{ABBREV.get(lab, lab):<8}{line}{total:>5}{good / max(1, total):>6.0%}")
    out("")
    acc = len(ok) / max(1, n)
    out(f"accuracy (primary acceptable): {len(ok)}/{n} = {acc:.1%}")
    sec = [(case, d) for case, d, _ in rows if case.secondary is not None]
    sec_ok = sum(1 for case, d in sec if d.secondary == case.secondary)
    if sec:
        out(f"secondary where expected:      {sec_ok}/{len(sec)} = {sec_ok / len(sec):.1%}")
    faults = [(case, d) for case, d, _ in rows if case.expect_fault]
    hit = sum(1 for case, d in faults if _fault_kinds(d))
    false = sum(1 for case, d, _ in rows if not case.expect_fault and d.faults)
    if faults:
        out(f"fault recall:                  {hit}/{len(faults)} = {hit / len(faults):.1%}"
            f"  (faults named where none was built: {false})")  # fmt: skip
    alerts = [(case, d) for case, d, _ in rows if case.expect_alert]
    a_hit = sum(1 for case, d in alerts if any(a.kind == case.expect_alert for a in d.alerts))
    if alerts:
        out(f"alert recall:                  {a_hit}/{len(alerts)} = {a_hit / len(alerts):.1%}")
    out("")
    misses = [(case, d) for case, d, _ in rows if d.primary not in case.accept]
    out(f"misses ({len(misses)}):")
    for case, d in misses:
        first = d.evidence[0].text if d.evidence else "(no evidence)"
        out(f"  {case.seed:>5} {case.name}")
        out(f"        {case.label} -> {d.primary}: {first}")
        if verbose:
            for e in d.evidence[1:]:
                out(f"        | {e.text}")
            if d.missing_evidence:
                out(f"        missing: {', '.join(d.missing_evidence)}")
    if verbose:
        wrong_sec = [(case, d) for case, d in sec if d.secondary != case.secondary]
        out(f"secondary misses ({len(wrong_sec)}):")
        for case, d in wrong_sec:
            out(f"  {case.seed:>5} {case.name}: {case.secondary} expected, got {d.secondary}")
        lost_f = [case for case, d in faults if not d.faults]
        out(f"faults missed ({len(lost_f)}): " + ", ".join(str(c.seed) for c in lost_f))
    return acc


def timing(rows, out=print) -> None:
    """The classifier's cost on 8-GPU windows: one judge(), and one tick of classify().

    Ticks are timed in CPU time (`time.process_time`), so other work on the machine does not
    inflate them: 10 ticks on the window of every 8-GPU case, the median and p95 over cases.
    """
    eight = [(case, t) for case, _, t in rows if case.params.get("gpus") == 8]
    if not eight:
        out("no 8-GPU cases in these seeds: no timing")
        return
    per = sorted(t * 1000 for _, t in eight)
    out(f"judge() on 8-GPU, 60-snapshot windows (wall): mean {statistics.fmean(per):.2f} ms, "
        f"p95 {_p95(per):.2f} ms ({len(per)} cases)")  # fmt: skip
    reps, ticks = 10, []
    for case, _ in eight:
        window = list(case.window)
        prev = judge(window)
        t = time.process_time()
        for _ in range(reps):
            prev = classify(window, prev)
        ticks.append((time.process_time() - t) / reps * 1000)
    ticks.sort()
    out(f"classify(window, previous) per tick, 8 GPUs, 60-snapshot window (CPU): median "
        f"{statistics.median(ticks):.2f} ms, p95 {_p95(ticks):.2f} ms, max {ticks[-1]:.2f} ms "
        f"({len(ticks)} windows x {reps} ticks)")  # fmt: skip


def _p95(values: list[float]) -> float:
    return values[min(len(values) - 1, int(0.95 * len(values)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=parse_seeds, default=None, help="e.g. 1000-1599")
    ap.add_argument("--tuning", action="store_true", help="the tuning seeds 0-599")
    ap.add_argument("--verbose", action="store_true", help="every evidence line of each miss")
    args = ap.parse_args(argv)
    seeds = args.seeds or (TUNING_SEEDS if args.tuning else HELDOUT_SEEDS)
    result = evaluate(seeds)
    report(result, args.verbose)
    print("")
    timing(result["rows"])
    if args.seeds is None:
        family(LAUNCH_TUNING_SEEDS if args.tuning else LAUNCH_HELDOUT_SEEDS)
    return 0


def family(seeds: range, out=print) -> None:
    """The launch-bound family (synchronization, finding launch_bound), drawn on its own seeds
    so that the mix above keeps its seeds: the primary and the finding named."""
    rows = evaluate(seeds)["rows"]
    ok = [case for case, d, _ in rows if d.primary in case.accept]
    found = [case for case, d, _ in rows if d.finding == "launch_bound"]
    out("")
    out(f"launch-bound family, seeds {seeds.start}-{seeds.stop - 1}: primary {len(ok)}/"
        f"{len(rows)} = {len(ok) / max(1, len(rows)):.1%}, named launch-bound {len(found)}/"
        f"{len(rows)}")  # fmt: skip
    for case, d, _ in rows:
        if d.primary not in case.accept:
            first = d.evidence[0].text if d.evidence else "(no evidence)"
            out(f"  {case.seed:>5} {case.name}")
            out(f"        {case.label} -> {d.primary}: {first}")


if __name__ == "__main__":
    sys.exit(main())
