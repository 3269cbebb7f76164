"""The ranks of a distributed job as Prometheus series: what each rank's probe measured.

The probe inside each process of a training job (`gputop-diag watch --probe`) writes its steps
to a file (`probe/schema.py`); the Monitor reads the files of the GPU processes each tick
(`Snapshot.probes`). The exporter publishes, per rank, the medians `diagnose/ranks.py` compares
ranks by, so `gputop-diag fleet` can name the straggler and a hang across nodes from Prometheus:

- `gputop_diag_rank_info{hpc_job, rank, pid, gpu, node, world, local_rank} 1` joins a rank to
  its process, its GPU and the node it runs on;
- gauges keyed by `hpc_job` and `rank`: the step's median seconds, the share of it the rank
  waits in collectives, its own work, the collectives it entered, the seconds since its last
  step, whether it is in a collective now, and the steps the medians are over.

Low cardinality: one sample per rank and gauge, nothing per step; a restarted rank keeps its
labels (its newest process wins), and a rank that said goodbye is dropped.

`ProbeFiles` reads every probe file of this user (`exporter --all-probes`), for the ranks NVML
does not list as GPU processes (a CPU rank, another PID namespace).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric

from ..collect.probe import ProbeReader
from ..model import ProbeState, Snapshot

PREFIX = "gputop_diag_rank_"
RANK_LABELS = ("rank", "run")
INFO_LABELS = ("pid", "gpu", "node", "world", "local_rank")
NODE_LABEL = "node"  # the probe's host name: identifying, dropped under --sanitize
# A probe file's name and its older generation (probe/schema.py `file_name`, which this layer
# may not import; tests/test_fleet_ranks.py checks that the two agree): the pid it names.
PROBE_FILE = re.compile(r"^probe-(\d+)-\d+\.jsonl(?:\.1)?$")


@dataclass(frozen=True, slots=True)
class RankSample:
    """One rank's probe with the time its stall is counted against (the probe's clock)."""

    probe: ProbeState
    now: float


def step_seconds(p: ProbeState, now: float) -> float | None:
    return p.steps.wall_p50_s if p.steps else None


def own_seconds(p: ProbeState, now: float) -> float | None:
    return p.steps.own_p50_s if p.steps else None


def wait_ratio(p: ProbeState, now: float) -> float | None:
    s = p.steps
    if s is None or s.wait_p50_s is None or not s.wall_p50_s:
        return None
    return s.wait_p50_s / s.wall_p50_s


def input_seconds(p: ProbeState, now: float) -> float | None:
    return p.steps.input_p50_s if p.steps else None


def sync_seconds(p: ProbeState, now: float) -> float | None:
    return p.steps.sync_p50_s if p.steps else None


def collective_seq(p: ProbeState, now: float) -> float | None:
    """Collectives entered so far: the progress record's while a step runs long (it counts the
    one the rank is in), else the newest step's."""
    if p.progress is not None:
        return float(p.progress.entered)
    seq = p.steps.coll_seq if p.steps else None
    return None if seq is None else float(seq)


def stalled_seconds(p: ProbeState, now: float) -> float | None:
    """Seconds since the rank's last step ended (its progress record's stall where newer)."""
    since = [now - p.steps.last_at] if p.steps else []
    if p.progress is not None:
        since.append(p.progress.stalled_s + max(0.0, now - p.progress.at))
    return max(0.0, max(since)) if since else None


def in_collective(p: ProbeState, now: float) -> float | None:
    return 1.0 if p.progress is not None and p.progress.in_collective else 0.0


def window_steps(p: ProbeState, now: float) -> float | None:
    if p.steps is None:
        return None
    return float(p.steps.median_steps or p.steps.steps)


def gone(p: ProbeState, now: float) -> float | None:
    return 1.0 if p.gone else 0.0


# name, help, the figure of one rank (None: no sample)
_GAUGES: tuple[tuple[str, str, Callable[[ProbeState, float], float | None]], ...] = (
    ("step_seconds", "Median step time of the rank over its latest steps, seconds.", step_seconds),
    (
        "own_seconds",
        "Median work of the rank's own a step (the step minus its exposed communication), "
        "seconds; absent where communication is not measured.",
        own_seconds,
    ),
    (
        "wait_ratio",
        "Share of the median step the rank waits in collectives (exposed communication / step), "
        "0-1; the straggler waits least.",
        wait_ratio,
    ),
    ("input_seconds", "Median wait for the next batch a step, seconds.", input_seconds),
    ("sync_seconds", "Median host-device synchronisation a step, seconds.", sync_seconds),
    (
        "collective_seq",
        "Collectives the rank has entered (the sequence number of the newest); a hung rank's is "
        "behind the others'.",
        collective_seq,
    ),
    ("stalled_seconds", "Seconds since the rank's last step ended.", stalled_seconds),
    ("in_collective", "1 while the rank is blocked in a collective, else 0.", in_collective),
    (
        "window_steps",
        "Steps the rank's medians are over (its newest 30 s, at most 1000).",
        window_steps,
    ),
    (
        "gone",
        "1 when the rank's process ended without a goodbye (killed, or failed on an exception), "
        "kept 2 minutes; else 0.",
        gone,
    ),
)
GAUGE_NAMES = tuple(PREFIX + name for name, _, _ in _GAUGES)


def newest_ranks(
    samples: Sequence[RankSample], job_of: Callable[[ProbeState], str]
) -> list[tuple[str, RankSample]]:
    """(job, sample), one per job and rank: the newest process of a rank that restarted; none
    for a process without a rank or one that said goodbye (its job ended as it should)."""
    chosen: dict[tuple[str, str, int], RankSample] = {}
    for s in samples:
        p = s.probe
        if p.rank is None or p.ended:
            continue
        key = (job_of(p), p.run_id or "", p.rank)
        kept = chosen.get(key)
        if kept is None or (p.updated_at or 0.0) >= (kept.probe.updated_at or 0.0):
            chosen[key] = s
    return [(job, s) for (job, _, _), s in sorted(chosen.items())]


def rank_families(
    ranks: Sequence[tuple[dict[str, str], RankSample]], node_names: Sequence[str]
) -> list[Metric]:
    """The info series and the gauges of `ranks`: (the labels shown for the rank, by name:
    the node's labels plus rank, pid, gpu, node, world, local_rank; its sample)."""
    if not ranks:
        return []
    keyed = [*node_names, *RANK_LABELS]
    info_names = [*keyed, *(n for n in INFO_LABELS if n in ranks[0][0])]
    info = GaugeMetricFamily(
        PREFIX + "info",
        "A rank of a distributed job run with the probe, 1 per rank: its process, its GPU (empty "
        "where NVML does not list it), the node it runs on, the world size; join it with "
        "* on(hpc_job, rank) group_left(node, gpu).",
        labels=info_names,
    )
    gauges = [GaugeMetricFamily(PREFIX + n, h, labels=keyed) for n, h, _ in _GAUGES]
    for labels, sample in ranks:
        info.add_metric([labels[n] for n in info_names], 1.0)
        key = [labels[n] for n in keyed]
        for fam, (_, _, figure) in zip(gauges, _GAUGES, strict=True):
            v = figure(sample.probe, sample.now)
            if v is not None:
                fam.add_metric(key, v)
    return [info, *gauges]


def rank_labels(p: ProbeState, gpu: int | None) -> dict[str, str]:
    """A rank's own labels (before the node's): rank, pid, gpu, node, world, local_rank."""
    return {
        "rank": str(p.rank),
        "run": p.run_id or "",
        "pid": str(p.pid),
        "gpu": "" if gpu is None else str(gpu),
        NODE_LABEL: p.node or "",
        "world": "" if p.world is None else str(p.world),
        "local_rank": "" if p.local_rank is None else str(p.local_rank),
    }


def samples_of(snap: Snapshot, extra: Sequence[RankSample] = ()) -> list[RankSample]:
    """The probes of a tick's processes (their stall counted on the tick's clock) and `extra`
    ones, once each (by pid and start)."""
    seen: dict[tuple[int, int], RankSample] = {}
    for s in (*(RankSample(p, snap.timestamp) for p in snap.probes or ()), *extra):
        seen.setdefault((s.probe.pid, s.probe.start_ticks), s)
    return list(seen.values())


class ProbeFiles:
    """Every probe file of this user in the probe directory whose process runs, read each tick
    (`exporter --all-probes`): the ranks NVML does not list as GPU processes. The directory is
    the exporter's own ($XDG_RUNTIME_DIR/gputop-diag, else /tmp/gputop-diag-UID); files are read
    as the Monitor reads them (`collect/probe.py`: ours only, never through a link)."""

    def __init__(self, environ: dict[str, str], procfs, now: Callable[[], float] = time.time):
        self._reader = ProbeReader(environ, procfs, now=now)
        self.directory = self._reader.directory
        self.now = now  # the probe's clock: the wall clock, also under --demo

    def read(self) -> list[RankSample]:
        try:
            names = os.listdir(self.directory)
        except OSError:
            names = []
        pids = {int(m.group(1)) for n in names if (m := PROBE_FILE.match(n))}
        now = self.now()
        return [RankSample(p, now) for p in self._reader.read(pids).states]
