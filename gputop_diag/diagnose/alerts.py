"""Alerts: what is not a bottleneck class but must be seen now."""

from __future__ import annotations

from collections.abc import Sequence

from ..driver.compat import fabric_from_snapshot, facts_from_snapshot, judge_chain
from ..model import OomKill, SchedulerEvidence
from ..model.formats import clip_words
from ..xid.catalog import describe
from . import thresholds as T
from .features import Features
from .types import Alert


def alerts_for(
    f: Features, scheduler: Sequence[SchedulerEvidence] = (), oom: Sequence[OomKill] = ()
) -> tuple[Alert, ...]:
    """What must be seen now, most severe kinds first: lost GPUs, Xids, throttling, memory."""
    out: list[Alert] = []
    for i in f.lost_gpus:
        out.append(
            Alert(
                "gpu_lost",
                "critical",
                f"GPU {i} is lost (fell off the bus): drain "
                "the node and reboot; check power, cooling and seating",
                i,
                gpus=(i,),
            )
        )
    seen: dict[tuple[int, int | None], int] = {}
    for x in f.xid_events:
        seen[(x.xid, x.gpu_index)] = seen.get((x.xid, x.gpu_index), 0) + 1
    for (xid, gpu), n in sorted(seen.items(), key=lambda kv: -kv[1]):
        name, meaning, step, sev = describe(xid)
        times = f" ×{n}" if n > 1 else ""
        where = f"GPU {gpu}" if gpu is not None else "a GPU"
        out.append(
            Alert(
                "xid",
                sev,
                f"Xid {xid} ({name}){times} on {where}: {meaning}; {step}",
                gpu,
                code=xid,
                gpus=() if gpu is None else (gpu,),
            )
        )
    if f.thermal_fraction >= T.THROTTLE_FRACTION:
        gpus = _gpus(f.throttled_gpus)
        out.append(
            Alert(
                "thermal",
                "warning",
                f"thermal slowdown on {gpus} in "
                f"{f.thermal_fraction:.0%} of busy samples; SM clock "
                f"{f.clock_pct_median or 0:.0f} % of max: check cooling and airflow",
                f.throttled_gpus[0] if f.throttled_gpus else None,
                gpus=f.throttled_gpus,
            )
        )
    if f.power_cap_fraction >= T.THROTTLE_FRACTION:
        capped = f.power_capped_gpus
        out.append(
            Alert(
                "power",
                "info",
                f"{_gpus(capped)}: clocks held by the power cap in "
                f"{f.power_cap_fraction:.0%} of busy samples",
                capped[0] if capped else None,
                gpus=capped,
            )
        )
    busy_host = _busy_host(f)
    if busy_host is not None:
        out.append(busy_host)
    g = f.mem_growth_mib_per_min
    if f.memory_grows:
        growing = f.growing_gpus or (f.mem_growth_gpu,)
        out.append(
            Alert(
                "memory_growth",
                "warning",
                f"{_gpus(growing)}: memory grows every step (fastest GPU {f.mem_growth_gpu}: "
                f"{g:.0f} MiB/min, full in ~{f.minutes_to_full:.0f} min): "
                "graph retention (loss kept with its graph) or a logging leak?",
                f.mem_growth_gpu,
                gpus=tuple(growing),
            )
        )
    for k in oom[:3]:
        # The kernel's OOM killer acts on host memory (or the job's cgroup limit); it never sees
        # CUDA out-of-memory, which the job reports itself.
        where = "the job's cgroup memory limit" if k.cgroup else "host memory"
        job = " (one of the job's processes)" if k.pid in f.gpu_pids else ""
        out.append(
            Alert(
                "host_oom",
                "critical",
                f"host OOM: the kernel's OOM killer ended pid {k.pid} ({k.process_name}){job}: "
                f"{where} ran out, not GPU memory; see `journalctl -k | grep -i 'out of memory'`"
                " and lower DataLoader workers / prefetch or raise the job's --mem",
            )
        )
    for j in scheduler:
        left = j.time_left_s
        if not j.pending and left is not None and left < T.TIME_LIMIT_CLOSE_S:
            out.append(
                Alert(
                    "time_limit",
                    "warning",
                    f"Slurm job {j.job_id} reaches its time limit in {max(0.0, left) / 60:.0f} "
                    "min: save a checkpoint (scontrol show job shows EndTime)",
                )
            )
    if f.mem_near_full_gpus:
        out.append(
            Alert(
                "memory_full",
                "warning",
                f"{_gpus(f.mem_near_full_gpus)}: memory at least {T.CAPACITY_WARN_PCT:.0f} % used "
                f"(fullest: {f.mem_used_where}, {f.mem_used_pct_max:.0f} %)",
                f.mem_used_pct_gpu,
                gpus=f.mem_near_full_gpus,
            )
        )
    if f.ecc_uncorrected:
        bad = f.ecc_uncorrected_gpus
        out.append(
            Alert(
                "ecc",
                "critical",
                f"{_gpus(bad)}: {f.ecc_uncorrected} uncorrectable ECC errors since the driver "
                "loaded: drain them and look for Xid 48/94/95 in the kernel log",
                bad[0] if bad else None,
                gpus=bad,
            )
        )
    for i in f.remap_failure_gpus:
        out.append(
            Alert(
                "remap_failure",
                "critical",
                f"GPU {i}: row remapping failed (an RMA criterion): drain it and contact support",
                i,
                gpus=(i,),
            )
        )
    for i in f.remap_pending_gpus:
        out.append(
            Alert(
                "ecc",
                "warning",
                f"GPU {i}: a row remap is pending; reset the GPU when it is idle",
                i,
                gpus=(i,),
            )
        )
    return tuple(out)


def _gpus(indices) -> str:
    """ "GPU 3" or "GPUs 0, 1, 5": every GPU an alert applies to."""
    idx = sorted(set(indices))
    if not idx:
        return "a GPU"
    return f"GPU {idx[0]}" if len(idx) == 1 else "GPUs " + ", ".join(map(str, idx))


# Faults that lead above the workload class: the GPU cannot be trusted until they are handled
# (NVIDIA's Xid catalog: 48 double-bit ECC, 79 fallen off the bus, 94/95 contained/uncontained
# ECC; 63/64 row-remap events are faults only with a remap failure; an Xid is the first step).
FAULT_XIDS = frozenset({48, 79, 94, 95})
REMAP_XIDS = frozenset({63, 64})


def faults_of(alerts: Sequence[Alert], remap_failure_gpus: Sequence[int] = ()) -> tuple[Alert, ...]:
    """The hardware faults among `alerts`, to head every view."""
    out = []
    for a in alerts:
        if a.kind in ("gpu_lost", "remap_failure"):
            out.append(a)
        elif a.kind == "xid" and (
            a.code in FAULT_XIDS or a.code in REMAP_XIDS and a.gpu_index in remap_failure_gpus
        ):
            out.append(a)
    return tuple(out)


# -- the watched job (`gputop-diag watch`) -----------------------------------------------------
_JOB_OUTPUT = {
    # kind: (severity, what it is evidence of, what to do)
    "cuda_oom": (
        "critical",
        "device capacity: the job asked a GPU for more memory than it had",
        "lower the batch size or sequence length, enable activation checkpointing, or see what "
        "else holds memory on the GPU (Memory pane)",
    ),
    "nccl_timeout": (
        "critical",
        "communication: a collective waited past its timeout (a rank stopped or hung, or a "
        "link failed)",
        "find the rank that stopped (its own log, py-spy dump), then check the links "
        "(NCCL_DEBUG=INFO, Xid events)",
    ),
    "nccl_error": (
        "warning",
        "communication: NCCL reported an error",
        "rerun with NCCL_DEBUG=INFO for the failing call",
    ),
    "cuda_error": (
        "critical",
        "a CUDA error ended or broke a kernel launch",
        "rerun with CUDA_LAUNCH_BLOCKING=1 to find the call; look for Xid events (Xid pane)",
    ),
}


def job_alerts(snap) -> tuple[Alert, ...]:
    """The watched job's own failures and findings: failure lines in its output (a CUDA OOM is
    device-capacity evidence, an NCCL timeout communication evidence), how it ended, and GPUs it
    holds but does not use."""
    job = snap.job
    if job is None:
        return ()
    out: list[Alert] = []
    by_kind: dict[str, list] = {}
    for e in job.output_events:
        by_kind.setdefault(e.kind, []).append(e)
    for kind in ("cuda_oom", "nccl_timeout", "nccl_error", "cuda_error"):
        events = by_kind.get(kind)
        if not events:
            continue
        sev, what, step = _JOB_OUTPUT[kind]
        last = events[-1]
        times = f" ×{len(events)}" if len(events) > 1 else ""
        out.append(
            Alert(
                f"job_{kind}",
                sev,
                f"job output line {last.line_no}{times}: {clip_words(last.line, 160)} — "
                f"{what}; {step}",
            )
        )
    if job.exit_signal:
        why = (
            " (the kernel's OOM killer sends SIGKILL: see host OOM)"
            if job.exit_signal == ("SIGKILL")
            else ""
        )
        out.append(
            Alert(
                "job_signal",
                "critical",
                f"the job was killed by {job.exit_signal}{why}",
            )
        )
    elif job.exit_code not in (None, 0):
        out.append(Alert("job_exit", "warning", f"the job exited with code {job.exit_code}"))
    s = job.slurm
    pids = {p.pid for p in job.processes}
    used = sorted({g.gpu_index for g in snap.gpu_processes if g.pid in pids})
    if (
        s is not None
        and s.state.upper() == "RUNNING"
        and s.gpus_requested
        and used
        and len(used) < s.gpus_requested
        and s.nodes
        and "," not in s.nodes
        and "[" not in s.nodes
    ):
        out.append(
            Alert(
                "job_gpus_unused",
                "warning",
                f"Slurm job {s.job_id} holds {s.gpus_requested} GPUs and uses {len(used)} "
                f"({_gpus(used)}): the others sit idle while the queue waits; request "
                f"--gpus={len(used)}, or check that every rank found its GPU (LOCAL_RANK)",
                used[0],
                gpus=tuple(used),
            )
        )
    elif job.visible_gpus and used:
        visible = [v for v in job.visible_gpus.split(",") if v.strip()]
        if len(visible) > len(used):
            out.append(
                Alert(
                    "job_gpus_unused",
                    "info",
                    f"the job sees {len(visible)} GPUs (CUDA_VISIBLE_DEVICES={job.visible_gpus})"
                    f" and uses {len(used)} ({_gpus(used)})",
                    used[0],
                    gpus=tuple(used),
                )
            )
    return tuple(out)


# The chain problems NVML's own failure already heads every view with (the banner): no driver.
_CHAIN_SHOWN_ELSEWHERE = frozenset({"no_driver"})


def driver_chain_alerts(snap) -> tuple[Alert, ...]:
    """A broken driver -> CUDA runtime chain (`Snapshot.driver_chain`): a process whose runtime
    is newer than the driver (it never reaches a GPU, so no other figure shows it), a kernel
    module that is not the user-space library's version, a libcuda from another driver, and on
    NVSwitch systems a fabric manager that is stopped, not the driver's version or has not
    registered the GPUs (from the health findings the snapshot carries: CUDA error 802); each
    with the error text the user sees and the next step."""
    chain, health = snap.driver_chain, getattr(snap, "health", None)
    key = (
        snap.system,
        snap.nvml_available,
        tuple((e.code, e.gpu_index) for e in snap.errors if e.source == "nvml"),
        tuple((p.pid, p.arch_list) for p in snap.probes or () if p.arch_list),
        tuple((g.static.name, g.static.compute_capability) for g in snap.gpus),
    )
    memo = _CHAIN_MEMO
    if memo is not None and memo[0] is chain and memo[1] is health and memo[2] == key:
        return memo[3]  # the chain is read every few seconds; a tick judges it again for nothing
    out = _chain_alerts(snap)
    globals()["_CHAIN_MEMO"] = (chain, health, key, out)
    return out


# (the chain, the health report, the rest the judgement reads, its alerts): the last judged
_CHAIN_MEMO: tuple | None = None


def _chain_alerts(snap) -> tuple[Alert, ...]:
    facts = facts_from_snapshot(snap)
    if facts is None:
        return ()
    out = []
    for p in judge_chain(facts, fabric_from_snapshot(snap)):
        if p.severity != "critical" or p.code in _CHAIN_SHOWN_ELSEWHERE:
            continue
        out.append(
            Alert(
                "driver_chain",
                "critical",
                # what users see first, the step (a command) last: a copied command takes
                # no prose with it
                f'driver chain broken at the {p.layer} (users see "{p.first_error}"): '
                f"{p.brief or p.text} (gputop-diag driver)",
            )
        )
    return tuple(out)


def _busy_host(f: Features) -> Alert | None:
    """Other processes' load on a saturated host: a finding of its own, never the job's input
    pressure (the job's own processes are judged apart: `rules.starved_loaders`)."""
    others, host, job = f.others_cpu_pct, f.host_cpu_median, f.job_cpu_pct
    if not f.active_gpus or others is None or host is None or job is None:
        return None
    if host < T.HOST_CPU_SATURATED_PCT or others < T.OTHERS_CPU_PCT:
        return None
    return Alert(
        "host_cpu",
        "warning",
        f"the host's CPUs are busy with other processes: {others:.0f} % of {f.cpu_count} "
        f"cores (this job's processes: {job:.0f} %); the job's own CPU work (its main "
        "thread's launches and syncs, its loaders) waits for a free core; see whose: "
        "ps -eo pid,user,pcpu,comm --sort=-pcpu | head",
    )
