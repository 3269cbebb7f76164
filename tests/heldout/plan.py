"""A case before it becomes snapshots: the machine, the job's kernels and timelines, its memory,
its processes, the host and the overlays. The recipes in `classes.py` fill one in."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from gputop_diag.model import OomKill, SchedulerEvidence

from .gpus import GpuModel, Reading
from .host import FRAMEWORKS, HostPlan, Pids, Proc, job_process
from .timeline import SPAN_S, Activity, StepFn, cyclic, timeline

USERS = ("alice", "bkim", "chen.w", "dpatel", "evans", "f.rossi", "gsato", "hlee")


@dataclass
class MemPlan:
    """The job's device memory on one GPU, MiB: context at the start, rising to `target_mib`
    while the model loads, then flat, or growing every step by `leak_mib_per_s` on average."""

    start_s: float = 0.0
    load_s: float = 0.0
    ctx_mib: float = 500.0
    target_mib: float = 0.0
    leak_mib_per_s: float = 0.0
    step_s: float = 1.0
    chunk_mib: float = 2.0  # the caching allocator grows in blocks
    wobble_mib: float = 0.0  # allocations that come and go (eval passes, dynamic shapes)
    wobble_s: float = 10.0

    def at(self, t: float) -> float:
        if t < self.start_s or self.target_mib <= 0:
            return 0.0
        if t < self.start_s + self.load_s:
            f = (t - self.start_s) / self.load_s
            v = self.ctx_mib + (self.target_mib - self.ctx_mib) * f
            return self.ctx_mib + 20.0 * math.floor((v - self.ctx_mib) / 20.0)
        v = self.target_mib
        if self.wobble_mib and (t % self.wobble_s) < self.wobble_s / 2:
            v += self.wobble_mib
        if self.leak_mib_per_s:
            steps = math.floor((t - self.start_s - self.load_s) / self.step_s)
            v += self.chunk_mib * math.floor(
                self.leak_mib_per_s * steps * self.step_s / self.chunk_mib
            )
        return v


@dataclass
class Plan:
    rng: random.Random
    label: str
    variant: str
    n_gpus: int
    model: GpuModel
    reading: Reading
    user: str
    layout: str = "single"  # "single" process, "ddp" (one per GPU, coupled), "independent"
    accept: set[str] = field(default_factory=set)
    secondary: str | None = None
    name_bits: list[str] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    acts: dict[str, Activity] = field(default_factory=dict)
    timelines: list[dict[str, list[float]]] = field(default_factory=list)
    gpu_tl: list[int] = field(default_factory=list)  # per GPU: its timeline (-1: not used)
    job_gpus: list[int] = field(default_factory=list)  # the GPUs the job runs on
    mem: list[MemPlan] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    foreign: list[tuple[Proc, int, float]] = field(default_factory=list)  # proc, GPU, MiB
    host: HostPlan | None = None
    pids: Pids | None = None
    mig: list[list[tuple[str, int, float]]] = field(default_factory=list)  # per GPU instances
    xids: list[tuple[int, int, int | None]] = field(default_factory=list)  # tick, xid, GPU
    lost: dict[int, int] = field(default_factory=dict)  # GPU -> tick it falls off
    health: dict[int, dict] = field(default_factory=dict)
    ooms: list[OomKill] = field(default_factory=list)
    scheduler_jobs: tuple[SchedulerEvidence, ...] = ()
    nvml_down: bool = False
    dropped: set[int] = field(default_factory=set)  # ticks the collector missed
    glitches: set[tuple[int, int]] = field(default_factory=set)  # (tick, GPU): a query timed out
    expect_fault: bool = False
    expect_alert: str | None = None
    framework: str = "torch2"

    def note(self, bit: str, **params) -> None:
        if bit:
            self.name_bits.append(bit)
        self.params.update(params)


def log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def draw_gpu_count(rng: random.Random, minimum: int = 1, big: float = 0.05) -> int:
    if rng.random() < big:
        return rng.choice((16, 16, 32, 64))
    counts = [n for n in (1, 2, 4, 8) if n >= minimum]
    weights = [{1: 0.28, 2: 0.17, 4: 0.25, 8: 0.3}[n] for n in counts]
    return rng.choices(counts, weights)[0]


def draw_reading(rng: random.Random, model: GpuModel, mig: bool = False) -> tuple[Reading, str]:
    """The driver's sample period, whether it keeps samples, whether GPM answers."""
    note = ""
    gpm = model.gpm and not mig
    if gpm and rng.random() < 0.2:
        gpm, note = False, "no-gpm(not-permitted)"
    elif not model.gpm:
        note = "no-gpm(pre-hopper)"
    elif mig:
        note = "no-gpm(mig)"
    reading = Reading(
        sample_period_s=1 / 6 if rng.random() < 0.65 else 1.0,
        samples=rng.random() < 0.7,
        gpm=gpm,
        mig=mig,
        power_appetite=rng.uniform(0.85, 1.35),
        memctl_gain=rng.uniform(0.95, 1.25),
    )
    return reading, note


def new_plan(
    rng: random.Random,
    label: str,
    variant: str,
    *,
    min_gpus: int = 1,
    nvlink: bool | None = None,
    mig: bool = False,
    n_gpus: int | None = None,
    big: float = 0.05,
) -> Plan:
    n = n_gpus or draw_gpu_count(rng, min_gpus, big)
    model = _model(rng, n, nvlink, mig)
    reading, gpm_note = draw_reading(rng, model, mig)
    plan = Plan(rng, label, variant, n, model, reading, rng.choice(USERS), accept={label})
    plan.pids = Pids(rng)
    plan.layout = "single" if n == 1 else rng.choice(("ddp", "ddp", "independent", "single"))
    plan.framework = rng.choice(FRAMEWORKS)
    cores = rng.choice((16, 24, 32, 48, 64) if n <= 2 else (64, 96, 128, 192, 224, 256))
    cores = max(cores, 4 * n)
    plan.host = HostPlan(
        cpu_count=cores,
        background_cores=rng.uniform(0.2, 2.5),
        psi=rng.random() < 0.7,
        mem_total_gib=rng.choice((256, 512, 1024, 2048) if n > 2 else (64, 128, 256, 512)),
        mem_used_share=rng.uniform(0.15, 0.6),
    )
    plan.mem = [MemPlan() for _ in range(n)]
    plan.gpu_tl = [-1] * n
    plan.job_gpus = list(range(n))
    if rng.random() < 0.5:  # other tenants, system daemons: load that is not pressure
        plan.host.background_cores = rng.uniform(0.05, 0.35) * cores
    plan.note(f"{label}/{variant}", cls=label, variant=variant, gpus=n, model=model.name)
    plan.params.update(
        sample_period_s=round(reading.sample_period_s, 3),
        util_samples=reading.samples,
        gpm=reading.gpm,
        framework=plan.framework,
        gpm_note=gpm_note,
    )
    return plan


def _model(rng: random.Random, n: int, nvlink: bool | None, mig: bool) -> GpuModel:
    from .gpus import pick_model

    return pick_model(rng, nvlink=nvlink, mig=mig, datacenter=n > 4)


def finish_name(plan: Plan) -> None:
    """Header bits every case name carries: GPUs, model, and what evidence is missing."""
    r = plan.reading
    bits = [f"gpus={plan.n_gpus}", plan.model.name.replace("NVIDIA ", "")]
    if not r.gpm:
        bits.append(plan.params.get("gpm_note") or "no-gpm")
    if r.mig:
        bits.append("mig")
    bits.append("util=1/6s" if r.sample_period_s < 0.5 else "util=1s")
    if not r.samples:
        bits.append("no-samples")
    plan.name_bits.extend(bits)


def set_timelines(
    plan: Plan,
    make_step,
    *,
    in_step: bool,
    start: float = 0.0,
    warmup_s: float = 0.0,
    period: float = 1.0,
    gpus=None,
) -> None:
    """Lay the job's steps on its GPUs: one shared timeline when they run in step (one process,
    or ranks coupled by collectives), else one per GPU with its own phase (a few at most)."""
    rng = plan.rng
    gpus = list(plan.job_gpus) if gpus is None else list(gpus)
    if in_step:
        step: StepFn = make_step()
        plan.timelines.append(timeline(step, rng.uniform(0, period), start, warmup_s))
        for g in gpus:
            plan.gpu_tl[g] = len(plan.timelines) - 1
        return
    distinct = min(len(gpus), 8)
    first = len(plan.timelines)
    for _ in range(distinct):
        plan.timelines.append(timeline(make_step(), rng.uniform(0, period), start, warmup_s))
    for i, g in enumerate(gpus):
        plan.gpu_tl[g] = first + i % distinct


def regular(
    plan: Plan,
    period: float,
    duty: float,
    jitter: float,
    work: str = "work",
    pause: tuple[int, float] | None = None,
):
    """A step factory: work for `duty` of each period, then idle; with `pause` = (n, seconds)
    every n-th step ends in a longer pause (a checkpoint, an evaluation, a log flush)."""
    rng = plan.rng

    def make():
        step = cyclic(rng, period, [(work, duty), ("idle", 1.0 - duty)], jitter)
        if pause is None:
            return step
        every, secs = pause
        return lambda i: step(i) + ([("idle", secs)] if i % every == every - 1 else [])

    return make


def add_job(
    plan: Plan,
    *,
    main_cpu,
    loader_cpu,
    n_loaders: int,
    pin_cpu=(1.0, 6.0),
    start_s: float = 0.0,
    visibility: str = "full",
) -> None:
    """The job's GPU processes: one for all GPUs ("single") or one per GPU."""
    rng, n = plan.rng, plan.n_gpus
    if n >= 16:
        n_loaders = min(n_loaders, 2)
    jobs = plan.job_gpus
    groups = [tuple(jobs)] if plan.layout == "single" else [(g,) for g in jobs]
    for gpus in groups:
        p = job_process(
            rng,
            plan.pids,
            plan.framework,
            gpus,
            plan.user,
            main_cpu=main_cpu,
            loader_cpu=loader_cpu,
            n_loaders=n_loaders,
            pin_cpu=pin_cpu,
        )
        p.start_s, p.visibility = start_s, visibility
        plan.procs.append(p)
    plan.params.update(loaders=n_loaders, layout=plan.layout, threads=visibility)


def job_memory(
    plan: Plan,
    share: tuple[float, float],
    *,
    start_s: float = 0.0,
    load_s: float = 0.0,
    step_s: float = 1.0,
) -> None:
    """The job's memory on each GPU it uses: a share of the device, a little uneven."""
    rng, total, reserved = plan.rng, plan.model.memory_mib, plan.model.reserved_mib
    base = rng.uniform(*share)
    for g in plan.job_gpus:
        if plan.mig:  # the job runs in the GPU's first MIG instance
            total, reserved = plan.mig[g][0][1], 0
        s = min(share[1], max(share[0], base + rng.uniform(-0.015, 0.015)))
        target = s * total - reserved
        plan.mem[g] = MemPlan(
            start_s, load_s, rng.uniform(300, 620), max(target, 400.0), 0.0, step_s, 2.0
        )


def span_ok(t: float) -> float:
    return min(max(t, 0.0), SPAN_S - 1.0)
