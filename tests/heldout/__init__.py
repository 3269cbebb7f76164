"""Held-out cases: a second, independent generator of labelled windows for measuring accuracy.

`generate(seed)` builds one `Case`: 60 snapshots (1 s ticks, oldest first) of a machine whose
label holds by construction. It shares nothing with the scenario simulator (`sim/scenarios.py`
and friends): it builds `Snapshot` objects straight from the model's dataclasses, from a
fine-grained busy timeline of each GPU (1/6 s bins), kernel activity per phase, the host's
processes and threads, and overlays (faults, OOM kills, other users, Slurm).

Seeds 0-599 are for tuning; seeds from 1000 are held out and never looked at while tuning.
A family of cases added later is drawn on seeds of its own, so the mix and its seeds stay
what they were: seeds 10000-10099 tune and 11000-11099 hold out the launch-bound family
(synchronization, launch-bound). The label contract is written out in docs/accuracy.md.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from gputop_diag.model import Snapshot

from . import overlays
from .assemble import snapshots
from .classes import FAMILIES, RECIPES, WEIGHTS
from .plan import finish_name

__all__ = [
    "BASE_CLASSES",
    "FAMILY_SEEDS",
    "HELDOUT_SEEDS",
    "LAUNCH_HELDOUT_SEEDS",
    "LAUNCH_TUNING_SEEDS",
    "TUNING_SEEDS",
    "Case",
    "cases",
    "generate",
]

TUNING_SEEDS = range(0, 600)  # thresholds may be set on these; never on HELDOUT_SEEDS
HELDOUT_SEEDS = range(1000, 1600)
# The launch-bound family: tuning 10000-10099, held out 11000-11099 (never tuned on).
LAUNCH_TUNING_SEEDS = range(10_000, 10_100)
LAUNCH_HELDOUT_SEEDS = range(11_000, 11_100)
FAMILY_SEEDS = {"launch_bound": range(10_000, 12_000)}
# The ten classes drawn with equal weight; insufficient_data (every GPU lost, no driver) is rarer.
BASE_CLASSES = tuple(c for c in RECIPES if c != "insufficient_data")


@dataclass(frozen=True)
class Case:
    """One labelled window. `accept` holds every acceptable primary (usually just `label`);
    `secondary` is set only where a second unit is clearly near its roof too."""

    seed: int
    name: str
    label: str
    accept: frozenset[str]
    secondary: str | None
    expect_fault: bool
    expect_alert: str | None
    window: tuple[Snapshot, ...]
    params: dict = field(default_factory=dict, compare=False)


def generate(seed: int) -> Case:
    rng = random.Random(seed)
    family = next((name for name, seeds in FAMILY_SEEDS.items() if seed in seeds), None)
    if family is not None:
        plan = FAMILIES[family](rng)
    else:
        names = list(RECIPES)
        label = rng.choices(names, [WEIGHTS[n] for n in names])[0]
        plan = RECIPES[label](rng)
    s0 = rng.randrange(0, 5)
    slow_ticks = list(range(s0 - 5, 60, 5))  # Slurm and the kernel log are read every 5 s
    overlays.apply(plan, slow_ticks)
    finish_name(plan)
    t0 = 1_700_000_000.0 + rng.randrange(0, 30_000_000)
    window = snapshots(plan, t0, slow_ticks)
    return Case(
        seed=seed,
        name=" ".join(plan.name_bits),
        label=plan.label,
        accept=frozenset(plan.accept or {plan.label}),
        secondary=plan.secondary,
        expect_fault=plan.expect_fault,
        expect_alert=plan.expect_alert,
        window=window,
        params=dict(plan.params),
    )


def cases(seeds: Iterable[int]) -> Iterator[Case]:
    for seed in seeds:
        yield generate(seed)
