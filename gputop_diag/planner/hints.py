"""What a job's command line says about its memory: training or inference, the batch, the
context, the precision, the optimizer, checkpointing, how many ranks, and where its model's
config.json may be. Pure: words in, hints out; every hint says which argument it came from.

The option names are those of the common launchers and trainers: Hugging Face Trainer's
TrainingArguments (--per_device_train_batch_size, --bf16, --optim, --gradient_checkpointing),
torchrun (--nproc-per-node), DeepSpeed (--deepspeed), Lightning (--precision), Megatron-LM
(--micro-batch-size, --seq-length, --recompute-granularity) and vLLM (--max-model-len,
--max-num-seqs, --kv-cache-dtype).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import Snapshot

_TRAIN_WORDS = ("train", "finetune", "fine_tune", "fine-tune", "sft", "pretrain", "dpo", "lora")
_INFER_WORDS = (
    "vllm",
    "sglang",
    "serve",
    "server",
    "generate",
    "generation",
    "inference",
    "infer",
    "predict",
    "chat",
    "text-generation-launcher",
)
_TRAIN_FLAGS = (
    "do-train",
    "per-device-train-batch-size",
    "learning-rate",
    "lr",
    "num-train-epochs",
    "train-iters",
    "gradient-accumulation-steps",
)
_BATCH = (
    "per-device-train-batch-size",
    "micro-batch-size",
    "train-micro-batch-size-per-gpu",
    "batch-size",
    "train-batch-size",
    "per-device-eval-batch-size",
    "max-num-seqs",
    "bs",
)
_SEQ = (
    "max-seq-length",
    "max-seq-len",
    "seq-length",
    "seq-len",
    "sequence-length",
    "block-size",
    "max-model-len",
    "context-length",
    "model-max-length",
    "cutoff-len",
    "max-length",
)
_CONFIG_OPTIONS = (
    "model-config",
    "config-name",
    "config",
    "model-name-or-path",
    "pretrained-model-name-or-path",
    "model-path",
    "model-dir",
    "model",
)
_OPTIMS = {
    "adamw": "adamw",
    "adam": "adamw",
    "adamw-torch": "adamw",
    "adamw-torch-fused": "adamw",
    "adamw-hf": "adamw",
    "adamw-apex-fused": "adamw",
    "adamw-8bit": "adam8bit",
    "adamw-bnb-8bit": "adam8bit",
    "paged-adamw-8bit": "adam8bit",
    "adam8bit": "adam8bit",
    "adafactor": "adafactor",
    "sgd": "sgd",
}
_DTYPES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "fp8": "fp8",
}
# Lightning's --precision values: (dtype, precision)
_LIGHTNING = {
    "bf16-mixed": ("bf16", "amp"),
    "16-mixed": ("fp16", "amp"),
    "bf16-true": ("bf16", "pure"),
    "16-true": ("fp16", "pure"),
    "32": ("fp32", None),
    "32-true": ("fp32", None),
    "bf16": ("bf16", "amp"),
    "16": ("fp16", "amp"),
}


@dataclass(frozen=True, slots=True)
class JobHints:
    mode: str | None = None  # "train", "infer"
    batch: int | None = None
    seq: int | None = None
    dtype: str | None = None
    precision: str | None = None  # "amp", "master", "pure"
    optimizer: str | None = None
    checkpointing: str | None = None
    zero: int | None = None
    fsdp: bool = False
    world: int | None = None
    flash_attention: bool | None = None
    kv_dtype: str | None = None
    config_paths: tuple[str, ...] = ()  # files or directories that may hold a config.json
    said: tuple[str, ...] = ()  # which argument gave which hint, one line each


def _options(argv: Sequence[str]) -> tuple[dict[str, str | None], list[str]]:
    """{normalised option name: value or None for a flag}, and the positional words."""
    opts: dict[str, str | None] = {}
    words: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-") and len(a) > 1 and not _number(a):
            name, eq, value = a.lstrip("-").partition("=")
            name = name.replace("_", "-").lower()
            if not eq:
                nxt = argv[i + 1] if i + 1 < len(argv) else None
                if nxt is not None and (not nxt.startswith("-") or _number(nxt)):
                    value = nxt
                    i += 1
                else:
                    value = None
            opts.setdefault(name, value)
        else:
            words.append(a)
        i += 1
    return opts, words


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _int(text: str | None) -> int | None:
    try:
        v = int(text) if text is not None else None
    except ValueError:
        return None
    return v if v is not None and v > 0 else None


def _truthy(v: str | None) -> bool:
    return v is None or v.lower() in ("1", "true", "yes", "on")


def _mode(opts: dict[str, str | None], words: list[str]) -> tuple[str | None, str]:
    if any(f in opts for f in _TRAIN_FLAGS):
        flag = next(f for f in _TRAIN_FLAGS if f in opts)
        return "train", f"--{flag}"
    names = [os.path.basename(w).lower() for w in words[:3]]
    names += [v.lower() for k, v in opts.items() if k == "m" and v]
    # the word found is said, never the name itself (a script's name may name a project)
    for words_of, mode in ((_TRAIN_WORDS, "train"), (_INFER_WORDS, "infer")):
        for n in names:
            hit = next((t for t in words_of if t in n), None)
            if hit:
                return mode, f"{hit!r} in the program's name"
    return None, ""


def _precision(opts: dict[str, str | None]) -> tuple[str | None, str | None, str]:
    if "bf16" in opts and _truthy(opts["bf16"]):
        return "bf16", "amp", "--bf16"
    if "fp16" in opts and _truthy(opts["fp16"]):
        return "fp16", "amp", "--fp16"
    p = opts.get("precision")
    if p and p.lower() in _LIGHTNING:
        dtype, precision = _LIGHTNING[p.lower()]
        return dtype, precision, f"--precision {p}"
    mp = opts.get("mixed-precision")
    if mp and mp.lower() in _DTYPES and mp.lower() != "no":
        return _DTYPES[mp.lower()], "amp", f"--mixed-precision {mp}"
    for key in ("dtype", "torch-dtype"):
        v = opts.get(key)
        if v and v.lower() in _DTYPES:
            return _DTYPES[v.lower()], None, f"--{key} {v}"
    return None, None, ""


def _config_paths(opts: dict[str, str | None], words: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for key in _CONFIG_OPTIONS:
        v = opts.get(key)
        if v and (v.endswith(".json") or "/" in v or v.startswith(".")):
            out.append(v)
    out += [w for w in words if os.path.basename(w) == "config.json" or w.endswith("config.json")]
    return tuple(dict.fromkeys(out))


def hints_from_argv(argv: Sequence[str] | None) -> JobHints:
    """The hints one command line gives; `JobHints()` for none."""
    if not argv:
        return JobHints()
    opts, words = _options(list(argv))
    said: list[str] = []
    mode, why = _mode(opts, words)
    if mode:
        said.append(f"{'training' if mode == 'train' else 'inference'}: {why}")

    def first(keys: Sequence[str], what: str) -> int | None:
        for k in keys:
            v = _int(opts.get(k))
            if v is not None:
                said.append(f"{what} {v}: --{k}")
                return v
        return None

    batch = first(_BATCH, "batch")
    seq = first(_SEQ, "context")
    dtype, precision, why = _precision(opts)
    if dtype:
        said.append(f"{dtype}: {why}")
    optimizer = None
    o = (opts.get("optim") or opts.get("optimizer") or "").lower().replace("_", "-")
    if o:
        optimizer = _OPTIMS.get(o) or next((v for k, v in _OPTIMS.items() if o.startswith(k)), None)
        if optimizer:
            said.append(f"{optimizer}: --optim")
    checkpointing = None
    for k in ("gradient-checkpointing", "activation-checkpointing"):
        if k in opts and _truthy(opts[k]):
            checkpointing = "full"
            said.append(f"full checkpointing: --{k}")
    g = (opts.get("recompute-granularity") or "").lower()
    if g in ("full", "selective"):
        checkpointing = g
        said.append(f"{g} checkpointing: --recompute-granularity")
    zero = _int(opts.get("zero-stage"))
    if "deepspeed" in opts:
        precision = precision or "master"
        said.append("DeepSpeed (--deepspeed): its ZeRO stage is in its own config")
    fsdp = bool(opts.get("fsdp")) and "shard" in (opts.get("fsdp") or "").lower()
    if fsdp:
        said.append("FSDP: --fsdp")
    world = first(("nproc-per-node", "num-gpus", "nproc"), "ranks")
    flash = None
    attn = (opts.get("attn-implementation") or "").lower()
    if attn:
        flash = attn in ("flash-attention-2", "flash_attention_2", "sdpa", "flash-attention-3")
    if "use-flash-attn" in opts or "flash-attn" in opts:
        flash = True
    kv = opts.get("kv-cache-dtype")
    kv_dtype = "fp8" if kv and kv.lower().startswith("fp8") else None
    return JobHints(
        mode=mode,
        batch=batch,
        seq=seq,
        dtype=dtype,
        precision=precision,
        optimizer=optimizer,
        checkpointing=checkpointing,
        zero=zero if zero is not None and zero <= 3 else None,
        fsdp=fsdp,
        world=world,
        flash_attention=flash,
        kv_dtype=kv_dtype,
        config_paths=_config_paths(opts, words),
        said=tuple(said),
    )


def job_hints(snap: Snapshot | None, pid: int | None) -> JobHints:
    """The hints of process `pid`'s command line in `snap` (nothing when it is not readable)."""
    if snap is None or pid is None:
        return JobHints()
    info = snap.process(pid)
    return hints_from_argv(info.cmdline if info is not None else None)
