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

from ..collect.cuda_init import probe_python_clean, run_init_probe
from ..collect.cuda_libs import (
    ChainScan,
    Probe,
    probe_python,
    read_chain,
    read_nvcc,
    unreadable_why,
)
from ..driver.clean_env import CleanEnvCheck, check
from ..driver.compat import FabricFacts, LoadedRuntime, fabric_facts, fabric_from_snapshot
from ..driver.facts import gpu_capabilities, processes_named
from ..driver.kernels import BuildArchs, judge_builds
from ..driver.render import SCHEMA, WhereRead, chain_document
from ..driver.render import render_text as chain_text
from ..model import Snapshot
from ..model.exits import EXIT_NO_GPU, EXIT_USAGE
from ..recording.store import Recording
from ..sources import Sources
from .common import add_sanitize, no_driver_error, sample_once, say

REPLAY = True  # `--replay FILE`: the chain the recording's last snapshot holds


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help=f"print one JSON document ({SCHEMA})")
    p.add_argument(
        "--probe-python",
        metavar="PATH",
        help="run this Python interpreter (in a subprocess, with a timeout) to read its "
        "torch.version.cuda and whether it initialises CUDA",
    )
    p.add_argument(
        "--clean-env",
        action="store_true",
        help="also run the CUDA initialisation probe (cuInit through libcuda.so.1) and "
        "--probe-python's probe in a scrubbed environment (env -i: no LD_LIBRARY_PATH, "
        "LD_PRELOAD, CUDA_*, conda or venv variables) beside yours, and say whether a failure "
        "follows your environment or the host",
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
        say("--timeout must be a positive number of seconds")
        return EXIT_USAGE
    if isinstance(feed, Recording):
        snap = feed.last()
        refused = _refused(feed, snap, args.probe_python, getattr(args, "clean_env", False))
        if refused is not None:
            say(refused)
            return EXIT_USAGE
        # no paths were recorded
        where, fabric = WhereRead("the recording"), fabric_from_snapshot(snap)
        doc = chain_document(snap, snap.driver_chain, where, fabric=fabric)
    else:
        snap = sample_once(feed, fast=True)
        scan = read_chain(feed, archs=True)
        toolkit, toolkit_prog = read_nvcc(feed)
        fabric = read_fabric(feed, snap)
        probe = probe_python(feed, args.probe_python, args.timeout) if args.probe_python else None
        clean = clean_env_check(feed, probe, args) if getattr(args, "clean_env", False) else None
        doc = build(snap, scan, toolkit, toolkit_prog, probe, fabric, clean)
    if getattr(args, "sanitize", False):
        from .common import sanitized_output, seeded_sanitizer

        sanitizer = seeded_sanitizer(feed, [snap])
        doc = sanitize_doc(doc, sanitizer, snap)
        text = json.dumps(doc, indent=2) if args.json else render_text(doc, feed)
        text = sanitized_output(text, sanitizer)
        if text is None:
            return 1
        print(text)
    elif args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(render_text(doc, feed))
    err = no_driver_error(snap)
    if err is not None:
        say(f"{err.message}; next: {err.next_step}")
        return EXIT_NO_GPU
    return 0


def _refused(
    feed: Recording, snap: Snapshot | None, probe_python: str | None, clean_env: bool = False
) -> str | None:
    """Why a recording cannot answer this command line; None when it can."""
    if snap is None:
        return f"{feed.shown} holds no snapshots"
    if snap.driver_chain is None:
        return f"{feed.shown} holds no driver chain (recorded before it was read)"
    if probe_python:
        return "--probe-python runs on this machine, not on a recording"
    if clean_env:
        return "--clean-env runs on this machine, not on a recording"
    return None


def clean_env_check(feed: Sources, probe: Probe | None, args: argparse.Namespace) -> CleanEnvCheck:
    """The CUDA initialisation probe (this interpreter, ctypes) in your environment and a
    scrubbed one; with --probe-python, that interpreter's torch the same two ways."""
    python = sys.executable
    yours = run_init_probe(feed, python, clean=False, timeout=args.timeout)
    clean = run_init_probe(feed, python, clean=True, timeout=args.timeout)
    torch_yours = torch_clean = None
    warnings: list[str] = []
    if probe is not None and probe.ok:
        other = probe_python_clean(feed, args.probe_python, args.timeout)
        if other.ok:
            torch_yours = bool(probe.result.get("cuda_available"))
            torch_clean = bool(other.result.get("cuda_available"))
            warnings = list(other.result.get("warnings") or [])
    return check(python, feed.environ, yours, clean, torch_yours, torch_clean, warnings)


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


def build(
    snap: Snapshot,
    scan: ChainScan,
    toolkit: str | None,
    toolkit_prog: str | None,
    probe: Probe | None,
    fabric: FabricFacts | None = None,
    clean: CleanEnvCheck | None = None,
) -> dict[str, Any]:
    """The document of what this read found: the scan's chain and where each layer was read,
    the framework probe's answer (`driver.render.chain_document`)."""
    where = WhereRead(
        scan.module_source,
        scan.module_text,
        scan.library_path,
        tuple(tuple(x.path for x in p.libs) for p in scan.processes),
        tuple(p.framework_file for p in scan.processes),
    )
    probed, probe_doc = [], None
    if probe is not None:
        probe_doc = {"interpreter": probe.interpreter, "ok": probe.ok, "error": probe.error}
        probe_doc.update(probe.result)
        if probe.result.get("torch_cuda"):
            name = f"{probe.interpreter} (probed)"
            probed.append(LoadedRuntime(0, name, None, probe.result["torch_cuda"]))
    kernels = judge_builds(builds_of(scan, probe), gpu_capabilities(snap))
    return chain_document(
        snap, scan.chain(), where, toolkit, toolkit_prog, fabric, probe_doc, probed, kernels, clean
    )


def builds_of(scan: ChainScan, probe: Probe | None) -> list[BuildArchs]:
    """Each framework build whose GPU architectures were read: the probed interpreter's
    (`torch._C._cuda_getArchFlags()`), then each mapped libtorch_cuda.so's (the processes of
    one build as one)."""
    out = []
    if probe is not None and probe.result.get("arch_list"):
        out.append(
            BuildArchs(
                f"{probe.interpreter} (probed)",
                tuple(probe.result["arch_list"]),
                "torch._C._cuda_getArchFlags(), what torch.cuda.get_arch_list() returns",
                cuda=probe.result.get("torch_cuda"),
            )
        )
    by_build: dict[tuple, list] = {}
    for p in scan.processes:
        if p.arch_source is not None:
            by_build.setdefault((p.arch_list, p.arch_source), []).append(p)
    for (archs, source), procs in by_build.items():
        pids = tuple(p.pid for p in procs)
        who = processes_named(pids, procs[0].name)
        out.append(BuildArchs(who, archs, source, pids, procs[0].framework_cuda))
    return out


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


def render_text(doc: dict[str, Any], feed: Sources | Recording | None = None) -> str:
    """The chain as text; why some processes' maps were refused is said for who reads them."""
    return chain_text(doc, unreadable_why(feed.euid() if isinstance(feed, Sources) else None))
