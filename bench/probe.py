"""What the probe costs a training job: the same CPU loop with and without it, in one run.

    python bench/probe.py [--rounds N] [--steps S] [--calls C]
                          [--ddp-runs R] [--ddp-steps D] [--ddp-warm W] [--part all|loop|ddp]

The loop is a real training step on the CPU, one thread: a batch from a DataLoader
(num_workers=0), an MLP's forward and backward, AdamW, and `loss.item()`, sized to about 10 ms.
It runs in rounds, without and with the probe alternately (`gputop_diag.probe._start` and
`_stop`, which put every hook in and take it out again), so a load that comes and goes on the
machine touches both alike; the figures are the medians of the rounds' mean step times. Each
round begins with a few untimed steps (the probe's start happens once in a job, not per round).

Printed: the step time without and with the probe (median and fastest round, with the noise:
half the rounds' interquartile range over their median), the overhead in percent three ways,
each with its noise; the headline is the median of the pairs (each round with the probe against
the round without it beside it, so a load that comes and goes touches both) with its 95 %
bootstrap interval, and whether that interval holds zero (`bench/noise.py`; target: at most 1 %
of a 10 ms step), the probe's own time per step (its optimizer post-hook, which hands
the step's figures to the writer's thread), the writer thread's time per step (it makes the
JSON lines and writes them, every half second, off the step's thread), and the cost of one
wrapped `Tensor.item()` on a CPU scalar (target: at most 2 us), from a tight loop of C calls,
best of 5. The loop's rounds run with the probe's default sampling (one step a minute, the
first at step 3, inside the untimed steps); then a sampled step's own cost: every other step
sampled, the sampled steps' median against the others' (the probe's step records), and what one
a minute adds.

Then a distributed job, the 4-rank gloo DDP loop of examples/ranks.py at 10 ms steps (the
model's compute is a sleep, so four ranks on two cores keep their timing), launched R times
without and R times with the probe, alternately (off, on, on, off, off, on, ...: a drift touches
both alike), each run the same command:

    OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 4 examples/ranks.py \\
        --step-ms 10 --steps D --times FILE

with the probe on: the environment of `gputop_diag.probe.launch.probe_environment` (as
`watch --probe` gives it: every rank probed, DDP's all-reduce timed through its communication
hook), its files in a temporary XDG_RUNTIME_DIR; off: the plain environment. Both are measured by
the job's own clock: rank 0 writes each step's end to FILE (`--times`); the first W steps (gloo's
connections, DDP's first buckets, the probe's first records) are dropped and a run's figure is
the median of its other steps' times. Printed: each run's median step, the median of the runs
off and on, the overhead in percent (medians, and each "on" run against the "off" run next to
it), its noise (how far apart the "off" runs are, and the "on" runs; an overhead within the
noise is not measured), and, from the probe's own step records of rank 0, the median step and
DDP communication the probe saw (a cross-check of the clock). Target: at most 1 % of a 10 ms
step. `--part loop` or `--part ddp` runs one half only.

The probe writes its files into a temporary XDG_RUNTIME_DIR, removed at the end. Figures only:
nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import gputop_diag.probe as probe  # noqa: E402
from gputop_diag.probe.launch import probe_environment  # noqa: E402
from gputop_diag.probe.sample import SAMPLE_EVERY_S, SAMPLE_VARIABLE  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from noise import median_ci_pct, paired_ratios, spread_pct, within_noise  # noqa: E402

WARM_STEPS = 5
ROOT = Path(__file__).resolve().parent.parent
RANKS = 4
DDP_STEP_MS = 10


def build(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(seed)
    features, hidden = 256, 768
    data = TensorDataset(torch.randn(64 * 64, features), torch.randn(64 * 64, 1))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    model = nn.Sequential(
        nn.Linear(features, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 1),
    )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4), loader


def run_steps(model: nn.Module, optimizer, loader: DataLoader, steps: int) -> float:  # noqa: ANN001
    """Mean seconds per step over `steps` steps."""
    done = 0
    t0 = time.perf_counter()
    while done < steps:
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss.item()
            done += 1
            if done == steps:
                break
    return (time.perf_counter() - t0) / steps


def ns_per_item(calls: int) -> float:
    scalar = torch.tensor(1.5)
    item = scalar.item
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            item()
        best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best


class HookTimer:
    """Time spent in the probe's optimizer post-hook (its per-step work)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.flush_s = 0.0

    def wrap_flush(self, flush):  # noqa: ANN001, ANN201
        """The writer thread's flushes (the last one, at the probe's end, is once a job)."""
        main = threading.get_ident()

        def timed(*args):  # noqa: ANN002, ANN202
            t0 = time.thread_time()  # its CPU time: waiting for the GIL is not its cost
            flush(*args)
            if threading.get_ident() != main:
                self.flush_s += time.thread_time() - t0

        return timed

    def wrap(self, on_step):  # noqa: ANN001, ANN201
        def timed(optimizer):  # noqa: ANN001, ANN202
            t0 = time.perf_counter()
            on_step(optimizer)
            self.seconds.append(time.perf_counter() - t0)

        return timed


def torchrun() -> list[str]:
    """torchrun, the one beside this Python (else its module, which is the same program)."""
    beside = Path(sys.executable).parent / "torchrun"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("torchrun")
    return [found] if found else [sys.executable, "-m", "torch.distributed.run"]


def ddp_run(probed: bool, steps: int, warm: int, scratch: Path, index: int) -> dict:
    """One launch of the 4-rank DDP job: rank 0's step times (seconds, warm-up dropped) and, when
    probed, the step records of the probe's file of rank 0."""
    times = scratch / f"times-{index}.txt"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runtime = None
    if probed:
        runtime = scratch / f"runtime-{index}"
        runtime.mkdir(mode=0o700)
        env = probe_environment(dict(env, XDG_RUNTIME_DIR=str(runtime)))
    command = torchrun() + [
        "--standalone",
        f"--nproc-per-node={RANKS}",
        str(ROOT / "examples" / "ranks.py"),
        f"--step-ms={DDP_STEP_MS}",
        f"--steps={steps}",
        f"--times={times}",
    ]
    done = subprocess.run(
        command,
        env=env,
        cwd=scratch,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120 + steps * 0.5,
    )
    if done.returncode != 0 or not times.exists():
        sys.exit(f"bench: the DDP job failed ({done.returncode}):\n{done.stderr[-3000:]}")
    ends = [float(line) for line in times.read_text().split()]
    step_s = [b - a for a, b in zip(ends[:-1], ends[1:], strict=True)][warm:]
    records = []
    if runtime is not None:
        for path in (runtime / "gputop-diag").glob("probe-*.jsonl"):
            lines = [json.loads(line) for line in path.read_text().splitlines() if line]
            if any(r.get("kind") == "hello" and r.get("rank") == 0 for r in lines):
                records = [r for r in lines if r.get("kind") == "step"]
    return {"step_s": step_s, "records": [r for r in records if r.get("step", 0) > warm]}


def ddp_bench(runs: int, steps: int, warm: int) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-probe-ddp-"))
    try:
        order = [probed for i in range(runs) for probed in ((False, True), (True, False))[i % 2]]
        results: list[tuple[bool, dict]] = []
        for index, probed in enumerate(order):
            results.append((probed, ddp_run(probed, steps, warm, scratch, index)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = [(probed, statistics.median(r["step_s"])) for probed, r in results]
    off = [m for probed, m in medians if not probed]
    on = [m for probed, m in medians if probed]
    # each "on" run against the "off" run next to it (the order pairs them: off on, on off, ...)
    pairs = [
        (a if a_probed else b) / (b if a_probed else a)
        for (a_probed, a), (_, b) in zip(medians[::2], medians[1::2], strict=True)
    ]
    off_m, on_m = statistics.median(off), statistics.median(on)

    def spread(figures: list[float]) -> float:
        return 100 * (max(figures) - min(figures)) / statistics.median(figures)

    print()
    print(
        f"DDP, {RANKS} ranks (gloo, CPU), {DDP_STEP_MS} ms steps: {runs} runs off and {runs} on, "
        f"{steps} steps each, the first {warm} dropped (rank 0's clock, --times)"
    )
    for index, (probed, r) in enumerate(results):
        step_s, name = r["step_s"], "on " if probed else "off"
        print(
            f"  run {index + 1} {name}  median {statistics.median(step_s) * 1e3:7.3f} ms, "
            f"mean {statistics.fmean(step_s) * 1e3:7.3f} ms, p90 "
            f"{statistics.quantiles(step_s, n=10)[-1] * 1e3:7.3f} ms ({len(step_s)} steps)"
        )
    print(f"step time without the probe   {off_m * 1e3:8.3f} ms (median of runs)")
    print(f"step time with the probe      {on_m * 1e3:8.3f} ms (median of runs)")
    print(f"overhead, medians             {100 * (on_m / off_m - 1):+8.2f} %")
    print(
        f"overhead, median of pairs     {100 * (statistics.median(pairs) - 1):+8.2f} %  "
        f"(pairs: {', '.join(f'{100 * (p - 1):+.2f}' for p in pairs)})"
    )
    print(
        f"noise: runs off differ by     {spread(off):8.2f} %, runs on by {spread(on):.2f} % "
        "(max - min over median)"
    )
    records = [rec for probed, r in results if probed for rec in r["records"]]
    walls = [rec["wall_s"] for rec in records if rec.get("wall_s") is not None]
    comm = [rec["t_comm_s"] for rec in records if rec.get("t_comm_s") is not None]
    exposed = [
        rec["t_comm_exposed_s"] for rec in records if rec.get("t_comm_exposed_s") is not None
    ]
    if walls:
        print(
            f"probe's own records (rank 0)  {statistics.median(walls) * 1e3:8.3f} ms step, "
            f"DDP comm {statistics.median(comm) * 1e3 if comm else float('nan'):.3f} ms "
            f"(exposed {statistics.median(exposed) * 1e3 if exposed else float('nan'):.3f} ms), "
            f"medians of {len(walls)} steps"
        )
    else:
        print("probe's own records (rank 0)  none found")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds",
        type=int,
        default=16,
        help="loop rounds, each without then with the probe (default 16; more narrows the "
        "noise figures)",
    )
    parser.add_argument(
        "--steps", type=int, default=50, help="timed steps per round (default 50, ~10 ms each)"
    )
    parser.add_argument(
        "--calls",
        type=int,
        default=200_000,
        help="Tensor.item() calls per timing of the wrapped call (default 200000, best of 5)",
    )
    parser.add_argument("--ddp-runs", type=int, default=2, help="DDP runs off, and as many on")
    parser.add_argument("--ddp-steps", type=int, default=450, help="steps per DDP run")
    parser.add_argument("--ddp-warm", type=int, default=50, help="first steps dropped")
    parser.add_argument(
        "--part",
        choices=("all", "loop", "ddp"),
        default="all",
        help="the CPU loop, the DDP job, or both (default)",
    )
    args = parser.parse_args()
    if args.part != "ddp":
        loop_bench(args)
    if args.part != "loop":
        ddp_bench(args.ddp_runs, args.ddp_steps, args.ddp_warm)


def loop_bench(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)

    runtime = tempfile.TemporaryDirectory(prefix="bench-probe-")
    os.environ["XDG_RUNTIME_DIR"] = runtime.name
    model, optimizer, loader = build()
    run_steps(model, optimizer, loader, 20)  # warm-up: allocator, AdamW state, lazy imports

    without, with_probe = [], []
    timer = HookTimer()
    for _ in range(args.rounds):
        run_steps(model, optimizer, loader, WARM_STEPS)
        without.append(run_steps(model, optimizer, loader, args.steps))
        started = probe._start(by_hand=True)
        # its start (once in a job: the hooks, the first step's model record) is not timed
        run_steps(model, optimizer, loader, WARM_STEPS)
        started.hooks.on_step = timer.wrap(started.hooks.on_step)
        writer = started.file
        writer.flush = timer.wrap_flush(writer.flush)
        with_probe.append(run_steps(model, optimizer, loader, args.steps))
        probe._stop()

    item_plain = ns_per_item(args.calls)
    probe._start(by_hand=True)
    item_probed = ns_per_item(args.calls)
    probe._stop()
    runtime.cleanup()

    off, on = statistics.median(without), statistics.median(with_probe)
    paired, low, high = median_ci_pct(paired_ratios(without, with_probe))
    noise_off, noise_on = spread_pct(without), spread_pct(with_probe)
    fastest_off, fastest_on = min(without), min(with_probe)
    hook_median = statistics.median(timer.seconds)
    hook_mean = statistics.fmean(timer.seconds)
    print(f"torch {torch.__version__}, 1 thread, {args.rounds} rounds of {args.steps} steps")
    print(
        f"step time without the probe   {off * 1e3:8.3f} ms median, {fastest_off * 1e3:.3f} min, "
        f"noise ±{noise_off:.1f} % (the rounds' half interquartile range)"
    )
    print(
        f"step time with the probe      {on * 1e3:8.3f} ms median, {fastest_on * 1e3:.3f} min, "
        f"noise ±{noise_on:.1f} %"
    )
    print(
        f"overhead, medians             {100 * (on / off - 1):+8.2f} %  "
        f"(noise ±{max(noise_off, noise_on):.1f} %: two medians of noisy rounds)"
    )
    print(
        f"overhead, fastest rounds      {100 * (fastest_on / fastest_off - 1):+8.2f} %  "
        f"(one round each: no better than the noise ±{noise_off:.1f} %)"
    )
    print(
        f"overhead, median of pairs     {paired:+8.2f} %  HEADLINE: each round against its "
        f"pair, 95 % CI {low:+.2f} to {high:+.2f} % (bootstrap of {len(without)} pairs)"
    )
    verdict = (
        "within the noise: no overhead measured"
        if within_noise(low, high)
        else f"above the noise: at least {low:+.2f} %"
        if low > 0
        else "below zero beyond the noise: a drift between the rounds, not the probe"
    )
    print(f"headline                      {verdict}")
    print(
        f"probe's post-step hook        {hook_median * 1e6:8.1f} us median, "
        f"{hook_mean * 1e6:.1f} us mean ({100 * hook_median / off:.2f} % of a step)"
    )
    flush_us = 1e6 * timer.flush_s / max(len(timer.seconds), 1)
    print(
        f"writer thread per step        {flush_us:8.1f} us CPU (JSON and file, off the step's "
        f"thread: {100 * flush_us / (off * 1e6):.2f} % of a step)"
    )
    print(f"Tensor.item() without         {item_plain:8.0f} ns")
    print(f"Tensor.item() wrapped         {item_probed:8.0f} ns")
    print(f"per wrapped .item()           {item_probed - item_plain:+8.0f} ns")
    sampled_bench(args)


def sampled_bench(args: argparse.Namespace) -> None:
    """The cost of a sampled step (probe/sample.py): every other step sampled, the sampled
    steps' time against the others' (the probe's own step records), and what one sampled step
    a minute (the default) adds to a minute of steps."""
    runtime = tempfile.TemporaryDirectory(prefix="bench-probe-")
    os.environ["XDG_RUNTIME_DIR"] = runtime.name
    os.environ[SAMPLE_VARIABLE] = "1e-9"  # every other step
    model, optimizer, loader = build()
    started = probe._start(by_hand=True)
    run_steps(model, optimizer, loader, args.steps)
    path = started.file.path
    probe._stop()
    del os.environ[SAMPLE_VARIABLE]
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    runtime.cleanup()
    steps = [r for r in records if r["kind"] == "step" and r["step"] > WARM_STEPS]
    on = statistics.median(r["wall_s"] for r in steps if r.get("sampled"))
    off = statistics.median(r["wall_s"] for r in steps if not r.get("sampled"))
    extra = on - off
    print(
        f"sampled step                  {on * 1e3:8.3f} ms median against {off * 1e3:.3f} ms "
        f"({on / off:.1f} x); one a minute ({SAMPLE_EVERY_S:.0f} s) adds "
        f"{100 * extra / SAMPLE_EVERY_S:.3f} % (GPUTOP_DIAG_PROBE_SAMPLE_S=0: none)"
    )


if __name__ == "__main__":
    main()
