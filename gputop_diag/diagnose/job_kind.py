"""What kind of job runs on the GPUs — training, serving (a model server or an inference run) or
unknown — read from the command lines in a snapshot, and a job's command line as a next step may
quote it. Pure: a snapshot in, words out.

The advice follows the kind: a server gets no optimizer, batch-size or `python train.py` advice,
and a check that starts the job again (under a profiler) names the job's own command.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

from ..model import Snapshot
from ..planner.hints import hints_from_argv

TRAINING = "training"
SERVING = "serving"
UNKNOWN = "unknown"

# Programs that serve a model whatever their arguments: vLLM (`vllm serve`), Hugging Face TGI
# (`text-generation-launcher`, its shards `text-generation-server`), NVIDIA Triton
# (`tritonserver`), TorchServe (`torchserve`), TensorRT-LLM (`trtllm-serve`), SGLang, llama.cpp
# (`llama-server`), Ollama, LMDeploy, Ray Serve (`serve run`).
SERVER_PROGRAMS = (
    "vllm",
    "text-generation-launcher",
    "text-generation-server",
    "tritonserver",
    "torchserve",
    "trtllm-serve",
    "sglang",
    "llama-server",
    "ollama",
    "lmdeploy",
)
# Python modules started with `-m` that serve: `python -m vllm.entrypoints.openai.api_server`,
# `python -m sglang.launch_server`, `python -m text_generation_server`.
SERVER_MODULES = ("vllm", "sglang", "text_generation_server", "lmdeploy", "tensorrt_llm")
# Options whose value is a secret: shown as <secret> when a check quotes the command line.
_SECRET_OPTIONS = ("token", "password", "passwd", "secret", "api-key", "apikey", "auth", "key")
# Where a check names the job's command line: filled in by `render.shown_checks` from the
# Diagnosis's `cmdline` (sanitized there as every command line is, under --sanitize).
JOB_COMMAND = "<the job's command>"
COMMAND_MAX_CHARS = 120  # a longer command line is quoted as its program and script, then `…`


def kind_of_argv(argv: Sequence[str] | None) -> str:
    """`training`, `serving` or `unknown` for one command line."""
    if not argv:
        return UNKNOWN
    names = [os.path.basename(a).lower() for a in argv[:3] if not a.startswith("-")]
    if any(n.startswith(SERVER_PROGRAMS) for n in names):
        return SERVING
    if "-m" in argv[:3]:
        module = argv[argv.index("-m") + 1] if argv.index("-m") + 1 < len(argv) else ""
        if module.split(".")[0].lower() in SERVER_MODULES:
            return SERVING
    mode = hints_from_argv(argv).mode
    return {"train": TRAINING, "infer": SERVING}.get(mode or "", UNKNOWN)


def job_argv(snap: Snapshot | None, pid: int | None) -> tuple[str, ...] | None:
    """The command line of `pid` in `snap`, where it was readable."""
    if snap is None or pid is None:
        return None
    info = snap.process(pid)
    return info.cmdline if info is not None and info.cmdline else None


def job_kind(snap: Snapshot | None, pid: int | None = None) -> str:
    """The kind of job on the GPUs: `pid`'s own command line decides where it tells; else the
    GPU processes' command lines when they agree; else `unknown`."""
    own = kind_of_argv(job_argv(snap, pid))
    if own != UNKNOWN or snap is None:
        return own
    kinds = {kind_of_argv(job_argv(snap, p.pid)) for p in snap.gpu_processes} - {UNKNOWN}
    return kinds.pop() if len(kinds) == 1 else UNKNOWN


def _secret(option: str) -> bool:
    name = option.lstrip("-").split("=", 1)[0].replace("_", "-").lower()
    return any(name == s or name.endswith("-" + s) for s in _SECRET_OPTIONS)


def command_text(argv: Sequence[str] | None, max_chars: int = COMMAND_MAX_CHARS) -> str | None:
    """`argv` as one shell line to paste (each word quoted as the shell needs), the values of
    secret options (`--token`, `--api-key`, `--password`) replaced by `<secret>`. Longer than
    `max_chars`: the program and its script, then `…` for the rest. None without a command."""
    if not argv:
        return None
    words: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            words.append("<secret>")
            hide_next = False
        elif a.startswith("-") and _secret(a):
            if "=" in a:
                words.append(shlex.quote(a.split("=", 1)[0] + "=") + "<secret>")
            else:
                words.append(shlex.quote(a))
                hide_next = True
        else:
            words.append(shlex.quote(a))
    line = " ".join(words)
    if len(line) <= max_chars:
        return line
    head = [words[0]]
    for k, w in enumerate(words[1:], 1):  # up to the script or module the program runs
        head.append(w)
        prev = argv[k - 1]
        if argv[k].startswith("-"):
            continue
        if prev == "-m" or not prev.startswith("-") or len(" ".join(head)) > max_chars:
            break
    return " ".join(head) + " …"
