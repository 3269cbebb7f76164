"""The planner beside a running job: what the plan of its model predicts per GPU, and what the
job holds (NVML's figure for the process; with the probe inside it, PyTorch's allocator peak
and the exact bytes of its parameters, gradients and optimizer state), with the difference.

What the command line does not say (batch, context, precision, optimizer) is assumed and every
assumption is named with the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..model import GpuProcess, Snapshot
from .configs import ReadConfig
from .gpus import GpuMemory
from .hints import JobHints, job_hints
from .optimizers import OPTIMIZER_NAMES
from .render import document
from .workload import Workload


@dataclass(frozen=True, slots=True)
class Measured:
    """What one process holds on one GPU."""

    pid: int
    gpu_index: int
    nvml_used: int | None  # NVML's used memory of the process on that GPU
    allocated: int | None = None  # the probe: torch's allocator, now
    reserved: int | None = None
    peak: int | None = None  # the most allocated at once
    params: int | None = None
    grads: int | None = None
    optimizer: int | None = None
    kv_cache: int | None = None


@dataclass(frozen=True, slots=True)
class Comparison:
    label: str
    predicted: int | None
    measured: int | None
    how: str  # what the measured figure is

    @property
    def difference(self) -> int | None:
        if self.predicted is None or self.measured is None:
            return None
        return self.measured - self.predicted


@dataclass(frozen=True, slots=True)
class JobPlan:
    measured: Measured
    doc: dict[str, Any]  # render.document of the job's model and workload
    rows: tuple[Comparison, ...]
    assumed: tuple[str, ...]  # what the command line did not say
    said: tuple[str, ...]  # what it did say, and where


def _without_rank(argv: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """A command line less its rank arguments (--local-rank=3, --local_rank 3)."""
    if not argv:
        return None
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if "local-rank" in a or "local_rank" in a:
            skip = "=" not in a
            continue
        out.append(a)
    return tuple(out)


def _ranks(snap: Snapshot, pid: int) -> int:
    """The GPU processes running the same command line as `pid` (a job's ranks)."""
    info = snap.process(pid)
    key = _without_rank(info.cmdline if info else None)
    if key is None:
        return 1
    same = {
        p.pid
        for p in snap.gpu_processes
        if (other := snap.process(p.pid)) is not None and _without_rank(other.cmdline) == key
    }
    return max(1, len(same))


def workload_for(
    hints: JobHints, read: ReadConfig, probe_says_training: bool | None = None
) -> tuple[Workload, tuple[str, ...]]:
    """The job's workload from its command line; the rest assumed and said."""
    assumed: list[str] = []
    mode = hints.mode
    if mode is None:
        mode = "infer" if probe_says_training is False else "train"
        why = "the probe saw no gradients" if probe_says_training is False else "assumed"
        assumed.append(f"{'inference' if mode == 'infer' else 'training'} ({why})")
    dtype = hints.dtype or read.checkpoint_dtype or "bf16"
    if not hints.dtype:
        src = "the checkpoint's dtype" if read.checkpoint_dtype else "assumed"
        assumed.append(f"{dtype} ({src})")
    precision = hints.precision or "master"
    if mode == "train" and dtype != "fp32" and not hints.precision:
        assumed.append("fp32 master weights")
    batch = hints.batch or 1
    if not hints.batch:
        assumed.append("batch 1")
    limit = read.shape.max_positions or 2048
    seq = hints.seq or min(2048, limit)
    if not hints.seq:
        assumed.append(f"{seq} tokens per sequence")
    optimizer = hints.optimizer or "adamw"
    if mode == "train" and not hints.optimizer:
        assumed.append("AdamW")
    checkpointing = hints.checkpointing or "none"
    if mode == "train" and not hints.checkpointing:
        assumed.append("no checkpointing")
    flash = True if hints.flash_attention is None else hints.flash_attention
    if hints.flash_attention is None:
        assumed.append("SDPA / flash attention (transformers' default)")
    world = hints.world or 1
    zero = hints.zero or 0
    if world == 1:
        zero = 0
    w = Workload(
        mode=mode,
        dtype=dtype,
        precision=precision,
        optimizer=optimizer,
        batch=batch,
        seq=seq,
        zero=zero,
        fsdp=hints.fsdp and world > 1,
        world=world,
        checkpointing=checkpointing,
        flash_attention=flash,
        kv_dtype=hints.kv_dtype,
    )
    return w, tuple(assumed)


def measured_of(snap: Snapshot, proc: GpuProcess) -> Measured:
    """NVML's figure for the process, and the probe's where one runs inside it."""
    m = Measured(proc.pid, proc.gpu_index, proc.used_memory_bytes)
    probe = snap.probe(proc.pid)
    if probe is None:
        return m
    mem = probe.memory
    return replace(
        m,
        allocated=mem.allocated_bytes if mem else None,
        reserved=mem.reserved_bytes if mem else None,
        peak=mem.peak_bytes if mem else None,
        params=probe.params_bytes,
        grads=probe.grads_bytes,
        optimizer=probe.optimizer_bytes,
        kv_cache=probe.kv_cache_bytes,
    )


def _term(doc: dict[str, Any], key: str) -> int:
    return sum(t["bytes"] for t in doc["terms"] if t["term"] == key)


def compare(doc: dict[str, Any], m: Measured) -> tuple[Comparison, ...]:
    """The plan's figures beside the job's, where the job's were measured."""
    runtime = _term(doc, "runtime")
    rows = [
        Comparison("process (NVML)", doc["total_bytes"], m.nvml_used, "NVML used"),
    ]
    if m.peak is not None or m.allocated is not None:
        rows.append(
            Comparison(
                "allocator peak", doc["total_bytes"] - runtime, m.peak, "torch max allocated"
            )
        )
    for key, label, value in (
        ("weights", "weights", m.params),
        ("gradients", "gradients", m.grads),
        ("optimizer", "optimizer state", m.optimizer),
        ("kv_cache", "KV cache", m.kv_cache),
    ):
        if value is not None:
            rows.append(Comparison(label, _term(doc, key), value, "the probe"))
    return tuple(rows)


def job_plan(
    snap: Snapshot,
    read: ReadConfig,
    *,
    gpu_index: int | None = None,
    pids: tuple[int, ...] = (),
    model: dict[str, Any] | None = None,
) -> JobPlan | None:
    """The plan of the job holding most memory (on `gpu_index`), beside what it holds; None
    when no process holds GPU memory."""
    proc = snap.job_process(gpu_index, pids)
    if proc is None:
        return None
    measured = measured_of(snap, proc)
    hints = job_hints(snap, proc.pid)
    training = None
    if measured.grads is not None or measured.optimizer is not None:
        training = bool(measured.grads or measured.optimizer)
    if hints.world is None:
        ranks = _ranks(snap, proc.pid)
        if ranks > 1:
            hints = replace(
                hints,
                world=ranks,
                said=(*hints.said, f"{ranks} ranks: GPU processes with the same command line"),
            )
    w, assumed = workload_for(hints, read, training)
    g = snap.gpu(proc.gpu_index)
    gpu = None
    if g is not None and g.mem_total_bytes:
        size = g.mem_total_bytes - (g.mem_reserved_bytes or 0)
        gpu = GpuMemory(
            g.static.name or f"GPU {g.index}",
            size,
            "NVML",
            compute_capability=g.static.compute_capability,  # nvmlDeviceGetCudaComputeCapability
            origin="NVML",
        )
    doc = document(read.shape, w, gpu, model=model, notes=read.notes)
    return JobPlan(measured, doc, compare(doc, measured), assumed, hints.said)


GIB = 2**30


def _g(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GIB:.1f}"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def plan_lines(jp: JobPlan, width: int, assumptions: bool = True) -> list[str]:
    """The plan beside the job, in a few lines of at most `width` characters."""
    doc, m = jp.doc, jp.measured
    w = doc["workload"]
    mode = "training" if w["mode"] == "train" else "inference"
    what = f"{w['dtype']} {OPTIMIZER_NAMES[w['optimizer']]}" if w["mode"] == "train" else w["dtype"]
    params = doc["model"]["parameters"]
    lines = [
        f"plan  {doc['model']['family']} {params / 1e9:.2f} B, {mode} {what}, batch "
        f"{w['batch']} × {w['seq']}: {_g(doc['total_bytes'])} GiB per GPU predicted"
    ]
    nvml = jp.rows[0]
    if nvml.measured is not None:
        diff = nvml.difference or 0
        side = "more" if diff > 0 else "less"
        lines.append(
            f"job   pid {m.pid} on GPU {m.gpu_index} holds {_g(nvml.measured)} GiB (NVML): "
            f"{_g(abs(diff))} GiB {side} than planned"
        )
    probe = list(jp.rows[1:])
    if probe:
        lines.append(
            "probe "
            + "  ".join(f"{r.label} {_g(r.measured)} (plan {_g(r.predicted)})" for r in probe)
        )
    if assumptions and jp.assumed:
        lines.append("      assumed: " + ", ".join(jp.assumed))
    return [_fit(x, width) for x in lines]
