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
- "step": {"step": n, "wall_s", "t_input_s", "t_sync_s", "sync_count", "t_comm_s",
  "t_comm_exposed_s", "t_gpu_s", "t_host_s", "measured": [names of the parts measured],
  "mem": {"allocated", "reserved", "peak", "inactive_split", "retries", "ooms"} or null}
  -- a part not measured is null, never a guess; t_host_s is wall minus the measured parts.
- "sync_sites": {"sites": [{"site": "train.py:42", "call": ".item", "count", "seconds"}]}
  -- the top call sites of host-device synchronizations so far, most time first.
- "model": {"params_bytes", "grads_bytes", "optimizer_bytes", "kv_cache_bytes" or null}
  -- exact sums over the optimizer's parameter groups and state tensors.
- "note": {"text"} -- e.g. a hook that failed and disabled itself (said once).
- "bye": {} -- the process is exiting normally.
"""

from __future__ import annotations

import os

SCHEMA = "gputop-diag.probe/1"
MAX_BYTES = 4 * 1024 * 1024
PREFIX = "probe-"
SUFFIX = ".jsonl"


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
