"""The sections of the sanitized report (`report/build.py`), each built from the window's
snapshots as JSON-ready data, every value from the machine passed through the `Sanitizer`.

One function per section; `report/build.py` assembles them, checks each (failing closed) and renders
the Markdown (`report/markdown.py`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ..collect.mapping import QUERY_COMMAND, ProcessMapping, collect_mapping
from ..diagnose.measured import process_memory
from ..diagnose.types import Diagnosis
from ..driver.compat import (
    FabricFacts,
    facts_from_snapshot,
    judge_chain,
    module_state,
    status_of,
    version_tuple,
)
from ..driver.kernels import BuildArchs, BuildOnGpus, GpuCapability, judge_builds, kernel_problems
from ..model import MIB, Snapshot, formats
from ..model.stats import median, percentile, slope_per_s
from ..sanitize.sanitizer import Sanitizer
from ..xid.catalog import CAUSES, entry
from .mapping import public_doc as mapping_public_doc

MAX_PROCESSES = 16  # the busiest by GPU memory; the rest counted
SPARK_WIDTH = 30
SPARK = "▁▂▃▄▅▆▇█"
COMMAND_MAX = 90
# What the report says to run to confirm the mapping privately (docs/mapping.md).
MAPPING_COMMAND = QUERY_COMMAND
# This shell's variables the mapping section shows (sanitized).
SHELL_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "GPU_DEVICE_ORDINAL",
    "SLURM_GPUS_ON_NODE",
)


# -- helpers -----------------------------------------------------------------------------------


def _r(v: float | None, nd: int = 1) -> float | None:
    return None if v is None else round(float(v), nd)


_gib = formats.gib_number


def gpu_list(indices) -> str:
    """0, 1, 2, 5 → "0–2, 5"."""
    xs = sorted(set(indices))
    out, i = [], 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        out.append(
            str(xs[i]) if i == j else f"{xs[i]}, {xs[j]}" if j == i + 1 else f"{xs[i]}–{xs[j]}"
        )
        i = j + 1
    return ", ".join(out)


def sparkline(values: Sequence[float | None], width: int = SPARK_WIDTH) -> str:
    """Percent values on a fixed 0–100 scale, averaged into at most `width` cells; a cell
    without a value is a space."""
    if not values:
        return ""
    n = min(width, len(values))
    cells = []
    for k in range(n):
        chunk = [
            v for v in values[k * len(values) // n : (k + 1) * len(values) // n] if v is not None
        ]
        if not chunk:
            cells.append(" ")
            continue
        avg = max(0.0, min(100.0, sum(chunk) / len(chunk)))
        cells.append(SPARK[min(len(SPARK) - 1, int(avg / 100.0 * len(SPARK)))])
    return "".join(cells)


def _series(snaps: Sequence[Snapshot], index: int, get: Callable) -> list[float | None]:
    out = []
    for s in snaps:
        g = s.gpu(index)
        out.append(None if g is None or g.lost else get(g))
    return out


# -- sections ----------------------------------------------------------------------------------


def machine(last: Snapshot, s: Sanitizer) -> dict[str, Any]:
    models = Counter(g.static.name or "unknown model" for g in last.gpus)
    sysinfo = last.system
    return {
        "host": s.hostname(sysinfo.hostname),
        "gpu_count": len(last.gpus),
        "gpu_models": [{"model": s.text(m), "count": n} for m, n in models.items()],
        "mig_enabled": any(g.static.mig_mode for g in last.gpus),
        "mig_instances": sum(len(g.mig_instances) for g in last.gpus),
        "driver_version": s.text(sysinfo.driver_version),
        "nvml_version": s.text(sysinfo.nvml_version),
        "driver_max_cuda": sysinfo.driver_max_cuda,
    }


def memory(snaps: Sequence[Snapshot], s: Sanitizer) -> dict[str, Any]:
    last = snaps[-1]
    times = [x.timestamp for x in snaps]
    users_of: dict[int, str | None] = {p.pid: p.user for p in last.processes}
    by_user: dict[str | None, dict[str, Any]] = {}
    rows = []
    for g in last.gpus:
        procs = [p for p in last.gpu_processes if p.gpu_index == g.index]
        held = [p.used_memory_bytes for p in procs if p.used_memory_bytes is not None]
        for p in procs:
            u = users_of.get(p.pid)
            rec = by_user.setdefault(u, {"bytes": 0, "gpus": set()})
            rec["bytes"] += p.used_memory_bytes or 0
            rec["gpus"].add(g.index)
        used = _series(snaps, g.index, lambda x: x.mem_used_bytes)
        present = [u for u in used if u is not None]
        slope = slope_per_s(times, [None if u is None else u / MIB for u in used])
        total = g.mem_total_bytes
        # what processes can use: `used` leaves the driver's reserve out (model.GpuState)
        usable = None if total is None else total - (g.mem_reserved_bytes or 0)
        now = g.mem_used_bytes or 0
        proc_bytes = sum(held) if held and len(held) == len(procs) else None
        unattributed = None
        if g.mem_used_bytes is not None and proc_bytes is not None:
            unattributed = max(0, g.mem_used_bytes - proc_bytes)
        rows.append(
            {
                "gpu": g.index,
                "lost": g.lost,
                "total_gib": _gib(total),
                "used_gib": _gib(g.mem_used_bytes),
                "used_pct": _r(g.mem_used_pct),
                "reserved_gib": _gib(g.mem_reserved_bytes),
                "processes_gib": _gib(proc_bytes),
                "processes": len(procs),
                "unattributed_gib": _gib(unattributed),
                "headroom_gib": _gib(
                    None if usable is None or g.mem_used_bytes is None else usable - now
                ),
                "lowest_headroom_gib": _gib(
                    None if usable is None or not present else usable - max(present)
                ),
                "trend_mib_per_min": _r(None if slope is None else slope * 60.0, 0),
                "mig": [
                    {
                        "instance": f"{g.index}:{m.mig_index}",
                        "profile": s.text((m.name or "").split()[-1]) if m.name else None,
                        "total_gib": _gib(m.memory_total_bytes),
                        "used_gib": _gib(m.memory_used_bytes),
                    }
                    for m in g.mig_instances
                ],
            }
        )
    holders = [
        {"user": s.user(u) if u else None, "gib": _gib(v["bytes"]), "gpus": sorted(v["gpus"])}
        for u, v in sorted(by_user.items(), key=lambda kv: -kv[1]["bytes"])
    ]
    return {"gpus": rows, "by_user": holders}


def utilization(snaps: Sequence[Snapshot]) -> dict[str, Any]:
    rows = []
    for g in snaps[-1].gpus:
        busy = _series(snaps, g.index, lambda x: x.util_gpu_pct)
        sm = _series(snaps, g.index, lambda x: x.gpm.sm_util_pct if x.gpm else None)
        rows.append(
            {
                "gpu": g.index,
                "busy_median_pct": _r(median(busy), 0),
                "busy_p95_pct": _r(percentile(busy, 95), 0),
                "busy_min_pct": _r(percentile(busy, 0), 0),
                "busy_sparkline": sparkline(busy) if any(v is not None for v in busy) else "",
                "memory_controller_median_pct": _r(
                    median(_series(snaps, g.index, lambda x: x.util_mem_pct)), 0
                ),
                "sm_active_median_pct": _r(median(sm), 0),
                "power_median_pct_of_limit": _r(
                    median(_series(snaps, g.index, lambda x: x.power_pct_of_limit)), 0
                ),
                "sm_clock_median_pct_of_max": _r(
                    median(_series(snaps, g.index, lambda x: x.sm_clock_pct_of_max)), 0
                ),
            }
        )
    return {"samples": len(snaps), "gpus": rows}


def throttle(snaps: Sequence[Snapshot]) -> dict[str, Any]:
    """Share of samples each clock-event reason was set, per GPU (GPU idle left out), with the
    GPUs that share the same figures grouped."""
    groups: dict[tuple, list[int]] = {}
    for g in snaps[-1].gpus:
        seen = [x for x in (s.gpu(g.index) for s in snaps) if x is not None and not x.lost]
        counts: Counter[str] = Counter()
        for x in seen:
            counts.update(r for r in x.clock_event_reasons if r != "gpu_idle")
        shares = (
            tuple(sorted((r, round(100 * n / len(seen))) for r, n in counts.items()))
            if seen
            else ()
        )
        groups.setdefault(shares, []).append(g.index)
    return {
        "groups": [
            {"gpus": gpus, "reasons": [{"reason": r, "share_pct": p} for r, p in shares]}
            for shares, gpus in sorted(groups.items(), key=lambda kv: kv[1])
        ]
    }


def xid(snaps: Sequence[Snapshot]) -> dict[str, Any]:
    start = snaps[0].timestamp
    codes: dict[int, dict[str, Any]] = {}
    for s in snaps:
        for x in s.xid_events:
            e = codes.setdefault(
                x.xid,
                {
                    "count": 0,
                    "gpus": set(),
                    "first": x.timestamp,
                    "last": x.timestamp,
                    "sources": set(),
                },
            )
            e["count"] += 1
            if x.gpu_index is not None:
                e["gpus"].add(x.gpu_index)
            e["first"] = min(e["first"], x.timestamp)
            e["last"] = max(e["last"], x.timestamp)
            e["sources"].add(x.source)
    rows = []
    for code, e in sorted(codes.items(), key=lambda kv: (-kv[1]["count"], kv[0])):
        info = entry(code)
        rows.append(
            {
                "xid": code,
                "name": info.name,
                "meaning": info.meaning,
                "cause": ", ".join(CAUSES[c] for c in info.causes) or None,
                "severity": info.severity,
                "count": e["count"],
                "gpus": sorted(e["gpus"]),
                "first_s": round(e["first"] - start, 1),
                "last_s": round(e["last"] - start, 1),
                "sources": sorted(e["sources"]),
                "question": info.question,
                "action": info.step,
            }
        )
    return {"events": sum(r["count"] for r in rows), "codes": rows}


def driver_chain(
    last: Snapshot, diag: Diagnosis, s: Sanitizer, fabric: FabricFacts | None = None
) -> dict[str, Any]:
    """The driver -> CUDA runtime chain as `gputop-diag driver` judges it (the snapshot carries
    the chain: kernel module, library on disk, the runtimes processes loaded; `fabric`, on
    NVSwitch systems, the fabric manager from the health checks); before the chain was read,
    what NVML said."""
    sysinfo = last.system
    facts = facts_from_snapshot(last)
    if facts is None:  # a recording made before the chain was read, or one out of date
        return _driver_from_nvml(last, diag, s)
    chain = last.driver_chain
    dmax = f"{facts.driver_max[0]}.{facts.driver_max[1]}" if facts.driver_max else None
    runtimes = sorted(
        {rt for p in facts.processes if (rt := p.framework_cuda or p.runtime)},
        key=lambda v: version_tuple(v) or (),
    )
    layers = [
        {
            "layer": "kernel module",
            "version": s.text(module_state(facts)) if facts.module_loaded else module_state(facts),
            "read_from": "/proc/driver/nvidia/version",
        },
        *(
            []
            if fabric is None
            else [
                {
                    "layer": "fabric manager",
                    "version": fabric.state,
                    "read_from": "systemctl, nv-fabricmanager --version, NVML's fabric state",
                }
            ]
        ),
        {
            "layer": "NVML library",
            "version": s.text(facts.library_version),
            "read_from": "libnvidia-ml.so on disk, NVML",
        },
        {
            "layer": "driver's CUDA limit",
            "version": dmax,
            "read_from": "NVML" if sysinfo.cuda_driver_version else "the minimum-driver table",
        },
        {
            "layer": "CUDA runtimes loaded",
            "version": ", ".join(runtimes) or None,
            "read_from": f"/proc/<pid>/maps of {chain.scanned if chain else 0} processes",
        },
    ]
    builds = probed_builds(last)
    if builds:  # the chain's last layer, from the probes' arch lists (the diagnosis's too)
        layers.append(
            {
                "layer": "kernel images",
                "version": "; ".join(" ".join(b.build.arch_list) for b in builds),
                "read_from": "the probe's torch._C._cuda_getArchFlags() against NVML's "
                "compute capability",
            }
        )
    if facts.kernels or facts.kernels_read is False:  # the mapped libtorch_cuda.so's
        layers.append(
            {
                "layer": "kernel images" + (" (mapped)" if builds else ""),
                "version": "; ".join(" ".join(b.build.arch_list) for b in facts.kernels)
                or "not read",
                "read_from": "libtorch_cuda.so .nv_fatbin against NVML's compute capability",
            }
        )
    problems = (*judge_chain(facts, fabric), *kernel_problems(builds))
    status = status_of(problems)
    out = [
        {
            "layer": p.layer,
            "severity": p.severity,
            "code": p.code,
            "text": s.text(p.text),
            "error_text": s.text(p.error_text),
            "next_step": s.text(p.next_step),
            "processes": len(p.pids),
        }
        for p in problems
    ]
    if out:
        first = out[0]
        verdict = f"{status}: {first['text']}"
        next_step = first["next_step"]
    elif dmax:
        verdict = f"whole: the driver runs CUDA up to {dmax}" + (
            f" and each runtime loaded ({', '.join(runtimes)}) fits it" if runtimes else ""
        )
        next_step = (
            "nothing to fix; a framework built for a CUDA newer than "
            f"{dmax} would fail to create a context here"
        )
    else:
        verdict = "the driver did not say which CUDA version it supports"
        next_step = "`nvidia-smi` shows the driver's CUDA version in its header"
    return {
        "layers": layers,
        "status": status,
        "verdict": verdict,
        "next_step": next_step,
        "problems": out,
        "findings": [p["text"] for p in out],
    }


def probed_builds(last: Snapshot) -> tuple[BuildOnGpus, ...]:
    """Each torch build the probed processes run (`arch_list` of their hello) against the GPUs
    they are on (`kernels.judge_builds`): where one lacks a kernel image, the report's chain
    says so as `gputop-diag driver` does from the library's .nv_fatbin."""
    rows = {r.pid: r for r in process_memory(last, {p.pid for p in last.probes})}
    by_build: dict[tuple, list[int]] = {}
    for p in last.probes:
        if p.arch_list and p.pid in rows and rows[p.pid].compute_capability is not None:
            by_build.setdefault((p.arch_list, p.torch_cuda), []).append(p.pid)
    out: list[BuildOnGpus] = []
    for (archs, cuda), pids in by_build.items():
        gpus = {
            g: GpuCapability(g, rows[pid].gpu_name, rows[pid].compute_capability)
            for pid in pids
            for g in rows[pid].gpus
        }
        who = f"pid {', '.join(map(str, pids[:4]))}" + (" ..." if len(pids) > 4 else "")
        source = "the probe's torch._C._cuda_getArchFlags()"
        build = BuildArchs(who, archs, source, tuple(pids), cuda=cuda)
        out += judge_builds([build], [gpus[g] for g in sorted(gpus)])
    return tuple(out)


def _driver_from_nvml(last: Snapshot, diag: Diagnosis, s: Sanitizer) -> dict[str, Any]:
    sysinfo = last.system
    nvml_error = next((e for e in last.errors if e.source == "nvml" and e.gpu_index is None), None)
    layers = [
        {"layer": "kernel driver", "version": s.text(sysinfo.driver_version), "read_from": "NVML"},
        {"layer": "NVML library", "version": s.text(sysinfo.nvml_version), "read_from": "NVML"},
        {"layer": "driver's CUDA limit", "version": sysinfo.driver_max_cuda, "read_from": "NVML"},
    ]
    findings = [
        s.text(a.text)
        for a in (*diag.faults, *diag.alerts)
        if a.kind.startswith(("driver", "nvml", "cuda")) or "mismatch" in a.kind
    ]
    if nvml_error is not None:
        verdict = f"broken at the host layer: {s.text(nvml_error.message)}"
        next_step = s.text(nvml_error.next_step)
    elif findings:
        verdict = "broken: " + "; ".join(findings)
        next_step = "debug from the host layer upward: driver, then the runtime"
    elif sysinfo.driver_max_cuda:
        verdict = (
            f"the driver answers and runs CUDA up to {sysinfo.driver_max_cuda}; the runtimes "
            "the processes loaded were not read in this recording"
        )
        next_step = (
            "in the job's environment compare "
            "`python -c 'import torch; print(torch.version.cuda)'` "
            f"with {sysinfo.driver_max_cuda}"
        )
    else:
        verdict = "the driver did not say which CUDA version it supports"
        next_step = "`nvidia-smi` shows the driver's CUDA version in its header"
    return {"layers": layers, "verdict": verdict, "next_step": next_step, "findings": findings}


# The conclusion per group of processes (verdict -> words); "one": consistent, one GPU named.
_MAPPING_TEXT = {
    "unreadable": "environment not readable (another user's process): NVML's process list "
    "is the only evidence",
    "unset": "CUDA_VISIBLE_DEVICES unset, so each sees every GPU; NVML places them on {where}",
    "one": "{its} cuda:0 is the GPU NVML places it on, checked by {how}",
    "consistent": "CUDA_VISIBLE_DEVICES names {n} GPUs by {how}; NVML places each process on "
    "a GPU it names, checked by {how}",
    "outside": "NVML places them on a GPU their CUDA_VISIBLE_DEVICES does not name (checked "
    "by {how}): the job uses a GPU it was not given",
    "unknown": "CUDA_VISIBLE_DEVICES names {devices} in an order only CUDA knows: not checked",
}


def mapping(last: Snapshot, environ: dict[str, str], s: Sanitizer) -> dict[str, Any]:
    """The mapping logic and its conclusion as `gputop-diag mapping --sanitize` gives them
    (`collect_mapping` and its public document), with the processes grouped by user; no
    per-node layout."""
    m = collect_mapping(last, None, environ)
    public = mapping_public_doc(m, s)
    nvml_of = {r.key: r.nvml_index for r in m.rows}
    groups: dict[tuple, list[ProcessMapping]] = {}
    for p in m.processes:
        user = s.user(p.user) if p.user else "another user"
        v = p.visibility
        if not p.env_readable or v is None:
            key = (user, "unreadable", "", 0)
        elif v.cvd is None:
            key = (user, "unset", "", 0)
        else:
            how = (
                "UUID"
                if any(e.text.upper().startswith(("GPU-", "MIG-")) for e in v.entries)
                else "index"
            )
            named = {nvml_of[k] for k in v.visible if k in nvml_of}
            if not v.order_known:
                verdict = "unknown"
            else:
                verdict = "consistent" if set(p.gpus) <= named else "outside"
            key = (user, verdict, how, len(v.visible))
        groups.setdefault(key, []).append(p)
    checks = []
    for (user, verdict, how, n_named), ps in groups.items():
        who = f"{len(ps)} process{'es' if len(ps) > 1 else ''} of {user}"
        gpus = sorted({i for p in ps for i in p.gpus})
        where = f"GPU {gpu_list(gpus)}"
        words = _MAPPING_TEXT["one" if verdict == "consistent" and n_named == 1 else verdict]
        its = "its" if len(ps) == 1 else "each one's"
        text = f"{who} on {where}: " + words.format(
            how=how, n=n_named, devices=formats.count(n_named, "device"), where=where, its=its
        )
        if any(p.visibility is not None and p.visibility.invalid for p in ps):
            text += "; an invalid entry in CUDA_VISIBLE_DEVICES hides every entry after it"
        checks.append(
            {
                "processes": len(ps),
                "user": user,
                "gpus": gpus,
                "verdict": verdict,
                "checked_by": how or None,
                "text": text,
            }
        )
    shell = {
        k: (s.cuda_visible_devices(v) if k.endswith("VISIBLE_DEVICES") else s.text(v))
        for k, v in sorted(environ.items())
        if k in SHELL_VARS
    }
    return {
        "logic": public["logic"],
        "conclusions": public["conclusions"],
        "findings": public["findings"],
        "checks": checks,
        "this_shell": shell,
        "confirm_privately": MAPPING_COMMAND,
        "publish": public["confirm"]["publish"],
    }


def processes(last: Snapshot, s: Sanitizer) -> dict[str, Any]:
    rows = []
    busiest = sorted(last.gpu_processes, key=lambda p: (-(p.used_memory_bytes or 0), p.pid))
    shown = sorted(busiest[:MAX_PROCESSES], key=lambda p: (p.gpu_index, p.pid))
    for p in shown:
        info = last.process(p.pid)
        if info is not None and info.cmdline:
            command = " ".join(s.argv(info.cmdline, name=info.name) or [])
        elif info is not None and info.name:
            command = f"{s.process_name(info.name)} (arguments not readable)"
        else:
            command = "(not readable)"
        rows.append(
            {
                "gpu": p.gpu_index,
                "pid": p.pid,
                "user": s.user(info.user) if info and info.user else None,
                "owner": s.owner_label(info.owner) if info is not None else None,
                "kind": p.kind,
                "gpu_memory_gib": _gib(p.used_memory_bytes),
                "cpu_pct": _r(info.cpu_pct if info else None, 0),
                "command": command[:COMMAND_MAX] + ("…" if len(command) > COMMAND_MAX else ""),
            }
        )
    return {"processes": rows, "more": len(busiest) - len(shown)}


def scheduler(last: Snapshot, s: Sanitizer) -> dict[str, Any]:
    return {
        "jobs": [
            {
                "job": s.job(j.job_id),
                "name": s.pseudonym("job_name", j.name) if j.name else None,
                "user": s.user(j.user),
                "state": s.text(j.state),
                "reason": s.text(j.reason),
                "wait_s": _r(j.wait_s, 0),
                "time_used_s": _r(j.time_used_s, 0),
                "time_left_s": _r(j.time_left_s, 0),
            }
            for j in last.scheduler_jobs or ()
        ],
        "queried": last.scheduler_jobs is not None,
    }


def errors(last: Snapshot, s: Sanitizer) -> dict[str, Any]:
    return {
        "errors": [
            {
                "source": e.source,
                "gpu": e.gpu_index,
                "message": s.text(e.message),
                "next_step": s.text(e.next_step),
            }
            for e in last.errors
        ]
    }
