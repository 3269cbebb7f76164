"""`gputop-diag memory`: where a model's memory goes on one GPU, whether it fits, and what each
lever would save (docs/memory.md). Offline: a local config.json (`--config`, never a download)
or the shape as options; the GPU from `--gpu MODEL`, else this machine's GPUs (NVML; the
simulated ones under --demo, a recording's under --replay).

Exit 0 with the plan, also when no GPU is named and none is usable here (the plan then says
it had nothing to fit against); 2 for a usage error (a bad option, an unreadable or unknown
config).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import replace

from ..collect.model_config import ModelConfigError, read_config_file
from ..model import Snapshot
from ..model.exits import EXIT_USAGE
from ..planner.configs import ConfigError
from ..planner.gpus import GIB, GpuMemory, find_gpu, known_names
from ..planner.optimizers import OPTIMIZERS
from ..planner.parallel import tp_problems
from ..planner.quant import QUANTS
from ..planner.render import SCHEMA, document, render_text
from ..planner.shape import ModelShape, parameter_count, problems
from ..planner.workload import (
    CHECKPOINTING,
    DTYPES,
    MODES,
    PRECISIONS,
    RUNTIME_BYTES,
    Workload,
    workload_problems,
)
from .common import add_sanitize, is_recording, say

REPLAY = True  # `--replay FILE`: the GPUs of the recording's last snapshot

# option -> ModelShape field, for the shape options
SHAPE_OPTIONS = {
    "layers": "layers",
    "hidden": "hidden",
    "heads": "heads",
    "kv_heads": "kv_heads",
    "head_dim": "head_dim",
    "intermediate": "intermediate",
    "vocab": "vocab",
    "experts": "experts",
    "active_experts": "active_experts",
    "expert_intermediate": "expert_intermediate",
}
REQUIRED_WITHOUT_CONFIG = ("layers", "hidden", "heads", "intermediate", "vocab")


def _option(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def _options(names: tuple[str, ...]) -> str:
    """`--layers, --hidden and --vocab`."""
    spelled = [_option(k) for k in names]
    return ", ".join(spelled[:-1]) + f" and {spelled[-1]}" if len(spelled) > 1 else spelled[0]


class UsageError(Exception):
    pass


def _count(text: str) -> int:
    """8030261248, 8e9, 8B, 124M."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmbt]?)\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"a number of parameters (8e9, 8B, 124M), not {text!r}")
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2)]
    value = round(float(m.group(1)) * scale)
    if value <= 0:
        raise argparse.ArgumentTypeError("the parameter count must be positive")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help=f"print one JSON document ({SCHEMA})")
    m = p.add_argument_group("the model")
    m.add_argument(
        "--config",
        metavar="FILE",
        help="a Hugging Face config.json on this machine (or the model directory holding it); "
        "never downloaded",
    )
    m.add_argument(
        "--params",
        type=_count,
        metavar="N",
        help="the parameter count (8e9, 8B), replacing the one the shape gives",
    )
    for opt, what in (
        ("layers", "transformer layers"),
        ("hidden", "hidden size"),
        ("heads", "attention heads"),
        ("kv-heads", "key/value heads (grouped-query attention; default: as many as heads)"),
        ("head-dim", "dimension per head (default: hidden / heads)"),
        ("intermediate", "MLP intermediate size (a gated MLP: gate, up and down)"),
        ("vocab", "vocabulary size"),
        ("experts", "routed experts per layer (MoE)"),
        ("active-experts", "experts per token (MoE)"),
        ("expert-intermediate", "an expert's intermediate size (default: --intermediate)"),
    ):
        m.add_argument(f"--{opt}", type=int, metavar="N", help=what)
    m.add_argument(
        "--tied-embeddings",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the output layer shares the input embedding's weights",
    )
    w = p.add_argument_group("the run")
    w.add_argument("--mode", choices=MODES, default="train", help="train (default) or infer")
    w.add_argument("--dtype", choices=DTYPES, default="bf16", help="compute dtype (default bf16)")
    w.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="master",
        help="16-bit training: master = 16-bit weights and gradients with fp32 master weights "
        "(DeepSpeed, Megatron, FSDP; default), amp = autocast over fp32 weights (HF Trainer "
        "--bf16), pure = everything 16-bit",
    )
    w.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default="adamw",
        help="adamw (default), sgd, sgd-momentum, adafactor, adam8bit (bitsandbytes)",
    )
    w.add_argument("--batch", type=int, default=1, metavar="N", help="sequences per GPU (1)")
    w.add_argument("--seq", type=int, default=2048, metavar="T", help="tokens per sequence (2048)")
    w.add_argument("--zero", type=int, default=0, choices=range(4), help="ZeRO stage 0-3")
    w.add_argument("--fsdp", action="store_true", help="FSDP full sharding (as ZeRO-3)")
    w.add_argument("--world", type=int, default=1, metavar="N", help="data-parallel ranks (1)")
    w.add_argument("--checkpointing", choices=CHECKPOINTING, default="none")
    w.add_argument(
        "--flash-attention",
        action="store_true",
        help="attention without the s×s scores (FlashAttention, SDPA)",
    )
    w.add_argument("--kv-dtype", choices=DTYPES, default=None, help="KV cache dtype (--dtype)")
    w.add_argument(
        "--quant",
        choices=QUANTS,
        default=None,
        help="inference: weight-only quantisation of the linear layers (int8: bitsandbytes; "
        "int4: GPTQ/AWQ, group size 128; fp8), computing in --dtype",
    )
    w.add_argument(
        "--tp",
        type=int,
        default=1,
        metavar="N",
        help="inference: tensor parallelism over N GPUs; the plan is one GPU's (1)",
    )
    w.add_argument(
        "--gpu",
        metavar="MODEL",
        help=f"the GPU to fit on ({known_names()}, or a size: 80GiB); default: this machine's",
    )
    w.add_argument(
        "--overhead",
        type=float,
        default=RUNTIME_BYTES / GIB,
        metavar="GIB",
        help=f"CUDA context and workspaces per process (default {RUNTIME_BYTES / GIB:g} GiB)",
    )
    add_sanitize(p)


def _shape(args: argparse.Namespace) -> tuple[ModelShape, dict, list[str]]:
    """The model: the config with the shape options over it, or the options alone."""
    given = {k: getattr(args, k) for k in SHAPE_OPTIONS if getattr(args, k) is not None}
    notes: list[str] = []
    model: dict = {"config": None, "architecture": None, "checkpoint_dtype": None}
    keys: dict[str, str] = {}  # a size -> the config's key for it, for what is wrong with it
    if args.config:
        try:
            cfg = read_config_file(args.config)
        except ModelConfigError as e:
            raise UsageError(str(e)) from None
        shape, keys = cfg.read.shape, dict(cfg.read.keys)
        model.update(
            config=cfg.path,
            architecture=cfg.read.architecture,
            checkpoint_dtype=cfg.read.checkpoint_dtype,
        )
        notes += list(cfg.read.notes)
        if cfg.read.not_read:
            notes.append(
                "not read (the planner does not know whether they change memory): "
                + ", ".join(cfg.read.not_read)
            )
        for k, v in given.items():
            was = getattr(shape, SHAPE_OPTIONS[k])
            if v != was:
                notes.append(f"--{k.replace('_', '-')} {v} replaces the config's {was}")
        shape = replace(shape, **{SHAPE_OPTIONS[k]: v for k, v in given.items()})
    else:
        missing = [k for k in REQUIRED_WITHOUT_CONFIG if k not in given]
        if missing:
            shape_options = _options(REQUIRED_WITHOUT_CONFIG)
            raise UsageError(
                f"give --config FILE, or the whole shape together: {shape_options} "
                f"(missing: {', '.join(_option(k) for k in missing)}); --params N alone "
                "only replaces the count of a shape"
            )
        heads = given["heads"]
        kv = given.get("kv_heads", heads)
        head_dim = given.get("head_dim") or given["hidden"] // max(1, heads)
        if "head_dim" not in given:
            notes.append(f"head dim derived: hidden / heads = {head_dim}")
        experts = given.get("experts", 0)
        shape = ModelShape(
            family="custom",
            layers=given["layers"],
            hidden=given["hidden"],
            heads=heads,
            kv_heads=kv,
            head_dim=head_dim,
            intermediate=given["intermediate"],
            vocab=given["vocab"],
            experts=experts,
            active_experts=given.get("active_experts", 0),
            expert_intermediate=given.get("expert_intermediate", given["intermediate"]),
            moe_layers=given["layers"] if experts else 0,
        )
        notes.append(
            "shape options: a Llama-style decoder (gated MLP, RMSNorm, no biases, untied "
            "embeddings unless --tied-embeddings)"
        )
    if args.tied_embeddings is not None:
        shape = replace(shape, tied_embeddings=args.tied_embeddings)
    if shape.experts and not shape.moe_layers:
        shape = replace(
            shape,
            moe_layers=shape.layers,
            expert_intermediate=shape.expert_intermediate or shape.intermediate,
        )
    bad = problems(shape, {**keys, **{k: _option(k) for k in given}})
    if bad:
        raise UsageError("; ".join(bad))
    if args.params is not None and args.params != parameter_count(shape):
        notes.append(
            f"--params {args.params:,} replaces the shape's {parameter_count(shape):,} "
            "(optimizer states scaled to it)"
        )
    return shape, model, notes


def _workload(args: argparse.Namespace, shape: ModelShape) -> Workload:
    w = Workload(
        mode=args.mode,
        dtype=args.dtype,
        precision=args.precision,
        optimizer=args.optimizer,
        batch=args.batch,
        seq=args.seq,
        zero=args.zero,
        fsdp=args.fsdp,
        world=args.world,
        checkpointing=args.checkpointing,
        flash_attention=args.flash_attention,
        kv_dtype=args.kv_dtype,
        overhead_bytes=round(args.overhead * GIB) if args.overhead >= 0 else -1,
        quant=args.quant,
        tp=args.tp,
    )
    bad = workload_problems(w)
    if not bad and w.tp > 1:
        bad += tp_problems(shape, w.tp)
    if (w.zero or w.fsdp) and w.world == 1:
        bad.append("--zero/--fsdp shard across ranks: give --world N (N > 1)")
    if bad:
        raise UsageError("; ".join(bad))
    return w


def machine_gpu(snap: Snapshot, where: str) -> GpuMemory | None:
    """The smallest usable GPU (or MIG instance) of a snapshot: what a process can fill, the
    driver's reserve taken off. `where`: whose NVML said it."""
    best: GpuMemory | None = None
    usable = [g for g in snap.gpus if not g.lost and g.mem_total_bytes]
    for g in usable:
        if g.mig_instances:
            for m in g.mig_instances:
                if m.memory_total_bytes:
                    cand = GpuMemory(
                        f"MIG {m.name or '?'}",
                        m.memory_total_bytes,
                        where,
                        compute_capability=g.static.compute_capability,
                        origin="NVML",
                    )
                    if best is None or cand.bytes < best.bytes:
                        best = cand
            continue
        size = g.mem_total_bytes - (g.mem_reserved_bytes or 0)
        if best is None or size < best.bytes:
            best = GpuMemory(
                g.static.name or f"GPU {g.index}",
                size,
                where,
                compute_capability=g.static.compute_capability,
                origin="NVML",
            )
    return None if best is None else replace(best, count=len(usable))


def _gpu(args: argparse.Namespace, feed) -> tuple[GpuMemory | None, str | None]:
    if args.gpu:
        gpu = find_gpu(args.gpu)
        if gpu is None:
            raise UsageError(f"--gpu {args.gpu}: not a GPU I know ({known_names()}; or 80GiB)")
        return gpu, None
    if is_recording(feed):
        snap, where = feed.last(), "NVML in the recording"
    else:
        from .common import sample_once

        snap = sample_once(feed, fast=True)
        where = "simulated (--demo)" if feed.simulated else "NVML on this machine"
    gpu = None if snap is None else machine_gpu(snap, where)
    if gpu is None:
        return None, (
            "no usable GPU to fit the plan against; next: give --gpu MODEL (e.g. --gpu "
            "H100-80GB) or run it on the GPU machine"
        )
    return gpu, None


def run(args: argparse.Namespace, feed) -> int:
    try:
        shape, model, notes = _shape(args)
        w = _workload(args, shape)
        gpu, no_gpu = _gpu(args, feed)
    except (UsageError, ConfigError) as e:
        say(e)
        return EXIT_USAGE
    if not w.training and w.world > 1:
        notes.append(
            "--world in inference: data-parallel replicas, each GPU holds the whole model; "
            "--tp N splits it over N GPUs"
        )
    doc = document(shape, w, gpu, parameters=args.params, model=model, notes=tuple(notes))
    if getattr(args, "sanitize", False):
        from ..sanitize.sanitizer import Sanitizer
        from .common import sanitized_output

        s = Sanitizer()
        if doc["model"]["config"]:
            doc["model"]["config"] = s.path(doc["model"]["config"])
        doc["notes"] = [s.text(n) for n in doc["notes"]]
        text = json.dumps(doc, indent=2) if args.json else render_text(doc)
        text = sanitized_output(text, s)
        if text is None:
            return 1
        print(text)
    else:
        print(json.dumps(doc, indent=2) if args.json else render_text(doc))
    if no_gpu is not None:  # the calculator answered: nothing to fit against is said, not failed
        say(no_gpu)
    return 0
