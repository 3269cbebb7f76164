"""`gputop-diag mapping`: which physical GPU each CUDA device is, for this shell and for every GPU
process; Slurm's view; the findings; the commands to confirm it.

One row per GPU and per MIG instance: NVML index, CUDA ordinal (this shell), minor number and
/dev/nvidiaN, PCI bus id, NUMA node and local CPUs, UUID, name, processes. Under `--sanitize`
only the mapping logic and the conclusions are printed, never the per-node layout (no minor
numbers, device nodes, bus ids or UUIDs). Exit 3 when no GPU is usable (what could be read is
still shown), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..collect.mapping import (
    LOOP_COMMAND,
    PUBLIC_PATTERN,
    QUERY_COMMAND,
    DeviceMapping,
    collect_mapping,
)
from ..mapping.render import mapping_document
from ..mapping.render import render_text as mapping_text
from ..model.exits import EXIT_NO_GPU, EXIT_USAGE
from ..recording.store import Recording
from ..report.mapping import SCHEMA, finding_doc, public_doc, render_public
from ..sources import Sources
from .common import add_sanitize, no_driver_error, sample_once, say

REPLAY = True  # `--replay FILE`: the mapping of the recording's last snapshot (no files read)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help=f"print one JSON document ({SCHEMA})")
    add_sanitize(p)


def run(args: argparse.Namespace, feed: Sources | Recording) -> int:
    if isinstance(feed, Recording):
        snap = feed.last()
        if snap is None:
            say(f"{feed.shown} holds no snapshots")
            return EXIT_USAGE
        mapping = collect_mapping(snap, None)
    else:
        snap = sample_once(feed, fast=True)
        mapping = collect_mapping(snap, feed)
    err = no_driver_error(snap)
    if getattr(args, "sanitize", False):
        from .common import sanitized_output, seeded_sanitizer

        sanitizer = seeded_sanitizer(feed, [snap])
        _seed(sanitizer, mapping, snap)
        doc = public_doc(mapping, sanitizer)
        text = json.dumps(doc, indent=2) if args.json else render_public(doc)
        text = sanitized_output(text, sanitizer)
        if text is None:
            return 1
        print(text)
    elif args.json:
        print(json.dumps(to_json(mapping), indent=2))
    else:
        print(render_text(mapping, err.message if err is not None else None))
    if err is not None:
        say(f"{err.message}; next: {err.next_step}")
        return EXIT_NO_GPU
    return 0


def _seed(sanitizer, m: DeviceMapping, snap) -> None:
    sanitizer.seed_hostname(m.hostname)
    for p in snap.processes:
        sanitizer.seed_user(p.user)
    for p in m.processes:
        sanitizer.seed_user(p.user)
        if p.slurm is not None:
            sanitizer.seed_job(p.slurm.job_id)
        sanitizer.seed_job(p.slurm_job)  # its cgroup's job, where its environment names none
    sanitizer.seed_job(m.shell_slurm.job_id)
    for r in m.rows:
        if r.uuid:
            sanitizer.seed_gpu_uuid(r.uuid)


# The commands that confirm the mapping (the second, in a private runbook only).
CONFIRM = {"query": QUERY_COMMAND, "private_loop": LOOP_COMMAND, "publish": PUBLIC_PATTERN}


def to_json(m: DeviceMapping) -> dict[str, Any]:
    return mapping_document(m, SCHEMA, [finding_doc(f) for f in m.findings], CONFIRM)


def render_text(m: DeviceMapping, no_gpu_why: str | None = None) -> str:
    """The mapping as text; `no_gpu_why` says why no GPU could be read (NVML missing, the
    driver not loaded), when that is why the table is empty."""
    return mapping_text(m, CONFIRM, no_gpu_why)
