"""`gputop-diag health`: node and job health checks, each finding with its evidence and where it
was read, the next step, and the bottleneck class it bears on (docs/health.md).

Reads one snapshot (the GPUs and their processes), then the GPU processes' environments and
states, the PCI bus, NVML's health settings, InfiniBand ports, the fabric manager and this
boot's kernel log (network ports, GPUDirect RDMA, NVLink training, a crash in NCCL). Exit 3
when no driver is usable (the findings that could be made are still printed), 2 for a usage
error, 0 otherwise: a finding is the output, not a failure. `--replay FILE`: the findings the
recording's last health read made (a recording keeps findings, not the facts read; `examined`
is then null).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..collect.health import read_health
from ..collect.kernlog.watch import read_kernel_health
from ..health import judge
from ..model import formats
from ..model.codec import iso_time
from ..model.exits import EXIT_NO_GPU, EXIT_USAGE
from ..model.health import HEALTH_SCHEMA, SEVERITIES, HealthReport, finding_to_json
from ..recording.store import Recording
from ..sources import Sources
from ..xid.types import gpu_refs
from .common import add_sanitize, no_driver_error, sample_once, say

REPLAY = True  # `--replay FILE`: the findings of the recording's last health read
SCHEMA = HEALTH_SCHEMA


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help=f"print one JSON document ({SCHEMA})")
    p.add_argument(
        "--pid",
        metavar="PID",
        type=int,
        action="append",
        default=[],
        help="also check this process and its descendants (a job not yet on a GPU); repeatable",
    )
    p.add_argument(
        "--no-lspci",
        action="store_true",
        help="do not run `lspci -vvv` for the ACS control of the bridges above the GPUs",
    )
    add_sanitize(p)


def run(args: argparse.Namespace, feed: Sources | Recording) -> int:
    if isinstance(feed, Recording):
        return _replayed(args, feed)
    snap = sample_once(feed, fast=True)
    facts = read_health(feed, snap, watched=args.pid, with_acs=not args.no_lspci)
    report = judge(facts, read_kernel_health(feed, gpu_refs(snap)))
    if not _print(args, build(report), report, feed, snap):
        return 1
    err = no_driver_error(snap)
    if err is not None:
        say(f"{err.message}; next: {err.next_step}")
        return EXIT_NO_GPU
    return 0


def _replayed(args: argparse.Namespace, rec: Recording) -> int:
    if args.pid:
        say("--pid reads this machine's processes, not a recording's")
        return EXIT_USAGE
    snap = rec.last()  # each tick carries the latest read; else the last one that had one
    if snap is not None and snap.health is None:
        snap = None
        for s in rec.snapshots():
            snap = s if s.health is not None else snap
    if snap is None:
        say(
            f"{rec.shown} holds no health read (recorded without the slow sources, "
            "or before the health checks existed)"
        )
        return EXIT_USAGE
    doc = build(snap.health, recorded_on=snap.system.hostname)
    return 0 if _print(args, doc, snap.health, rec, snap) else 1


def _print(args: argparse.Namespace, doc: dict[str, Any], report: HealthReport, feed, snap) -> bool:
    """Print `doc` as JSON or text, under --sanitize through the one sanitizer (seeded from
    `feed`: this machine, or a recording's snapshots only); False when the output was refused."""
    if getattr(args, "sanitize", False):
        from .common import sanitized_output, seeded_sanitizer

        sanitizer = seeded_sanitizer(feed, [snap])
        doc = sanitize_doc(doc, sanitizer, report)
        text = sanitized_output(
            json.dumps(doc, indent=2) if args.json else render_text(doc), sanitizer
        )
        if text is None:
            return False
        print(text)
    else:
        print(json.dumps(doc, indent=2) if args.json else render_text(doc))
    return True


def build(report: HealthReport, recorded_on: str | None = None) -> dict[str, Any]:
    """The document; `recorded_on` (the recording's host name, "" where it has none) for a
    recorded report: it keeps the findings, not the facts read, so `examined` is null and
    `recorded` true."""
    recorded = recorded_on is not None
    f = report.facts
    counts = {s: sum(1 for x in report.findings if x.severity == s) for s in SEVERITIES}
    return {
        "schema": SCHEMA,
        "hostname": recorded_on if recorded else f.hostname,
        "recorded": recorded,
        "timestamp": iso_time(f.timestamp),
        "worst": report.worst,
        "counts": counts,
        "read_s": None if f.read_s is None else round(f.read_s, 4),
        "examined": None
        if recorded
        else {
            "gpus_nvml": len(f.nvml.gpus),
            "gpus_pci": len(f.pci.gpus),
            "nvswitches": len(f.pci.nvswitches),
            "processes": f.processes.examined,
            "environments": len(f.processes.envs),
            "ib_ports": len(f.interconnect.ib_ports),
        },
        # the schema's next_step is null where a finding has none
        "findings": [
            {**finding_to_json(x), "next_step": x.next_step or None} for x in report.findings
        ],
    }


def sanitize_doc(doc: dict[str, Any], sanitizer, report: HealthReport) -> dict[str, Any]:
    """Every string through the one sanitizer: the host, the PCI bus ids of GPUs, bridges and
    switches (the layout of the node), paths and mount sources."""
    f = report.facts
    sanitizer.seed_hostname(doc["hostname"])
    for g in f.pci.gpus:
        for b in (g.bdf, *g.bridges):
            sanitizer.seed_pci(b)
    for b in f.pci.nvswitches:
        sanitizer.seed_pci(b)
    for g in f.nvml.gpus:
        sanitizer.seed_pci(g.bus_id)
    for s in f.processes.stuck:  # the file servers of the mounts: server:/export
        for m in s.mounts:
            server, sep, _ = m.device.partition(":/")
            if sep:
                sanitizer.seed_hostname(server)
    sanitizer.learn_document(doc)
    out = sanitizer.document(doc)
    out["sanitized"] = True
    return out


_MARK = {"critical": "CRITICAL", "warning": "WARNING", "info": "INFO", "ok": "ok"}


def render_text(doc: dict[str, Any]) -> str:
    c = doc["counts"]
    lines = [
        f"{doc['hostname']}  health{' (recorded)' if doc.get('recorded') else ''}  "
        f"{doc['timestamp']}  "
        f"{c['critical']:,} critical, {formats.count(c['warning'], 'warning')}, "
        f"{c['info']:,} info, {c['ok']:,} ok",
        "",
    ]
    for x in doc["findings"]:
        lines.append(f"{_MARK[x['severity']]:<8}  {x['title']}  [{x['id']}]")
        if x["severity"] == "ok" and not x["next_step"]:
            continue
        if x["bears_on"]:  # one field a line, and none that would say only "-"
            bears = ", ".join(c.replace("_", " ") for c in x["bears_on"])
            lines.append(f"{'':<10}bears on: {bears}")
        if x["layer"]:
            lines.append(f"{'':<10}driver-chain layer: {x['layer'].replace('_', ' ')}")
        for e in x["evidence"]:
            lines.append(f"{'':<10}- {e['text']}  ({e['source']})")
        if x["next_step"]:
            lines.append(f"{'':<10}next: {x['next_step']}")
    return "\n".join(lines)
