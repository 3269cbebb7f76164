"""The probe's file format, `gputop-diag.probe/1`: what the probe writes and the Monitor reads.

One JSON-lines file per probed process, in `probe_dir()`, named `file_name(pid, start_ticks)`;
`start_ticks` is field 22 of /proc/<pid>/stat (the process's start time in clock ticks since
boot), so a reused pid never matches an old file. The directory is mode 0700, each file 0600.
A file is bounded: past `MAX_BYTES` the writer renames it to `<name>.1` (one old generation kept)
and starts a new one that begins with a fresh "hello" record.

Records, one JSON object per line, every one with "kind" and "t" (wall clock, seconds):

- "hello": {"schema": SCHEMA, "pid", "start_ticks", "argv": [...], "python": "3.11.7",
  "torch": "2.13.0" or null, "cuda": bool, "rank": int or null, "world": int or null,
  "measures": {"t_input": bool, "t_sync": bool, "t_comm": bool, "t_gpu": bool, "memory": bool}}
  -- which parts this process can measure (without torch: only wall-clock steps).
  "cuda": the process has initialized CUDA (`torch.cuda.is_initialized()`; the probe never asks
  `is_available()`, which would initialize the driver in a CPU job).
- "step": {"step": n, "wall_s", "t_input_s", "t_sync_s", "sync_count", "t_comm_s",
  "t_comm_exposed_s", "t_gpu_s", "gpu_span_s", "t_host_s",
  "measured": [names of the parts measured],
  "mem": {"allocated", "reserved", "peak", "inactive_split", "retries", "ooms"} or null}
  -- a part not measured is null, never a guess; t_host_s is wall minus the measured parts.
  "step" counts the boundaries so far (steps of the first optimizer to step, or calls of
  `probe.step()`); a record covers the time since the previous boundary, so the first boundary
  has a record only when the probe saw the step start (a DataLoader asked for data before it):
  records begin at step 1 or 2. "measured" names parts among t_input, t_sync, t_comm, t_gpu.
  t_input_s, t_sync_s and t_comm_exposed_s are the host's blocked time (disjoint: a sync inside
  a loader's wait counts as input), and t_host_s = wall_s minus those three. t_comm_s is the
  collectives' time as the host saw it, issue to completion (an async_op collective: issue to
  the return of its `wait()`), so t_comm_s >= t_comm_exposed_s. t_gpu_s (the GPU's busy time in
  the step) is null and never in "measured": events at step boundaries give only the span of the
  stream's timeline between them, idle gaps included, which over many steps equals the wall time
  whether the job is GPU- or host-bound; busy time needs CUPTI or the profiler. That span is
  "gpu_span_s" (CUDA only), informational; a record waiting for it can be written a few records
  late, so records are in step order but not always in "t" order. "mem": bytes (retries, ooms:
  counts since the start), "peak" since the job started (never reset by the probe); CUDA only.
- "sync_sites": {"sites": [{"site": "train.py:42", "call": ".item", "count", "seconds"}]}
  -- the top call sites of host-device synchronizations so far, most time first.
  "site" is the user's file (relative to the job's working directory when inside it) and line
  ("(other sites)" past 4096 distinct ones);
  "call" is one of .item, .tolist, .cpu, bool(), float(), int(), torch.cuda.synchronize,
  torch.cuda.Event.synchronize, torch.cuda.Stream.synchronize, torch.accelerator.synchronize.
- "model": {"params_bytes", "grads_bytes", "optimizer_bytes", "kv_cache_bytes" or null}
  -- exact sums over the optimizer's parameter groups and state tensors.
  Written after the first optimizer step, then again when the figures change (looked at every
  30 s). kv_cache_bytes: live transformers cache objects, null while the job has made none.
- "sample": {"step", "wall_s", "ops", "flops", "matmul_flops", "misaligned_flops",
  "dtype_flops": {dtype: flops}, "shapes": [{"op", "dtype", "dims": {"M", "N", "K"} or
  {"C", "O"}, "count", "flops", "misaligned": [names], "site"}], "transfers": {"h2d"/"d2h":
  {"count", "bytes", "seconds", "pinned_bytes", "non_blocking"}}, "batch": {"samples", "tokens",
  "from"} or null, "loss", "backward", "grad_scaler", "autocast": {device: dtype},
  "matmul_precision", "allow_tf32", "cudnn_tf32", "capability": [major, minor] or null,
  "device_name"} -- one step looked at closely (sample.py): the third, then one a minute. Its
  "step" record carries "sampled": true (slowed by the sampling; the reader leaves it out of
  the step figures). "hello" also carries "arch_list" (torch's GPU architectures, "sm_80") and
  "torch_cuda" (the CUDA release torch was built with).
- "note": {"text"} -- e.g. a hook that failed and disabled itself (said once).
- "bye": {} -- the process is exiting normally.
  No "bye" after an uncaught exception, a signal or `os._exit`.
- "exit": {"error": "RuntimeError: first line"} -- the process is exiting on an uncaught
  exception (a rank whose peer died fails in its next collective); nothing after a signal.
- "progress": {"step", "stalled_s", "entered", "done", "op", "bytes", "in_s", "thread",
  "stack_signal"} -- written by the writer's thread while the current step has run for 2 s or
  more (every 2 s): the boundaries so far, seconds since the newest one, the collectives entered
  and finished so far (every rank of a job numbers the same collectives alike), the newest one's
  op and bytes, how long it has been in it (null: in none), the stepping thread's ident, and the
  signal that makes the probe write its stacks (null: the job has claimed it since).
  "hello" also carries "local_rank", "node" (uname), "run_id" (TORCHELASTIC_RUN_ID: the same
  in every rank of a torchrun job, on every node), "cuda_device" and "stack_signal" (stacks.py:
  every thread's Python stack appended to `stack-<pid>-<start_ticks>.txt` on that signal), and
  "step" carries "coll_seq", the collectives entered by the end of the step. A
  DistributedDataParallel's gradient buckets are collectives too ("all_reduce (DDP bucket)",
  ddp.py), and its exposed wait is in t_comm_exposed_s.

When the file appears: the "hello" is written just before the process's first other record.
A process started by hand (`probe.start()`, `python -m gputop_diag.probe`) has a file by its
exit at the latest; under `watch --probe` a process has a file only once it steps, so the
launcher (torchrun), helpers and DataLoader workers, which never step, have none.
"""

from __future__ import annotations

import os

SCHEMA = "gputop-diag.probe/1"
MAX_BYTES = 4 * 1024 * 1024
PREFIX = "probe-"
SUFFIX = ".jsonl"
STACK_PREFIX = "stack-"
STACK_SUFFIX = ".txt"


def probe_dir(environ: dict[str, str] | None = None, uid: int | None = None) -> str:
    """`$XDG_RUNTIME_DIR/gputop-diag`, or a per-user directory under /tmp without one."""
    env = os.environ if environ is None else environ
    uid = os.getuid() if uid is None else uid
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "gputop-diag")
    return os.path.join("/tmp", f"gputop-diag-{uid}")


def file_name(pid: int, start_ticks: int) -> str:
    return f"{PREFIX}{pid}-{start_ticks}{SUFFIX}"


def stack_file_name(pid: int, start_ticks: int) -> str:
    """The file the probe's stack dumps go to (stacks.py), beside the probe file."""
    return f"{STACK_PREFIX}{pid}-{start_ticks}{STACK_SUFFIX}"


def parse_stack_file_name(name: str) -> tuple[int, int] | None:
    """(pid, start_ticks) of a stack file's name (stack_file_name), None for any other name."""
    if not (name.startswith(STACK_PREFIX) and name.endswith(STACK_SUFFIX)):
        return None
    return parse_file_name(PREFIX + name[len(STACK_PREFIX) : -len(STACK_SUFFIX)] + SUFFIX)


def parse_file_name(name: str) -> tuple[int, int] | None:
    """(pid, start_ticks) of a probe file's name, None for any other name."""
    if not (name.startswith(PREFIX) and name.endswith(SUFFIX)):
        return None
    parts = name[len(PREFIX) : -len(SUFFIX)].split("-")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def start_ticks_of(stat_text: str) -> int | None:
    """Field 22 (starttime) of a /proc/<pid>/stat line; the name in field 2 may hold spaces."""
    try:
        rest = stat_text[stat_text.rindex(")") + 2 :].split()
        return int(rest[19])
    except (ValueError, IndexError):
        return None
