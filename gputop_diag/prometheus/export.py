"""The exporter's core: the newest Monitor tick as Prometheus metric families.

Per-GPU series carry dcgm-exporter's names, units and labels (`dcgm_fields.py`), so dashboards
and alert rules written for dcgm-exporter read them unchanged; `gputop_diag_*` series carry what
DCGM has no name for: the verdict, the job's host-side input pressure, its helpers' CPU (the
dataloader), the GPU processes, the host figures the classifier reads, and Xid counts.

`TickMetrics.update(tick)` runs once per tick on the exporter's loop and builds every family;
a scrape (`collect()`) only hands the ready families to prometheus-client, so its cost does not
grow with the history. No Textual, no I/O except the Slurm job id (`SlurmJobs`).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .. import __version__
from ..diagnose.features import extract
from ..diagnose.rules import input_pressure
from ..model import GpuState, ProcessInfo, Snapshot
from ..monitor.core import WINDOW_S, Tick
from ..sanitize.sanitizer import Sanitizer
from ..sanitize.snapshot import learn_snapshots
from .dcgm_fields import (
    FIELDS,
    GPU_LABELS,
    HOST_LABEL,
    HOST_LABELS,
    IDENTIFYING_LABELS,
    JOB_LABEL,
    MIG_FIELDS,
    MIG_ID_LABEL,
    MIG_PROFILE_LABEL,
    MODEL_LABEL,
    MODEL_LABEL_LINT_CLEAN,
    NOT_LINT_CLEAN,
    XID_FIELD,
    Field,
    mig_profile,
)
from .owners import OWNER_LABELS, HpcJobMapping, ShownOwners, holder
from .ranks import NODE_LABEL, ProbeFiles, newest_ranks, rank_families, rank_labels, samples_of

PREFIX = "gputop_diag_"
SLURM_JOB_ENV = "SLURM_JOB_ID"
NAMES_CACHED = 4096  # thread and helper names judged under --sanitize, remembered
OTHER = "other"  # a thread's or helper's name under --sanitize when it is not a runtime's


def _family(f: Field, labels: Sequence[str], lint_clean: bool) -> Metric:
    if f.exposed_type(lint_clean) == "gauge":
        return GaugeMetricFamily(f.name, f.help, labels=labels)
    # DCGM's counters keep their exact names: written untyped here, and typed `counter` by
    # `TickMetrics.exposition` (prometheus-client would name a counter's samples NAME_total).
    return Metric(f.name, f.help, "unknown")


def _add(m: Metric, labels: Sequence[str], names: Sequence[str], value: float) -> None:
    if isinstance(m, (GaugeMetricFamily, CounterMetricFamily)):
        m.add_metric(list(labels), value)
    else:
        m.add_sample(m.name, dict(zip(names, labels, strict=True)), value)


@dataclass
class SlurmJobs:
    """The Slurm job of each GPU: SLURM_JOB_ID in the environment of the processes on it, else
    the exporter's own (run it inside the allocation: `srun --overlap gputop-diag exporter`).
    A process's environment is read once (it does not change)."""

    psutil: object | None
    own_job: str | None = field(default_factory=lambda: os.environ.get(SLURM_JOB_ENV) or None)
    _seen: dict[int, str | None] = field(default_factory=dict)

    def of_pid(self, pid: int) -> str | None:
        if pid not in self._seen:
            job = None
            try:
                env = self.psutil.Process(pid).environ()  # type: ignore[union-attr]
                job = env.get(SLURM_JOB_ENV) or None
            except Exception:  # noqa: BLE001 - gone, another user's, or no psutil: no job id
                job = None
            self._seen[pid] = job
        return self._seen[pid]

    def by_gpu(self, snap: Snapshot) -> dict[int, str]:
        live = {p.pid for p in snap.gpu_processes}
        for pid in [p for p in self._seen if p not in live]:
            del self._seen[pid]
        jobs: dict[int, Counter] = {}
        for p in snap.gpu_processes:
            job = self.of_pid(p.pid) if self.psutil is not None else None
            if job:
                jobs.setdefault(p.gpu_index, Counter())[job] += 1
        out = {i: c.most_common(1)[0][0] for i, c in jobs.items()}
        if self.own_job:
            for g in snap.gpus:
                out.setdefault(g.index, self.own_job)
        return out


class TickMetrics:
    """prometheus-client collector serving the families built from the newest tick."""

    def __init__(
        self,
        *,
        sanitize: bool = False,
        lint_clean: bool = False,
        host_label: str = HOST_LABEL,
        dcgm_labels: bool | None = None,
        jobs: SlurmJobs | None = None,
        source: str = "nvml",
        window: Callable[[], Sequence[Snapshot]] | None = None,
        sanitizer: Sanitizer | None = None,
        kubernetes: bool = False,
        owner_info: bool = False,
        hpc_jobs: HpcJobMapping | None = None,
        probe_files: ProbeFiles | None = None,
    ) -> None:
        self.sanitize = sanitize
        # Whose GPU it is (`owners.py`): dcgm-exporter's labels on every per-GPU series
        # (`kubernetes`), or one info series per GPU to join at query time (`owner_info`).
        self.kubernetes = kubernetes
        self.owner_info = owner_info
        self.hpc_jobs = hpc_jobs
        self.attribute = kubernetes or owner_info or hpc_jobs is not None
        self._mapped: dict[str, tuple[str, ...]] = {}  # the HPC job mapping, read this tick
        # Under --sanitize: the one sanitizer, seeded with the machine's names
        # (`commands.common.seeded_sanitizer`), judges each thread and helper name.
        self.sanitizer = (sanitizer if sanitizer is not None else Sanitizer()) if sanitize else None
        self._shown = ShownOwners(self.sanitizer)
        self._shown_names: dict[str, str] = {}
        self._learned_pids: frozenset[int] = frozenset()
        # dcgm-exporter's names and types (the default), or what promtool's lint accepts
        # (`exporter --lint-clean`: model_name, DCGM's counters untyped). `dcgm_labels=True`
        # asked for dcgm-exporter's spelling when it was not the default: it changes nothing.
        self.lint_clean = lint_clean and not dcgm_labels
        if host_label not in HOST_LABELS:
            raise ValueError(f"host label {host_label!r}: expected one of {HOST_LABELS}")
        self.host_label = host_label
        self.gpu_label_names = tuple(
            MODEL_LABEL_LINT_CLEAN
            if n == MODEL_LABEL and self.lint_clean
            else host_label
            if n == HOST_LABEL
            else n
            for n in GPU_LABELS
        )
        # DCGM's counters, untyped in `collect()`, typed `counter` in `exposition()`
        self.counter_names: frozenset[str] = frozenset(
            f.name for f in FIELDS if not self.lint_clean and f.exposed_type() == "counter"
        )
        self.jobs = jobs
        # Every probe file of this user, not only the GPU processes' (`exporter --all-probes`).
        self.probe_files = probe_files
        self.source = source
        self.window = window  # the Monitor's recent snapshots (input pressure is judged on them)
        self._families: list[Metric] = []
        self._lock = threading.Lock()
        self._last_xid: dict[int, int] = {}
        self._xid_counts: Counter[tuple[int, int]] = Counter()

    # -- prometheus-client -----------------------------------------------------------------------
    def collect(self) -> Iterable[Metric]:
        with self._lock:
            return list(self._families)

    def describe(self) -> Iterable[Metric]:
        return []

    def exposition(self) -> bytes:
        """The newest families in Prometheus' text format (0.0.4), as dcgm-exporter serves
        them: DCGM's counters as `# TYPE NAME counter` with samples named NAME. (prometheus-client
        writes a counter NAME's TYPE line as NAME_total, and OpenMetrics wants its samples named
        NAME_total: neither would match a dashboard written for dcgm-exporter.)"""
        text = generate_latest(self).decode()
        for name in self.counter_names:
            text = text.replace(f"# TYPE {name} untyped\n", f"# TYPE {name} counter\n", 1)
        return text.encode()

    # -- one tick ---------------------------------------------------------------------------------
    def update(self, tick: Tick) -> None:
        """Build every family from `tick` (the exporter's loop calls this once per tick)."""
        snap = tick.snapshot
        if self.sanitizer is not None:
            self._learn(snap)
        for x in snap.xid_events:
            if x.gpu_index is not None:
                self._last_xid[x.gpu_index] = x.xid
                self._xid_counts[(x.gpu_index, x.xid)] += 1
        families = self._build(tick)
        with self._lock:
            self._families = families

    def _learn(self, snap: Snapshot) -> None:
        """Seed the sanitizer with the names of a snapshot whose processes are new (their
        owners, command lines, working directories); the names judged so far are judged
        again."""
        pids = frozenset(p.pid for p in snap.processes)
        if pids != self._learned_pids:
            learn_snapshots(self.sanitizer, [snap])
            self._learned_pids = pids
            self._shown_names.clear()
            self._shown.clear()

    def _keep(self, names: Sequence[str]) -> list[str]:
        if not self.sanitize:
            return list(names)
        # Asked whose GPU it is, the job stays, as a pseudonym (`_job`).
        kept = (JOB_LABEL,) if self.attribute else ()
        return [n for n in names if n not in IDENTIFYING_LABELS or n in kept]

    def _build(self, tick: Tick) -> list[Metric]:
        snap = tick.snapshot
        host = snap.system.hostname
        job_of = self.jobs.by_gpu(snap) if self.jobs is not None else {}
        gpu_names = self._keep((*self.gpu_label_names, JOB_LABEL))
        if self.kubernetes:
            gpu_names += OWNER_LABELS
        full_sets = self._gpu_label_sets(snap, host, job_of)
        gpu_labels = {i: [[f[n] for n in gpu_names] for f in fs] for i, fs in full_sets.items()}
        out: list[Metric] = []
        live = [g for g in snap.gpus if not g.lost]
        for f in FIELDS:
            if self.lint_clean and f.name in NOT_LINT_CLEAN:
                continue
            m = _family(f, gpu_names, self.lint_clean)
            for g in live:
                v = f.get(g)
                for labels in gpu_labels[g.index]:
                    if v is not None:
                        _add(m, labels, gpu_names, v)
                    mig = MIG_FIELDS.get(f.name)
                    if mig is not None and g.mig_instances:
                        self._mig_samples(m, mig, g, gpu_names, labels)
            if m.samples:
                out.append(m)
        xid = GaugeMetricFamily(XID_FIELD.name, XID_FIELD.help, labels=gpu_names)
        for g in live:
            for labels in gpu_labels[g.index]:
                xid.add_metric(labels, float(self._last_xid.get(g.index, 0)))
        out.append(xid)
        out += self._own_gpu(snap, gpu_names, gpu_labels)
        if self.owner_info:
            out.append(self._owner_info(snap, full_sets))
        node_names = self._keep((self.host_label, JOB_LABEL))
        jobs = (f[JOB_LABEL] for fs in full_sets.values() for f in fs[:1])
        main_job = Counter(j for j in jobs if j).most_common(1)
        node_full = {self.host_label: host, JOB_LABEL: main_job[0][0] if main_job else ""}
        node_labels = [node_full[n] for n in node_names]
        out += self._verdict(tick, node_names, node_labels)
        out += self._host(snap, node_names, node_labels)
        out += self._processes(snap, node_names, node_labels, job_of)
        out += self._ranks(snap, node_names, node_full, full_sets)
        return out

    def _ranks(
        self,
        snap: Snapshot,
        names: list[str],
        node: dict[str, str],
        full_sets: dict[int, list[dict[str, str]]],
    ) -> list[Metric]:
        """The ranks the probes measured (`ranks.py`), one per job and rank as shown: a rank's
        job is its process's Slurm job, else its GPU's, else the node's."""
        extra = self.probe_files.read() if self.probe_files is not None else []
        samples = samples_of(snap, extra)
        if not samples:
            return []
        gpu_of = {g.pid: g.gpu_index for g in snap.gpu_processes}

        def job(p) -> str:
            if JOB_LABEL not in names:
                return ""
            own = self.jobs.of_pid(p.pid) if self.jobs is not None and self.jobs.psutil else None
            if own:
                return self._shown.job(own)
            sets = full_sets.get(gpu_of.get(p.pid, -1))
            return sets[0][JOB_LABEL] if sets else node[JOB_LABEL]

        shown = []
        for j, s in newest_ranks(samples, job):
            labels = {**node, JOB_LABEL: j, **rank_labels(s.probe, gpu_of.get(s.probe.pid))}
            if self.sanitize:
                labels.pop(NODE_LABEL)  # a host name
            shown.append((labels, s))
        return rank_families(shown, names)

    def _gpu_label_sets(
        self, snap: Snapshot, host: str, job_of: dict[int, str]
    ) -> dict[int, list[dict[str, str]]]:
        """Every label a GPU's series may carry, as shown (sanitized where asked): one set, or
        one per job where the HPC job mapping names several (dcgm-exporter copies the series)."""
        owners = holder(snap) if self.attribute else {}
        self._mapped = self.hpc_jobs.read() if self.hpc_jobs is not None else {}
        out: dict[int, list[dict[str, str]]] = {}
        for g in snap.gpus:
            values = _gpu_label_values(g, host, snap.system.driver_version)
            full = dict(zip(self.gpu_label_names, values, strict=True))
            for n in (MODEL_LABEL, MODEL_LABEL_LINT_CLEAN):  # NVML's words: sanitized too
                if n in full:
                    full[n] = self._text(full[n])
            o = owners.get(g.index)
            full.update(self._shown.owner(o))
            jobs = self._mapped.get(str(g.index))
            if not jobs:
                own = o.slurm_job if o is not None and o.kind == "slurm" else None
                jobs = (own or job_of.get(g.index, ""),)
            out[g.index] = [{**full, JOB_LABEL: self._shown.job(j)} for j in jobs]
        return out

    def _owner_info(self, snap: Snapshot, full_sets: dict[int, list[dict[str, str]]]) -> Metric:
        names = [*self._keep(("gpu", "UUID")), *OWNER_LABELS, JOB_LABEL]
        info = GaugeMetricFamily(
            PREFIX + "gpu_owner_info",
            "Whose GPU it is, 1 per GPU (and per job the HPC job mapping names on it): its pod, "
            "namespace and container (dcgm-exporter's --kubernetes labels) and hpc_job; join it "
            "with * on(gpu, UUID) group_left(pod, namespace, container).",
            labels=names,
        )
        for g in snap.gpus:
            for f in full_sets[g.index]:
                info.add_metric([f[n] for n in names], 1.0)
        return info

    def _mig_samples(
        self, m: Metric, get, g: GpuState, names: list[str], labels: list[str]
    ) -> None:
        """A MIG instance's sample: its parent GPU's labels plus GPU_I_PROFILE and GPU_I_ID,
        as dcgm-exporter writes them; its own job where the HPC job mapping has a file for
        it (`GPU.INSTANCE`)."""
        base = dict(zip(names, labels, strict=True))
        for mi in g.mig_instances:
            v = get(mi)
            if v is None or mi.gpu_instance_id is None:
                continue
            lab = {
                **base,
                MIG_PROFILE_LABEL: self._text(mig_profile(mi)),
                MIG_ID_LABEL: str(mi.gpu_instance_id),
            }
            jobs = self._mapped.get(f"{g.index}.{mi.gpu_instance_id}")
            if jobs and JOB_LABEL in lab:
                for job in jobs:
                    m.add_sample(m.name, {**lab, JOB_LABEL: self._shown.job(job)}, v)
            else:
                m.add_sample(m.name, lab, v)

    def _own_gpu(self, snap: Snapshot, names: list[str], labels: dict[int, list[list[str]]]):
        lost = GaugeMetricFamily(
            PREFIX + "gpu_lost",
            "1 when the GPU fell off the bus (NVML: GPU is lost); its other series stop.",
            labels=names,
        )
        replays = CounterMetricFamily(
            PREFIX + "pcie_replays",
            "PCIe replays (DCGM_FI_DEV_PCIE_REPLAY_COUNTER under --lint-clean, which drops that "
            "name: promtool rejects a name holding 'counter').",
            labels=names,
        )
        xids = CounterMetricFamily(
            PREFIX + "xid_events",
            "Xid events seen since the exporter started, by Xid (DCGM_FI_DEV_XID_ERRORS keeps "
            "only the last).",
            labels=[*names, "xid"],
        )
        for g in snap.gpus:
            for lab in labels[g.index]:
                lost.add_metric(lab, float(g.lost))
                if self.lint_clean and not g.lost and g.pcie_replay_count is not None:
                    replays.add_metric(lab, float(g.pcie_replay_count))
        for (gpu, code), n in sorted(self._xid_counts.items()):
            for lab in labels.get(gpu, ()):
                xids.add_metric([*lab, str(code)], float(n))
        return [lost, replays, xids] if self.lint_clean else [lost, xids]

    def _verdict(self, tick: Tick, names: list[str], labels: list[str]) -> list[Metric]:
        d = tick.diagnosis
        verdict = GaugeMetricFamily(
            PREFIX + "bottleneck",
            "The current bottleneck class (label class; secondary: a second class near its "
            "limit) with its confidence 0-1 as the value (0: no verdict yet or undetermined).",
            labels=[*names, "class", "secondary"],
        )
        verdict.add_metric([*labels, d.primary, d.secondary or ""], d.confidence)
        alerts = GaugeMetricFamily(
            PREFIX + "alerts",
            "Alerts of the current diagnosis by kind and severity (Xid, thermal, memory growth, "
            "lost GPU, ...).",
            labels=[*names, "kind", "severity"],
        )
        for (kind, sev), n in sorted(Counter((a.kind, a.severity) for a in d.alerts).items()):
            alerts.add_metric([*labels, kind, sev], float(n))
        missing = GaugeMetricFamily(
            PREFIX + "evidence_missing",
            "1 for each kind of evidence the diagnosis lacks (it lowers the confidence).",
            labels=[*names, "evidence"],
        )
        for e in d.missing_evidence:
            missing.add_metric([*labels, e], 1.0)
        pressure = GaugeMetricFamily(
            PREFIX + "input_pressure",
            "The job's host-side input pressure: each host figure over its threshold "
            "(dataloader_worker_cpu % of a core, iowait %, io_pressure % stalled, host_cpu %).",
            labels=[*names, "figure"],
        )
        if self.window is not None:
            for e in input_pressure(extract(self.window())):
                pressure.add_metric([*labels, e.metric], float(e.value))
        info = GaugeMetricFamily(
            PREFIX + "exporter_info",
            "The exporter: version and what it reads (nvml, or simulator:SCENARIO).",
            labels=["version", "source"],
        )
        info.add_metric([__version__, self.source], 1.0)
        last = GaugeMetricFamily(
            PREFIX + "last_tick_timestamp_seconds",
            "When the exporter last sampled the machine (seconds since the epoch).",
        )
        last.add_metric([], tick.snapshot.timestamp)
        return [verdict, alerts, missing, pressure, info, last]

    def _host(self, snap: Snapshot, names: list[str], labels: list[str]) -> list[Metric]:
        h = snap.host
        if h is None:
            return []
        out = []
        for name, help_, value in (
            ("host_cpu_percent", "Host CPU busy, percent of all cores.", h.cpu_pct),
            ("host_iowait_percent", "Host CPU time in iowait, percent.", h.iowait_pct),
            ("host_cpus", "Logical CPUs of the host.", float(h.cpu_count)),
        ):
            if value is not None:
                m = GaugeMetricFamily(PREFIX + name, help_, labels=names)
                m.add_metric(labels, float(value))
                out.append(m)
        if h.pressure:
            m = GaugeMetricFamily(
                PREFIX + "host_pressure_percent",
                "Pressure stall information (/proc/pressure/RESOURCE): percent of time some or "
                "all tasks stalled, 10 s average.",
                labels=[*names, "resource", "kind"],
            )
            for res, ps in sorted(h.pressure.items()):
                m.add_metric([*labels, res, "some"], ps.some_avg10)
                if ps.full_avg10 is not None:
                    m.add_metric([*labels, res, "full"], ps.full_avg10)
            out.append(m)
        return out

    def _processes(
        self, snap: Snapshot, names: list[str], labels: list[str], job_of: dict[int, str]
    ) -> list[Metric]:
        gpu_mem = GaugeMetricFamily(
            PREFIX + "process_gpu_memory_bytes",
            "GPU memory a process holds on a GPU (NVML's process list; GPU_I_ID: its MIG "
            "instance).",
            labels=[*names, "gpu", "pid", MIG_ID_LABEL],
        )
        for p in snap.gpu_processes:
            if p.used_memory_bytes is not None:
                gi = "" if p.gpu_instance_id is None else str(p.gpu_instance_id)
                gpu_mem.add_metric(
                    [*labels, str(p.gpu_index), str(p.pid), gi], float(p.used_memory_bytes)
                )
        threads = GaugeMetricFamily(
            PREFIX + "process_thread_cpu_percent",
            "CPU of a GPU process's busiest threads, percent of a core (tid = pid: its main "
            "thread).",
            labels=[*names, "pid", "tid", "name"],
        )
        children = GaugeMetricFamily(
            PREFIX + "process_child_cpu_percent",
            "CPU of a GPU process's child processes (dataloader workers, ...), percent of a core.",
            labels=[*names, "pid", "child", "name"],
        )
        loader = GaugeMetricFamily(
            PREFIX + "dataloader_cpu_percent",
            "CPU of a GPU process's helpers (child processes and every thread but the main "
            "one), percent of a core: the input pipeline's work.",
            labels=[*names, "pid"],
        )
        for p in snap.processes:
            pid = str(p.pid)
            for t in p.busiest_threads:
                if t.cpu_pct is not None:
                    threads.add_metric([*labels, pid, str(t.tid), self._name(t.name)], t.cpu_pct)
            for c in p.children:
                if c.cpu_pct is not None:
                    children.add_metric([*labels, pid, str(c.pid), self._name(c.name)], c.cpu_pct)
            helpers = _helpers_cpu(p)
            if helpers is not None:
                loader.add_metric([*labels, pid], helpers)
        return [gpu_mem, threads, children, loader]

    def _text(self, value: str) -> str:
        """A label value NVML gives (the GPU's model, a MIG profile): as it reads, or under
        --sanitize through the sanitizer (a model name and a profile read the same)."""
        if self.sanitizer is None or not value:
            return value
        return self.sanitizer.text(value) or ""

    def _name(self, name: str | None) -> str:
        """A thread's or helper's name; under --sanitize kept only where the sanitizer keeps it
        whole (a runtime's: `pt_data_worker`, `NCCL Progress 0`, `cuda-EvtHandlr`, the names
        the classifier reads), else "other": a script's, a title's or a user's own name (also
        `pt_<project>`, a runtime's shape around a seeded name) could identify them."""
        if not name:
            return ""
        if self.sanitizer is None:
            return name
        shown = self._shown_names.get(name)
        if shown is None:
            shown = name if self.sanitizer.process_name(name) == name else OTHER
            if len(self._shown_names) >= NAMES_CACHED:
                self._shown_names.clear()
            self._shown_names[name] = shown
        return shown


def _gpu_label_values(g: GpuState, host: str, driver: str | None) -> tuple[str, ...]:
    """In the order of `GPU_LABELS`."""
    st = g.static
    return (
        str(g.index),
        st.uuid or "",
        st.pci_bus_id or "",
        f"nvidia{g.index}",  # dcgm-exporter: "nvidia" + the GPU's index, not its minor number
        st.name or "",
        host,
        driver or "",  # DCGM_FI_DRIVER_VERSION; an empty label is no label to Prometheus
    )


def _helpers_cpu(p: ProcessInfo) -> float | None:
    """Children plus every thread but the main one (tid == pid), percent of a core."""
    vals = [c.cpu_pct for c in p.children if c.cpu_pct is not None]
    vals += [t.cpu_pct for t in p.busiest_threads if t.cpu_pct is not None and t.tid != p.pid]
    return sum(vals) if vals else None


def window_of(monitor) -> Callable[[], Sequence[Snapshot]]:
    """What the classifier reads on `monitor`: its last WINDOW_S seconds."""
    return lambda: monitor.history.snapshots(WINDOW_S)
