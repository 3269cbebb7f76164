"""What `gputop-diag watch` says of a job it watched: the status line every few seconds, and the
summary at the end (text, or the `gputop-diag.watch/1` JSON document) with the processes seen
over the watch and what their probes measured. Pure over the snapshots: the command hands in
what it gathered (`SeenProcesses`, `ProbesSeen`) and prints what comes back."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..job.figures import gpu_memory, gpus_used_in, throughput
from ..job.output import LABELS
from ..job.state import state_words
from ..model import JobProcess, JobState, Owner, ProbeState, Snapshot
from ..model.codec import jsonable
from ..planner.shape import ModelShape
from .measured import process_memory
from .measured_render import measured_lines
from .ranks import RanksView, judge_ranks
from .ranks_render import ranks_lines
from .render import render_text, to_json
from .step_split import PROFILER_COMMANDS, estimate

MAX_SEEN = 512  # processes remembered for the summary
MAX_ENDED_KEPT = 20  # of which ended ones listed (the newest); older ones are counted
WATCH_SCHEMA = "gputop-diag.watch/1"


class SeenProcesses:
    """The job's processes over the watch, for the summary: every live one (at most `MAX_SEEN`)
    and the `MAX_ENDED_KEPT` that ended last; older ended ones are only counted (a Slurm step
    or a shell loop may start thousands of short-lived ones)."""

    def __init__(self) -> None:
        self._procs: dict[int, JobProcess] = {}
        self._ended: dict[int, None] = {}  # ended pids, oldest first
        self.ended_not_kept = 0

    @property
    def count(self) -> int:
        return len(self._procs) + self.ended_not_kept

    def update(self, now: Sequence[JobProcess]) -> None:
        alive = set()
        for p in now:
            alive.add(p.pid)
            self._ended.pop(p.pid, None)
            held = self._procs.get(p.pid)
            if held is not None and p.rss_bytes == 0 and held.rss_bytes:
                # read as it exited (a zombie holds no memory and reads 0): the summary keeps
                # what it was while it ran
                continue
            if held is not None or len(self._procs) < MAX_SEEN:
                self._procs[p.pid] = p
        for pid in sorted(self._procs.keys() - alive - self._ended.keys()):
            self._ended[pid] = None
        while len(self._ended) > MAX_ENDED_KEPT:
            pid = next(iter(self._ended))
            del self._ended[pid]
            del self._procs[pid]
            self.ended_not_kept += 1

    def processes(self) -> list[JobProcess]:
        return list(self._procs.values())


class ProbesSeen:
    """The latest probe state of each of the job's processes over the watch (a process that
    has exited keeps its last), with the tick that carried it (for NVML's figures beside)."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[ProbeState, Snapshot]] = {}

    def update(self, snap: Snapshot) -> None:
        if snap.job is None or not snap.probes:
            return
        pids = {p.pid for p in snap.job.processes} | set(snap.job.root_pids)
        for p in snap.probes:
            if p.pid in pids or (p.gone and p.pid in self._last):  # a killed rank: gone
                self._last[p.pid] = (p, snap)

    def ranks(self) -> RanksView | None:
        """The job's ranks as last seen, judged against the newest tick's GPUs."""
        if not self._last:
            return None
        newest = max((snap for _, snap in self._last.values()), key=lambda s: s.timestamp)
        return judge_ranks(self.probes(), newest)

    def probes(self) -> list[ProbeState]:
        return [p for p, _ in self._last.values()]

    def memory(self) -> list:
        out = []
        for p, snap in self._last.values():
            out.extend(process_memory(dataclasses.replace(snap, probes=(p,))))
        return out


def status_line(snap) -> str:
    job = snap.job
    if job is None:
        return "no job"
    cpu = sum(p.cpu_pct or 0.0 for p in job.processes)
    rss = sum(p.rss_bytes or 0 for p in job.processes)
    steps = throughput([snap]).headline()
    return (
        f"{job.label}: {state_words(job)}; {len(job.processes)} processes, CPU {cpu:.0f} %, "
        f"RSS {rss / 2**20:.0f} MiB; {steps}"
    )


def _tree_lines(procs: list[JobProcess], gone: set[int]) -> list[str]:
    out = []
    for p in procs:
        name = p.name or "?"
        cpu = "—" if p.cpu_pct is None else f"{p.cpu_pct:.0f} %"
        rss = "—" if p.rss_bytes is None else f"{p.rss_bytes / 2**20:.0f} MiB"
        threads = "—" if p.num_threads is None else str(p.num_threads)
        end = "  (ended)" if p.pid in gone else ""
        busy = ""
        busiest = [t for t in p.busiest_threads if (t.cpu_pct or 0) >= 1]
        if busiest:
            busy = "  busiest: " + ", ".join(f"{t.name} {t.cpu_pct:.0f} %" for t in busiest[:3])
        out.append(
            f"  {'  ' * p.depth}{p.pid} {name}  CPU {cpu}  RSS {rss}  threads {threads}{busy}{end}"
        )
    return out


def quiet(job: JobState) -> JobState:
    """The job without its output's text (free text that no sanitizer can vouch for): the
    failure lines keep their kind and line number."""
    return dataclasses.replace(
        job,
        output_tail=(),
        output_events=tuple(dataclasses.replace(e, line="") for e in job.output_events),
        problem=None,
    )


def job_owners(procs: Sequence[JobProcess], snaps: Sequence[Snapshot]) -> list[Owner]:
    """Who the job runs for: the distinct owners (Slurm job, pod, container, unit) of its
    processes that the snapshots know, newest snapshot first."""
    pids = {p.pid for p in procs}
    out: list[Owner] = []
    for snap in reversed(snaps):
        for info in snap.processes:
            if info.pid in pids and info.owner is not None and info.owner not in out:
                out.append(info.owner)
        if out:
            break
    return out


def _owner_words(owners: Sequence[Owner]) -> str | None:
    shown = [o.label or o.unit or o.kind for o in owners]
    return ", ".join(dict.fromkeys(shown)) or None


def summary_text(
    job: JobState,
    procs: list[JobProcess],
    snaps: list,
    diagnosis,
    ended_by: str | None,
    ended_not_listed: int = 0,
    probes: Sequence[ProbeState] = (),
    memory: Sequence = (),
    owners: Sequence[Owner] = (),
    ranks: RanksView | None = None,
    model: ModelShape | None = None,
) -> str:
    lines = [f"watch: {job.label}", f"  state: {state_words(job)}"]
    owned = _owner_words(owners)
    if owned:
        lines.append(f"  runs for: {owned}")
    if ended_by == "seconds":
        lines.append("  (watched for --seconds; the job goes on)")
    elif ended_by == "interrupted":
        lines.append("  (watching stopped by Ctrl-C; the job goes on)")
    elif ended_by == "terminated":
        lines.append("  (watching stopped by SIGTERM; the job goes on)")
    elif ended_by == "hangup":
        lines.append("  (the terminal closed: watching stopped; the job goes on)")
    if job.log_path:
        n = job.output_lines
        lines.append(f"  output: {job.log_path} ({n} line{'' if n == 1 else 's'})")
    if job.problem:
        lines.append(f"  note: {job.problem}")
    alive = {p.pid for p in job.processes}
    lines.append(f"processes ({len(alive)} now, {len(procs) + ended_not_listed} seen):")
    lines.extend(_tree_lines(procs, {p.pid for p in procs} - alive) or ["  none"])
    if ended_not_listed:
        lines.append(f"  … and {ended_not_listed} more that ended (the newest ended are listed)")
    if job.visible_gpus is not None:
        lines.append(f"GPUs visible to the job: CUDA_VISIBLE_DEVICES={job.visible_gpus}")
    for m in gpu_memory(snaps):
        trend = ""
        if m.trend_bytes_per_min is not None:
            trend = f", trend {m.trend_bytes_per_min / 2**20:+.0f} MiB/min"
        lines.append(
            f"GPU {m.gpu}: the job holds {m.now_bytes / 2**30:.2f} GiB "
            f"(peak {m.peak_bytes / 2**30:.2f} GiB{trend})"
        )
    tp = throughput(snaps)
    s = job.steps
    if s is not None and tp.median_s is not None:
        of = f"/{s.total}" if s.total else ""
        step = f"step {s.step}{of}" if s.step is not None else "step count unknown"
        if s.steps_per_s:  # a counter without printed times, timed over the window
            how = f"{tp.median_s:.3g} s a step (its steps over the time they took)"
        else:
            how = f"median {tp.median_s:.3g} s, p95 {tp.p95_s:.3g} s over {len(s.step_times_s)}"
        lines.append(f"steps ({s.source}): {step}; {how}; {tp.headline()}")
    elif s is not None:
        step = f"step {s.step}" if s.step is not None else "no step count"
        lines.append(f"steps ({s.source}): {step}; no step time yet")
    split = estimate(s, snaps, gpus_used_in(snaps), diagnosis.primary)
    measured = measured_lines(probes, memory, ranks=len(ranks.rows) if ranks else 0, model=model)
    lines.extend(measured)
    if ranks is not None:
        lines.extend(ranks_lines(ranks))
    if split is not None and not measured:
        parts = " + ".join(f"{n} {v:.3g} s" for n, v in split.parts if v is not None)
        if split.wait_part is None and split.wait_s > 0:
            parts += f" + waiting {split.wait_s:.3g} s (not attributed)"
        lines.append(f"step split (an estimate, from outside): {parts}; {split.basis}")
        lines.append(f"  measure it: {PROFILER_COMMANDS[0]}")
    for e in job.output_events[-5:]:
        text = e.line or "(the line left out under --sanitize: a job's output is free text)"
        lines.append(f"{LABELS.get(e.kind, e.kind)} at line {e.line_no}: {text}")
    lines.append("")
    lines.append(render_text(diagnosis))
    return "\n".join(lines)


def summary_json(
    job: JobState,
    procs: list[JobProcess],
    snaps: list,
    diagnosis,
    ended_by: str | None,
    owners: Sequence[Owner] = (),
) -> dict:
    tp = throughput(snaps)
    split = estimate(job.steps, snaps, gpus_used_in(snaps), diagnosis.primary)
    return {
        "schema": WATCH_SCHEMA,
        "state": state_words(job),
        "watch_ended_by": ended_by,
        "job": jsonable(job),
        "owners": [jsonable(o) for o in owners],
        "processes_seen": [jsonable(p) for p in procs],
        "steps": {
            "steps_per_s": tp.steps_per_s,
            "median_s": tp.median_s,
            "p95_s": tp.p95_s,
            "peak_gpu_memory_bytes": tp.peak_gpu_memory_bytes,
        },
        "step_split": None
        if split is None
        else {
            "estimate": True,
            "step_s": split.step_s,
            "gpu_busy_share": split.gpu_busy_share,
            "parts": {n: v for n, v in split.parts},
            "wait_s": split.wait_s,
            "wait_part": split.wait_part,
            "basis": split.basis,
            "measure_with": list(PROFILER_COMMANDS),
        },
        "gpu_memory": [
            {
                "gpu": m.gpu,
                "now_bytes": m.now_bytes,
                "peak_bytes": m.peak_bytes,
                "trend_bytes_per_min": m.trend_bytes_per_min,
            }
            for m in gpu_memory(snaps)
        ],
        "diagnosis": to_json(diagnosis),
    }
