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
import sys
from typing import Any

from ..collect.mapping import (
    LOOP_COMMAND,
    PUBLIC_PATTERN,
    QUERY_COMMAND,
    DeviceMapping,
    DeviceRow,
    ProcessMapping,
    collect_mapping,
)
from ..mapping.checks import GLOBAL_CAVEAT, SlurmGpus
from ..mapping.ordinals import Visibility
from ..model.codec import iso_time
from ..model.exits import EXIT_NO_GPU, EXIT_USAGE
from ..recording.store import Recording
from ..report.mapping import SCHEMA, finding_doc, public_doc, render_public
from ..sources import Sources
from .common import add_sanitize, no_driver_error, sample_once

REPLAY = True  # `--replay FILE`: the mapping of the recording's last snapshot (no files read)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help=f"print one JSON document ({SCHEMA})")
    add_sanitize(p)


def run(args: argparse.Namespace, feed: Sources | Recording) -> int:
    if isinstance(feed, Recording):
        snap = feed.last()
        if snap is None:
            print(f"gputop-diag: {feed.shown} holds no snapshots", file=sys.stderr)
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
        print(f"gputop-diag: {err.message}; next: {err.next_step}", file=sys.stderr)
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
    sanitizer.seed_job(m.shell_slurm.job_id)
    for r in m.rows:
        if r.uuid:
            sanitizer.seed_gpu_uuid(r.uuid)


# -- JSON ---------------------------------------------------------------------------------------
def _visibility(v: Visibility, keys: dict[str, DeviceRow]) -> dict[str, Any]:
    return {
        "cuda_visible_devices": v.cvd,
        "cuda_device_order": v.order,
        "order_known": v.order_known,
        "unknown_why": v.unknown_why or None,
        "mixed_models": v.mixed_models,
        "devices": [
            {
                "cuda_ordinal": v.ordinal(k),
                "device": k,
                "nvml_index": keys[k].nvml_index if k in keys else None,
                "uuid": keys[k].uuid if k in keys else None,
            }
            for k in v.visible
        ],
        "entries": [
            {
                "text": e.text,
                "device": e.key,
                "invalid": e.key is None,
                "why": e.why or None,
                "ignored": e.ignored,
            }
            for e in v.entries
        ],
    }


def _slurm(s: SlurmGpus | None) -> dict[str, Any] | None:
    if s is None or not (s.in_job or s.job_gpus or s.step_gpus):
        return None
    return {
        "job_id": s.job_id,
        "step_id": s.step_id,
        "job_gpus": list(s.job_gpus) if s.job_gpus is not None else None,
        "step_gpus": list(s.step_gpus) if s.step_gpus is not None else None,
        "gpu_device_ordinal": s.device_ordinal,
        "gpus_on_node": s.gpus_on_node,
        "cuda_visible_devices": s.cvd,
        "constrained": s.constrained,
        "caveat": GLOBAL_CAVEAT,
    }


def to_json(m: DeviceMapping) -> dict[str, Any]:
    keys = {r.key: r for r in m.rows}
    return {
        "schema": SCHEMA,
        "timestamp": iso_time(m.timestamp),
        "hostname": m.hostname,
        "devices": [
            {
                "key": r.key,
                "nvml_index": r.nvml_index,
                "mig_index": r.mig_index,
                "gpu_instance_id": r.gpu_instance_id,
                "compute_instance_id": r.compute_instance_id,
                "name": r.name,
                "uuid": r.uuid,
                "pci_bus_id": r.bus.nvml if r.bus else None,
                "pci_bus_id_procfs": r.bus.procfs if r.bus else None,
                "minor_number": r.minor if r.mig_index is None else None,
                "device_node": r.device_node if r.mig_index is None else None,
                "numa_node": r.numa_node,
                "cpu_affinity": r.cpu_affinity,
                "information": r.info,
                "processes": list(r.pids),
                "lost": r.lost,
                "cuda_ordinal": m.shell.ordinal(r.key) if m.shell_known else None,
                "cuda_visible": r.key in m.shell.visible if m.shell_known else None,
            }
            for r in m.rows
        ],
        "shell": {**_visibility(m.shell, keys), "slurm": _slurm(m.shell_slurm)}
        if m.shell_known
        else None,
        "processes": [
            {
                "pid": p.pid,
                "user": p.user,
                "name": p.name,
                "nvml_gpus": list(p.gpus),
                "environ_readable": p.env_readable,
                "visibility": _visibility(p.visibility, keys) if p.visibility else None,
                "slurm": _slurm(p.slurm),
            }
            for p in m.processes
        ],
        "slurm_jobs": [
            {
                "job_id": j.job_id,
                "state": j.state,
                "gpus_by_node": {k: list(v) for k, v in j.nodes.items()},
            }
            for j in m.jobs
        ],
        "findings": [finding_doc(f) for f in m.findings],
        "conclusions": list(m.conclusions),
        "confirm": {
            "query": QUERY_COMMAND,
            "private_loop": LOOP_COMMAND,
            "publish": PUBLIC_PATTERN,
        },
        "errors": list(m.errors),
    }


TIE_NOTE = (
    "FASTEST_FIRST on one GPU model: CUDA's order usually follows the PCI bus id, as shown "
    "(the usual behaviour, not promised by NVIDIA); CUDA_DEVICE_ORDER=PCI_BUS_ID makes it sure"
)


# -- text ---------------------------------------------------------------------------------------
def _env_line(v: Visibility) -> str:
    cvd = "(unset: all)" if v.cvd is None else v.cvd or "(empty: none)"
    return f"CUDA_VISIBLE_DEVICES={cvd}  CUDA_DEVICE_ORDER={v.order}"


def _cuda_of(p: ProcessMapping, keys: dict[str, DeviceRow]) -> str:
    v = p.visibility
    if v is None:
        return "environment not readable"
    if not v.visible:
        return "no CUDA device visible"
    if not v.order_known:
        if v.unknown_why:
            return f"{len(v.visible)} candidate device(s): {v.unknown_why}"
        return f"{len(v.visible)} device(s), order only CUDA knows (FASTEST_FIRST, mixed models)"
    names = [_short_key(k) for k in v.visible]
    if names == [str(k) for k in range(len(names))]:
        return (
            f"cuda:0-{len(names) - 1} = GPU 0-{len(names) - 1}"
            if len(names) > 1
            else ("cuda:0 = GPU 0")
        )
    return ", ".join(f"cuda:{k}={n}" for k, n in enumerate(names))


def _short_key(key: str) -> str:
    """gpu3 -> 3; gpu0-mig1 -> 0:1 (GPU 0, MIG instance 1)."""
    gpu, _, mig = key.removeprefix("gpu").partition("-mig")
    return f"{gpu}:{mig}" if mig else gpu


def render_text(m: DeviceMapping, no_gpu_why: str | None = None) -> str:
    """The mapping as text; `no_gpu_why` says why no GPU could be read (NVML missing, the
    driver not loaded), when that is why the table is empty."""
    keys = {r.key: r for r in m.rows}
    lines = [
        f"Device mapping  {m.hostname}  {iso_time(m.timestamp)}",
        "NVML and nvidia-smi number GPUs by PCI bus id; CUDA numbers the devices "
        "CUDA_VISIBLE_DEVICES leaves, in CUDA_DEVICE_ORDER; /dev/nvidiaN is the minor number.",
        "",
        f"this shell: {_env_line(m.shell)}"
        if m.shell_known
        else "this shell: not part of a recording (the processes' variables are)",
    ]
    if m.rows:
        lines += [
            "",
            f"{'NVML':<6}{'CUDA':>4}  {'MINOR':>5}  {'DEVICE':<14}{'PCI BUS ID':<18}{'NUMA':>4}  "
            f"{'CPUS':<9}{'UUID':<42}{'NAME':<26}PROCESSES",
        ]
        for r in m.rows:
            if r.mig_index is None:
                idx = f"{r.nvml_index}{' LOST' if r.lost else ''}"
                minor = "?" if r.minor is None else str(r.minor)
                node = r.device_node or "?"
                bus = r.bus.nvml if r.bus else "?"
                numa = "?" if r.numa_node is None else str(r.numa_node)
                cpus = r.cpu_affinity or "?"
            else:
                idx = f"{r.nvml_index}:{r.mig_index}"
                minor, node = "", f"GI {r.gpu_instance_id} CI {r.compute_instance_id}"
                bus = numa = cpus = ""
            cuda = m.shell.cell(r.key) if m.shell_known else ""
            if r.mig_index is not None and m.shell.mig_unknown and m.shell_known:
                cuda = "?"
            pids = ",".join(map(str, r.pids)) or "-"
            lines.append(
                f"{idx:<6}{cuda:>4}  {minor:>5}  {node:<14}{bus:<18}{numa:>4}  {cpus:<9}"
                f"{(r.uuid or '?'):<42}{(r.name or '?')[:25]:<26}{pids}"
            )
        unknown = m.shell.unknown_why or "numbering only CUDA knows"
        lines.append(f"CUDA: this shell's ordinal (- not visible, ? {unknown})")
        if m.shell_known and m.shell.order == "FASTEST_FIRST" and not m.shell.mixed_models:
            lines.append(f"  {TIE_NOTE}")
        info_rows = [r for r in m.rows if r.info]
        if info_rows:
            r = info_rows[0]
            extra = {
                k: v
                for k, v in r.info.items()
                if k
                in ("Video BIOS", "GPU Firmware", "GPU Excluded", "Bus Type", "Blacklisted", "IRQ")
            }
            lines.append(
                f"/proc/driver/nvidia/gpus/<bus>/information read for {len(info_rows)} GPU(s); "
                f"GPU {r.nvml_index}: " + ", ".join(f"{k} {v}" for k, v in extra.items())
            )
    else:
        lines += [
            "",
            f"no GPU to map: {no_gpu_why}" if no_gpu_why else "no GPU to map (NVML lists none)",
        ]
    if m.processes:
        lines += [
            "",
            f"{'PID':>8}  {'USER':<10}{'GPU':<6}{'CUDA_VISIBLE_DEVICES':<24}"
            f"{'ORDER':<15}CUDA DEVICES",
        ]
        for p in m.processes:
            v = p.visibility
            cvd = "?" if v is None else ("(unset)" if v.cvd is None else v.cvd or "(empty)")
            if len(cvd) > 23:
                cvd = cvd[:10] + "…" + cvd[-12:]
            order = "?" if v is None else v.order
            gpus = ",".join(map(str, p.gpus))
            lines.append(
                f"{p.pid:>8}  {(p.user or '?')[:10]:<10}{gpus:<6}{cvd:<24}{order:<15}"
                f"{_cuda_of(p, keys)}"
            )
    s = m.shell_slurm
    lines += ["", "Slurm:"]
    if s.in_job or s.job_gpus or s.step_gpus:
        lines.append(
            f"  this shell: job {s.job_id or '?'} step {s.step_id or '-'}  "
            f"SLURM_JOB_GPUS={_ids(s.job_gpus)} SLURM_STEP_GPUS={_ids(s.step_gpus)} "
            f"GPU_DEVICE_ORDINAL={s.device_ordinal or '-'} SLURM_GPUS_ON_NODE="
            f"{s.gpus_on_node if s.gpus_on_node is not None else '-'} "
            f"CUDA_VISIBLE_DEVICES={s.cvd if s.cvd is not None else '(unset)'}"
        )
    else:
        lines.append("  this shell is not in a Slurm job (no SLURM_JOB_ID)")
    for j in m.jobs:
        where = "; ".join(f"{node}: IDX {_ids(ids)}" for node, ids in j.nodes.items()) or "no GRES"
        lines.append(f"  job {j.job_id} ({j.state or '?'}): scontrol show job -d: {where}")
    lines.append(f"  {GLOBAL_CAVEAT}")
    if m.conclusions:
        lines += ["", "Conclusions:", *(f"  - {c}" for c in m.conclusions)]
    lines += ["", "Findings:" if m.findings else "Findings: none"]
    for f in m.findings:
        lines += [f"  [{f.severity}] {f.text}", f"    next: {f.next_step}"]
    for e in m.errors:
        lines.append(f"  ! {e}")
    lines += [
        "",
        f"Confirm: {QUERY_COMMAND}",
        "  per-node layout (private runbook only):",
        *("    " + x for x in LOOP_COMMAND.splitlines()),
        f"Publish: {PUBLIC_PATTERN} (`gputop-diag mapping --sanitize`)",
    ]
    return "\n".join(lines)


def _ids(ids) -> str:
    return "-" if ids is None else ",".join(map(str, ids)) or "(none)"
