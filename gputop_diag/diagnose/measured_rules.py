"""The rules over figures measured inside the job (the probe), which outrank the figures inferred
from outside: a measured waiting part of the step decides its class (input pipeline,
synchronization, communication), and the allocator's figures tell true memory pressure from
its cache or fragmentation. Every text says "measured"; the outside rules (`rules.py`) judge a
class whose part the probe did not measure.
"""

from __future__ import annotations

from ..model import formats
from . import thresholds as T
from .features import Features
from .measured import PART_CLASS, WAIT_PARTS
from .rules import LAUNCH_BOUND, Verdict, as_pct, ev, gap_evidence
from .types import Evidence

_gib = formats.gib_unit
_PART_TEXT = {
    "t_input": "waiting for the next batch (t_input)",
    "t_sync": "blocked in host-device syncs (t_sync)",
    "t_comm": "waiting for communication not hidden behind compute (exposed t_comm)",
}


def secs(s: float | None) -> str:
    """A part of a step: 1.20 s, 750 ms, 2.4 ms, 0.03 ms (a fast step's parts are small)."""
    if s is None:
        return "n/a"
    if s >= 1:
        return f"{s:.2f} s"
    ms = s * 1000
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms" if ms >= 0.1 else f"{ms:.2f} ms"


def _sites(f: Features) -> str:
    m = f.measured
    if m is None or not m.sync_sites:
        return ""
    total = sum(s.seconds for s in m.sync_sites) or 1.0
    return "; where: " + ", ".join(
        f"{s.site} {s.call} ({as_pct(s.seconds / total)})" for s in m.sync_sites[:3]
    )


def wait(f: Features, cls: str) -> Verdict | None:
    """The verdict on class `cls` from its waiting part measured inside the job: it fires when
    the part takes MEASURED_WAIT_SHARE of the step or more, more than any other waiting part,
    and the GPU is not busy through it. None when the probe did not measure the part (too few
    steps, no probe): the outside rule judges then."""
    part = next(p for p, c in PART_CLASS.items() if c == cls)
    m = f.measured
    share = m.share(part) if m is not None and f.measured_steps else None
    if share is None:
        return _hang_verdict(f) if part == "t_comm" else None
    n = len(m.pids)
    step = f"{secs(m.step_s)} step"
    over = f"over {m.steps} steps" + (f", the mean of {n} processes" if n > 1 else " of 1 process")
    gpu = m.share("t_gpu")
    # The probe does not measure GPU busy time (probe/schema.py): NVML's busy share over the
    # window stands in. A host blocked in .item() while the GPU runs what it queued is the GPU's
    # time, not a sync stall; a loader waited on while the GPU is busy is not the limit either.
    nvml = f.busy_mean / 100.0 if gpu is None and f.busy_mean is not None else None
    busy_share = gpu if gpu is not None else nvml
    busy = busy_share is not None and busy_share >= T.MEASURED_GPU_BUSY
    fires = share >= T.MEASURED_WAIT_SHARE and m.largest_wait == part and not busy
    what = _PART_TEXT[part]
    text = (
        f"measured in the job: {what} {secs(m.seconds(part))} of every {step} "
        f"({as_pct(share)}, {over})"
    )
    if part == "t_sync" and m.sync_count is not None:
        text += f", {m.sync_count:.1f} syncs a step" + _sites(f)
    if part == "t_comm" and m.t_comm_total_s is not None:
        text += f", of {secs(m.t_comm_total_s)} communication in all"
    metric = f"measured_{part}_share"
    out = [ev(metric, 100 * share, 100 * T.MEASURED_WAIT_SHARE, text)]
    if part == "t_comm" and f.ranks is not None and (f.ranks.straggler or f.ranks.hang):
        # the ranks wait for one of them: the straggler's own work, not the network
        out.append(ev("ranks", None, None, f"measured in the job's ranks: {f.ranks.verdict}"))
    if gpu is not None:
        out.append(
            ev(
                "measured_gpu_share",
                100 * gpu,
                100 * T.MEASURED_GPU_BUSY,
                f"measured: the GPU busy {as_pct(gpu)} of the step ({secs(m.seconds('t_gpu'))}"
                ", CUDA events)",
            )
        )
    elif nvml is not None and busy:
        out.append(
            ev(
                "gpu_busy_while_waiting",
                100 * nvml,
                100 * T.MEASURED_GPU_BUSY,
                f"the GPUs busy {as_pct(nvml)} of the time (NVML) while the job waited: it waits "
                "for work it queued, so the GPU is the limit",
            )
        )
    if f.gappy:
        out.append(gap_evidence(f))
    if share < T.MEASURED_WAIT_SHARE:
        against = (
            f"measured in the job: {what} only {secs(m.seconds(part))} ({as_pct(share)}) of "
            f"the {step}"
        )
    elif busy:
        against = (
            f"measured: {what} {as_pct(share)} of the step, but the GPU is busy "
            f"{as_pct(busy_share)} of the time{' (NVML)' if gpu is None else ''}: the wait "
            "overlaps GPU work"
        )
    else:
        other = m.largest_wait or part
        against = (
            f"measured: {what} {as_pct(share)} of the step, less than "
            f"{_PART_TEXT[other].split(' (')[0]} ({as_pct(m.share(other) or 0.0)})"
        )
    against += _one_rank(f, cls)
    return Verdict(
        fires,
        T.CONF_MEASURED,
        tuple(out),
        ev(metric, 100 * share, 100 * T.MEASURED_WAIT_SHARE, against),
        (),
        job=f"pid {_culprit_pid(f, part) or m.pids[0]}",
        share=share,
        measured=True,
    )


def launch(f: Features) -> Verdict | None:
    """Launch-bound, measured inside the job: the GPU busy under half the step (where a probe
    measures t_gpu) while no waiting part takes a fifth of it, so the step is the host's own
    work, issuing it. The probe counts no launches (probe/schema.py): the host's share is the
    figure. None where t_gpu was not measured (the outside figures judge then)."""
    m = f.measured
    if m is None or not f.measured_steps:
        return None
    gpu = m.share("t_gpu")
    if gpu is None or gpu >= T.LAUNCH_MEASURED_GPU_SHARE:
        return None
    if any((m.share(p) or 0.0) >= T.MEASURED_WAIT_SHARE for p in WAIT_PARTS):
        return None
    host = m.share("t_host")
    text = (
        f"measured in the job: the GPU busy only {as_pct(gpu)} of every {secs(m.step_s)} step "
        f"({secs(m.seconds('t_gpu'))}) while the host's own work takes "
        f"{as_pct(host or 0.0)} and no wait {as_pct(T.MEASURED_WAIT_SHARE)}: the host issuing "
        "the step is the limit (launch-bound)"
    )
    e = ev("measured_gpu_share", 100 * gpu, 100 * T.LAUNCH_MEASURED_GPU_SHARE, text)
    return Verdict(
        True,
        T.CONF_MEASURED,
        (e,),
        e,
        (),
        job=f"pid {m.pids[0]}",
        share=host,
        measured=True,
        finding=LAUNCH_BOUND,
    )


def _hang_verdict(f: Features) -> Verdict | None:
    """Ranks that stopped stepping while others wait in a collective: no step is recent, so no
    split is, but the hang is measured (the ranks' progress records) and it is the verdict."""
    ranks = f.ranks
    if ranks is None or ranks.hang is None:
        return None
    text = f"measured in the job's ranks: {ranks.verdict}"
    return Verdict(
        True,
        T.CONF_MEASURED,
        (ev("ranks_hang", None, None, text),),
        ev("ranks_hang", None, None, text),
        (),
        job=f"pid {_culprit_pid(f, 't_comm')}" if _culprit_pid(f, "t_comm") else None,
        measured=True,
    )


def _one_rank(f: Features, cls: str) -> str:
    """A class the ranks' mean rules out, while one rank is the straggler of it: said, so the
    two lines do not contradict (the others wait for that rank in communication)."""
    s = f.ranks.straggler if f.ranks is not None else None
    if s is None or _CAUSE_CLASS.get(s.cause) != cls:
        return ""
    return (
        f" (the mean of the ranks); rank {s.rank} alone is the straggler of it "
        f"({secs(s.gap_s)} more a step), and the others wait for it in communication"
    )


_CAUSE_CLASS = {"input pipeline": "input_pipeline", "host syncs": "synchronization"}


def _culprit_pid(f: Features, part: str) -> int | None:
    """The rank the others wait for (the straggler, the hang's missing rank): the process a
    communication verdict concerns, rather than the first that waits."""
    ranks = f.ranks
    if part != "t_comm" or ranks is None:
        return None
    if ranks.straggler is not None:
        return ranks.straggler.pid
    if ranks.hang is not None and ranks.hang.missing:
        row = ranks.row(ranks.hang.missing[0])
        return row.pid if row is not None else None
    return None


def memory(f: Features) -> tuple[Evidence, ...]:
    """What the allocator measured in the fullest probed process: the cache or fragmentation
    (reserved well above allocated, cudaMalloc retries), or the tensors themselves."""
    rows = [r for r in f.measured_memory if r.reserved_bytes is not None]
    if not rows:
        return ()
    r = max(rows, key=lambda r: r.reserved_bytes or 0)
    who = f"pid {r.pid}" + (f", rank {r.rank}" if r.rank is not None else "")
    out = []
    if r.fragmented:
        cached = r.cached_bytes or 0
        split = f", {_gib(r.inactive_split_bytes)} of it split" if r.inactive_split_bytes else ""
        retries = (
            f"; {r.alloc_retries} cudaMalloc retries (the cache freed to make room)"
            if r.alloc_retries
            else ""
        )
        out.append(
            ev(
                "measured_cached_share",
                100 * cached / r.reserved_bytes if r.reserved_bytes else None,
                100 * T.MEASURED_CACHE_SHARE,
                f"measured in the job ({who}): the allocator reserved "
                f"{_gib(r.reserved_bytes)} for {_gib(r.allocated_bytes)} of tensors "
                f"({_gib(cached)} cached{split}){retries}: the cache or fragmentation, not the "
                "tensors, fills the GPU; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                "(torch.cuda.empty_cache() is not the fix: the next steps reserve it again)",
            )
        )
    peak = r.peak_pct
    if peak is not None:
        pressure = peak >= T.MEASURED_PRESSURE_PCT
        parts = [
            (name, b)
            for name, b in (
                ("parameters", r.params_bytes),
                ("gradients", r.grads_bytes),
                ("optimizer state", r.optimizer_bytes),
                ("activations and temporaries", r.activations_bytes),
                ("KV cache", r.kv_cache_bytes),
            )
            if b is not None
        ]
        held = ("; " + ", ".join(f"{n} {_gib(b)}" for n, b in parts)) if parts else ""
        verdict = (
            ": true pressure, the tensors need it"
            if pressure
            else ", below the profiler's 90 % capacity rule"
        )
        out.append(
            ev(
                "measured_peak_pct",
                peak,
                T.MEASURED_PRESSURE_PCT,
                f"measured in the job ({who}): tensors peak at "
                f"{_gib(r.peak_bytes or r.allocated_bytes)} of {_gib(r.device_total_bytes)} "
                f"({peak:.0f} %){verdict}{held}",
            )
        )
    return tuple(out)
