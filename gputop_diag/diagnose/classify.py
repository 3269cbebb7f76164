"""classify(window) -> Diagnosis: a pure judgement over the sample history.

The rules run in a fixed order of precedence: too little data, the scheduler, idle, capacity,
then the shape of GPU busy time over time (communication: dips together across GPUs with
interconnect traffic; input pipeline: gaps with the loaders and storage flat out;
synchronization: gaps with one host thread spinning) and last what the GPU does while busy
(bandwidth, compute). Every class that does not win gets the one figure against it. No clock,
no I/O, no globals: the same window always gives the same diagnosis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..model import OomKill, SchedulerEvidence, Snapshot, formats
from . import limits, measured_rules, rules
from . import thresholds as T
from .alerts import alerts_for, driver_chain_alerts, faults_of, job_alerts
from .checks import MISSING_CHECKS, checks_for, planned_checks, story_pid
from .features import Features, extract
from .health_evidence import with_health
from .job_kind import job_argv
from .rules import Verdict, ev
from .types import BOTTLENECK_CLASSES, Diagnosis, RuledOut
from .work_evidence import with_work

if TYPE_CHECKING:  # the planner loads only where a job's model config is read (`with_plan`)
    from ..planner.configs import ReadConfig

# The GPU classes in order of precedence (the scheduler and idle are decided before them).
# Compute and bandwidth come last and between the two the unit nearer its own roof leads.
RULE_ORDER = (
    "capacity",
    "communication",
    "input_pipeline",
    "synchronization",
    "bandwidth",
    "compute",
)
_WAIT_CLASSES = ("communication", "input_pipeline", "synchronization")


def assess(
    f: Features, scheduler: Sequence[SchedulerEvidence] = (), oom: Sequence[OomKill] = ()
) -> dict[str, Verdict]:
    """Every class's verdict on one window's features."""
    return {
        "capacity": limits.capacity(f),
        # measured inside the job, where a probe measured the part; else inferred from outside
        "communication": measured_rules.wait(f, "communication") or rules.communication(f),
        "input_pipeline": measured_rules.wait(f, "input_pipeline") or rules.input_pipeline(f),
        "synchronization": _synchronization(f),
        "bandwidth": rules.bandwidth(f),
        "compute": rules.compute(f),
        "scheduler": limits.scheduler(f, scheduler),
    }


def _synchronization(f: Features) -> Verdict:
    """The GPU waits on the host: a measured sync, else launch-bound work (the host's launches,
    measured or seen from outside), else the sync seen from outside."""
    measured = measured_rules.wait(f, "synchronization")
    if measured is not None and measured.fires:
        return measured
    launch = measured_rules.launch(f) or rules.launch_bound(f)
    if launch is not None:
        return launch
    return measured or rules.synchronization(f)


def _no_data_reason(f: Features) -> str | None:
    if f.samples == 0:
        return "no samples yet"
    if not f.nvml_ok:
        return f.nvml_problem or "no usable NVIDIA driver: NVML did not initialise"
    if f.gpu_count == 0:
        return "NVML found no GPUs"
    if len(f.lost_gpus) == f.gpu_count:
        return "every GPU is lost (fell off the bus)"
    if f.samples < T.MIN_SAMPLES:
        return f"only {formats.count(f.samples, 'sample')} so far; {T.MIN_SAMPLES} show a shape"
    return None


def _firing(verdicts: dict[str, Verdict]) -> list[str]:
    """The GPU classes whose rule fires, in precedence order; compute and bandwidth by share; a
    wait measured inside the job before the waits inferred from outside."""
    out = [c for c in RULE_ORDER if verdicts[c].fires]
    measured = _measured_waits(verdicts)
    if measured:
        out = (
            [c for c in out if c == "capacity"]
            + measured
            + [c for c in out if c != "capacity" and c not in measured]
        )
    if "compute" in out and "bandwidth" in out:
        share = {c: verdicts[c].share or 0.0 for c in ("compute", "bandwidth")}
        if share["compute"] > share["bandwidth"]:
            i, j = out.index("bandwidth"), out.index("compute")
            out[i], out[j] = out[j], out[i]
    return out


def _measured_waits(verdicts: dict[str, Verdict]) -> list[str]:
    """The waiting classes a measured part of the step decides, the largest share first."""
    hits = [c for c in _WAIT_CLASSES if verdicts[c].fires and verdicts[c].measured]
    return sorted(hits, key=lambda c: -(verdicts[c].share or 0.0))


def raw_primary(f: Features, verdicts: dict[str, Verdict]) -> str:
    """The class this window shows on its own, before hysteresis. A wait measured inside the
    job names its class even where the outside figures cannot judge (no driver, GPUs that look
    idle to NVML because the job starves them): the job's own steps say where the time goes."""
    if verdicts["scheduler"].fires:
        return "scheduler"
    measured = _measured_waits(verdicts)
    if _no_data_reason(f) is not None:
        return measured[0] if measured and f.samples else "insufficient_data"
    if not f.active_gpus:
        return measured[0] if measured else "idle"
    firing = [c for c in _firing(verdicts) if c in ("capacity", *_WAIT_CLASSES)]
    if firing:
        return firing[0]
    # The GPUs wait but what would name the cause is missing: no class may claim it.
    if any(verdicts[c].undecided for c in _WAIT_CLASSES):
        return "undetermined"
    firing = _firing(verdicts)
    if firing:
        return firing[0]
    # "Balanced" says the GPUs work and no unit is near its roof: without busy time and without
    # GPM (MIG mode on older GPUs) neither half can be seen.
    return "balanced" if _sees_work(f) else "undetermined"


def _sees_work(f: Features) -> bool:
    return "util" in f.available or "gpm" in f.available


def secondary_of(primary: str, verdicts: dict[str, Verdict]) -> str | None:
    """A second class whose rule fires too (mixed limits), the next in precedence."""
    if primary not in RULE_ORDER:
        return None
    return next((c for c in _firing(verdicts) if c != primary), None)


def _confidence(f: Features, base: float, needs: Sequence[str]) -> float:
    missing = sum(1 for k in needs if k in f.missing)
    return round(base * T.MISSING_EVIDENCE_FACTOR**missing, 2)


def build(
    f: Features,
    verdicts: dict[str, Verdict],
    primary: str,
    scheduler: Sequence[SchedulerEvidence] = (),
    oom: Sequence[OomKill] = (),
    held: bool = False,
) -> Diagnosis:
    """The Diagnosis naming `primary`, its evidence and the figures against the other classes."""
    v = verdicts.get(primary)
    scope = f.active_gpus
    # `squeue --me` lists the user's jobs on every node, so a running job is not known to be the
    # one on these GPUs: the scope names the process the evidence is about (`story_pid`), the
    # same one the checks name.
    pid = story_pid(primary, f)
    job = None if pid is None else f"pid {pid}"
    reason = _no_data_reason(f)
    secondary = secondary_of(primary, verdicts)
    if primary == "insufficient_data":
        conf = 0.0  # not a verdict: no confidence figure
        evidence = (ev("samples", f.samples, T.MIN_SAMPLES, reason or "no usable data", ""),)
        if f.nvml_next_step:
            evidence += (ev("nvml", None, None, f"next: {f.nvml_next_step}", ""),)
    elif primary == "undetermined":
        conf = 0.0
        evidence = (rules.gap_evidence(f),) if _sees_work(f) else (_blind_evidence(f),)
        for c in _WAIT_CLASSES:
            if verdicts[c].undecided:
                evidence += (verdicts[c].against,)
        evidence += tuple(
            ev("evidence_missing", None, None, f"missing: {MISSING_CHECKS[k]}", "")
            for k in ("util", "gpm", "threads", "nvlink", "host")
            if k in f.missing and (k not in ("util", "gpm") or not _sees_work(f))
        )
    elif primary == "idle" and f.active_gpus:
        # held by hysteresis while the GPUs already run kernels: say what they do now
        conf = T.CONF_STATE * T.HELD_CONFIDENCE
        evidence = (
            ev(
                "util_gpu_p95",
                f.util_p95 or 0.0,
                T.IDLE_UTIL_PCT,
                f"{_gpus_text(f.active_gpus)} started running kernels (busy "
                f"{rules.pct(f.util_median)} since): idle is held until the new class lasts "
                f"{T.HYSTERESIS_TICKS} ticks",
            ),
        )
    elif primary == "idle":
        conf = T.CONF_STATE
        holders = (
            f" while {formats.count(len(f.gpu_pids), 'process', 'processes')} hold GPU memory"
            if f.gpu_pids
            else ""
        )
        evidence = (
            ev(
                "util_gpu_p95",
                f.util_p95 or 0.0,
                T.IDLE_UTIL_PCT,
                f"no GPU ran kernels in the last {f.recent_s:.0f} s (busy time under "
                f"{T.IDLE_UTIL_PCT:.0f} % on {f.gpu_count - len(f.lost_gpus)} GPUs){holders}",
            ),
        )
    elif primary == "balanced":
        conf = _confidence(f, T.CONF_BALANCED, ("gpm", "threads"))
        evidence = (
            rules.gap_evidence(f),
            ev(
                "sm_util",
                f.sm_median,
                T.SM_ACTIVE_PCT,
                f"SM activity {rules.pct(f.sm_median)}, DRAM bandwidth "
                f"{rules.pct(f.dram_median)}, memory controller {rules.pct(f.memctl_median)}, "
                f"power {rules.pct(f.power_pct_median)} of the limit: no class stands out",
            ),
        )
    else:
        base = v.confidence * (T.HELD_CONFIDENCE if held else 1.0)
        if secondary is not None and {primary, secondary} == {"compute", "bandwidth"}:
            base = min(base, T.CONF_MIXED)  # two units near their roofs
        conf = _confidence(f, base, v.needs)
        evidence = v.evidence
        if v.scope_gpus is not None:
            scope = v.scope_gpus
        if v.job is not None:
            job = v.job
    symptom = _memory_symptom(f, primary)
    if symptom is not None:
        evidence = (*tuple(evidence)[:3], symptom)
    ruled = tuple(
        RuledOut(c, _against(f, c, verdicts[c], primary, reason))
        for c in BOTTLENECK_CLASSES
        if c != primary
    )
    alerts = alerts_for(f, scheduler, oom)
    sec = verdicts[secondary] if secondary is not None else None
    finding = v.finding if v is not None and v.fires else None
    return Diagnosis(
        primary=primary,
        confidence=conf,
        scope_gpus=tuple(scope),
        scope_job=job,
        evidence=tuple(evidence[:4]),
        ruled_out=ruled,
        checks=checks_for(primary, f, job, finding=finding),
        finding=finding,
        alerts=alerts,
        missing_evidence=f.missing_names(),
        available_evidence=f.available_names(),
        window_s=round(f.span_s, 1),
        timestamp=f.timestamp,
        secondary=secondary,
        secondary_evidence=tuple(sec.evidence[:2]) if sec is not None else (),
        faults=faults_of(alerts, f.remap_failure_gpus),
    )


def _blind_evidence(f: Features):
    return ev(
        "util_gpu",
        None,
        None,
        f"{formats.count(len(f.active_gpus), 'GPU')} "
        f"{'holds' if len(f.active_gpus) == 1 else 'hold'} running processes, but neither busy "
        "time nor SM "
        f"activity counters are reported (power {rules.pct(f.power_pct_median)} of the limit): "
        "whether they compute or wait cannot be seen",
        "",
    )


def _memory_symptom(f: Features, primary: str):
    """Capacity's first question: is nearly full memory the limit, or a symptom of waiting?"""
    used = f.mem_used_pct_max
    if used is None or used < T.MEMORY_SYMPTOM_PCT or primary not in _WAIT_CLASSES:
        return None
    return ev(
        "mem_used_pct_max",
        used,
        T.CAPACITY_MEM_PCT,
        f"{f.mem_used_where} memory {used:.0f} % used is not the limit here: under "
        f"{T.CAPACITY_MEM_PCT:.0f} %, not growing, and the GPU idles "
        f"{rules.as_pct(f.idle_share)} of the time waiting ({primary.replace('_', ' ')}); a "
        "larger batch would not help until that is fixed",
    )


_KERNEL_CLASSES = ("bandwidth", "compute", "input_pipeline", "synchronization", "communication")


def _against(f: Features, cls: str, v: Verdict, primary: str, reason: str | None):
    """The one figure against `cls`; for a class that also fires, why the winner comes first."""
    if reason is not None and cls != "scheduler" and not v.measured:
        why = "no GPU figures" if not f.nvml_ok else reason
        return ev("not_judged", None, None, f"not judged: {why}", "")
    if not f.active_gpus and cls in _KERNEL_CLASSES and not v.measured:
        return ev(
            "util_gpu_p95",
            f.util_p95 or 0.0,
            T.IDLE_UTIL_PCT,
            "no GPU runs kernels: nothing for it to limit",
        )
    if v.fires and v.evidence and primary in RULE_ORDER:
        e = v.evidence[0]
        return replace(
            e,
            text=f"{e.text} — present too, but {primary.replace('_', ' ')} "
            "comes first: fix that, then look again",
        )
    return v.against


def _in_window(oom: Sequence[OomKill], window: Sequence[Snapshot]) -> tuple[OomKill, ...]:
    if not window:
        return ()
    start = window[0].timestamp
    return tuple(k for k in oom if k.timestamp is None or k.timestamp >= start)


def _slow_sources(window: Sequence[Snapshot], scheduler, kernel_oom):
    """Scheduler and OOM evidence: as given, else what the newest snapshot carries."""
    newest = window[-1] if window else None
    if scheduler is None:
        scheduler = (newest.scheduler_jobs if newest is not None else None) or ()
    if kernel_oom is None:
        kernel_oom = (newest.kernel_ooms if newest is not None else None) or ()
    return tuple(scheduler), tuple(kernel_oom)


def judge(
    window: Sequence[Snapshot],
    scheduler: Sequence[SchedulerEvidence] | None = None,
    kernel_oom: Sequence[OomKill] | None = None,
    tick_s: float = 1.0,
) -> Diagnosis:
    """The class this window shows on its own, without hysteresis."""
    return classify(window, None, scheduler, kernel_oom, tick_s=tick_s)


def classify(
    window: Sequence[Snapshot],
    previous: Diagnosis | None = None,
    scheduler: Sequence[SchedulerEvidence] | None = None,
    kernel_oom: Sequence[OomKill] | None = None,
    tick_s: float = 1.0,
) -> Diagnosis:
    """The current bottleneck of `window` (snapshots, oldest first).

    `previous` is the diagnosis of the tick before: a new class replaces it only after winning
    `HYSTERESIS_TICKS` ticks in a row (counted in `candidate_streak`), so one noisy sample never
    flips the verdict. `scheduler` is the user's Slurm jobs (`collect_scheduler_evidence`),
    `kernel_oom` the OOM kills from the kernel log (`collect_oom_kills`); when left `None` both
    are read from the newest snapshot (`Snapshot.scheduler_jobs`, `Snapshot.kernel_ooms`), which
    is how the Monitor and a replayed recording pass them. Every alert is attached here: the
    driver chain's (first) and the watched job's from the newest snapshot, then its health
    findings (`Snapshot.health`: the cause of the class where they name it, else alerts).
    `tick_s` is the seconds between samples coarser than one a second (Prometheus scrapes):
    each window keeps its number of samples (`thresholds.PROFILING_DIP_MAX_TICK_S`).
    """
    scheduler, kernel_oom = _slow_sources(window, scheduler, kernel_oom)
    f = extract(window, tick_s)
    oom = _in_window(kernel_oom, window)
    verdicts = assess(f, scheduler, oom)
    raw = raw_primary(f, verdicts)
    streak = 1
    if previous is not None and previous.candidate == raw:
        streak = previous.candidate_streak + 1
    keep = (
        previous is not None
        and previous.primary != raw
        and "insufficient_data" not in (previous.primary, raw)  # (extract bridges hiccups)
        and streak < T.HYSTERESIS_TICKS
    )
    primary = previous.primary if keep else raw
    held = keep and primary in verdicts and not verdicts[primary].fires
    d = build(f, verdicts, primary, scheduler, oom, held=held)
    if window:  # a broken driver chain leads; the watched job's own failures close the list
        last = window[-1]
        d = replace(
            d,
            alerts=driver_chain_alerts(last) + d.alerts + job_alerts(last),
            # the job's words (train/serve)
            checks=checks_for(primary, f, d.scope_job, last, finding=d.finding),
            cmdline=job_argv(last, story_pid(primary, f)),
        )
        # what the probe's sampled step measured (precision, shapes, the build's kernels)
        # bears on the class the figures decided and adds its alerts (`work_evidence`)
        d = with_work(d, f)
        # the node and job health findings name the cause of the class the figures decided,
        # or are alerts; they never decide the class (`health_evidence`)
        d = with_health(d, f, last)
    return replace(d, candidate=raw, candidate_streak=streak)


def _gpus_text(gpus: Sequence[int]) -> str:
    return f"GPU {gpus[0]}" if len(gpus) == 1 else f"{len(gpus)} GPUs"


def with_plan(
    d: Diagnosis, window: Sequence[Snapshot], read: ReadConfig, tick_s: float = 1.0
) -> Diagnosis:
    """`d` with the memory plan of the job's own model (`--model-config`): a capacity verdict's
    first checks become the plan's terms and the what-ifs that make it fit, in place of the
    advice read from the job's command line. Other classes' checks do not depend on the plan."""
    if d.primary != "capacity" or not window:
        return d
    from ..planner.live import job_plan

    f = extract(window, tick_s)
    last = window[-1]
    pid = story_pid("capacity", f)
    jp = job_plan(last, read, gpu_index=f.mem_used_pct_gpu, pids=(pid,) if pid else ())
    if jp is None:
        return d
    return replace(d, checks=planned_checks(d.checks, f, last, jp.doc))
