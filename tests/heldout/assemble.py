"""A plan becomes 60 snapshots, one per second, oldest first, the way the collectors build them."""

from __future__ import annotations

from dataclasses import replace

from gputop_diag.model import (
    MIB,
    CollectorError,
    GpuProcess,
    MigInstance,
    OomKill,
    Snapshot,
    SystemInfo,
    XidEvent,
)

from .gpus import gpu_state, lost_state, static_for
from .host import HostSim
from .plan import Plan
from .timeline import N_BINS, SPAN_S, observe

DRIVERS = {  # by compute capability major: (driver, NVML's CUDA version)
    10: (("570.124.06", 12080), ("575.57.08", 12090)),
    9: (("535.183.01", 12020), ("550.127.05", 12040), ("560.35.03", 12060)),
    8: (("525.147.05", 12000), ("535.183.01", 12020), ("550.54.15", 12040)),
    7: (("470.256.02", 11040), ("525.147.05", 12000), ("535.183.01", 12020)),
}
XID_TEXT = {
    48: "An uncorrectable double bit error (DBE) has been detected on GPU",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row",
    79: "GPU has fallen off the bus.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    13: "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted",
    43: "Ch 00000010",
}


def snapshots(plan: Plan, t0: float, slow_ticks: list[int]) -> tuple[Snapshot, ...]:
    rng, model, n = plan.rng, plan.model, plan.n_gpus
    statics = [static_for(model, g, rng, plan.reading.mig) for g in range(n)]
    observed = [observe(tl, plan.acts) for tl in plan.timelines]
    quiet = None
    if any(i < 0 for i in plan.gpu_tl):
        quiet = observe({"idle": [1.0] * N_BINS}, {})
    scales = [rng.uniform(0.965, 1.035) for _ in range(n)]
    overhead = [rng.uniform(0.0, 64.0) for _ in range(n)]
    driver, cuda = rng.choice(DRIVERS[min(10, max(7, model.cc[0]))])
    system = SystemInfo(
        hostname=f"gpu-node{rng.randrange(1, 64):02d}",
        driver_version=driver,
        nvml_version=f"12.{driver}",
        cuda_driver_version=cuda,
        gpu_count=0 if plan.nvml_down else n,
    )
    host = HostSim(rng, plan.host, plan.procs + [p for p, _, _ in plan.foreign])
    xids: dict[int, list[XidEvent]] = {}
    for tick, xid, g in plan.xids:
        proc = next((p for p in plan.procs if g in p.gpus), None)
        xids.setdefault(tick, []).append(
            XidEvent(
                timestamp=t0 + tick + 0.4,
                xid=xid,
                gpu_index=g,
                source=rng.choice(("nvml", "kernel-log")),
                pci_bus_id=statics[g].pci_bus_id,
                pid=proc.pid if proc and xid in (13, 31, 43, 94, 95) else None,
                process_name=proc.name if proc and xid in (13, 31, 43, 94, 95) else None,
                message=XID_TEXT.get(xid, ""),
            )
        )
    ooms = [OomKill(t0 + k.timestamp + 0.5, k.pid, k.process_name, k.cgroup) for k in plan.ooms]
    out = []
    for k in range(SPAN_S):
        t = k + 1.0  # the tick covers (k, k + 1]; the snapshot is taken at its end
        ts = t0 + t + rng.uniform(-0.015, 0.015)
        live = [p for p in plan.procs if p.start_s <= t < p.gone_s]
        gpus, gprocs = [], []
        if not plan.nvml_down:
            for g in range(n):
                if g in plan.lost and k >= plan.lost[g]:
                    gpus.append(lost_state(statics[g]))
                    continue
                tl = plan.gpu_tl[g]
                tick = observed[tl][k] if tl >= 0 else quiet[k]
                holders = [p for p in live if g in p.gpus]
                job_mib = plan.mem[g].at(t) if holders else 0.0
                foreign = [(p, mib) for p, fg, mib in plan.foreign if fg == g]
                instances: tuple[MigInstance, ...] = ()
                if plan.mig:
                    instances = tuple(
                        MigInstance(
                            g,
                            i,
                            f"MIG-{statics[g].uuid[4:]}-{i}",
                            i + 1,
                            0,
                            size * MIB,
                            int((used + (job_mib if i == 0 else 0)) * MIB),
                            f"{model.name} MIG {name}",
                        )
                        for i, (name, size, used) in enumerate(plan.mig[g])
                    )
                    used_mib = model.reserved_mib + sum(
                        x.memory_used_bytes / MIB for x in instances
                    )
                else:
                    used_mib = model.reserved_mib + job_mib + overhead[g]
                    used_mib += sum(mib for _, mib in foreign)
                state = gpu_state(
                    statics[g],
                    model,
                    tick,
                    plan.reading,
                    rng,
                    used_mib,
                    scales[g],
                    instances,
                    plan.health.get(g),
                )
                if (k, g) in plan.glitches:
                    state = replace(
                        state, util_gpu_pct=None, util_mem_pct=None, gpm=None, util_samples=()
                    )
                gpus.append(state)
                for p in holders:
                    per_proc = job_mib / max(1, len(holders))
                    gprocs.append(_gpu_proc(plan, p.pid, g, per_proc))
                for p, mib in foreign:
                    gprocs.append(_gpu_proc(plan, p.pid, g, mib))
        infos, host_state, _ = host.tick(k, t)
        listed = {gp.pid for gp in gprocs}
        read = max(r for r in slow_ticks if r <= k) if any(r <= k for r in slow_ticks) else None
        read_at = None if read is None else t0 + read + 1.0
        errors: tuple[CollectorError, ...] = tuple(
            CollectorError(
                "nvml",
                "nvmlDeviceGetUtilizationRates: Timeout",
                "transient: the next tick usually answers",
                g,
                "NVMLError_Timeout",
            )
            for kk, g in plan.glitches
            if kk == k
        )
        if k in plan.dropped:
            continue
        if plan.nvml_down:
            errors = (
                CollectorError(
                    "nvml",
                    "NVML Shared Library Not Found: libnvidia-ml.so.1 is not installed",
                    "install the NVIDIA driver (or mount it into the container) and try again",
                    code="NVMLError_LibraryNotFound",
                ),
            )
        out.append(
            Snapshot(
                timestamp=ts,
                system=system,
                gpus=tuple(gpus),
                host=host_state,
                gpu_processes=tuple(gprocs),
                processes=tuple(i for i in infos if i.pid in listed),
                xid_events=tuple(xids.get(k, ())),
                errors=errors,
                scheduler_jobs=plan.scheduler_jobs if read is not None else (),
                kernel_ooms=tuple(
                    o for o in ooms if read_at is not None and o.timestamp <= read_at
                ),
                slow_sources_at=read_at,
            )
        )
    return tuple(out)


def _gpu_proc(plan: Plan, pid: int, g: int, mib: float) -> GpuProcess:
    if plan.mig:  # NVML gives no per-process memory on MIG
        return GpuProcess(pid, g, "compute", None, gpu_instance_id=1, compute_instance_id=0)
    return GpuProcess(pid, g, "compute", int(mib * MIB))
