"""One recipe per class: draw the job's physics so that the label holds by construction.

Each recipe decides what the GPUs do (kernels, step shape, duty, alignment), what the job's
processes burn on the host, its memory, and which evidence is missing. The label is the class
the physics makes true (the contract in docs/accuracy.md), never what a rule would answer.
"""

from __future__ import annotations

import random

from gputop_diag.model import SchedulerEvidence

from . import kernels
from .host import THREAD_LOADERS, job_process, quiet_process
from .jobs import (
    busy_variant,
    gappy_job,
    host_noise,
    idle_gpus,
    kernel_job,
    mig_layout,
    ramp,
    subset,
)
from .plan import (
    USERS,
    MemPlan,
    Plan,
    add_job,
    job_memory,
    log_uniform,
    new_plan,
    regular,
    set_timelines,
)
from .timeline import SPAN_S, cyclic

PENDING_REASONS = (
    "Resources",
    "Priority",
    "QOSMaxGRESPerUser",
    "AssocGrpGRES",
    "ReqNodeNotAvail",
    "QOSGrpGRES",
)

# -- states without a workload ---------------------------------------------------------------


def idle(rng: random.Random) -> Plan:
    variant = rng.choices(
        ("empty", "holding", "salloc", "mig-empty", "busy-host"), (0.25, 0.35, 0.15, 0.1, 0.15)
    )[0]
    plan = new_plan(rng, "idle", variant, mig=variant == "mig-empty")
    if variant == "busy-host":
        # a CPU-only job (preprocessing, compilation) loads the host; no GPU work waits on it
        variant = "holding" if rng.random() < 0.5 else "empty"
        plan.host.saturate, plan.host.sat_level = True, rng.uniform(88.0, 99.0)
        if rng.random() < 0.4:
            plan.host.storage_stall = True
            plan.host.stall_io_psi = rng.uniform(15.0, 60.0)
            plan.host.stall_iowait = rng.uniform(10.0, 35.0)
    if variant == "mig-empty":
        mig_layout(plan)
    if variant in ("holding", "salloc") and rng.random() < 0.5:
        # a polling loop's tiny kernels, several per 1/6 s sample: busy a few percent
        period, duty = rng.uniform(0.03, 0.15), rng.uniform(0.004, 0.03)
        plan.acts["work"] = kernels.work(rng, plan.model, "light")
        set_timelines(plan, regular(plan, period, duty, 0.2), in_step=False, period=period)
        plan.note("trickle", duty=round(duty, 3))
    else:
        idle_gpus(plan)
    if variant in ("holding", "salloc"):
        holders = rng.sample(range(plan.n_gpus), rng.randint(1, plan.n_gpus))
        share = rng.uniform(0.03, 0.6)
        for g in holders:
            plan.procs.append(quiet_process(rng, plan.pids, (g,), plan.user))
            plan.mem[g] = MemPlan(target_mib=share * plan.model.memory_mib)
    if variant == "salloc":
        plan.scheduler_jobs = (_running(rng, plan),)
    return plan


def scheduler(rng: random.Random) -> Plan:
    mig = rng.random() < 0.1
    reason = rng.choice(PENDING_REASONS)
    plan = new_plan(rng, "scheduler", reason, mig=mig)
    if mig:
        mig_layout(plan)
    idle_gpus(plan)
    wait = log_uniform(rng, 300.0, 36_000.0)
    jobs = [
        SchedulerEvidence(
            str(rng.randrange(1_000_000, 9_999_999)),
            "PENDING",
            reason,
            round(wait),
            rng.choice((3600.0, 86400.0, 172800.0)),
            0.0,
            rng.choice(("train_llm", "sweep", "finetune", "eval")),
            plan.user,
        )
    ]
    if rng.random() < 0.3:
        jobs.append(_running(rng, plan))
    plan.scheduler_jobs = tuple(jobs)
    plan.note(f"wait={wait / 60:.0f}min", wait_s=round(wait))
    return plan


def _running(rng: random.Random, plan: Plan) -> SchedulerEvidence:
    limit = rng.choice((14400.0, 86400.0, 172800.0))
    return SchedulerEvidence(
        str(rng.randrange(1_000_000, 9_999_999)),
        "RUNNING",
        "None",
        round(rng.uniform(5, 4000)),
        limit,
        limit * rng.uniform(0.05, 0.8),
        "interactive",
        plan.user,
    )


def compute(rng: random.Random) -> Plan:
    mixed = rng.random() < 0.2
    plan = new_plan(rng, "compute", "mixed" if mixed else "math")
    kind = "mixed" if mixed else rng.choices(("tensor", "fp32", "fp64"), (0.6, 0.25, 0.15))[0]
    kernel_job(plan, kind, **busy_variant(plan))
    _roofline_label(plan)
    return plan


def bandwidth(rng: random.Random) -> Plan:
    mixed = rng.random() < 0.2
    plan = new_plan(rng, "bandwidth", "mixed" if mixed else "dram")
    kind = "mixed" if mixed else rng.choices(("bandwidth", "bandwidth_tensor"), (0.65, 0.35))[0]
    kernel_job(plan, kind, **busy_variant(plan))
    _roofline_label(plan)
    return plan


def _roofline_label(plan: Plan) -> None:
    leads, second = kernels.nearer_roof(plan.acts["work"])
    plan.accept = set(leads)
    if plan.label not in leads:
        plan.label = next(iter(leads))
    plan.secondary = second if plan.params.get("kind") == "mixed" else None
    if len(leads) == 2:
        plan.note("either")


def balanced(rng: random.Random) -> Plan:
    plan = new_plan(rng, "balanced", "no-roof")
    kernel_job(plan, "balanced", duty=(0.93, 0.99), **busy_variant(plan))
    return plan


def capacity(rng: random.Random) -> Plan:
    variant = rng.choices(("full", "leak", "mig-full"), (0.55, 0.35, 0.1))[0]
    plan = new_plan(rng, "capacity", variant, mig=variant == "mig-full")
    if variant == "mig-full":
        mig_layout(plan)
        g = rng.randrange(plan.n_gpus)
        plan.layout = "single"
        plan.acts["work"] = kernels.work(rng, plan.model, "balanced")
        period, d = log_uniform(rng, 0.2, 5.0), rng.uniform(0.4, 0.95)
        set_timelines(plan, regular(plan, period, d, 0.1), in_step=True, gpus=[g])
        p = quiet_process(rng, plan.pids, (g,), plan.user)
        p.threads[0].cpu = rng.uniform(20, 100)
        plan.procs.append(p)
        name, size, _ = plan.mig[g][0]
        plan.mem[g] = MemPlan(target_mib=size * rng.uniform(0.955, 0.995))
        plan.params.update(capacity_gpus=[g], mig_instance=name)
        return plan
    subset(plan)
    pattern = rng.choices(
        ("compute", "bandwidth", "balanced", "gappy", "loaders", "idle"),
        (0.25, 0.15, 0.2, 0.2, 0.1, 0.1),
    )[0]
    if variant == "leak" and pattern == "idle":
        pattern = "balanced"
    plan.note(f"pattern={pattern}", pattern=pattern)
    if pattern in ("compute", "bandwidth", "balanced"):
        kind = {"compute": "tensor", "bandwidth": "bandwidth", "balanced": "balanced"}[pattern]
        kernel_job(plan, kind)
    elif pattern == "gappy":
        gappy_job(plan, main_cpu=(90.0, 100.0), loader_cpu=(0.5, 12.0))
    elif pattern == "loaders":
        gappy_job(plan, main_cpu=(5.0, 40.0), loader_cpu=(85.0, 100.0))
    else:
        idle_gpus(plan)
        add_job(plan, main_cpu=(0.0, 3.0), loader_cpu=(0.0, 1.0), n_loaders=rng.randint(0, 2))
        job_memory(plan, (0.3, 0.5))
    gpus = list(plan.job_gpus)
    if plan.layout == "independent" and len(gpus) > 1:
        gpus = rng.sample(gpus, rng.randint(1, len(gpus)))
    total = plan.model.memory_mib
    for g in gpus:
        m = plan.mem[g]
        if variant == "full":
            m.target_mib = total * rng.uniform(0.955, 0.993) - plan.model.reserved_mib
        else:
            rate = log_uniform(rng, 25.0, 500.0)  # MiB/min
            to_full = rng.uniform(3.0, 28.0)  # minutes at the end of the window
            steady = SPAN_S - m.start_s - m.load_s
            end = total - plan.model.reserved_mib - 64 - rate * to_full
            m.target_mib = max(1000.0, end - rate * steady / 60.0)
            m.leak_mib_per_s = rate / 60.0
            m.chunk_mib = 20.0 if rate * m.step_s / 60.0 >= 20.0 else 2.0
            plan.params.update(leak_mib_per_min=round(rate), minutes_to_full=round(to_full, 1))
    if variant == "full" and rng.random() < 0.15:
        # another user's job holds most of one full GPU; this job's share is small
        g = gpus[0]
        plan.mem[g].target_mib = total * rng.uniform(0.05, 0.2)
        other = rng.choice([u for u in USERS if u != plan.user])
        holder = job_process(
            rng,
            plan.pids,
            "torch2",
            (g,),
            other,
            main_cpu=(30.0, 90.0),
            loader_cpu=(5.0, 60.0),
            n_loaders=rng.randint(2, 6),
        )
        holder.visibility = rng.choice(("denied", "absent"))
        used = total * rng.uniform(0.955, 0.99) - plan.model.reserved_mib
        plan.foreign.append((holder, g, used - plan.mem[g].target_mib))
        plan.note("held-by-another-user", other_user_gpu=g)
    plan.params["capacity_gpus"] = sorted(gpus)
    return plan


def input_pipeline(rng: random.Random) -> Plan:
    pressure = rng.choices(
        ("cpu-loaders", "storage", "host-saturated", "no-threads"), (0.45, 0.25, 0.15, 0.15)
    )[0]
    plan = new_plan(rng, "input_pipeline", pressure)
    subset(plan)
    host = plan.host
    visibility, main = "full", (5.0, 45.0)
    if pressure == "no-threads":
        visibility = rng.choice(("denied", "absent"))
        pressure = rng.choice(("storage", "host-saturated"))
        plan.note(pressure)
    if pressure == "cpu-loaders":
        heavy = plan.framework not in THREAD_LOADERS and rng.random() < 0.3
        loader = (100.0, 190.0) if heavy else (85.0, 100.0)
        if rng.random() < 0.3:
            main = (60.0, 100.0)  # collation / pinning in the main thread too
            plan.note("main-busy")
    elif pressure == "storage":
        loader = (3.0, 45.0)  # blocked in D state on reads
        host.storage_stall = True
        host.stall_io_psi = rng.uniform(18.0, 70.0)
        lo = 15.0 if not host.psi else 4.0
        host.stall_iowait = rng.uniform(lo, 45.0)
    else:
        loader = (35.0, 75.0)
        host.saturate, host.sat_level = True, rng.uniform(93.0, 99.5)
    procs = 1 if plan.layout == "single" else len(plan.job_gpus)
    n = rng.randint(2, 12)
    if pressure == "cpu-loaders":  # enough cores for the loaders, or it is saturation too
        n = max(1, min(n, int(0.8 * host.cpu_count / (procs * loader[1] / 100.0))))
    mem = (0.8, 0.9) if rng.random() < 0.2 else (0.08, 0.78)
    if mem[0] >= 0.8:
        plan.note("mem-80-90")
    duty = (0.1, 0.5) if rng.random() < 0.3 else (0.1, 0.7)
    gappy_job(
        plan,
        main_cpu=main,
        loader_cpu=loader,
        duty=duty,
        visibility=visibility,
        n_loaders=n,
        shapes=("regular", "regular", "bursty", "trickle"),
        mem=mem,
    )
    plan.params.update(pressure=pressure, loader_cpu=loader)
    return plan


def synchronization(rng: random.Random) -> Plan:
    plan = new_plan(rng, "synchronization", rng.choice(("item", "logging", "metrics")))
    subset(plan)
    host_noise(plan)
    gappy_job(
        plan,
        main_cpu=(90.0, 100.0),
        loader_cpu=(0.5, 18.0),
        duty=(0.25, 0.75),
        n_loaders=rng.choice((0, 2, 4, 8)),
    )
    return plan


def launch_bound(rng: random.Random) -> Plan:
    """Synchronization's launch-bound form (docs/accuracy.md, "The launch-bound family"): the
    GPU waits on the host's next launch, not on a sync. Kernels too small to fill the GPU are
    launched back to back: one is resident 90-100 % of each step's work (NVML counts the GPU
    busy) on a few SMs; steps of 20-500 ms leave the host 1-8 % of each between them; the
    launching thread is at 92-100 % of a core, the loaders nearly idle. Only where GPM is read:
    without SM activity nothing in NVML's figures shows it, so no such case is built."""
    variant = rng.choice(("small-batch", "unfused-optimizer", "env-step", "decode-loop"))
    plan = new_plan(rng, "synchronization", f"launch-{variant}")
    for _ in range(40):
        if plan.reading.gpm:
            break
        plan = new_plan(rng, "synchronization", f"launch-{variant}")
    subset(plan)
    host_noise(plan)
    plan.acts["work"] = kernels.tiny(rng, plan.model)
    period, d = log_uniform(rng, 0.02, 0.5), rng.uniform(0.92, 0.99)
    pause = None
    if rng.random() < 0.15:  # a log flush or a short evaluation now and then
        secs = rng.uniform(0.2, 0.8)
        every = max(1, int(secs / 0.04 / period) + 1)
        pause = (every, secs)
        plan.note(f"pause={secs:.1f}s/{every * period:.0f}s", pause_s=round(secs, 2))
    start, load, warm = ramp(plan, 0.2)
    set_timelines(
        plan,
        regular(plan, period, d, 0.1, pause=pause),
        in_step=plan.layout != "independent",
        start=start + load,
        warmup_s=warm,
        period=period,
    )
    add_job(
        plan,
        main_cpu=(92.0, 100.0),
        loader_cpu=(0.5, 18.0),
        n_loaders=rng.choice((0, 1, 2, 4)),
        start_s=start,
    )
    job_memory(plan, (0.04, 0.6), start_s=start, load_s=load, step_s=period)
    plan.note(
        f"launch period={period:.2g}s duty={d:.2f}",
        finding="launch_bound",
        period_s=round(period, 3),
        duty=round(d, 3),
    )
    return plan


def communication(rng: random.Random) -> Plan:
    nvlink = rng.random() < 0.7
    plan = new_plan(
        rng, "communication", "nvlink" if nvlink else "pcie", min_gpus=2, nvlink=nvlink, big=0.12
    )
    plan.layout = rng.choice(("ddp", "ddp", "single"))
    plan.acts["work"] = kernels.work(rng, plan.model, rng.choice(("tensor", "balanced", "light")))
    period = log_uniform(rng, 1.5, 10.0)
    c = rng.uniform(0.2, 0.55)
    # NCCL kernels are resident for a share of the exposed collective (buckets launched one
    # after another, ranks waiting for each other): the busy time dips while the links carry
    # the traffic; with GPM the SMs show the dip even when the kernels never leave.
    f = rng.uniform(0.4, 1.0 if plan.reading.gpm else 0.75)
    plan.acts["comm"] = kernels.nccl(rng, plan.model, nvlink, resident=f)
    phases = [("work", 1.0 - c), ("comm", c)]
    start, load, warm = ramp(plan, 0.2)
    set_timelines(
        plan,
        lambda: cyclic(rng, period, phases, 0.06),
        in_step=True,
        start=start + load,
        warmup_s=warm,
        period=period,
    )
    visibility = rng.choice(("denied", "absent")) if rng.random() < 0.15 else "full"
    add_job(
        plan,
        main_cpu=(15.0, 60.0),
        loader_cpu=(1.0, 15.0),
        n_loaders=rng.randint(1, 8),
        start_s=start,
        visibility=visibility,
    )
    job_memory(plan, (0.2, 0.85), start_s=start, load_s=load, step_s=period)
    plan.note(
        f"period={period:.2g}s comm={c:.2f} nccl-resident={f:.2f}",
        period_s=round(period, 3),
        comm_share=round(c, 3),
        nccl_resident=round(f, 3),
    )
    return plan


def undetermined(rng: random.Random) -> Plan:
    variant = rng.choices(("sync-hidden", "light-input-hidden", "mig-hidden"), (0.45, 0.4, 0.15))[0]
    plan = new_plan(rng, "undetermined", variant, mig=variant == "mig-hidden")
    if variant == "mig-hidden":
        mig_layout(plan)
    subset(plan)
    host_noise(plan)
    plan.host.background_cores = min(plan.host.background_cores, 0.2 * plan.host.cpu_count)
    vis = rng.choice(("denied", "absent"))
    if variant == "light-input-hidden":
        main, loader = (10.0, 40.0), (20.0, 70.0)
    else:
        main, loader = (90.0, 100.0), (0.5, 12.0)
    # no pressure the host could show: the job's CPU stays well under the machine's
    procs = 1 if plan.layout == "single" else len(plan.job_gpus)
    room = 0.4 * plan.host.cpu_count * 100.0 / procs - main[1]
    n = max(1, min(rng.randint(1, 4), int(room / loader[1])))
    gappy_job(plan, main_cpu=main, loader_cpu=loader, duty=(0.2, 0.7), visibility=vis, n_loaders=n)
    return plan


def insufficient_data(rng: random.Random) -> Plan:
    variant = rng.choice(("all-lost", "all-lost", "no-driver"))
    plan = new_plan(rng, "insufficient_data", variant, n_gpus=rng.choice((1, 1, 2)))
    if variant == "no-driver":
        plan.nvml_down = True
        idle_gpus(plan)
        return plan
    plan.layout = "independent" if plan.n_gpus > 1 else "single"
    kernel_job(plan, rng.choice(("tensor", "balanced")))
    for g in range(plan.n_gpus):
        tick = rng.randint(5, 50)
        plan.lost[g] = tick
        if rng.random() < 0.85:
            plan.xids.append((tick, 79, g))
    plan.expect_fault = True
    return plan


RECIPES = {
    "idle": idle,
    "scheduler": scheduler,
    "capacity": capacity,
    "compute": compute,
    "bandwidth": bandwidth,
    "input_pipeline": input_pipeline,
    "synchronization": synchronization,
    "communication": communication,
    "balanced": balanced,
    "undetermined": undetermined,
    "insufficient_data": insufficient_data,
}
WEIGHTS = {name: 1.0 for name in RECIPES} | {"insufficient_data": 0.3}
# Families drawn on seeds of their own (`heldout.FAMILY_SEEDS`), so that the mix above and its
# seeds stay what they were.
FAMILIES = {"launch_bound": launch_bound}
