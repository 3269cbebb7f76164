"""Pane 6, Job: the job being watched (`gputop-diag watch`). Hidden (and key 6 inert) until a job
is set.

From the top: what is watched and how it stands (Slurm's state, pending reason, queue time, time
left); the headline — steps per second beside the peak GPU memory — with the step-time history,
median and p95; the step-time split: measured inside the job where it runs with the probe
(`watch --probe`: a stacked bar of input, sync, exposed communication and the host's own time,
the GPU's busy time beside it, each part labelled measured or not, and the lines of code that
sync), else labelled an estimate from outside with the profiler command that measures it (the
mean of the ranks, where the job has two or more); the ranks compared (rank, node, step median,
the share of it waiting in collectives, own work, lag behind the fastest, state), the straggler
or why none is named, a hang with the top frames of the missing rank's stack (on a short
terminal only the ranks that matter: the straggler, the stalled ones, then the others); each
probed process's memory (the allocator's allocated and reserved beside NVML's figure,
parameters, gradients, optimizer state and activations); the GPUs the job can see against those
it uses (and those Slurm gave it), and the GPU memory its processes hold on each GPU over time
with the trend; the process tree (CPU %, RSS, threads, GPU memory) and the busiest threads by
name; the last lines of its output, the failure lines (CUDA OOM, NCCL timeout, CUDA errors)
marked `!` and in bold.

Its histories are the Monitor's (`Update.job_window`: every tick of the last ten minutes that
carries the job), so they have no holes when the pane was not on screen. What it shows is
computed by `diagnose.job_view` (a frozen `JobView`); this module only lays it out.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult

from gputop_diag.diagnose.job_view import JobView, MeasuredView, job_view
from gputop_diag.diagnose.measured_rules import secs
from gputop_diag.diagnose.ranks import RankRow, RanksView
from gputop_diag.diagnose.ranks_render import NO_STACK_YET, lag_text, ms, rank_state
from gputop_diag.diagnose.step_split import PROFILER_COMMANDS, StepSplit
from gputop_diag.job.figures import JobGpuMemory
from gputop_diag.job.state import state_words
from gputop_diag.model import JobState, Snapshot, formats
from gputop_diag.monitor.view import Update
from gputop_diag.planner.shape import ModelShape
from gputop_diag.tui.panes.base import Pane, View
from gputop_diag.widgets import DiffText
from gputop_diag.widgets.glyphs import history, stacked_bar

OUTPUT_LINES = 12  # of the job's output shown (fewer on a short terminal)
SHORT_OUTPUT_LINES = 5
MAX_TREE = 40  # processes listed
MAX_PROBED = 8  # probed processes whose memory is listed
MAX_BUSY_THREADS = 5  # busiest threads named
MAX_SYNC_SITES = 3  # lines of code that sync, listed
MAX_NOTES = 3  # probe notes shown
MAX_RANKS = 64  # ranks listed (the pane scrolls)
SHORT_RANKS = 4  # ranks listed on a short terminal: those that matter first
STACK_FRAMES = 8  # top lines of a missing rank's stack shown
SHORT_STACK_FRAMES = 3
BAR_GLYPHS = {"t_input": "█", "t_sync": "▓", "t_comm": "▒", "t_transfer": "▚", "t_host": "░"}
PLAIN_GLYPHS = {"t_input": "#", "t_sync": "=", "t_comm": "~", "t_transfer": "+", "t_host": "."}


def _gib(b: int | None) -> str:
    return formats.size(b, none="—")


def _secs(s: float | None) -> str:
    return "—" if s is None else secs(s)


def state_line(job: JobState) -> str:
    """The job's state (`job.state.state_words`), named as Slurm's where Slurm gives it."""
    return ("Slurm " if job.slurm is not None else "") + state_words(job)


def render(
    job: JobState | None,
    window: list[Snapshot],
    primary: str | None,
    view: View,
    width: int,
    label: str | None = None,
    shown: Snapshot | None = None,
    model: ModelShape | None = None,
) -> Text:
    """The pane's text for the watched job and the recorded window (`label`: what is watched,
    while no sample of it has arrived; `shown`: the tick as the screen shows it, sanitized
    where the view is, whose probes give the measured figures; default the window's last)."""
    t = Text(no_wrap=False)
    if job is None:
        if label:
            t.append(f"watching {'the job' if view.sanitize else label}\n", style="bold")
        t.append("waiting for the first sample of the job…")
        return t
    n = SHORT_OUTPUT_LINES if view.short else OUTPUT_LINES
    v = job_view(job, window, primary, shown, output_lines=n, model=model)
    _head(t, job, view, width)
    _steps(t, v, view, width)
    if v.ranks is not None:
        _ranks(t, v.ranks, view, width)
    _gpus(t, v, view, width)
    _processes(t, v, view, width)
    _output(t, v, view, width)
    return t


def _head(t: Text, job: JobState, view: View, width: int) -> None:
    """What is watched, how it stands, where its output goes."""
    label = "(job)" if view.sanitize else job.label
    room = max(10, width - 5)
    t.append("Job ", style="bold")
    t.append(label if len(label) <= room else label[: room - 1] + "…", style="bold")
    t.append("\n  " + state_line(job))
    if job.root_pids and not view.sanitize:
        t.append(f" · pid {', '.join(map(str, job.root_pids[:4]))}")
    t.append("\n")
    if job.log_path:
        # under --sanitize the path's pseudonym, as watch's own lines name it
        sanitizer = view.sanitizer
        if view.sanitize:
            where = sanitizer.path(job.log_path) if sanitizer is not None else "(output file)"
        else:
            where = job.log_path
        t.append(f"  output: {where} ({job.output_lines} lines)\n")
    if job.problem and not view.sanitize:
        t.append(f"  note: {job.problem}\n", style="italic")


def _steps(t: Text, v: JobView, view: View, width: int) -> None:
    """The headline, the step-time history, the split."""
    t.append("\nSteps ", style="bold")
    if v.measured_stalled_s is not None:  # its steps stopped: the rate is history
        t.append(f"no step for {formats.span(v.measured_stalled_s)}", style="bold")
        t.append(
            f"  (measured in the job: {v.measured_steps_per_s:.3g} steps/s up to step "
            f"{v.measured_last_step})\n"
        )
    elif v.measured_steps_per_s is not None:  # measured in the job beats output lines
        t.append(f"{v.measured_steps_per_s:.3g} steps/s", style="bold")
        t.append(f"  (measured in the job, step {v.measured_last_step})\n")
    elif not v.has_output_steps:
        t.append(
            "no step time in the output yet (tqdm, Lightning, HF Trainer, Megatron, "
            "`step N … loss`; or --step-regex)\n"
        )
    else:
        tp, steps = v.throughput, v.steps
        t.append(tp.headline(), style="bold")
        of = f"/{steps.total}" if steps.total else ""
        t.append(f"  ({steps.source}, step {steps.step}{of})\n")
        head = f"  median {_secs(tp.median_s)} · p95 {_secs(tp.p95_s)} · "
        t.append(head)
        top = max(steps.step_times_s) if steps.step_times_s else 1.0
        w = max(8, min(60, width - len(head) - 18))
        t.append(history(steps.step_times_s, w, view.plain, top=top or 1.0))
        t.append(f"  last {min(w, len(steps.step_times_s))} steps\n")
    if v.measured is not None:
        _measured(t, v.measured, view, width, len(v.ranks.rows) if v.ranks else 0)
    elif v.estimate is not None:
        _estimated(t, v.estimate)


def _gpus(t: Text, v: JobView, view: View, width: int) -> None:
    """The GPUs the job can see against those it uses, and what it holds on each."""
    job = v.job
    t.append("\nGPUs ", style="bold")
    seen = job.visible_gpus
    t.append(f"visible: {seen if seen is not None else 'all (CUDA_VISIBLE_DEVICES not set)'}")
    t.append(f" · used: {', '.join(map(str, v.used_gpus)) if v.used_gpus else 'none'}")
    if job.slurm is not None and job.slurm.gpus_requested is not None:
        t.append(f" · Slurm gave {job.slurm.gpus_requested}")
    t.append("\n")
    for m in v.gpu_memory:
        t.append(_memory_line(m, view, width) + "\n")


def _processes(t: Text, v: JobView, view: View, width: int) -> None:
    """The process tree and the busiest threads."""
    procs = v.job.processes
    t.append(f"\nProcesses ({len(procs)})", style="bold")
    if not procs:
        t.append("  none on this machine\n")
        return
    t.append("\n")
    name_w = max(8, min(24, width - 48))
    t.append(f"  {'pid':>7} {'name':<{name_w}} {'CPU':>6} {'RSS':>9} {'thr':>4}  GPU memory\n")
    for p in procs[:MAX_TREE]:
        pid = "—" if view.sanitize else str(p.pid)
        indent = "  " * min(p.depth, 6)
        name = (indent + (p.name or "?"))[:name_w]
        cpu = "—" if p.cpu_pct is None else f"{p.cpu_pct:.0f} %"
        thr = "—" if p.num_threads is None else str(p.num_threads)
        gm = ", ".join(f"GPU{gpu} {_gib(b)}" for gpu, b in v.held_by(p.pid))
        t.append(f"  {pid:>7} {name:<{name_w}} {cpu:>6} {_gib(p.rss_bytes):>9} {thr:>4}  {gm}\n")
    if len(procs) > MAX_TREE:
        t.append(f"  … {len(procs) - MAX_TREE} more\n")
    busy = v.busiest_threads[:MAX_BUSY_THREADS]
    if busy:
        t.append("  busiest threads: ")
        t.append(", ".join(f"{b.name} {b.cpu_pct:.0f} %" for b in busy) + "\n")


def _output(t: Text, v: JobView, view: View, width: int) -> None:
    """The last lines of the job's output, failure lines marked."""
    job = v.job
    if not (job.log_path or job.output_tail):
        return
    title = "\nOutput"
    if v.output_labels:
        title += " — " + ", ".join(v.output_labels)
    t.append(title + "\n", style="bold")
    if view.sanitize:
        t.append("  (not shown under --sanitize)\n")
        return
    for line in v.output_lines:
        text = line.text.replace("\t", "    ")[: max(10, width - 4)]
        if line.failure:
            t.append("! ", style="bold")
            t.append(text + "\n", style="bold reverse")
        else:
            t.append("  " + text + "\n")
    for e in v.older_failures:
        t.append(f"! line {e.line_no}: ", style="bold")
        t.append(e.line[: max(10, width - 16)] + "\n", style="bold")


def _pct(share: float) -> str:
    return formats.pct(100 * share)


def _estimated(t: Text, split: StepSplit) -> None:
    t.append("Step split ", style="bold")
    t.append("(estimate, from outside)", style="italic")
    parts = []
    for name, seconds in split.parts:
        if seconds is not None:
            parts.append(f"{name} {_secs(seconds)}")
    if split.wait_part is None and split.wait_s > 0:
        parts.append(f"waiting {_secs(split.wait_s)} (input/host/transfer/sync/comm)")
    t.append(": " + " + ".join(parts) + f" ≈ {_secs(split.step_s)}\n")
    t.append(f"  {split.basis}\n")
    t.append(f"  measure it: {PROFILER_COMMANDS[0]}  (or: gputop-diag watch --probe -- CMD)\n")


def _measured(t: Text, mv: MeasuredView, view: View, width: int, ranks: int = 0) -> None:
    """The step split measured inside the job, its sync sites and each process's memory
    (`ranks`: a distributed job's, whose split is the mean of its ranks)."""
    m = mv.split
    t.append("Step split ", style="bold")
    t.append("(measured in the job)", style="italic")
    if m is None:
        t.append(": the probe has seen no step yet\n")
    else:
        n = len(m.pids)
        who = f"mean of {ranks} ranks" if ranks > 1 else f"{n} process{'es' if n > 1 else ''}"
        t.append(f": {_secs(m.step_s)} a step · {m.steps} steps, {who}")
        if mv.stale_s is not None:
            t.append(f" · no step for {formats.span(mv.stale_s)}")
        t.append("\n")
        _split_bar(t, mv, view, width)
        for line in _site_lines(mv, width):
            t.append(line + "\n")
    for line in mv.work_lines:  # the sampled step: work, precision, shapes, transfers, kernels
        t.append(f"  {line}\n")
    _memory_table(t, mv, view, width)
    notes = dict.fromkeys(mv.notes)
    bad = mv.malformed_lines
    if bad:
        notes[f"{bad} line{'s' if bad > 1 else ''} of the probe files were no records: skipped"] = (
            None
        )
    for note in list(notes)[:MAX_NOTES]:
        t.append(f"  note: {note}\n", style="italic")


def _ranks(t: Text, rv: RanksView, view: View, width: int) -> None:
    """The ranks compared, the straggler or why none is named, the hang and its stacks."""
    world = f" of world {rv.world}" if rv.world else ""
    t.append(f"\nRanks ({len(rv.rows)}{world})", style="bold")
    if not view.short:
        t.append("  medians over each rank's latest steps", style="italic")
    t.append("\n")
    rows = _ranks_shown(rv, SHORT_RANKS if view.short else MAX_RANKS)
    marked = _marked(rv)
    for line, r in zip(_rank_table(rows, width), (None, *rows), strict=True):
        t.append(line + "\n", style="bold" if r is not None and r.rank in marked else "")
    if len(rows) < len(rv.rows):
        t.append(f"  … {len(rv.rows) - len(rows)} more ranks (a taller terminal lists them)\n")
    bad = rv.hang is not None or rv.straggler is not None
    t.append(f"  {_cut(rv.verdict, 2 * width - 4)}\n", style="bold" if bad else "italic")
    if rv.straggler is not None and not view.short:
        t.append(f"  next: {rv.straggler.next_step}\n")
    if rv.hang is not None:
        _hang(t, rv, view, width)


def _marked(rv: RanksView) -> set[int]:
    """The ranks the table shows in bold: the straggler and the ranks a hang misses."""
    out = set(rv.hang.missing) if rv.hang is not None else set()
    if rv.straggler is not None:
        out.add(rv.straggler.rank)
    return out


def _ranks_shown(rv: RanksView, most: int) -> list[RankRow]:
    """At most `most` ranks, those that matter first (the straggler, the ranks a hang misses,
    stalled and gone ranks, waiting ones, then the others by rank), listed by rank."""
    first = _marked(rv)
    order = {"stalled": 1, "gone": 1, "waiting": 2}

    def weight(r: RankRow) -> tuple[int, int]:
        return (0 if r.rank in first else order.get(r.state, 3), r.rank)

    chosen = sorted(rv.rows, key=weight)[:most]
    return sorted(chosen, key=lambda r: r.rank)


def _rank_table(rows: list[RankRow], width: int) -> list[str]:
    """The header, then a line per rank, cut to `width` (the node and the state give way)."""
    node_w = max(6, min(20, width - 66))
    head = f"  {'rank':>4} {'node':<{node_w}} {'step p50':>9} {'wait':>5} {'own':>9} {'lag':>10}"
    lines = [head + "  state"]
    room = max(8, width - len(head) - 2)
    for r in rows:
        node = _cut(r.node or "?", node_w)
        share = "—" if r.wait_share is None else _pct(r.wait_share)
        lines.append(
            f"  {r.rank:>4} {node:<{node_w}} {ms(r.step_p50_s):>9} {share:>5} "
            f"{ms(r.own_s):>9} {lag_text(r):>10}  {_cut(rank_state(r), room)}"
        )
    return lines


def _hang(t: Text, rv: RanksView, view: View, width: int) -> None:
    """The stacks of the ranks a hang misses (those first), their top frames, and what next."""
    hang = rv.hang
    frames = SHORT_STACK_FRAMES if view.short else STACK_FRAMES
    stacks = hang.stacks[:1] if view.short else hang.stacks[:2]
    for rank, stack in stacks:
        lines = [ln.strip() for ln in stack.splitlines() if ln.strip()]  # its frames
        t.append(f"  stack of rank {rank} (most recent call first):\n", style="bold")
        for line in lines[:frames]:  # cut from the left: the line and the function stay
            room = max(12, width - 4)
            t.append(f"    {line if len(line) <= room else '…' + line[-(room - 1) :]}\n")
    if not hang.stacks and not hang.gone:
        t.append(f"  {NO_STACK_YET}\n")
    if not view.short:
        t.append(f"  next: {hang.next_step}\n")


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(1, room - 1)] + "…"


def _split_bar(t: Text, mv: MeasuredView, view: View, width: int) -> None:
    glyphs = PLAIN_GLYPHS if view.plain else BAR_GLYPHS
    w = max(10, min(60, width - 4))
    shown = [(p.seconds or 0.0, glyphs[p.part]) for p in mv.parts]
    t.append("  " + stacked_bar(shown, mv.split.step_s, w) + "\n")
    labels = [f"{glyphs[p.part]} {p.word} {_secs(p.seconds)} {_pct(p.share)}" for p in mv.parts]
    for line in _filled(labels, width - 2):  # a label never breaks across lines
        t.append("  " + line + "\n")
    gpu = mv.gpu_busy
    if gpu is not None and gpu.measured:
        t.append(f"  GPU busy {_secs(gpu.seconds)} of the step ({_pct(gpu.share)}, measured)")
    elif gpu is not None:
        t.append(
            f"  GPU busy ≈ {_secs(gpu.seconds)} of the step "
            f"({_pct(gpu.share)}, estimated from NVML's samples)"
        )
    else:
        t.append("  GPU busy: not measured")
    if mv.unmeasured:
        t.append(f" · not measured (inside host): {', '.join(mv.unmeasured)}")
    t.append("\n")


def _filled(items: list[str], width: int, sep: str = "  ") -> list[str]:
    """`items` joined by `sep` into lines of at most `width` (an item longer stands alone)."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + len(sep) + len(item) <= width:
            lines[-1] += sep + item
        else:
            lines.append(item)
    return lines


def _site_lines(mv: MeasuredView, width: int) -> list[str]:
    """The lines of code that waited for the GPU, most time first."""
    if not mv.sync_sites:
        return []
    m = mv.split
    out = ["  syncs: " + (f"{m.sync_count:.1f} a step" if m.sync_count is not None else "")]
    room = max(12, width - 30)
    for ss in mv.sync_sites[:MAX_SYNC_SITES]:
        s = ss.site
        site = s.site if len(s.site) <= room else "…" + s.site[-(room - 1) :]
        out.append(f"    {site} {s.call} · {s.count}× {_secs(s.seconds)} ({_pct(ss.share)})")
    return out


def _memory_table(t: Text, mv: MeasuredView, view: View, width: int) -> None:
    rows = mv.memory
    if not rows:
        return
    t.append("Memory per process ", style="bold")
    t.append("(GiB; allocator and model measured in the job, NVML used beside)\n", style="italic")
    cols = ("alloc", "reserved", "NVML", "params", "grads", "optim", "activ")
    wide = width >= 2 + 7 + 5 + 9 * len(cols)  # one row a process; else two
    split = 3 if not wide else len(cols)
    head = f"  {'pid':>7} {'rank':>4}"
    t.append(head + "".join(f" {c:>8}" for c in cols[:split]) + "\n")
    if not wide:
        t.append(" " * len(head) + "".join(f" {c:>8}" for c in cols[split:]) + "\n")
    for r in rows[:MAX_PROBED]:
        pid = "—" if view.sanitize else str(r.pid)
        rank = "—" if r.rank is None else str(r.rank)
        vals = [
            formats.gib(v, "—")
            for v in (
                r.allocated_bytes,
                r.reserved_bytes,
                r.nvml_used_bytes,
                r.params_bytes,
                r.grads_bytes,
                r.optimizer_bytes,
                r.activations_bytes,
            )
        ]
        t.append(f"  {pid:>7} {rank:>4}" + "".join(f" {v:>8}" for v in vals[:split]) + "\n")
        if not wide:
            t.append(" " * len(head) + "".join(f" {v:>8}" for v in vals[split:]) + "\n")
    if len(rows) > MAX_PROBED:
        t.append(f"  … {len(rows) - MAX_PROBED} more\n")
    worst = mv.fragmented
    if worst is not None:
        t.append(
            f"  reserved far above allocated: {_gib(worst.cached_bytes)} cached, "
            f"{_gib(worst.inactive_split_bytes)} split, {worst.alloc_retries or 0} cudaMalloc "
            "retries: fragmentation, try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n",
            style="bold",
        )


def _memory_line(m: JobGpuMemory, view: View, width: int) -> str:
    values = [b for _, b in m.series]
    top = max(values) or 1
    trend = ""
    if m.trend_bytes_per_min is not None:
        trend = f" trend {m.trend_bytes_per_min / 2**20:+.0f} MiB/min"
    w = max(8, min(40, width - 52))
    spark = history(values, w, view.plain, top=top)
    return (
        f"  GPU {m.gpu}: job holds {_gib(m.now_bytes)} (peak {_gib(m.peak_bytes)}){trend} {spark}"
    )


class JobPane(Pane):
    def compose(self) -> ComposeResult:
        yield DiffText(id="job-text")

    def show(self, u: Update, view: View) -> None:
        primary = u.diagnosis.primary if u.diagnosis is not None else None
        width = max(40, (self.size.width or 80) - 2)
        config = getattr(self.app, "model_config", None)  # --model-config: MFU from its FLOPs
        model = config.read.shape if config is not None else None
        text = render(
            u.snapshot.job, list(u.job_window), primary, view, width, view.job, u.snapshot, model
        )
        self.query_one("#job-text", DiffText).update(text)
