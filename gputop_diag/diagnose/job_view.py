"""What the live view's Job pane shows of the watched job, computed: the steps and their split
(measured inside the job by the probe, else estimated from outside), the work of the probe's
sampled step (samples and tokens a second, MFU, the loss, precision, misaligned shapes,
transfers, the build's kernels for the GPU), the GPU memory the job holds, its processes' GPU
memory and busiest threads, the last lines of its output with the failure lines marked; with
two ranks or more, the ranks compared (`ranks.judge_ranks`: the rank table, the straggler, the
hang), judged here so that the pane only lays them out.

`job_view(job, window, primary, shown)` is a pure function of the job's tick and the recorded
window; the pane only lays the `JobView` out in text (widths, glyphs, what --sanitize hides).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..job.figures import JobGpuMemory, Throughput, gpu_memory, throughput, used_gpus
from ..job.output import LABELS, classify_line
from ..model import JobState, OutputEvent, ProbeState, Snapshot, StepStats, SyncSite
from ..planner.shape import ModelShape
from .measured import (
    PART_WORDS,
    MeasuredSplit,
    ProcessMemory,
    is_recent,
    measured_split,
    process_memory,
)
from .measured_render import work_lines
from .measured_work import devices_of, kernel_problems, measured_work
from .ranks import RanksView, judge_ranks
from .step_split import StepSplit, estimate

# The step's wall time as the split bar stacks it: the waits, the host-to-device copies (measured
# in a sampled step, taken out of the host's time as `watch` says it), then the host's own time.
BAR_PARTS = ("t_input", "t_sync", "t_comm", "t_transfer", "t_host")
TRANSFER_WORD = "transfer (sampled)"
BUSY_THREAD_MIN_PCT = 1.0  # a thread under this CPU % is not named among the busiest
STALLED_MIN_S = 5.0  # the job has taken no step for this long, and STALLED_STEPS of its steps:
STALLED_STEPS = 5  # its steps a second are history, not now


class BusyThread(NamedTuple):
    """A thread of the job's processes by its CPU %, busiest first when sorted descending."""

    cpu_pct: float
    name: str
    pid: int


@dataclass(frozen=True, slots=True)
class OutputLine:
    text: str  # as the job wrote it
    failure: bool  # names a failure (`job.output.classify_line`)


@dataclass(frozen=True, slots=True)
class SplitPart:
    """A part of the step as the measured split shows it."""

    part: str  # "t_input", "t_sync", "t_comm", "t_transfer", "t_host"
    word: str  # "input", "sync", "comm", "transfer (sampled)", "host"
    seconds: float | None  # mean seconds a step
    share: float  # of the step, 0..1


@dataclass(frozen=True, slots=True)
class GpuBusy:
    """The GPUs' busy time beside the measured split: measured by the probe, else estimated
    from NVML's samples."""

    seconds: float | None
    share: float  # of the step, 0..1
    measured: bool


@dataclass(frozen=True, slots=True)
class SiteShare:
    """A line of code that waited for the GPU, with its share of every such wait."""

    site: SyncSite
    share: float  # 0..1


@dataclass(frozen=True, slots=True)
class MeasuredView:
    """The step split the probes measured inside the job, and each probed process's memory."""

    split: MeasuredSplit | None  # None: the probe has seen no step yet
    stale_s: float | None  # no recent step: seconds since the newest one (None: stepping)
    parts: tuple[SplitPart, ...]  # the measured parts, in BAR_PARTS order
    unmeasured: tuple[str, ...]  # the words of the parts not measured (inside the host)
    gpu_busy: GpuBusy | None  # None: not measured and no estimate
    sync_sites: tuple[SiteShare, ...]  # most time first
    memory: tuple[ProcessMemory, ...]  # the probed processes with an allocator or model figure
    fragmented: ProcessMemory | None  # the process whose allocator cache holds the most, if
    # that cache is fragmentation
    notes: tuple[str, ...]  # the probes' notes, each once
    malformed_lines: int  # lines of the probe files that were no records
    # the newest sampled step's work in words, as `watch` says it (`measured_render.work_lines`):
    # samples and tokens a second, MFU or why none, the loss; the precision and what it costs
    # on this GPU; misaligned shapes; host-device copies; then a build without kernels for it
    work_lines: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class JobView:
    """What the Job pane shows of `job`, over the recorded window."""

    job: JobState
    throughput: Throughput  # from the job's output
    steps: StepStats | None  # as read from the job's output
    measured_steps_per_s: float | None  # measured in the job (the mean over its processes)
    measured_last_step: int | None
    # no step in the job for this long (its steps stopped: a hang, an evaluation); None: stepping
    measured_stalled_s: float | None
    estimate: StepSplit | None  # the split of the step estimated from outside
    measured: MeasuredView | None  # where the job's processes run the probe
    used_gpus: tuple[int, ...]  # where NVML lists the job's processes
    gpu_memory: tuple[JobGpuMemory, ...]  # what the job holds on each GPU over the window
    held: tuple[tuple[int, tuple[tuple[int, int], ...]], ...]  # pid -> ((GPU, bytes), ...)
    busiest_threads: tuple[BusyThread, ...]  # over BUSY_THREAD_MIN_PCT, busiest first
    output_labels: tuple[str, ...]  # the kinds of failure its output named
    output_lines: tuple[OutputLine, ...]  # its last lines
    older_failures: tuple[OutputEvent, ...]  # failure lines above those, the newest three
    ranks: RanksView | None = None  # a distributed job's ranks (two or more), judged

    @property
    def has_output_steps(self) -> bool:
        """A step time was read from the job's output."""
        return self.steps is not None and self.throughput.median_s is not None

    def held_by(self, pid: int) -> tuple[tuple[int, int], ...]:
        """(GPU, bytes) the process holds on each GPU, at the window's last tick."""
        return dict(self.held).get(pid, ())


def job_probes(job: JobState, snap: Snapshot | None) -> tuple[ProbeState, ...]:
    """The probes of the job's processes in `snap`."""
    if snap is None or not snap.probes:
        return ()
    pids = {p.pid for p in job.processes} | set(job.root_pids)
    return tuple(p for p in snap.probes if p.pid in pids)


def rank_probes(
    job: JobState, window: Sequence[Snapshot], snap: Snapshot | None
) -> tuple[ProbeState, ...]:
    """The probes the ranks are judged from: the job's in `snap`, and a rank whose process
    ended without a goodbye (`gone`: no longer one of the job's processes) where it was one of
    them in the window, so that a killed rank stays in the table as watch's summary keeps it."""
    probes = job_probes(job, snap)
    gone = [p for p in (snap.probes if snap is not None else ()) if p.gone and p not in probes]
    if not gone:
        return probes
    seen = {p.pid for w in window if w.job is not None for p in w.job.processes}
    return probes + tuple(p for p in gone if p.pid in seen)


def job_view(
    job: JobState,
    window: Sequence[Snapshot],
    primary: str | None,
    shown: Snapshot | None = None,
    output_lines: int = 12,
    model: ModelShape | None = None,
) -> JobView:
    """The Job pane's figures for `job` over `window` (`primary`: the diagnosis's class, which
    the estimated split attributes the wait to; `shown`: the tick whose probes give the measured
    figures, default the window's last; `output_lines`: how many of its last lines)."""
    shown = shown if shown is not None else (window[-1] if window else None)
    probes = job_probes(job, shown)
    probed = [p.steps for p in probes if p.steps is not None]
    gpus = used_gpus(window[-1]) if window else ()
    split = estimate(job.steps, window, gpus, primary)
    tail = list(job.output_tail)[-output_lines:]
    on_screen = set(tail)
    return JobView(
        job=job,
        throughput=throughput(window),
        steps=job.steps,
        measured_steps_per_s=sum(1.0 / s.wall_s for s in probed) / len(probed) if probed else None,
        measured_last_step=max(s.last_step for s in probed) if probed else None,
        measured_stalled_s=_stalled(probed, shown),
        estimate=split,
        measured=_measured(probes, shown, split, model) if probes else None,
        used_gpus=gpus,
        gpu_memory=gpu_memory(window),
        held=_held(window[-1]) if window else (),
        busiest_threads=_busiest(job),
        output_labels=tuple(
            LABELS[k] for k in sorted({e.kind for e in job.output_events}) if k in LABELS
        ),
        output_lines=tuple(OutputLine(line, bool(classify_line(line))) for line in tail),
        older_failures=tuple(e for e in job.output_events if e.line not in on_screen)[-3:],
        ranks=judge_ranks(rank_probes(job, window, shown), shown) if probes else None,
    )


def _held(snap: Snapshot) -> tuple[tuple[int, tuple[tuple[int, int], ...]], ...]:
    held: dict[int, list[tuple[int, int]]] = {}
    for g in snap.gpu_processes:
        if g.used_memory_bytes is not None:
            held.setdefault(g.pid, []).append((g.gpu_index, g.used_memory_bytes))
    return tuple((pid, tuple(on)) for pid, on in held.items())


def _busiest(job: JobState) -> tuple[BusyThread, ...]:
    busy = sorted(
        (
            BusyThread(th.cpu_pct or 0.0, th.name, p.pid)
            for p in job.processes
            for th in p.busiest_threads
        ),
        reverse=True,
    )
    return tuple(b for b in busy if b.cpu_pct >= BUSY_THREAD_MIN_PCT)


def _stalled(probed: list, shown: Snapshot | None) -> float | None:
    """Seconds since the job's newest step, where that is over STALLED_STEPS of its steps
    and STALLED_MIN_S (a rate of steps a second would say it still steps)."""
    if not probed or shown is None:
        return None
    since = shown.timestamp - max(s.last_at for s in probed)
    typical = max(s.wall_s for s in probed)
    return since if since >= max(STALLED_MIN_S, STALLED_STEPS * typical) else None


def _measured(
    probes: tuple[ProbeState, ...],
    snap: Snapshot,
    outside: StepSplit | None,
    model: ModelShape | None = None,
) -> MeasuredView:
    """The step split measured inside the job, its sync sites and each process's memory."""
    recent = [p for p in probes if is_recent(p, snap.timestamp)]
    m = measured_split(recent or probes)
    stale_s = None
    if m is not None and not recent:
        stale_s = snap.timestamp - max(p.steps.last_at for p in probes if p.steps is not None)
    every = process_memory(snap, {p.pid for p in probes})
    devices = devices_of(every)
    work = measured_work(recent or probes, devices, model)  # model: --model-config's
    rows = tuple(r for r in every if r.reserved_bytes is not None or r.params_bytes is not None)
    worst = max(rows, key=lambda r: r.cached_bytes or 0) if rows else None
    return MeasuredView(
        split=m,
        stale_s=stale_s,
        parts=_parts(m, work.transfer_s if work is not None else None) if m is not None else (),
        unmeasured=_unmeasured(m) if m is not None else (),
        gpu_busy=_gpu_busy(m, outside) if m is not None else None,
        sync_sites=_sites(m) if m is not None else (),
        memory=rows,
        fragmented=worst if worst is not None and worst.fragmented else None,
        notes=tuple(dict.fromkeys(n for p in probes for n in p.notes)),
        malformed_lines=sum(p.malformed_lines for p in probes),
        work_lines=(
            *(work_lines(work) if work is not None else ()),
            *(f"kernel images: {k}" for k in kernel_problems(probes, devices)),
        ),
    )


def _parts(m: MeasuredSplit, transfer_s: float | None = None) -> tuple[SplitPart, ...]:
    """The measured parts; with `transfer_s` (the sampled step's host-to-device copies), the
    copies out of the host's time, as `measured_render.split_text` says them."""
    out = []
    for part in BAR_PARTS:
        if part == "t_transfer":
            continue
        seconds, share = m.seconds(part), m.share(part) or 0.0
        if part == "t_host" and transfer_s is not None and seconds is not None:
            moved = min(transfer_s, seconds)
            step = m.step_s if m.step_s > 0 else None
            out.append(SplitPart("t_transfer", TRANSFER_WORD, moved, moved / step if step else 0))
            seconds -= moved
            share = seconds / step if step else 0.0
        if m.is_measured(part):
            out.append(SplitPart(part, PART_WORDS[part], seconds, share))
    return tuple(out)


def _unmeasured(m: MeasuredSplit) -> tuple[str, ...]:
    return tuple(
        PART_WORDS[part] for part in BAR_PARTS if part != "t_transfer" and not m.is_measured(part)
    )


def _gpu_busy(m: MeasuredSplit, outside: StepSplit | None) -> GpuBusy | None:
    share = m.share("t_gpu")
    if share is not None:
        return GpuBusy(m.seconds("t_gpu"), share, measured=True)
    if outside is not None:
        return GpuBusy(outside.step_s * outside.gpu_busy_share, outside.gpu_busy_share, False)
    return None


def _sites(m: MeasuredSplit) -> tuple[SiteShare, ...]:
    total = sum(s.seconds for s in m.sync_sites) or 1.0
    return tuple(SiteShare(s, s.seconds / total) for s in m.sync_sites)
