"""`gputop-diag driver`'s document and text: the chain, host layer upward, each layer with where
it was read, and the verdict with the text users see and the next step. Pure: the command hands
in what it read (a snapshot, its driver chain, where each layer was read)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..model import DriverChain, Snapshot
from ..model.codec import iso_time
from .clean_env import CleanEnvCheck, check_doc
from .facts import (
    MODULE_NOT_VISIBLE,
    MODULE_NOT_VISIBLE_WHY,
    ChainFacts,
    FabricFacts,
    LoadedRuntime,
    Problem,
    facts_from_snapshot,
)
from .judge import judge_chain, problem, status_of
from .kernels import BuildOnGpus, gpus_named, wheel_for_driver
from .versions import TABLE_SOURCE, TOOLKIT_MIN_DRIVER, runtime_verdict
from .wording import ERR_MISMATCH, FABRIC_STATE_WORDS

SCHEMA = "gputop-diag.driver/1"


@dataclass(frozen=True, slots=True)
class WhereRead:
    """Where the command read the chain, which a snapshot's `DriverChain` leaves out (paths may
    name a home): the kernel module's file and line, the NVML library's path, and per process
    in the chain's order each library's path and the file torch.version.cuda was read from."""

    module_source: str | None = None
    module_text: str | None = None  # the NVRM line
    library_path: str | None = None
    library_paths: tuple[tuple[str | None, ...], ...] = ()
    framework_files: tuple[str | None, ...] = ()


def problem_doc(p: Problem) -> dict[str, Any]:
    return {
        "layer": p.layer,
        "severity": p.severity,
        "code": p.code,
        "text": p.text,
        "error_text": p.error_text,
        "next_step": p.next_step,
        "pids": list(p.pids),
    }


def chain_document(
    snap: Snapshot,
    chain: DriverChain,
    where: WhereRead,
    toolkit: str | None = None,
    toolkit_prog: str | None = None,
    fabric: FabricFacts | None = None,
    probe: dict[str, Any] | None = None,
    probed: Sequence[LoadedRuntime] = (),
    kernels: Sequence[BuildOnGpus] = (),
    clean_env: CleanEnvCheck | None = None,
) -> dict[str, Any]:
    """The `gputop-diag.driver/1` document of `chain` read with `snap`; `probe`: the framework
    probe's answer as the document shows it, `probed`: the runtime it reported; `kernels`: each
    framework build's architectures against the GPUs (`kernels.judge_builds`); `clean_env`:
    the CUDA initialisation probe in your environment and a clean one (`--clean-env`)."""
    s = snap.system
    facts = facts_from_snapshot(replace(snap, driver_chain=chain), toolkit, probed)
    if kernels:  # the command's own read (the probe's list, where each was read) over the chain's
        facts = replace(facts, kernels=tuple(kernels))
    problems = cpu_build_first(judge_chain(facts, fabric), cpu_build_problem(probe, facts))
    found = clean_env_problem(clean_env)
    if found is not None:  # after the chain's own: it says which layer they follow
        problems = (*problems, found)
    status = status_of(problems)
    if any(p.code == "no_driver" for p in problems):
        status = "no_driver"
    return {
        "schema": SCHEMA,
        "timestamp": iso_time(snap.timestamp),
        "hostname": s.hostname,
        "status": status,
        "layers": {
            "kernel_module": {
                "loaded": chain.module_loaded,
                # absent files while NVML answers: WSL2, a container, a mock library
                "visible": chain.module_loaded is not False or not facts.nvml_answered,
                "version": chain.module_version,
                "flavour": chain.module_flavour,
                "source": where.module_source or "/proc/driver/nvidia/version (absent)",
                "text": where.module_text,
            },
            # NVSwitch systems only; null where there is none (no layer, nothing asked)
            "fabric_manager": None if fabric is None else _fabric_doc(fabric),
            "nvml_library": _library_doc(snap, facts, where),
            "driver_max_cuda": {
                "version": f"{facts.driver_max[0]}.{facts.driver_max[1]}"
                if facts.driver_max
                else None,
                "source": _max_source(snap, facts),
            },
            "cuda_runtimes": {
                "scanned": chain.scanned,
                "unreadable": chain.unreadable,
                "processes": _processes_doc(snap, chain, where, facts),
            },
            "toolkit": {"nvcc": toolkit_prog, "version": toolkit},
            "framework_probe": probe,
            "kernel_images": [_kernels_doc(k) for k in facts.kernels],
            # whether the mapped libtorch_cuda.so's were read (null: none is mapped)
            "kernel_images_read": facts.kernels_read,
            "clean_env": None if clean_env is None else check_doc(clean_env),
        },
        "problems": [problem_doc(p) for p in problems],
        "check_first": problems[0].next_step if problems else None,
        "min_driver_table": {
            "source": TABLE_SOURCE,
            "rows": [{"cuda": c, "min_driver": d} for c, d in TOOLKIT_MIN_DRIVER],
        },
    }


def is_cpu_build(probe: dict[str, Any] | None) -> bool:
    """Whether the probed interpreter's torch is a CPU-only build: it answered, and its
    torch.version.cuda is None (PyTorch's CPU wheels, "2.13.0+cpu")."""
    return bool(probe and probe.get("torch") and not probe.get("torch_cuda"))


def cpu_build_problem(probe: dict[str, Any] | None, facts: ChainFacts) -> Problem | None:
    """The probed framework is a CPU-only build: the wheel index of the newest CUDA the driver
    runs (`kernels.wheel_for_driver`) is the next step; None for a CUDA build."""
    if not is_cpu_build(probe):
        return None
    index = wheel_for_driver(facts.driver_max)
    return problem(
        "framework_cpu_only",
        torch=probe["torch"],
        python=probe.get("interpreter") or "python",
        index=index,
        dmax=f"{facts.driver_max[0]}.{facts.driver_max[1]}" if facts.driver_max else None,
    )


# Nothing above these can run: a CPU-only framework is named after them, else first.
_HOST_FIRST = ("no_driver", "module_not_loaded")


def cpu_build_first(problems: Sequence[Problem], cpu: Problem | None) -> tuple[Problem, ...]:
    """`problems` with the CPU-only build's first, after a missing driver or module."""
    if cpu is None:
        return tuple(problems)
    host = [p for p in problems if p.code in _HOST_FIRST]
    return (*host, cpu, *(p for p in problems if p.code not in _HOST_FIRST))


def clean_env_problem(c: CleanEnvCheck | None) -> Problem | None:
    """The problem `--clean-env` found: the environment's, the host's or the framework's;
    None when CUDA initialises (or the probe did not answer)."""
    if c is None or c.verdict.follows in ("nothing", "unknown"):
        return None
    v = c.verdict
    failing = c.yours if v.follows == "environment" else c.clean
    said = failing.said()
    if v.follows == "framework" or c.yours.state == c.clean.state == "ok":
        said = "torch.cuda.is_available() is False"
    return problem(
        f"clean_env_{v.follows}",
        text=v.text,
        said=said,
        next_step=v.next_step,
        named=", ".join(f"{k}={val}" for k, val in v.variables),
    )


def _kernels_doc(k: BuildOnGpus) -> dict[str, Any]:
    return {
        "build": k.build.who,
        "pids": list(k.build.pids),
        "arch_list": list(k.build.arch_list),
        "source": k.build.source,
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "compute_capability": f"{g.capability[0]}.{g.capability[1]}",
                "runs": c.runs if c else None,
                "by": c.by if c else None,
                "jit": c.jit if c else None,
            }
            for g, c in k.checks
        ],
    }


def _fabric_doc(fabric: FabricFacts) -> dict[str, Any]:
    return {
        "state": fabric.state,
        "text": fabric.text,
        "evidence": [{"text": t, "source": src} for t, src in fabric.evidence],
        "gpus": list(fabric.gpus),
        "next_step": fabric.next_step or None,
        "findings": list(fabric.ids),
        "source": "gputop-diag health (the fabric manager's checks)",
    }


def _library_doc(snap: Snapshot, facts: ChainFacts, where: WhereRead) -> dict[str, Any]:
    s = snap.system
    nvml_err = next((e for e in snap.errors if e.source == "nvml" and e.gpu_index is None), None)
    return {
        "found": facts.library_found,
        "version": facts.library_version,
        "path": where.library_path,
        "nvml_driver_version": s.driver_version,
        "nvml_version": s.nvml_version,
        # under a mismatch, NVML's own text: the generic explanation assumes an upgrade
        "nvml_error": ERR_MISMATCH
        if facts.nvml_error == "LIB_RM_VERSION_MISMATCH"
        else (nvml_err.message if nvml_err else None),
        "nvml_error_code": facts.nvml_error,
    }


def _max_source(snap: Snapshot, facts: ChainFacts) -> str | None:
    if facts.driver_max is None:
        return None
    if snap.system.cuda_driver_version:
        return f"nvmlSystemGetCudaDriverVersion ({snap.system.cuda_driver_version})"
    return "the minimum-driver table, from the library's version (NVML did not answer)"


def _processes_doc(
    snap: Snapshot, chain: DriverChain, where: WhereRead, facts: ChainFacts
) -> list[dict[str, Any]]:
    out = []
    for i, p in enumerate(chain.processes):
        rt, cu = p.library("cudart"), p.library("cuda")
        version = p.framework_cuda if rt is None or "." not in (rt.version or "") else rt.version
        v = runtime_verdict(
            version or (rt.version if rt else None),
            facts.driver_max,
            facts.module_version or facts.library_version,
            bool(cu and cu.origin == "compat"),
        )
        paths = _at(where.library_paths, i) or ()
        out.append(
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
                        "path": _at(paths, j) or None,
                        "deleted": x.deleted,
                    }
                    for j, x in enumerate(p.libraries)
                ],
                "framework": p.framework,
                "framework_cuda": p.framework_cuda,
                "framework_file": _at(where.framework_files, i),
                "verdict": v.status if v else None,
            }
        )
    return out


def _at(seq: Sequence, i: int):
    return seq[i] if i < len(seq) else None


# -- text ---------------------------------------------------------------------------------------
_STATUS = {
    "ok": "OK: every layer that could be read agrees",
    "warnings": "WARNINGS: it works, with the caveats below",
    "broken": "BROKEN: see the problems below, host layer first",
    "no_driver": "NO DRIVER: nothing above the host can work",
}
_LIBRARY_NAMES = {
    "cudart": "cudart",
    "cuda": "libcuda",
    "torch_cuda": "torch",
    "nccl": "nccl",
    "cudnn": "cudnn",
}
_VERDICT_WORDS = {
    "too_new": "TOO NEW",
    "mvc": "minor-version compat",
    "compat": "forward compat",
    "ok": "ok",
    None: "?",
}
MAX_GROUPS = 8  # runtime entries shown; --json lists them all


def render_text(doc: dict[str, Any], unreadable_why: str) -> str:
    """The document as text; `unreadable_why`: why some processes' maps were refused, for who
    runs this."""
    L = doc["layers"]
    lines = [
        f"Driver chain  {doc['hostname']}  {doc['timestamp']}",
        "kernel module -> "
        + ("fabric manager -> " if L.get("fabric_manager") is not None else "")
        + "user-space library -> driver's max CUDA -> CUDA runtime -> framework -> kernels",
        f"verdict: {_STATUS[doc['status']]}",
        "",
        *_host_lines(L),
        *_runtime_lines(L["cuda_runtimes"], unreadable_why),
        *_above_lines(L),
        "",
        *_problem_lines(doc),
    ]
    return "\n".join(x for x in lines if x is not None)


def _host_lines(L: dict[str, Any]) -> list[str]:
    """Layers 1 to 3: the kernel module, the fabric manager, the NVML library, the max CUDA."""
    km, nv, mx = L["kernel_module"], L["nvml_library"], L["driver_max_cuda"]
    if km["loaded"]:
        mod = f"{km['version'] or '?'} ({km['flavour'] or 'flavour not said'})"
        where = km["source"]
    elif km["loaded"] is False and not km.get("visible", True):
        mod, where = MODULE_NOT_VISIBLE, MODULE_NOT_VISIBLE_WHY
    elif km["loaded"] is False:
        mod, where = "not loaded", "/proc/driver/nvidia/version and /sys/module/nvidia: absent"
    else:
        mod, where = "?", km["source"]
    lines = [f"1 kernel module      {mod:<28} {where}"]
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
        where = nv["path"] or "the version NVML gave (its file not read)"
    lines.append(f"2 NVML library       {lib:<28} {where}")
    answers = nvml_answers(nv)
    if answers:
        lines.append(f"                     NVML answers: {answers}")
    if nv["nvml_error"]:
        lines.append(f"                     NVML: {nv['nvml_error']}")
    lines.append(f"3 driver's max CUDA  {mx['version'] or 'n/a':<28} {mx['source'] or 'not known'}")
    return lines


def nvml_answers(nv: dict[str, Any]) -> str:
    """What NVML itself says of the driver, each value once and named by the call that gave
    it: `nvmlSystemGetDriverVersion` (the driver, "570.124.06") and `nvmlSystemGetNVMLVersion`
    (the NVML library, "12.570.124.06": the CUDA major version before the driver's)."""
    said = []
    if nv["nvml_driver_version"]:
        said.append(f"driver {nv['nvml_driver_version']} (nvmlSystemGetDriverVersion)")
    if nv["nvml_version"]:
        said.append(f"NVML {nv['nvml_version']} (nvmlSystemGetNVMLVersion)")
    return ", ".join(said)


def _runtime_lines(rt: dict[str, Any], unreadable_why: str) -> list[str]:
    """Layer 4: the processes with CUDA libraries, the ranks of one job as one entry."""
    procs = rt["processes"]
    hidden = f", {rt['unreadable']} {unreadable_why}" if rt["unreadable"] else ""
    lines = [
        f"4 CUDA runtimes      {_count(len(procs), 'process', 'processes')} with CUDA libraries "
        f"(/proc/<pid>/maps of {_count(rt['scanned'], 'process', 'processes')}{hidden})"
    ]
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
        if n == MAX_GROUPS:
            lines.append(f"    (+{len(groups) - MAX_GROUPS} more: --json lists them all)")
            break
        place = "on a GPU" if on_gpu else "on no GPU"
        pids = ", ".join(str(p["pid"]) for p in ps[:6]) + (
            f" +{len(ps) - 6}" if len(ps) > 6 else ""
        )
        who = f"pid {pids}" if len(ps) == 1 else f"{len(ps)} processes (pid {pids})"
        lines.append(f"    {who} {name or '?'} ({user or '?'}, {place}): {_VERDICT_WORDS[verdict]}")
        lines.append("      " + ", ".join(libs))
        if fcuda:
            lines.append(
                f"      torch.version.cuda {fcuda} (read from {ffile or 'its torch/version.py'})"
            )
    return lines


def _lib(x: dict) -> str:
    where = f" ({x['origin']}{', replaced on disk' if x['deleted'] else ''})"
    return f"{_LIBRARY_NAMES[x['kind']]} {x['version'] or '?'}{where}"


def _above_lines(L: dict[str, Any]) -> list[str]:
    """Layers 5 and 6: the host toolkit, the framework an interpreter reports."""
    tk = L["toolkit"]
    lines = [
        f"5 host toolkit       {tk['version'] or 'no nvcc':<28} "
        + (
            f"{tk['nvcc']} --version"
            if tk["version"]
            else "frameworks bring their own runtime; the toolkit matters for code built here"
        )
    ]
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
    kernels = _kernel_lines(L.get("kernel_images") or [], pr, L.get("kernel_images_read"))
    return [*lines, *kernels, *_clean_lines(L.get("clean_env"))]


def _clean_lines(ce: dict[str, Any] | None) -> list[str]:
    """`--clean-env`: the CUDA initialisation probe both ways and which layer it follows."""
    if ce is None:
        return []
    kept = " ".join(f"{k}={v}" for k, v in ce["clean_environment"].items())
    lines = ["", f"Clean environment (cuInit through libcuda.so.1; clean: env -i {kept})"]
    for r in ce["runs"]:
        lines.append(f"  {r['where']:<20} {r['said']}")
    torch = ce.get("torch_initialises")
    if torch is not None:
        said = {True: "initialises CUDA", False: "does NOT initialise CUDA"}
        lines.append(
            f"  torch                your environment: {said[torch['yours']]}; clean: "
            f"{said[torch['clean']]}"
        )
    lines.append(f"  follows: {ce['follows']}: {ce['text']}")
    lines.append(f"  next: {ce['next_step']}")
    return lines


def _kernel_lines(
    builds: list[dict[str, Any]], probe: dict[str, Any] | None = None, read: bool | None = None
) -> list[str]:
    """Layer 7: each build's GPU architectures against the GPUs, GPUs of one capability and
    one outcome as one line; without one, why none was read."""
    if not builds:
        return [f"7 kernel images      ({kernels_unread_why(probe, read)})"]
    lines = []
    for n, b in enumerate(builds):
        archs = " ".join(b["arch_list"]) or "none found"
        head = "7 kernel images      " if n == 0 else "                     "
        lines.append(f"{head}{b['build']}: {archs} ({b['source']})")
        groups: dict[tuple, list[dict]] = {}
        for g in b["gpus"]:
            key = (g["name"], g["compute_capability"], g["runs"], g["by"], g["jit"])
            groups.setdefault(key, []).append(g)
        for (name, cc, runs, by, jit), gs in groups.items():
            shown = gpus_named([g["index"] for g in gs])
            verdict = (
                "?"
                if runs is None
                else "NO KERNEL IMAGE"
                if not runs
                else f"PTX only ({by}, compiled at start)"
                if jit
                else f"ok ({by})"
            )
            lines.append(f"                       {shown} {name or '?'} ({cc}): {verdict}")
    return lines


def kernels_unread_why(probe: dict[str, Any] | None, read: bool | None) -> str:
    """Why no build's architectures are shown: the probed torch is a CPU build (it has none),
    did not say them, or did not answer; the mapped libraries were not read; nothing to read."""
    if probe is not None and is_cpu_build(probe):
        return (
            f"--probe-python's torch {probe['torch']} is a CPU-only build: it carries no GPU "
            "architectures"
        )
    if read is False:
        return (
            "not read: the mapped libtorch_cuda.so's architectures (its file not readable "
            "here, or recorded before they were read)"
        )
    if probe is not None and probe.get("torch"):
        return "--probe-python's torch did not say its architectures (torch._C._cuda_getArchFlags)"
    if probe is not None:
        return f"--probe-python did not answer: {probe.get('error') or 'no answer'}"
    return "a build's architectures: a mapped libtorch_cuda.so, or --probe-python PATH"


def _problem_lines(doc: dict[str, Any]) -> list[str]:
    """The problems, host layer first, what to check first, and the minimum-driver table."""
    lines = []
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
    return [*lines, "", table, f"  source: {doc['min_driver_table']['source']}"]


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
