"""Pane 6, Job: the job being watched (`gputop-diag watch`). Hidden (and key 6 inert) until a job
is set.

From the top: what is watched and how it stands (Slurm's state, pending reason, queue time, time
left); the headline — steps per second beside the peak GPU memory — with the step-time history,
median and p95; the step-time split, labelled an estimate, with the profiler command that
measures it; the GPUs the job can see against those it uses (and those Slurm gave it), and the
GPU memory its processes hold on each GPU over time with the trend; the process tree (CPU %,
RSS, threads, GPU memory) and the busiest threads by name; the last lines of its output, the
failure lines (CUDA OOM, NCCL timeout, CUDA errors) marked `!` and in bold.

Its histories are the Monitor's (`Update.job_window`: every tick of the last ten minutes that
carries the job), so they have no holes when the pane was not on screen.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult

from ...diagnose.step_split import PROFILER_COMMANDS, estimate
from ...job.figures import JobGpuMemory, gpu_memory, throughput, used_gpus
from ...job.output import LABELS, classify_line
from ...job.state import state_words
from ...model import JobState, Snapshot, formats
from ...widgets import DiffText
from ...widgets.glyphs import history
from ..feed import Update
from .base import Pane, View

OUTPUT_LINES = 12  # of the job's output shown (fewer on a short terminal)
SHORT_OUTPUT_LINES = 5
MAX_TREE = 40  # processes listed


def _gib(b: int | None) -> str:
    return formats.size(b, none="—")


def _secs(s: float | None) -> str:
    if s is None:
        return "—"
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


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
) -> Text:
    """The pane's text for the watched job and the recorded window (`label`: what is watched,
    while no sample of it has arrived)."""
    t = Text(no_wrap=False)
    if job is None:
        if label:
            t.append(f"watching {'the job' if view.sanitize else label}\n", style="bold")
        t.append("waiting for the first sample of the job…")
        return t
    label = "(job)" if view.sanitize else job.label
    t.append("Job ", style="bold")
    t.append(label[: max(10, width - 5)], style="bold")
    t.append("\n  " + state_line(job))
    if job.root_pids and not view.sanitize:
        t.append(f" · pid {', '.join(map(str, job.root_pids[:4]))}")
    t.append("\n")
    if job.log_path:
        where = "(output file)" if view.sanitize else job.log_path
        t.append(f"  output: {where} ({job.output_lines} lines)\n")
    if job.problem and not view.sanitize:
        t.append(f"  note: {job.problem}\n", style="italic")

    # -- steps: the headline, the history, the split -------------------------------------------
    tp = throughput(window)
    steps = job.steps
    t.append("\nSteps ", style="bold")
    if steps is None or tp.median_s is None:
        t.append(
            "no step time in the output yet (tqdm, Lightning, HF Trainer, Megatron, "
            "`step N … loss`; or --step-regex)\n"
        )
    else:
        t.append(tp.headline(), style="bold")
        of = f"/{steps.total}" if steps.total else ""
        t.append(f"  ({steps.source}, step {steps.step}{of})\n")
        head = f"  median {_secs(tp.median_s)} · p95 {_secs(tp.p95_s)} · "
        t.append(head)
        top = max(steps.step_times_s) if steps.step_times_s else 1.0
        w = max(8, min(60, width - len(head) - 18))
        t.append(history(steps.step_times_s, w, view.plain, top=top or 1.0))
        t.append(f"  last {min(w, len(steps.step_times_s))} steps\n")
    gpus = used_gpus(window[-1]) if window else ()
    split = estimate(steps, window, gpus, primary)
    if split is not None:
        t.append("Step split ", style="bold")
        t.append("(estimate, from outside)", style="italic")
        parts = []
        for name, secs in split.parts:
            if secs is not None:
                parts.append(f"{name} {_secs(secs)}")
        if split.wait_part is None and split.wait_s > 0:
            parts.append(f"waiting {_secs(split.wait_s)} (input/host/transfer/sync/comm)")
        t.append(": " + " + ".join(parts) + f" ≈ {_secs(split.step_s)}\n")
        t.append(f"  {split.basis}\n")
        t.append(f"  measure it: {PROFILER_COMMANDS[0]}\n")

    # -- GPUs --------------------------------------------------------------------------------
    t.append("\nGPUs ", style="bold")
    seen = job.visible_gpus
    t.append(f"visible: {seen if seen is not None else 'all (CUDA_VISIBLE_DEVICES not set)'}")
    t.append(f" · used: {', '.join(map(str, gpus)) if gpus else 'none'}")
    if job.slurm is not None and job.slurm.gpus_requested is not None:
        t.append(f" · Slurm gave {job.slurm.gpus_requested}")
    t.append("\n")
    mem = gpu_memory(window)
    for m in mem:
        t.append(_memory_line(m, view, width) + "\n")

    # -- processes ---------------------------------------------------------------------------
    procs = job.processes
    t.append(f"\nProcesses ({len(procs)})", style="bold")
    if not procs:
        t.append("  none on this machine\n")
    else:
        t.append("\n")
        held: dict[int, list[str]] = {}
        if window:
            for g in window[-1].gpu_processes:
                if g.used_memory_bytes is not None:
                    held.setdefault(g.pid, []).append(
                        f"GPU{g.gpu_index} {_gib(g.used_memory_bytes)}"
                    )
        name_w = max(8, min(24, width - 48))
        t.append(f"  {'pid':>7} {'name':<{name_w}} {'CPU':>6} {'RSS':>9} {'thr':>4}  GPU memory\n")
        for p in procs[:MAX_TREE]:
            pid = "—" if view.sanitize else str(p.pid)
            indent = "  " * min(p.depth, 6)
            name = (indent + (p.name or "?"))[:name_w]
            cpu = "—" if p.cpu_pct is None else f"{p.cpu_pct:.0f} %"
            thr = "—" if p.num_threads is None else str(p.num_threads)
            gm = ", ".join(held.get(p.pid, ())) or ""
            t.append(
                f"  {pid:>7} {name:<{name_w}} {cpu:>6} {_gib(p.rss_bytes):>9} {thr:>4}  {gm}\n"
            )
        if len(procs) > MAX_TREE:
            t.append(f"  … {len(procs) - MAX_TREE} more\n")
        busy = sorted(
            ((th.cpu_pct or 0.0, th.name, p.pid) for p in procs for th in p.busiest_threads),
            reverse=True,
        )
        busy = [b for b in busy if b[0] >= 1.0][:5]
        if busy:
            t.append("  busiest threads: ")
            t.append(", ".join(f"{name} {pct:.0f} %" for pct, name, _ in busy) + "\n")

    # -- output ------------------------------------------------------------------------------
    if job.log_path or job.output_tail:
        n = SHORT_OUTPUT_LINES if view.short else OUTPUT_LINES
        kinds = {e.kind for e in job.output_events}
        title = "\nOutput"
        if kinds:
            title += " — " + ", ".join(LABELS[k] for k in sorted(kinds) if k in LABELS)
        t.append(title + "\n", style="bold")
        if view.sanitize:
            t.append("  (not shown under --sanitize)\n")
        else:
            tail = list(job.output_tail)[-n:]
            for line in tail:
                _output_line(t, line, width)
            shown = set(tail)
            older = [e for e in job.output_events if e.line not in shown][-3:]
            for e in older:
                t.append(f"! line {e.line_no}: ", style="bold")
                t.append(e.line[: max(10, width - 16)] + "\n", style="bold")
    return t


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


def _output_line(t: Text, line: str, width: int) -> None:
    text = line.replace("\t", "    ")[: max(10, width - 4)]
    if classify_line(line):
        t.append("! ", style="bold")
        t.append(text + "\n", style="bold reverse")
    else:
        t.append("  " + text + "\n")


class JobPane(Pane):
    def compose(self) -> ComposeResult:
        yield DiffText(id="job-text")

    def show(self, u: Update, view: View) -> None:
        primary = u.diagnosis.primary if u.diagnosis is not None else None
        width = max(40, (self.size.width or 80) - 2)
        text = render(u.snapshot.job, list(u.job_window), primary, view, width, view.job)
        self.query_one("#job-text", DiffText).update(text)
