"""Overlays on any class: hardware faults, benign Xids, host OOM kills, other users' processes,
Slurm jobs that must not move the label."""

from __future__ import annotations

from gputop_diag.model import OomKill, SchedulerEvidence

from .host import Entity, quiet_process
from .plan import USERS, Plan

FAULT_XIDS = (48, 94, 95)  # double-bit ECC, contained / uncontained ECC (NVIDIA Xid catalog)
BENIGN_XIDS = (13, 31, 43)  # graphics engine exception, MMU fault, channel stopped: the app's
RESPAWNING = ("mp_pool", "grain", "hf_datasets")  # pools replace a killed worker


def apply(plan: Plan, slow_ticks: list[int]) -> None:
    rng = plan.rng
    if plan.label == "insufficient_data":
        return
    r = rng.random()
    if r < 0.14:
        _fault(plan)
    elif r < 0.20:
        _benign_xid(plan)
    if rng.random() < 0.12:
        _oom(plan, slow_ticks)
    if rng.random() < 0.12:
        _foreign(plan)
    if rng.random() < 0.08:  # a slow tick: the collector skipped a sample or two
        plan.dropped = set(rng.sample(range(5, 55), rng.randint(1, 3)))
        plan.note("dropped-ticks", dropped=sorted(plan.dropped))
    if rng.random() < 0.06 and not plan.mig:  # one GPU's utilization query timed out
        plan.glitches = {(rng.randrange(5, 59), rng.randrange(plan.n_gpus))}
        plan.note("nvml-timeout")
    if plan.label not in ("idle", "scheduler") and plan.params.get("pattern") != "idle":
        jobs = list(plan.scheduler_jobs)
        if rng.random() < 0.3:
            limit = rng.choice((14400.0, 86400.0, 172800.0))
            jobs.append(
                SchedulerEvidence(
                    str(rng.randrange(10**6, 10**7)),
                    "RUNNING",
                    "None",
                    round(rng.uniform(5, 3000)),
                    limit,
                    limit * rng.uniform(0.05, 0.8),
                    "train",
                    plan.user,
                )
            )
        if rng.random() < 0.08:  # another job of this user waits; the GPUs here are busy
            jobs.append(
                SchedulerEvidence(
                    str(rng.randrange(10**6, 10**7)),
                    "PENDING",
                    rng.choice(("Priority", "Resources")),
                    round(rng.uniform(300, 20000)),
                    86400.0,
                    0.0,
                    "next_sweep",
                    plan.user,
                )
            )
            plan.note("pending-elsewhere")
        plan.scheduler_jobs = tuple(jobs)


def _fault(plan: Plan) -> None:
    rng = plan.rng
    kinds = ["xid"]
    keep = sorted(plan.params.get("capacity_gpus") or plan.job_gpus)[:1]  # the pattern stays
    coupled = plan.layout != "independent" and plan.label not in ("idle", "scheduler")
    spare = [
        i
        for i in range(plan.n_gpus)
        if i not in keep and not (coupled and i in plan.job_gpus) and not plan.mig
    ]
    if spare and plan.label != "communication":
        kinds.append("lost")
    if plan.model.remap:
        kinds.append("remap")
    kind = rng.choice(kinds)
    g = rng.randrange(plan.n_gpus)
    if kind == "lost":
        g = rng.choice(spare)
        tick = rng.randint(8, 52)
        plan.lost[g] = tick
        if rng.random() < 0.8:
            plan.xids.append((tick, 79, g))
        for p in plan.procs:
            if p.gpus == (g,):
                p.gone_s = tick + 0.5
    if kind == "xid":
        plan.xids.append((rng.randint(3, 57), rng.choice(FAULT_XIDS), g))
    elif kind == "remap":
        plan.health[g] = dict(
            remap_failure=True,
            remapped_rows_unc=rng.randint(1, 4),
            ecc_uncorrected=rng.randint(0, 2),
        )
        if rng.random() < 0.5:
            plan.xids.append((rng.randint(3, 57), rng.choice((63, 64)), g))
    plan.expect_fault = True
    plan.note(f"fault={kind}@gpu{g}", fault=kind, fault_gpu=g)


def _benign_xid(plan: Plan) -> None:
    """An application's Xid, or a row remap that succeeded: not a hardware fault."""
    rng = plan.rng
    g = rng.randrange(plan.n_gpus)
    if plan.model.remap and rng.random() < 0.3:
        xid = 63
        plan.health[g] = dict(remapped_rows_corr=1, remap_pending=True)
    else:
        xid = rng.choice(BENIGN_XIDS)
    plan.xids.append((rng.randint(3, 57), xid, g))
    plan.note(f"xid{xid}(benign)", benign_xid=xid)


def _oom(plan: Plan, slow_ticks: list[int]) -> None:
    """The kernel's OOM killer ends one of the job's loader processes (host memory)."""
    rng = plan.rng
    victims = [(p, c) for p in plan.procs for c in p.children if c.sd >= 0]
    if not victims:
        return
    proc, child = rng.choice(victims)
    last_read = slow_ticks[-1]
    if plan.framework in RESPAWNING:
        tick = rng.randint(10, last_read)
        proc.children.append(
            Entity(plan.pids(), child.name, child.cpu, child.sd, child.cap, born_s=tick + 2.5)
        )
    else:  # the DataLoader notices within seconds and the job dies: the window ends first
        tick = rng.randint(max(10, last_read - 4), last_read)
    child.gone_s = tick + 0.5
    plan.host.oom_tick = tick
    plan.ooms.append(OomKill(float(tick), child.id, child.name, cgroup=rng.random() < 0.5))
    plan.expect_alert = "host_oom"
    plan.note("host-oom", oom_pid=child.id, oom_tick=tick)


def _foreign(plan: Plan) -> None:
    """Another user's idle process holding a little memory on one GPU."""
    rng = plan.rng
    if plan.mig:
        return
    g = rng.randrange(plan.n_gpus)
    total = plan.model.memory_mib
    peak = max(plan.mem[g].at(t) for t in (1.0, 30.0, 60.0)) + plan.model.reserved_mib
    if plan.label == "capacity" and g in plan.params.get("capacity_gpus", ()):
        room = 0.0
    else:
        room = 0.93 * total - peak
    mib = min(rng.uniform(250.0, 1600.0), room)
    if mib < 200.0:
        return
    other = rng.choice([u for u in USERS if u != plan.user])
    p = quiet_process(rng, plan.pids, (g,), other)
    p.visibility = rng.choice(("denied", "denied", "absent"))
    plan.foreign.append((p, g, mib))
    plan.note("shared-gpu", foreign_gpu=g, foreign_mib=round(mib))
