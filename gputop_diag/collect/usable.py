"""Whether a snapshot has any GPU the tool can read, and if not, why (exit code 3).

A GPU is usable unless it is lost or NVML reported it unavailable (an `nvml` error with its index:
the collector emits those only for a GPU it cannot open). The reason is the most useful error:
NVML itself failing (no driver, the count failed), no GPU at all, or every GPU lost/unavailable.
"""

from __future__ import annotations

from ..model import CollectorError, Snapshot


def usable_gpus(snap: Snapshot) -> tuple[int, ...]:
    down = {e.gpu_index for e in snap.errors if e.source == "nvml" and e.gpu_index is not None}
    return tuple(g.index for g in snap.gpus if not g.lost and g.index not in down)


def no_usable_gpu(snap: Snapshot) -> CollectorError | None:
    """None when at least one GPU is usable; else the reason, with the next step."""
    if usable_gpus(snap):
        return None
    for e in snap.errors:
        if e.source == "nvml" and e.gpu_index is None:
            return e
    if not snap.gpus:
        return CollectorError(
            source="nvml",
            message="no GPU found",
            next_step="check `nvidia-smi -L`; in a container or a Slurm job, check that GPUs "
            "were allocated to it",
            code="NoGpu",
        )
    per_gpu = [e for e in snap.errors if e.source == "nvml" and e.gpu_index is not None]
    lost = [g.index for g in snap.gpus if g.lost]
    what = "lost" if len(lost) == len(snap.gpus) else "lost or unavailable"
    first = per_gpu[0] if per_gpu else None
    return CollectorError(
        source="nvml",
        message=f"no usable GPU: every GPU is {what}"
        + (f" ({first.message})" if first is not None else ""),
        next_step=first.next_step if first is not None else "check `nvidia-smi`",
        code=first.code if first is not None else None,
    )
