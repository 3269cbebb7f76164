"""What fits on a GPU: headroom, the largest batch and the longest context, and the what-ifs,
one change at a time, each with the memory it saves and whether the job then fits.

The levers are the seed's five (mixed precision, gradient checkpointing, a smaller batch, a
sharded optimizer, a shorter context) and, for inference, the KV cache in fp8, fewer KV
heads (grouped-query attention: Ainslie et al. 2023, "GQA", arXiv:2305.13245), weight-only
quantisation of the weights (`quant.py`) and tensor parallelism over the fewest GPUs that fit
(`parallel.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .parallel import kv_replicated, tp_problems
from .precision import quant_fits_gpu
from .shape import DTYPE_BYTES, ModelShape
from .terms import Plan, plan
from .workload import Workload

MAX_BATCH = 1 << 16
MAX_SEQ = 1 << 22
SHARD_WORLD = 8  # the ranks a sharding what-if assumes when the job runs on one GPU
TP_SIZES = (2, 4, 8)  # the tensor-parallel sizes a what-if tries: one node's GPUs
# bytes per weight of each weight-only format, to skip a lever that would not save (int4 is
# half a byte and its scales)
_WEIGHT_BYTES = {"int4": 0.52, "int8": 1.0, "fp8": 1.0}


@dataclass(frozen=True, slots=True)
class Fit:
    capacity: int | None  # bytes of one GPU; None: no GPU known
    total: int
    largest_batch: int | None  # None: not even batch 1 fits (or no GPU known)
    longest_seq: int | None

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.total <= self.capacity

    @property
    def headroom(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.total


@dataclass(frozen=True, slots=True)
class WhatIf:
    lever: str  # the seed's words: "mixed precision", "gradient checkpointing", ...
    change: str  # what would change: "bf16 with fp32 master weights", "batch 8 → 3"
    saves: int | None  # bytes saved per GPU (None: not applicable)
    total: int | None
    fits: bool | None
    note: str = ""


def _largest(fn, lo: int, hi: int, capacity: int) -> int | None:
    """The largest n in [lo, hi] with fn(n) <= capacity (fn grows with n); None if none."""
    if fn(lo) > capacity:
        return None
    if fn(hi) <= capacity:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fn(mid) <= capacity:
            lo = mid
        else:
            hi = mid
    return lo


def fit(shape: ModelShape, w: Workload, capacity: int | None, parameters: int | None = None) -> Fit:
    total = plan(shape, w, parameters).total
    if capacity is None:
        return Fit(None, total, None, None)

    def with_batch(b: int) -> int:
        return plan(shape, replace(w, batch=b), parameters).total

    def with_seq(s: int) -> int:
        return plan(shape, replace(w, seq=s), parameters).total

    return Fit(
        capacity,
        total,
        _largest(with_batch, 1, MAX_BATCH, capacity),
        _largest(with_seq, 1, MAX_SEQ, capacity),
    )


def _row(
    lever: str,
    change: str,
    base: Plan,
    shape: ModelShape,
    w: Workload,
    capacity: int | None,
    parameters: int | None,
    note: str = "",
) -> WhatIf:
    after = plan(shape, w, parameters)
    fits = None if capacity is None else after.total <= capacity
    return WhatIf(lever, change, base.total - after.total, after.total, fits, note)


def _na(lever: str, why: str) -> WhatIf:
    return WhatIf(lever, "-", None, None, None, why)


def what_ifs(
    shape: ModelShape,
    w: Workload,
    capacity: int | None,
    parameters: int | None = None,
    kv_shape: ModelShape | None = None,
    compute_capability: tuple[int, int] | None = None,
) -> tuple[WhatIf, ...]:
    """One row per lever, each applied alone to `w`. `kv_shape`: the model with fewer KV heads
    (default: 8 where it has more, else 1); `compute_capability`: the GPU's, to say where a
    weight format does not run on it."""
    base = plan(shape, w, parameters)
    f = fit(shape, w, capacity, parameters)
    rows: list[WhatIf] = []

    def row(lever: str, change: str, new: Workload, note: str = "", model=shape) -> None:
        rows.append(_row(lever, change, base, model, new, capacity, parameters, note))

    # 1. mixed precision
    if w.dtype == "fp32":
        row(
            "mixed precision",
            "fp32 → bf16" + (" with fp32 master weights" if w.training else ""),
            replace(w, dtype="bf16", precision="master"),
            "model states stay 16 B per parameter with Adam; activations halve"
            if w.training
            else "",
        )
    else:
        rows.append(_na("mixed precision", f"already {w.dtype}"))
    # 2. gradient checkpointing
    if not w.training:
        rows.append(_na("gradient checkpointing", "inference keeps no activations for backward"))
    else:
        for how in ("selective", "full"):
            if w.checkpointing == how or (how == "selective" and w.checkpointing == "full"):
                rows.append(_na(f"checkpointing: {how}", f"already {w.checkpointing}"))
                continue
            row(
                f"checkpointing: {how}",
                f"{w.checkpointing} → {how}",
                replace(w, checkpointing=how),
                "about a third more compute" if how == "full" else "a few % more compute",
            )
    # 3. a smaller batch
    target = f.largest_batch if f.fits is False and f.largest_batch else max(1, w.batch // 2)
    if target >= w.batch:
        rows.append(_na("smaller batch", "already at batch 1"))
    else:
        row(
            "smaller batch",
            f"batch {w.batch} → {target}",
            replace(w, batch=target),
            f"keep the global batch with gradient accumulation × {-(-w.batch // target)}"
            if w.training
            else "fewer sequences at once",
        )
    # 4. a sharded optimizer (and everything else)
    if not w.training:
        rows.append(_na("sharded optimizer", "no optimizer in inference"))
    else:
        world = w.world if w.world > 1 else SHARD_WORLD
        assumed = "" if w.world > 1 else f"; {SHARD_WORLD} GPUs assumed: --world"
        for stage, what in ((1, "optimizer state"), (3, "all model states")):
            if w.stage >= stage:
                rows.append(_na(f"ZeRO-{stage}", f"already stage {w.stage}"))
                continue
            row(
                f"sharded optimizer: ZeRO-{stage}" + (" / FSDP" if stage == 3 else ""),
                f"{what} / {world} GPUs",
                replace(w, zero=stage, fsdp=False, world=world),
                "more communication per step" + assumed,
            )
    # 5. a shorter context
    target = f.longest_seq if f.fits is False and f.longest_seq else max(1, w.seq // 2)
    if target >= w.seq:
        rows.append(_na("shorter context", "already at 1 token"))
    else:
        row("shorter context", f"seq {w.seq} → {target}", replace(w, seq=target))
    # besides the seed's levers: attention without the s×s scores
    if w.flash_attention:
        rows.append(_na("flash attention", "already on"))
    else:
        row(
            "flash attention",
            "eager → flash attention",
            replace(w, flash_attention=True),
            "transformers: attn_implementation='sdpa' or 'flash_attention_2'",
        )
    # 6. the KV cache in fp8, 7. fewer KV heads
    if not w.training and shape.head == "lm":
        if w.kv == "fp8":
            rows.append(_na("KV cache in fp8", "already fp8"))
        else:
            row(
                "KV cache in fp8",
                f"{w.kv} → fp8",
                replace(w, kv_dtype="fp8"),
                "the engine must support it: vLLM --kv-cache-dtype fp8",
            )
        fewer = kv_shape or fewer_kv_heads(shape)
        if fewer is None:
            rows.append(_na("fewer KV heads", "already one KV head (multi-query attention)"))
        else:
            row(
                "fewer KV heads",
                f"{shape.kv_heads} → {fewer.kv_heads} KV heads",
                w,
                "needs a model trained or uptrained with them: GQA",
                model=fewer,
            )
    else:
        why = "training keeps no KV cache" if w.training else "an encoder keeps no KV cache"
        rows.append(_na("KV cache in fp8", why))
        rows.append(_na("fewer KV heads", why))
    together = _together(w)
    if together is not None and together != w:
        row("all of the above", _describe(together, w), together, "batch and context kept")
    # 8. weight-only quantisation, 9. tensor parallelism: each alone, for inference
    if w.training:
        rows.append(_na("weight-only quantisation", "training keeps its weights in --dtype"))
        rows.append(
            _na("tensor parallelism", "modelled for inference; training: --world with --zero 3")
        )
        return tuple(rows)
    moe = shape.experts > 0
    for quant, note in (
        ("int8", "bitsandbytes load_in_8bit, or an int8 checkpoint"),
        ("fp8", "vLLM --quantization fp8, or an fp8 checkpoint"),
        ("int4", "a GPTQ or AWQ checkpoint: vLLM --quantization gptq / awq"),
    ):
        now = w.quant or w.dtype
        if _WEIGHT_BYTES[quant] >= _WEIGHT_BYTES.get(now, DTYPE_BYTES.get(now, 2)):
            rows.append(_na(f"weights in {quant}", f"already {now} weights"))
            continue
        new = replace(w, quant=quant, dtype="bf16" if w.dtype == "fp8" else w.dtype)
        hw = quant_fits_gpu(quant, compute_capability, moe)
        row(
            f"weights in {quant}",
            f"{now} → {quant} weights (weight-only)",
            new,
            "; ".join(x for x in (note, hw) if x),
        )
    rows.append(_tp_row(shape, w, base, capacity, parameters))
    return tuple(rows)


def _tp_row(
    shape: ModelShape, w: Workload, base: Plan, capacity: int | None, parameters: int | None
) -> WhatIf:
    """Tensor parallelism over the fewest GPUs (2, 4, 8) that fit, else over the most."""
    sizes = [t for t in TP_SIZES if t > w.tp] or [2 * w.tp]
    sizes = [t for t in sizes if not tp_problems(shape, t)]
    if not sizes:
        return _na("tensor parallelism", f"{shape.heads} heads do not split over 2, 4 or 8 GPUs")

    def over(t: int, note: str = "") -> WhatIf:
        new = replace(w, tp=t)
        return _row("tensor parallelism", f"{w.tp} → {t} GPUs (--tp {t})", base, shape, new,
                    capacity, parameters, note)  # fmt: skip

    t = next((t for t in sizes if over(t).fits is not False), sizes[-1])
    notes = ["vLLM --tensor-parallel-size"]
    if capacity is not None and over(t).fits:
        notes.insert(0, "the fewest GPUs that fit")
    if kv_replicated(shape, t):
        notes.append(f"KV heads replicated beyond {shape.kv_heads} GPUs")
    return over(t, "; ".join(notes))


def _together(w: Workload) -> Workload | None:
    """Every lever that keeps the batch and the context, at once."""
    out = replace(w, flash_attention=True)
    if w.dtype == "fp32":
        out = replace(out, dtype="bf16", precision="master")
    if w.training:
        out = replace(out, checkpointing="full")
        if out.stage < 3:
            out = replace(out, zero=3, world=w.world if w.world > 1 else SHARD_WORLD)
    elif w.kv != "fp8":
        out = replace(out, kv_dtype="fp8")
    return out


def _describe(new: Workload, old: Workload) -> str:
    said = []
    if new.dtype != old.dtype:
        said.append(new.dtype)
    if new.flash_attention and not old.flash_attention:
        said.append("flash attention")
    if new.checkpointing != old.checkpointing:
        said.append(f"{new.checkpointing} checkpointing")
    if new.stage != old.stage:
        said.append(f"ZeRO-{new.stage} / {new.world} GPUs")
    if new.kv != old.kv:
        said.append(f"KV cache {new.kv}")
    return ", ".join(said)


def fewer_kv_heads(shape: ModelShape) -> ModelShape | None:
    """The model with 8 KV heads where it has more (Llama-2-70B's choice), else with one."""
    if shape.kv_heads <= 1:
        return None
    target = 8 if shape.kv_heads > 8 and shape.heads % 8 == 0 else 1
    return replace(shape, kv_heads=target, fused_qkv=False)
