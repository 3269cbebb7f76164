"""`gputop-diag driver`: the driver -> CUDA runtime -> framework chain, host layer upward, each
layer with where it was read, and the verdict with the text users see and the next step.

Layers: the kernel module (/proc/driver/nvidia/version), on NVSwitch systems the fabric manager
(its service, its version against the driver's, the GPUs' fabric registration: the health
checks' fabric findings), the user-space NVML library, the
driver's maximum CUDA, the CUDA runtimes every readable process has loaded (/proc/<pid>/maps: a
runtime too new for the driver never reaches a GPU, so NVML's process list cannot show it), the
host toolkit (nvcc), and with `--probe-python PATH` what that interpreter's framework says.
Exit 3 when no driver is usable (every layer that could be read is still shown), 2 for a usage
error, 0 otherwise (a broken runtime layer is in the verdict).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..collect.cuda_libs import (
    ChainScan,
    FoundLib,
    FoundProcess,
    Probe,
    probe_python,
    read_chain,
    read_nvcc,
    unreadable_why,
)
from ..driver.compat import (
    ERR_MISMATCH,
    FABRIC_STATE_WORDS,
    MODULE_NOT_VISIBLE,
    MODULE_NOT_VISIBLE_WHY,
    TABLE_SOURCE,
    TOOLKIT_MIN_DRIVER,
    FabricFacts,
    LoadedRuntime,
    Problem,
    fabric_facts,
    fabric_from_snapshot,
    facts_from_snapshot,
    judge_chain,
    runtime_verdict,
    status_of,
)
from ..model import Snapshot
from ..model.codec import iso_time
from ..model.exits import EXIT_NO_GPU, EXIT_USAGE
from ..recording.store import Recording
from ..sources import Sources
from .common import add_sanitize, no_driver_error, sample_once

REPLAY = True  # `--replay FILE`: the chain the recording's last snapshot holds
SCHEMA = "gputop-diag.driver/1"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help=f"print one JSON document ({SCHEMA})")
    p.add_argument(
        "--probe-python",
        metavar="PATH",
        help="run this Python interpreter (in a subprocess, with a timeout) to read its "
        "torch.version.cuda and whether it initialises CUDA",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds --probe-python may take (default 60)",
    )
    add_sanitize(p)


def run(args: argparse.Namespace, feed: Sources | Recording) -> int:
    if args.timeout <= 0:
        print("gputop-diag: --timeout must be a positive number of seconds", file=sys.stderr)
        return EXIT_USAGE
    probe: Probe | None = None
    toolkit = toolkit_prog = None
    fabric: FabricFacts | None = None
    if isinstance(feed, Recording):
        snap = feed.last()
        if snap is None:
            print(f"gputop-diag: {feed.shown} holds no snapshots", file=sys.stderr)
            return EXIT_USAGE
        if snap.driver_chain is None:
            print(
                f"gputop-diag: {feed.shown} holds no driver chain (recorded before it was read)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        scan = _scan_of(snap)
        fabric = fabric_from_snapshot(snap)
        if args.probe_python:
            print(
                "gputop-diag: --probe-python runs on this machine, not on a recording",
                file=sys.stderr,
            )
            return EXIT_USAGE
    else:
        snap = sample_once(feed, fast=True)
        scan = read_chain(feed)
        toolkit, toolkit_prog = read_nvcc(feed)
        fabric = read_fabric(feed, snap)
        if args.probe_python:
            probe = probe_python(feed, args.probe_python, args.timeout)
    doc = build(snap, scan, toolkit, toolkit_prog, probe, fabric)
    if getattr(args, "sanitize", False):
        from .common import sanitized_output, seeded_sanitizer

        sanitizer = seeded_sanitizer(feed, [snap])
        doc = sanitize_doc(doc, sanitizer, snap)
        text = json.dumps(doc, indent=2) if args.json else render_text(doc)
        text = sanitized_output(text, sanitizer)
        if text is None:
            return 1
        print(text)
    elif args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(render_text(doc))
    err = no_driver_error(snap)
    if err is not None:
        print(f"gputop-diag: {err.message}; next: {err.next_step}", file=sys.stderr)
        return EXIT_NO_GPU
    return 0


def read_fabric(feed: Sources, snap: Snapshot) -> FabricFacts | None:
    """The fabric-manager layer: on NVSwitch systems only (none found: no layer, nothing
    asked), judged by the health checks' fabric findings."""
    from ..collect.health.fabric import read_fabric_manager
    from ..collect.health.nvml import read_nvml
    from ..collect.health.pci import read_pci
    from ..health.node import fabric_findings

    try:
        pci = read_pci(feed.procfs, feed.run_command, with_acs=False)
        fm = read_fabric_manager(feed.procfs, feed.run_command, pci.nvswitches)
        if not fm.asked:
            return None
        return fabric_facts(fabric_findings(pci, read_nvml(feed.nvml, snap), fm))
    except Exception as e:  # noqa: BLE001 - the other layers are still shown
        return FabricFacts("unknown", f"could not be checked: {type(e).__name__}: {e}")


def _scan_of(snap: Snapshot) -> ChainScan:
    """A recording's chain as a scan (no paths were recorded)."""
    c = snap.driver_chain
    scan = ChainScan(
        module_version=c.module_version,
        module_flavour=c.module_flavour,
        module_loaded=c.module_loaded,
        module_source="the recording",
        library_version=c.library_version,
        scanned=c.scanned,
        unreadable=c.unreadable,
    )
    for p in c.processes:
        libs = tuple(FoundLib(x.kind, "", x.version, x.origin, x.deleted) for x in p.libraries)
        scan.processes.append(
            FoundProcess(p.pid, p.name, p.user, libs, p.framework, p.framework_cuda)
        )
    return scan


# -- the document -------------------------------------------------------------------------------
def _problem(p: Problem) -> dict[str, Any]:
    return {
        "layer": p.layer,
        "severity": p.severity,
        "code": p.code,
        "text": p.text,
        "error_text": p.error_text,
        "next_step": p.next_step,
        "pids": list(p.pids),
    }


def build(
    snap: Snapshot,
    scan: ChainScan,
    toolkit: str | None,
    toolkit_prog: str | None,
    probe: Probe | None,
    fabric: FabricFacts | None = None,
) -> dict[str, Any]:
    from dataclasses import replace

    s = snap.system
    extra = []
    if probe is not None and probe.result.get("torch_cuda"):
        extra.append(
            LoadedRuntime(0, f"{probe.interpreter} (probed)", None, probe.result["torch_cuda"])
        )
    facts = facts_from_snapshot(replace(snap, driver_chain=scan.chain()), toolkit, extra)
    problems = judge_chain(facts, fabric)
    nvml_err = next((e for e in snap.errors if e.source == "nvml" and e.gpu_index is None), None)
    if facts.driver_max is None:
        max_source = None
    elif s.cuda_driver_version:
        max_source = f"nvmlSystemGetCudaDriverVersion ({s.cuda_driver_version})"
    else:
        max_source = "the minimum-driver table, from the library's version (NVML did not answer)"
    status = status_of(problems)
    if any(p.code == "no_driver" for p in problems):
        status = "no_driver"
    procs = []
    for p in scan.processes:
        rt = next((x for x in p.libs if x.kind == "cudart"), None)
        cu = next((x for x in p.libs if x.kind == "cuda"), None)
        version = p.framework_cuda if rt is None or "." not in (rt.version or "") else rt.version
        v = runtime_verdict(
            version or (rt.version if rt else None),
            facts.driver_max,
            facts.module_version or facts.library_version,
            bool(cu and cu.origin == "compat"),
        )
        procs.append(
            {
                "pid": p.pid,
                "name": p.name,
                "user": p.user,
                "on_gpu": any(g.pid == p.pid for g in snap.gpu_processes),
                "libraries": [
                    {
                        "kind": x.kind,
                        "version": x.version,
                        "origin": x.origin,
                        "path": x.path or None,
                        "deleted": x.deleted,
                    }
                    for x in p.libs
                ],
                "framework": p.framework,
                "framework_cuda": p.framework_cuda,
                "framework_file": p.framework_file,
                "verdict": v.status if v else None,
            }
        )
    return {
        "schema": SCHEMA,
        "timestamp": iso_time(snap.timestamp),
        "hostname": s.hostname,
        "status": status,
        "layers": {
            "kernel_module": {
                "loaded": scan.module_loaded,
                # absent files while NVML answers: WSL2, a container, a mock library
                "visible": scan.module_loaded is not False or not facts.nvml_answered,
                "version": scan.module_version,
                "flavour": scan.module_flavour,
                "source": scan.module_source or "/proc/driver/nvidia/version (absent)",
                "text": scan.module_text,
            },
            # NVSwitch systems only; null where there is none (no layer, nothing asked)
            "fabric_manager": None
            if fabric is None
            else {
                "state": fabric.state,
                "text": fabric.text,
                "evidence": [{"text": t, "source": src} for t, src in fabric.evidence],
                "gpus": list(fabric.gpus),
                "next_step": fabric.next_step or None,
                "findings": list(fabric.ids),
                "source": "gputop-diag health (the fabric manager's checks)",
            },
            "nvml_library": {
                "found": facts.library_found,
                "version": facts.library_version,
                "path": scan.library_path,
                "nvml_driver_version": s.driver_version,
                "nvml_version": s.nvml_version,
                # under a mismatch, NVML's own text: the generic explanation assumes an upgrade
                "nvml_error": ERR_MISMATCH
                if facts.nvml_error == "LIB_RM_VERSION_MISMATCH"
                else (nvml_err.message if nvml_err else None),
                "nvml_error_code": facts.nvml_error,
            },
            "driver_max_cuda": {
                "version": f"{facts.driver_max[0]}.{facts.driver_max[1]}"
                if facts.driver_max
                else None,
                "source": max_source,
            },
            "cuda_runtimes": {
                "scanned": scan.scanned,
                "unreadable": scan.unreadable,
                "processes": procs,
            },
            "toolkit": {"nvcc": toolkit_prog, "version": toolkit},
            "framework_probe": None
            if probe is None
            else {
                "interpreter": probe.interpreter,
                "ok": probe.ok,
                "error": probe.error,
                **probe.result,
            },
        },
        "problems": [_problem(p) for p in problems],
        "check_first": problems[0].next_step if problems else None,
        "min_driver_table": {
            "source": TABLE_SOURCE,
            "rows": [{"cuda": c, "min_driver": d} for c, d in TOOLKIT_MIN_DRIVER],
        },
    }


def sanitize_doc(doc: dict[str, Any], sanitizer, snap: Snapshot) -> dict[str, Any]:
    """The same document with every field through the sanitizer (host, users, paths, the
    probe's answer and error line, the kernel module's text, the problems' words); the table
    left out (it names no one, and `gputop-diag driver` prints it)."""
    sanitizer.seed_hostname(doc["hostname"])
    for p in doc["layers"]["cuda_runtimes"]["processes"]:
        sanitizer.seed_user(p["user"])
    for g in snap.gpus:
        if g.static.uuid:
            sanitizer.seed_gpu_uuid(g.static.uuid)
    doc = {**doc, "min_driver_table": {"source": doc["min_driver_table"]["source"]}}
    sanitizer.learn_document(doc)
    out = sanitizer.document(doc)
    out["sanitized"] = True
    return out


# -- text ---------------------------------------------------------------------------------------
_STATUS = {
    "ok": "OK: every layer that could be read agrees",
    "warnings": "WARNINGS: it works, with the caveats below",
    "broken": "BROKEN: see the problems below, host layer first",
    "no_driver": "NO DRIVER: nothing above the host can work",
}


def _lib(x: dict) -> str:
    where = f" ({x['origin']}{', replaced on disk' if x['deleted'] else ''})"
    name = {
        "cudart": "cudart",
        "cuda": "libcuda",
        "torch_cuda": "torch",
        "nccl": "nccl",
        "cudnn": "cudnn",
    }[x["kind"]]
    return f"{name} {x['version'] or '?'}{where}"


def render_text(doc: dict[str, Any]) -> str:
    L = doc["layers"]
    km, nv, mx, rt = L["kernel_module"], L["nvml_library"], L["driver_max_cuda"], L["cuda_runtimes"]
    lines = [
        f"Driver chain  {doc['hostname']}  {doc['timestamp']}",
        "kernel module -> "
        + ("fabric manager -> " if L.get("fabric_manager") is not None else "")
        + "user-space library -> driver's max CUDA -> CUDA runtime -> framework",
        f"verdict: {_STATUS[doc['status']]}",
        "",
    ]
    if km["loaded"]:
        mod = f"{km['version'] or '?'} ({km['flavour'] or 'flavour not said'})"
        where = km["source"]
    elif km["loaded"] is False and not km.get("visible", True):
        mod, where = MODULE_NOT_VISIBLE, MODULE_NOT_VISIBLE_WHY
    elif km["loaded"] is False:
        mod, where = "not loaded", "/proc/driver/nvidia/version and /sys/module/nvidia: absent"
    else:
        mod, where = "?", km["source"]
    lines.append(f"1 kernel module      {mod:<28} {where}")
    fm = L.get("fabric_manager")
    if fm is not None:  # NVSwitch systems only
        state = FABRIC_STATE_WORDS.get(fm["state"], fm["state"])
        lines.append(f"  fabric manager     {state:<28} {fm['text']}")
        for e in fm["evidence"][:4] if fm["state"] != "ok" else ():
            lines.append(f"                     - {e['text']} ({e['source']})")
    if nv["found"] is False:
        lib, where = "not found", "libnvidia-ml.so.* in the library directories: none"
    else:
        lib = nv["version"] or "?"
        where = nv["path"] or ("NVML" if nv["nvml_driver_version"] else "not found on disk")
        if nv["nvml_version"]:
            where += f"; NVML {nv['nvml_version']}"
    lines.append(f"2 NVML library       {lib:<28} {where}")
    if nv["nvml_error"]:
        lines.append(f"                     NVML: {nv['nvml_error']}")
    lines.append(f"3 driver's max CUDA  {mx['version'] or 'n/a':<28} {mx['source'] or 'not known'}")
    procs = rt["processes"]
    hidden = f", {rt['unreadable']} {unreadable_why()}" if rt["unreadable"] else ""
    lines.append(
        f"4 CUDA runtimes      {_count(len(procs), 'process', 'processes')} with CUDA libraries "
        f"(/proc/<pid>/maps of {_count(rt['scanned'], 'process', 'processes')}{hidden})"
    )
    groups: dict[tuple, list[dict]] = {}
    for p in procs:  # the ranks of one job load the same libraries: one entry for them all
        key = (
            p["name"],
            p["user"],
            p["on_gpu"],
            p["verdict"],
            p["framework_cuda"],
            p["framework_file"],
            tuple(_lib(x) for x in p["libraries"]),
        )
        groups.setdefault(key, []).append(p)
    for n, ((name, user, on_gpu, verdict, fcuda, ffile, libs), ps) in enumerate(groups.items()):
        if n == 8:
            lines.append(f"    (+{len(groups) - 8} more: --json lists them all)")
            break
        shown = {
            "too_new": "TOO NEW",
            "mvc": "minor-version compat",
            "compat": "forward compat",
            "ok": "ok",
            None: "?",
        }[verdict]
        place = "on a GPU" if on_gpu else "on no GPU"
        pids = ", ".join(str(p["pid"]) for p in ps[:6]) + (
            f" +{len(ps) - 6}" if len(ps) > 6 else ""
        )
        who = f"pid {pids}" if len(ps) == 1 else f"{len(ps)} processes (pid {pids})"
        lines.append(f"    {who} {name or '?'} ({user or '?'}, {place}): {shown}")
        lines.append("      " + ", ".join(libs))
        if fcuda:
            lines.append(
                f"      torch.version.cuda {fcuda} (read from {ffile or 'its torch/version.py'})"
            )
    tk = L["toolkit"]
    lines.append(
        f"5 host toolkit       {tk['version'] or 'no nvcc':<28} "
        + (
            f"{tk['nvcc']} --version"
            if tk["version"]
            else "frameworks bring their own runtime; the toolkit matters for code built here"
        )
    )
    pr = L["framework_probe"]
    if pr is None:
        lines.append("6 framework          (--probe-python PATH runs an interpreter to ask torch)")
    elif pr.get("torch"):
        avail = "initialises CUDA" if pr.get("cuda_available") else "does NOT initialise CUDA"
        lines.append(
            f"6 framework          torch {pr['torch']}, torch.version.cuda {pr.get('torch_cuda')}"
            f": {avail} ({pr['interpreter']})"
        )
        for w in pr.get("warnings", [])[:2]:
            lines.append(f"                     warning: {w}")
    else:
        lines.append(f"6 framework          {pr.get('error') or 'no answer'}")
    lines.append("")
    if doc["problems"]:
        lines.append("Problems (host layer first):")
        for p in doc["problems"]:
            lines += [
                f"  [{p['severity']}] {p['layer']}: {p['text']}",
                f"    users see: {p['error_text']}",
                f"    next: {p['next_step']}",
            ]
        lines += ["", f"Check first: {doc['check_first']}"]
    else:
        lines.append("Problems: none")
    rows = doc["min_driver_table"].get("rows")
    table = (
        "Minimum driver per CUDA toolkit (GA): "
        + ", ".join(f"{r['cuda'].split()[0]} {r['min_driver']}" for r in rows if "GA" in r["cuda"])
        if rows
        else "Minimum driver per CUDA toolkit: not repeated here (`gputop-diag driver` prints it)"
    )
    lines += ["", table, f"  source: {doc['min_driver_table']['source']}"]
    return "\n".join(x for x in lines if x is not None)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
