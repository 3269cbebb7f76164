"""What the probe costs a training job: the same CPU loop with and without it, in one run.

    python bench/probe.py [--rounds N] [--steps S] [--calls C]

The loop is a real training step on the CPU, one thread: a batch from a DataLoader
(num_workers=0), an MLP's forward and backward, AdamW, and `loss.item()`, sized to about 10 ms.
It runs in rounds, without and with the probe alternately (`gputop_diag.probe._start` and
`_stop`, which put every hook in and take it out again), so a load that comes and goes on the
machine touches both alike; the figures are the medians of the rounds' mean step times. Each
round begins with a few untimed steps (the probe's start happens once in a job, not per round).

Printed: the step time without and with the probe (median and fastest round), the overhead in
percent three ways (target: at most 1 % of a 10 ms step; on a shared machine the fastest rounds
are the least disturbed), the probe's own time per step (its optimizer post-hook, which hands
the step's figures to the writer's thread), the writer thread's time per step (it makes the
JSON lines and writes them, every half second, off the step's thread), and the cost of one
wrapped `Tensor.item()` on a CPU scalar (target: at most 2 us), from a tight loop of C calls,
best of 5.

The probe writes its file into a temporary XDG_RUNTIME_DIR, removed at the end. Figures only:
nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
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

WARM_STEPS = 5


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
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
    paired = statistics.median(b / a - 1 for a, b in zip(without, with_probe, strict=True))
    fastest_off, fastest_on = min(without), min(with_probe)
    hook_median = statistics.median(timer.seconds)
    hook_mean = statistics.fmean(timer.seconds)
    print(f"torch {torch.__version__}, 1 thread, {args.rounds} rounds of {args.steps} steps")
    print(f"step time without the probe   {off * 1e3:8.3f} ms median, {fastest_off * 1e3:.3f} min")
    print(f"step time with the probe      {on * 1e3:8.3f} ms median, {fastest_on * 1e3:.3f} min")
    print(f"overhead, medians             {100 * (on / off - 1):+8.2f} %")
    print(f"overhead, fastest rounds      {100 * (fastest_on / fastest_off - 1):+8.2f} %")
    print(f"overhead, median of pairs     {100 * paired:+8.2f} %  (each round against its pair)")
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


if __name__ == "__main__":
    main()
