"""What the kernels did, 1/6 s at a time, and what 1 s counters make of it.

A job is a loop of steps; each step is a list of phases (`work`, `idle`, `comm`, ...) with a
duration. `timeline` lays the steps over the 60 s window and records, for every 1/6 s bin (the
finest busy sample NVML keeps), the share of the bin each phase filled. `observe` turns a
timeline and the activity of each phase into per-tick figures the way the counters report them:
GPM and NVLink as tick averages, NVML's busy time as the last sample period's share, PCIe as a
short window at the tick.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, fields

SPAN_S = 60  # the window: 60 ticks of 1 s, oldest first
BINS_PER_S = 6  # NVML's finest busy-time sample: 1/6 s
N_BINS = SPAN_S * BINS_PER_S
BIN_S = 1.0 / BINS_PER_S
OFF, IDLE = "off", "idle"  # the job not started yet; started but no kernel resident


@dataclass(frozen=True, slots=True)
class Activity:
    """What a GPU does during one phase: shares of the time (0-1) and interconnect rates."""

    busy: float = 0.0  # a kernel is resident: what NVML's utilization.gpu counts
    sm: float = 0.0  # SM active (at least one warp resident), averaged over SMs
    occupancy: float = 0.0  # resident warps / max warps
    tensor: float = 0.0  # any tensor pipe
    fp16: float = 0.0
    fp32: float = 0.0
    fp64: float = 0.0
    dram: float = 0.0  # share of peak DRAM bandwidth
    nvlink_kib_s: float = 0.0  # each direction
    pcie_tx_kb_s: float = 0.0  # sent by the GPU
    pcie_rx_kb_s: float = 0.0  # received by the GPU (host-to-device copies)


QUIET = Activity()
FIELDS = tuple(f.name for f in fields(Activity))

Segment = tuple[str, float]  # (phase, seconds)
StepFn = Callable[[int], list[Segment]]


def timeline(step: StepFn, offset: float = 0.0, start: float = 0.0, warmup_s: float = 0.0):
    """Per-bin share of each phase over the window: {phase: [N_BINS shares]}.

    The job exists from `start` (before it: `off`); its steps run from `start - offset` (a
    phase shift); during `warmup_s` after the start the non-idle phases fill a rising share of
    their time (compilation, cudnn autotuning, the allocator warming up).
    """
    shares: dict[str, list[float]] = {}

    def add(key: str, t0: float, t1: float) -> None:
        t0, t1 = max(t0, 0.0), min(t1, float(SPAN_S))
        if t1 <= t0:
            return
        arr = shares.get(key)
        if arr is None:
            arr = shares[key] = [0.0] * N_BINS
        b = int(t0 * BINS_PER_S)
        while t0 < t1 - 1e-9 and b < N_BINS:
            end = min((b + 1) * BIN_S, t1)
            arr[b] += (end - t0) * BINS_PER_S
            t0, b = end, b + 1

    add(OFF, 0.0, start)
    t, i = start - offset, 0
    while t < SPAN_S:
        for key, d in step(i):
            a = max(t, start)
            if t + d > a:
                if key != IDLE and a < start + warmup_s:
                    f = max(0.05, (a - start) / warmup_s)
                    add(key, a, a + (t + d - a) * f)
                    add(IDLE, a + (t + d - a) * f, t + d)
                else:
                    add(key, a, t + d)
            t += d
        i += 1
    return shares


def cyclic(rng: random.Random, period: float, phases: list[tuple[str, float]], jitter: float):
    """Steps of `period` seconds split into `phases` (fractions), period and split jittered."""

    def step(i: int) -> list[Segment]:
        p = period * math.exp(rng.gauss(0.0, jitter))
        w = [max(0.0, f * math.exp(rng.gauss(0.0, jitter * 0.7))) for _, f in phases]
        tot = sum(w) or 1.0
        return [(k, p * x / tot) for (k, _), x in zip(phases, w, strict=True)]

    return step


def bursts(rng: random.Random, step_s: float, n: int, stall_s: float, jitter: float):
    """`n` quick steps back to back (tiny launch gaps), then one long stall: a DataLoader whose
    workers deliver their batches together, or metric aggregation every n steps."""

    def step(i: int) -> list[Segment]:
        out: list[Segment] = []
        for _ in range(n):
            s = step_s * math.exp(rng.gauss(0.0, jitter * 0.5))
            out += [("work", s * 0.98), (IDLE, s * 0.02)]
        out.append((IDLE, stall_s * math.exp(rng.gauss(0.0, jitter))))
        return out

    return step


@dataclass(slots=True)
class Tick:
    """One GPU over one tick, before noise: tick means, the last 1/6 s, and the 1/6 s shares."""

    mean: dict[str, float]  # every Activity field, averaged over the tick
    last: dict[str, float]  # every Activity field over the tick's last 1/6 s
    busy_bins: tuple[float, ...]  # busy share of each 1/6 s bin (0-1)
    job_on: bool  # the job's process exists by the end of the tick


def observe(shares: dict[str, list[float]], acts: dict[str, Activity]) -> list[Tick]:
    """Per-tick figures of a timeline given each phase's activity (missing phases: QUIET)."""
    keys = list(shares)
    act = {k: acts.get(k, QUIET) for k in keys}
    out = []
    for k in range(SPAN_S):
        lo = k * BINS_PER_S
        mean_w = {key: sum(shares[key][lo : lo + BINS_PER_S]) / BINS_PER_S for key in keys}
        last_w = {key: shares[key][lo + BINS_PER_S - 1] for key in keys}
        mean = {f: sum(w * getattr(act[key], f) for key, w in mean_w.items()) for f in FIELDS}
        last = {f: sum(w * getattr(act[key], f) for key, w in last_w.items()) for f in FIELDS}
        bins = tuple(
            sum(shares[key][b] * act[key].busy for key in keys) for b in range(lo, lo + BINS_PER_S)
        )
        off = shares.get(OFF)
        job_on = off is None or off[lo + BINS_PER_S - 1] < 0.5
        out.append(Tick(mean, last, bins, job_on))
    return out
