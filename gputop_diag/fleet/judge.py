"""The fleet's diagnosis: the same classifier per node, and what only several nodes show.

Each node's snapshots (`fleet/read.py`) are judged as the node's own panes judge them
(`fleet/node_judge.py`): the verdict a Monitor holds once fed the node's window in order, its
last minute (in ticks) classified with hysteresis, so a row and its node's side panel name the
same class. A multi-node job (nodes that share the --group-by label, the Slurm job by default)
adds two findings no single node can see:

- **correlated dips**: GPU activity falls on most of the job's nodes at the same moments, the
  shape of a collective (all-reduce) waiting on the network; and
- **a straggler**: most nodes wait on their collectives (communication-bound) while one node
  does something else (computes, throttles, waits on its input): that node holds the job back
  and is the one to fix first. Inferred from the nodes' classes; where the job's ranks run with
  the probe and their exporters publish `gputop_diag_rank_*`, the straggler rank and its node,
  or the hang, are measured instead (`fleet/ranks.py`, `diagnose/ranks.py`).

Pure functions over `FleetData`: no I/O, no clock.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..diagnose import host_figures, memory_figures
from ..diagnose import thresholds as T
from ..diagnose.render import to_json
from ..diagnose.types import Diagnosis
from ..model import Snapshot, formats
from ..model.codec import iso_time
from ..model.stats import median, percentile
from .node_judge import judge_node, judge_steady
from .ranks import RankFigures, judge_job_ranks
from .read import FleetData, NodeData

FLEET_SCHEMA = "gputop-diag.fleet/1"
# Ours: a node whose newest sample is this many steps older than the window's end has stopped
# reporting (its exporter or Prometheus' scrape of it is down); its verdict is stale.
STALE_STEPS = 3
# Ours: a job's nodes wait on a straggler when at least half of the others are communication-
# bound and at most a quarter of the job (at least one node) does something else.
STRAGGLER_WAITING_SHARE = 0.5
STRAGGLER_MAX_SHARE = 0.25
_NOT_A_CLASS = ("insufficient_data", "idle")
# What each source adds, for the names of what a node lacks.
SOURCE_NAMES = {
    "profiling": "DCGM profiling series (DCGM_FI_PROF_*: SM, tensor and DRAM activity)",
    "nvlink": "NVLink throughput (DCGM_FI_PROF_NVLINK_TX_BYTES/RX)",
    "host": "host CPU, iowait and pressure (node-exporter, or gputop-diag exporter)",
    "processes": "GPU processes (gputop_diag_process_gpu_memory_bytes)",
    "threads": "threads and dataloader helpers (gputop_diag_process_thread/child_cpu_percent)",
}


@dataclass(frozen=True)
class NodeVerdict:
    node: NodeData
    diagnosis: Diagnosis
    busy_pct: float | None  # mean GPU busy time over the window (the active GPUs)
    clock_pct: float | None  # median SM clock, % of max, while busy
    missing_series: tuple[str, ...]
    stale_s: float | None  # how long before the window's end it last reported (when stale)
    gpus: int = 0  # the most GPUs one of its snapshots holds
    samples: int = 0  # its snapshots in the window
    # its GPU activity at each snapshot's time (`_activity`): what the job's dips compare,
    # kept once the snapshots are dropped
    activity: tuple[tuple[float, float | None], ...] = ()
    # "raw": judged from its raw series; "aggregate": from the server's aggregates over the
    # window, where they decide the verdict (`fleet/triage.py`)
    read: str = "raw"


@dataclass(frozen=True)
class JobFinding:
    kind: str  # "straggler", "hang", "ranks" (no straggler among measured ranks), "correlated_dips"
    text: str
    node: str | None = None
    value: float | None = None
    basis: str | None = None  # a straggler's: "measured" (the ranks' probes) or "inferred"
    rank: int | None = None  # the measured straggler, or the first rank a hang waits for


@dataclass(frozen=True)
class JobVerdict:
    job: str
    nodes: tuple[str, ...]
    classes: dict[str, int]
    findings: tuple[JobFinding, ...] = ()


@dataclass
class FleetVerdict:
    data: FleetData
    nodes: list[NodeVerdict] = field(default_factory=list)
    jobs: list[JobVerdict] = field(default_factory=list)


def natural_key(name: str) -> tuple:
    """Names in natural order: gpu2 before gpu10, 10.0.0.9:9400 before 10.0.0.10:9400."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part.lower())
        for part in re.split(r"(\d+)", name)
        if part
    )


def judge_fleet(data: FleetData) -> FleetVerdict:
    out = FleetVerdict(data)
    out.nodes = judge_nodes(data)
    out.jobs = judge_jobs(out.nodes, data)
    return out


def judge_nodes(data: FleetData, *, drop: bool = False, steady: bool = False) -> list[NodeVerdict]:
    """Each node of `data` judged, in natural order; `drop`: the verdicts keep no snapshots
    (what the judgement of the node's jobs needs is kept in `activity`), so a batch of nodes
    is judged and its window let go; `steady`: nodes whose every window shows one class by
    construction, judged from their last window alone (`node_judge.judge_steady`)."""
    sm_ok = data.tick_s <= T.PROFILING_DIP_MAX_TICK_S
    out = []
    for key in sorted(data.nodes, key=natural_key):
        nd = data.nodes[key]
        snaps = nd.snapshots
        d = (judge_steady if steady else judge_node)(snaps, data.tick_s)
        stale = None
        if nd.last_seen is not None and data.end - nd.last_seen > STALE_STEPS * data.step_s:
            stale = data.end - nd.last_seen
        out.append(
            NodeVerdict(
                replace(nd, snapshots=[]) if drop else nd,
                d,
                _busy(snaps),
                _clock(snaps),
                _missing(nd),
                stale,
                gpus=max((len(s.gpus) for s in snaps), default=0),
                samples=len(snaps),
                activity=tuple((s.timestamp, _activity(s, sm_ok)) for s in snaps),
            )
        )
    if drop:  # the diagnosis' memos would keep the last windows' snapshots alive
        host_figures.forget()
        memory_figures.forget()
    return out


def judge_jobs(nodes: Sequence[NodeVerdict], data: FleetData) -> list[JobVerdict]:
    """The multi-node jobs among the judged nodes (`data` for its ranks, end and tick)."""
    groups: dict[str, list[NodeVerdict]] = {}
    for v in nodes:
        if v.node.group:
            groups.setdefault(v.node.group, []).append(v)
    for job in data.ranks:
        if job and len(data.ranks[job]) >= 2:
            groups.setdefault(job, [])
    return [_judge_job(job, members, data) for job, members in sorted(groups.items())]


def _missing(nd: NodeData) -> tuple[str, ...]:
    have = set(nd.sources)
    if have & {"gputop_diag", "node_exporter"}:
        have.add("host")
    if "gputop_diag" in have:  # our exporter publishes them whenever there are any
        have |= {"processes", "threads"}
    return tuple(SOURCE_NAMES[k] for k in SOURCE_NAMES if k not in have)


def _active(snap: Snapshot) -> list:
    return [g for g in snap.gpus if not g.lost and g.util_gpu_pct is not None]


def _busy(snaps: Sequence[Snapshot]) -> float | None:
    vals = [g.util_gpu_pct for s in snaps for g in _active(s)]
    return statistics.fmean(vals) if vals else None


def _clock(snaps: Sequence[Snapshot]) -> float | None:
    return median(
        [
            g.sm_clock_pct_of_max
            for s in snaps
            for g in s.gpus
            if not g.lost and (g.util_gpu_pct or 0) > T.IDLE_UTIL_PCT
        ]
    )


def _activity(s: Snapshot, sm_ok: bool = True) -> float | None:
    """A node's GPU activity at one step: mean SM activity (GPM) or busy time; busy time alone
    when steps are so far apart that the profiling ratios average the dips out (`sm_ok`)."""
    sm = [g.gpm.sm_util_pct for g in s.gpus if g.gpm is not None and g.gpm.sm_util_pct is not None]
    if sm and sm_ok:
        return statistics.fmean(sm)
    util = [g.util_gpu_pct for g in _active(s)]
    return statistics.fmean(util) if util else None


def correlated_dips(series: Sequence[Sequence[float | None]]) -> tuple[float, int]:
    """(share of steps where most nodes dip together, steps compared): a node dips when its
    activity falls DIP_POINTS under its own p90, as the single-node rule does across GPUs."""
    if len(series) < 2:
        return 0.0, 0
    steps = min(len(s) for s in series)
    p90 = [percentile(list(s), 90) or 0.0 for s in series]
    together = compared = 0
    for k in range(steps):
        seen = [(s[k], p) for s, p in zip(series, p90, strict=True) if s[k] is not None]
        if len(seen) < 2:
            continue
        compared += 1
        dipping = sum(1 for v, p in seen if v < p - T.DIP_POINTS)
        together += dipping >= T.CORRELATED_DIPS * len(seen)
    return (together / compared if compared else 0.0), compared


def _judge_job(job: str, members: list[NodeVerdict], data: FleetData) -> JobVerdict:
    names = tuple(v.node.key for v in members)
    classes = Counter(v.diagnosis.primary for v in members)
    findings: list[JobFinding] = []
    measured = _ranks_findings(data.ranks.get(job, ()), data.end)
    if measured is not None:
        findings += measured
    if len(members) >= 2:
        findings += _dips_finding(members, data)
        straggler = _straggler(members) if measured is None else None
        if straggler is not None:
            findings.append(straggler)
    return JobVerdict(job, names, dict(classes), tuple(findings))


def _hang_next(hang, ranks: Sequence[RankFigures]) -> str:
    """Where to look, with the rank's pid and node (the stacks stay on the node: Prometheus
    has none)."""
    if not hang.missing:
        return (
            "a communication problem, not a rank: check the network between the nodes (NCCL "
            "RAS, `NCCL_DEBUG=INFO`)"
        )
    r = next((r for r in ranks if r.rank == hang.missing[0]), None)
    if r is None:
        return hang.next_step
    return (
        f"look at what rank {r.rank} is doing on {r.where} (pid {r.pid}): its Python stack "
        f"(`py-spy dump --pid {r.pid}` there), its output's last lines, and that node's kernel "
        "log for a crash or an OOM kill"
    )


def _ranks_findings(ranks: Sequence[RankFigures], at: float) -> list[JobFinding] | None:
    """What the job's ranks measured: the hang, else the straggler rank and its node, else why
    none is named; None where the job has fewer than two ranks with figures."""
    view = judge_job_ranks(ranks, at)
    if view is None:
        return None
    node_of = {r.rank: r.node for r in ranks}
    n = len(view.rows)
    if view.hang is not None:
        h = view.hang
        first = (h.missing or h.waiting or (None,))[0]
        return [
            JobFinding(
                "hang",
                f"measured over {n} ranks: {view.verdict}; next: {_hang_next(h, ranks)}",
                node=node_of.get(first) if first is not None else None,
                value=round(h.stalled_s, 1),
                basis="measured",
                rank=first,
            )
        ]
    s = view.straggler
    if s is None:
        return [JobFinding("ranks", f"measured over {n} ranks: {view.verdict}", basis="measured")]
    return [
        JobFinding(
            "straggler",
            f"measured over {n} ranks: {view.verdict}; "
            + "; ".join(s.evidence)
            + f". Next: {s.next_step}",
            node=node_of.get(s.rank),
            value=round(100 * s.gap_share, 1),
            basis="measured",
            rank=s.rank,
        )
    ]


def _dips_finding(members: list[NodeVerdict], data: FleetData) -> list[JobFinding]:
    # Align the nodes' steps on their timestamps (every node's snapshots sit on one grid).
    times = sorted({t for v in members for t, _ in v.activity})
    series = []
    for v in members:
        at = dict(v.activity)
        series.append([at.get(t) for t in times])
    share, compared = correlated_dips(series)
    if compared < T.MIN_SAMPLES or share < T.COMM_DIP_FRACTION:
        return []
    return [
        JobFinding(
            "correlated_dips",
            f"GPU activity dips on {len(members)} nodes at once in {share:.0%} of "
            f"{compared} samples: the job waits on collectives across nodes (all-reduce over "
            "the network); the network's own counters are not read, so this is the shape only",
            value=round(100 * share, 1),
        )
    ]


def _straggler(members: list[NodeVerdict]) -> JobFinding | None:
    waiting = [v for v in members if v.diagnosis.primary == "communication"]
    others = [
        v
        for v in members
        if v.diagnosis.primary != "communication" and v.diagnosis.primary not in _NOT_A_CLASS
    ]
    n = len(members)
    if not others or len(waiting) < STRAGGLER_WAITING_SHARE * (n - len(others)):
        return None
    if len(others) > max(1, int(STRAGGLER_MAX_SHARE * n)):
        return None
    slow = max(others, key=lambda v: v.busy_pct or 0.0)
    d = slow.diagnosis
    wait_busy = median([v.busy_pct for v in waiting])
    why = d.evidence[0].text if d.evidence else ""
    clock = ""
    peers_clock = median([v.clock_pct for v in waiting])
    if slow.clock_pct is not None and peers_clock is not None:
        clock = f"; SM clock {slow.clock_pct:.0f} % of max vs {peers_clock:.0f} % on the others"
    alerts = "; ".join(a.text for a in d.alerts[:1])
    return JobFinding(
        "straggler",
        "inferred from the nodes' classes (no rank series): "
        f"{slow.node.key} holds the job back: {len(waiting)} of its {n} nodes wait on "
        f"collectives (communication, GPUs busy {_pct(wait_busy)}) while {slow.node.key} is "
        f"{d.label} (GPUs busy {_pct(slow.busy_pct)}{clock}): {why}"
        + (f" [{alerts}]" if alerts else "")
        + f". Fix {slow.node.key} first; the others' communication class follows from it",
        node=slow.node.key,
        value=slow.busy_pct,
        basis="inferred",
    )


_pct = formats.pct


# -- output --------------------------------------------------------------------------------------
def to_fleet_json(
    fv: FleetVerdict, *, prometheus: str | None, match: str | None, group_by: str
) -> dict:
    """The fleet as `--json` prints it; under --sanitize, `fv` is `FleetNames.verdict`'s copy
    and `prometheus` and `match` are None (an address, a selector naming hosts)."""
    data = fv.data
    nodes = []
    for v in fv.nodes:
        d = v.diagnosis
        nd = v.node
        nodes.append(
            {
                "node": nd.key,
                "hostname": nd.hostname,
                "instances": list(nd.instances),
                "group": nd.group,
                "gpus": v.gpus,
                "model": nd.model,
                "primary": d.primary,
                "confidence": d.confidence if d.has_confidence else None,
                "secondary": d.secondary,
                "evidence": [e.text for e in d.evidence[:2]],
                "alerts": [
                    {"kind": a.kind, "severity": a.severity, "text": a.text} for a in d.alerts
                ],  # fmt: skip
                "faults": [a.text for a in d.faults],
                "evidence_missing": list(d.missing_evidence),
                "series_missing": list(v.missing_series),
                "sources": list(nd.sources),
                "samples": v.samples,
                "read": v.read,
                "busy_pct": _round(v.busy_pct),
                "stale_s": _round(v.stale_s),
                "diagnosis": to_json(d),
            }
        )
    return {
        "schema": FLEET_SCHEMA,
        "prometheus": prometheus,
        "sanitized": prometheus is None,
        "match": match or None,
        "group_by": group_by,
        "time": iso_time(data.end),
        "timestamp": data.end,
        "window_s": round(data.end - data.start, 1),
        "step_s": data.step_s,
        "tick_s": data.tick_s,
        "queries": data.queries,
        "nodes": nodes,
        "jobs": [
            {
                "job": j.job,
                "nodes": list(j.nodes),
                "classes": j.classes,
                "findings": [_finding_json(f) for f in j.findings],
            }
            for j in fv.jobs
        ],
        "summary": dict(Counter(v.diagnosis.primary for v in fv.nodes)),
        "reads": _reads(fv),
        "warnings": list(data.warnings),
    }


def _reads(fv: FleetVerdict) -> dict:
    """How many nodes were judged from the server's aggregates and how many from their raw
    series, and why those were read raw (`fleet/triage.py`)."""
    n = Counter(v.read for v in fv.nodes)
    return {"aggregate": n["aggregate"], "raw": n["raw"], "raw_because": fv.data.raw_because}


def _finding_json(f: JobFinding) -> dict:
    out = {"kind": f.kind, "node": f.node, "value": _round(f.value), "text": f.text}
    if f.basis is not None:
        out.update(basis=f.basis, rank=f.rank)
    return out


def _round(v: Any) -> Any:
    return round(v, 2) if isinstance(v, float) else v


def render_fleet_text(fv: FleetVerdict, *, width: int = 100) -> str:
    data = fv.data
    lines = [
        f"Fleet: {len(fv.nodes)} nodes, window {data.end - data.start:.0f} s ending "
        f"{iso_time(data.end)}, one sample every {data.step_s:g} s"
        + ("" if data.tick_s == 1.0 else " (the classifier's windows keep their sample counts)"),
        "",
    ]
    key_w = max([4, *(len(v.node.key) for v in fv.nodes)])
    lines.append(f"{'NODE':<{key_w}}  {'CLASS':<17} {'CONF':>4}  {'ALERTS':<14} EVIDENCE")
    order = sorted(fv.nodes, key=lambda v: (severity_rank(v), natural_key(v.node.key)))
    for v in order:
        d = v.diagnosis
        label, conf = class_and_confidence(v)
        alerts = ",".join(sorted({a.kind for a in d.alerts})) or "-"
        ev = d.evidence[0].text if d.evidence else ""
        if v.stale_s is not None:
            ev = stale_text(v.stale_s) + (f"; before it: {d.label}" if d.has_confidence else "")
        rest = width - key_w - 41
        ev = ev if len(ev) <= rest or rest < 20 else ev[: rest - 1] + "…"
        lines.append(f"{v.node.key:<{key_w}}  {label:<17} {conf:>4}  {alerts[:14]:<14} {ev}")
        if v.missing_series:
            lines.append(f"{'':<{key_w}}  missing: " + "; ".join(v.missing_series))
    if fv.jobs:
        lines += ["", "Jobs:"]
        for j in fv.jobs:
            classes = ", ".join(f"{c.replace('_', ' ')} ×{n}" for c, n in j.classes.items())
            lines.append(f"  {j.job}: {len(j.nodes)} nodes ({classes})")
            lines += [f"    - {f.text}" for f in j.findings]
    counts = Counter(v.diagnosis.primary for v in fv.nodes)
    lines += ["", "By class: " + ", ".join(f"{c.replace('_', ' ')} {n}" for c, n in
                                             counts.most_common())]  # fmt: skip
    aggregate = sum(v.read == "aggregate" for v in fv.nodes)
    if aggregate:
        lines.append(
            "Judged from Prometheus' aggregates (idle throughout): "
            f"{formats.count(aggregate, 'node')}; read "
            f"raw: {len(fv.nodes) - aggregate}"
        )
    lines += [f"warning: {w}" for w in data.warnings]
    return "\n".join(lines)


def class_and_confidence(v: NodeVerdict) -> tuple[str, str]:
    """What the CLASS and CONF columns say: STALE and no confidence for a node that stopped
    reporting (its class is of figures that old), else its class and confidence."""
    d = v.diagnosis
    if v.stale_s is not None:
        return "STALE", "-"
    return d.label, f"{d.confidence:.0%}" if d.has_confidence else "-"


def stale_text(stale_s: float) -> str:
    return f"no scrape for {stale_s:.0f} s (its exporter or Prometheus' scrape of it stopped)"


def severity_rank(v: NodeVerdict) -> int:
    """The order the table lists nodes in: stale first (what it says is old), then faults,
    critical alerts, other alerts, the rest."""
    d = v.diagnosis
    if v.stale_s is not None:
        return -1
    if d.faults:
        return 0
    if any(a.severity == "critical" for a in d.alerts):
        return 1
    if d.alerts:
        return 2
    return 3
