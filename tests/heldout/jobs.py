"""The shapes jobs share across recipes: busy kernels, waiting jobs, ramps, subsets, MIG.

Each helper fills part of a `Plan`: what the GPUs run (timelines, kernel activity), the job's
processes and their CPU, and its memory. The recipes in `classes.py` combine them.
"""

from __future__ import annotations

from . import kernels
from .plan import (
    Plan,
    add_job,
    job_memory,
    log_uniform,
    regular,
    set_timelines,
)
from .timeline import bursts, cyclic


def idle_gpus(plan: Plan) -> None:
    set_timelines(plan, lambda: cyclic(plan.rng, 5.0, [("idle", 1.0)], 0.0), in_step=True)


def ramp(plan: Plan, p: float = 0.3) -> tuple[float, float, float]:
    """Some jobs start inside the window: (start, model-load seconds, warm-up seconds)."""
    rng = plan.rng
    if rng.random() >= p:
        return 0.0, 0.0, 0.0
    # at most 24 s: the last 36 s of the window show the class
    start = rng.choice((0.0, rng.uniform(0.0, 4.0)))
    load, warm = rng.uniform(3.0, 16.0), rng.uniform(0.0, 4.0)  # loading shards: a slow rise
    plan.note("ramp", ramp_start_s=round(start, 1), ramp_load_s=round(load, 1))
    return start, load, warm


def in_step(plan: Plan) -> bool:
    return plan.layout != "independent"


def subset(plan: Plan, p: float = 0.12) -> None:
    """Some jobs use only some of the machine's GPUs; the others sit idle and empty."""
    rng = plan.rng
    if plan.n_gpus < 2 or plan.reading.mig or rng.random() >= p:
        return
    k = rng.randint(1, plan.n_gpus - 1)
    plan.job_gpus = sorted(rng.sample(range(plan.n_gpus), k))
    if len(plan.job_gpus) == 1:
        plan.layout = "single"
    plan.note(f"job-on={len(plan.job_gpus)}/{plan.n_gpus}", job_gpus=plan.job_gpus)


def host_noise(plan: Plan, p: float = 0.1) -> None:
    """Checkpoint writes and the like: some iowait, well short of a storage stall."""
    if plan.rng.random() < p:
        plan.host.base_iowait = plan.rng.uniform(3.0, 9.0)
        plan.note("some-iowait", base_iowait=round(plan.host.base_iowait, 1))


def mig_layout(plan: Plan) -> None:
    total = plan.model.memory_mib
    k = plan.rng.choice((7, 3, 2))  # instances: 1g, 2g or 3g slices
    size = int(total / {7: 8, 3: 4, 2: 2}[k]) - 128
    name = f"{ {7: 1, 3: 2, 2: 3}[k] }g.{round(size / 1024)}gb"
    plan.mig = [
        [(name, size, plan.rng.uniform(12, 40)) for _ in range(k)] for _ in range(plan.n_gpus)
    ]


# -- the GPU's own work ----------------------------------------------------------------------


def kernel_job(
    plan: Plan,
    kind: str,
    *,
    duty=(0.955, 0.995),
    main_cpu=(20.0, 70.0),
    loader_cpu=(5.0, 45.0),
    visibility="full",
    mem=(0.1, 0.9),
) -> None:
    """A job whose GPUs stay busy: kernels of `kind`, launch gaps of a few percent."""
    rng = plan.rng
    ddp = plan.layout == "ddp" and rng.random() < 0.6
    if kind == "mixed":
        plan.acts["work"] = kernels.mixed(rng, plan.model, plan.label)
    else:
        for _ in range(20):
            plan.acts["work"] = kernels.work(rng, plan.model, kind, overlap_comm=ddp)
            if plan.label not in ("compute", "bandwidth"):
                break
            leads, _ = kernels.nearer_roof(plan.acts["work"])
            if leads == {plan.label}:
                break
    period, d = log_uniform(rng, 0.1, 10.0), rng.uniform(*duty)
    pause = None
    if rng.random() < 0.15:  # a checkpoint or eval pause, under 5 % of the time
        secs = rng.uniform(0.5, 2.0)
        every = max(1, int(secs / 0.04 / period) + 1)
        pause = (every, secs)
        plan.note(f"pause={secs:.1f}s/{every * period:.0f}s", pause_s=round(secs, 2))
    start, load, warm = ramp(plan)
    set_timelines(
        plan,
        regular(plan, period, d, 0.08, pause=pause),
        in_step=in_step(plan),
        start=start + load,
        warmup_s=warm,
        period=period,
    )
    add_job(
        plan,
        main_cpu=main_cpu,
        loader_cpu=loader_cpu,
        n_loaders=rng.randint(2, 10),
        start_s=start,
        visibility=visibility,
    )
    job_memory(plan, mem, start_s=start, load_s=load, step_s=period)
    if rng.random() < 0.2 and plan.label != "capacity":
        wobble = rng.uniform(100.0, 900.0)
        for g in plan.job_gpus:
            plan.mem[g].wobble_mib, plan.mem[g].wobble_s = wobble, rng.uniform(4.0, 20.0)
        plan.note("mem-wobble", wobble_mib=round(wobble))
    plan.note(
        f"{kind} period={period:.2g}s duty={d:.2f}",
        kind=kind,
        period_s=round(period, 3),
        duty=round(d, 3),
        overlap_comm=ddp,
    )


def busy_variant(plan: Plan) -> dict:
    """How the host side of a busy job looks: the variants that must not move the label."""
    rng = plan.rng
    subset(plan)
    host_noise(plan)
    loaders = 0.2 if plan.label in ("compute", "bandwidth") else 0.0  # balanced: no pressure
    v = rng.choices(("plain", "spin", "busy-loaders", "no-threads"), (0.45, 0.2, loaders, 0.15))[0]
    plan.note(v, host_variant=v)
    if v == "spin":  # .item() every step: the main thread spins while the GPU runs
        return dict(main_cpu=(92.0, 100.0), loader_cpu=(2.0, 25.0))
    if v == "busy-loaders":  # loaders flat out but keeping up: the GPU never waits
        return dict(loader_cpu=(80.0, 100.0))
    if v == "no-threads":
        return dict(visibility=rng.choice(("denied", "absent")))
    return {}


# -- the GPU waits -----------------------------------------------------------------------------


def gappy_shape(plan: Plan, duty: tuple[float, float], shapes=("regular", "bursty")):
    """A step factory whose GPU idles in gaps, and its period and duty."""
    rng = plan.rng
    shape = rng.choice(shapes)
    if shape == "bursty":
        n, step_s = rng.randint(2, 12), log_uniform(rng, 0.05, 0.6)
        d = rng.uniform(*duty)
        stall = n * step_s * 0.98 / d - n * step_s
        if stall > 10.0:  # a stall longer than that is a stopped job, not a slow pipeline
            stall = 10.0
            d = n * step_s * 0.98 / (n * step_s + stall)
        plan.note(
            f"bursty n={n} step={step_s:.2g}s stall={stall:.2g}s duty={d:.2f}",
            shape=shape,
            period_s=round(n * step_s + stall, 3),
            duty=round(d, 3),
        )
        return (lambda: bursts(rng, step_s, n, stall, 0.15)), n * step_s + stall
    if shape == "trickle":  # short steps, short stalls: low amplitude in every sample
        period, d = rng.uniform(0.1, 0.25), rng.uniform(*duty)
    else:
        period, d = log_uniform(rng, 0.1, 10.0), rng.uniform(*duty)
    plan.note(
        f"{shape} period={period:.2g}s duty={d:.2f}",
        shape=shape,
        period_s=round(period, 3),
        duty=round(d, 3),
    )
    return regular(plan, period, d, 0.12), period


def gappy_job(
    plan: Plan,
    *,
    main_cpu,
    loader_cpu,
    duty=(0.2, 0.7),
    visibility="full",
    n_loaders=None,
    shapes=("regular", "bursty"),
    mem=(0.08, 0.78),
) -> None:
    """A job whose GPUs idle in gaps (input, synchronization, undetermined shapes); the CPU
    figures given decide which."""
    rng = plan.rng
    kind = rng.choice(("light", "tensor", "balanced"))
    ddp = plan.layout == "ddp"  # gradients all-reduced while the step runs, none while waiting
    plan.acts["work"] = kernels.work(rng, plan.model, kind, overlap_comm=ddp)
    make, period = gappy_shape(plan, duty, shapes)
    start, load, warm = ramp(plan, 0.2)
    set_timelines(
        plan, make, in_step=in_step(plan), start=start + load, warmup_s=warm, period=period
    )
    n = rng.randint(2, 10) if n_loaders is None else n_loaders
    add_job(
        plan,
        main_cpu=main_cpu,
        loader_cpu=loader_cpu,
        n_loaders=n,
        start_s=start,
        visibility=visibility,
    )
    job_memory(plan, mem, start_s=start, load_s=load, step_s=period)
