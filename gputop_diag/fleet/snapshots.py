"""A node's columns on the fleet grid as the frozen snapshots a Monitor makes.

`fleet/read.py` sorts Prometheus' answers into one `GpuColumns` per GPU and one `NodeColumns`
per node (the gputop_diag_* series); `node_snapshots` turns them into a `Snapshot` per grid
point: GPU states (dcgm-exporter's units back in the model's), the host (our exporter's
figures, else node-exporter's), the GPU processes with their threads and helpers, Xid events.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import MISSING, dataclass, field, fields
from itertools import islice, repeat
from operator import attrgetter

from ..model import (
    MIB,
    ChildInfo,
    GpmMetrics,
    GpuProcess,
    GpuState,
    GpuStatic,
    HostState,
    MigInstance,
    PressureStall,
    ProcessInfo,
    Snapshot,
    SystemInfo,
    ThreadInfo,
    XidEvent,
)
from ..prometheus.dcgm_fields import MODEL_LABEL, MODEL_LABEL_LINT_CLEAN, decode_clock_reasons
from .query import Grid


@dataclass
class GpuColumns:
    """One GPU's dcgm-exporter columns by model target (`dcgm_fields.Field.target`)."""

    labels: dict[str, str]
    cols: dict[str, list[float | None]] = field(default_factory=dict)
    xids: list[tuple[int, int, int]] = field(default_factory=list)  # (k, xid, count)
    # MIG instances' columns by (GPU_I_ID, GPU_I_PROFILE), then by DCGM field name (MiB)
    mig: dict[tuple[int, str], dict[str, list[float | None]]] = field(default_factory=dict)


@dataclass
class NodeColumns:
    """A node's gputop_diag_* columns."""

    lost: dict[int, list] = field(default_factory=dict)
    xid_counts: dict[int, list] = field(default_factory=dict)
    host: dict[str, list] = field(default_factory=dict)
    pressure: dict[tuple[str, str], list] = field(default_factory=dict)
    gpu_mem: dict[tuple[int, int], list] = field(default_factory=dict)
    gpu_instance: dict[tuple[int, int], int] = field(default_factory=dict)  # (gpu, pid): GPU_I_ID
    threads: dict[tuple[int, int, str], list] = field(default_factory=dict)
    children: dict[tuple[int, int, str], list] = field(default_factory=dict)


def _last(col: list[float | None] | None) -> float | None:
    if not col:
        return None
    return next((v for v in reversed(col) if v is not None), None)


def _int(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def _static(idx: int, g: GpuColumns) -> GpuStatic:
    lab, c = g.labels, g.cols
    total = _last(c.get("fb_total"))
    return GpuStatic(
        index=idx,
        name=lab.get(MODEL_LABEL) or lab.get(MODEL_LABEL_LINT_CLEAN) or None,
        uuid=lab.get("UUID") or None,
        pci_bus_id=lab.get("pci_bus_id") or None,
        memory_total_bytes=None if total is None else int(total),
        power_limit_w=_last(c.get("static.power_limit_w")),
        max_sm_clock_mhz=_int(_last(c.get("static.max_sm_clock_mhz"))),
        max_mem_clock_mhz=_int(_last(c.get("static.max_mem_clock_mhz"))),
        gpm_supported=_last(c.get("gpm.sm_util_pct")) is not None,
        nvlink_supported=_last(c.get("nvlink_tx_kib_s")) is not None,
        mig_mode=True if g.mig else None,
    )


_GPM_ATTRS = ("sm_util_pct", "sm_occupancy_pct", "dram_bw_util_pct", "tensor_util_pct",
              "fp16_util_pct", "fp32_util_pct", "fp64_util_pct")  # fmt: skip
_INT_ATTRS = (
    "sm_clock_mhz", "mem_clock_mhz", "pstate", "pcie_gen", "pcie_width", "pcie_tx_kbps",
    "pcie_rx_kbps", "ecc_corrected", "ecc_uncorrected", "retired_pages_sbe",
    "retired_pages_dbe", "remapped_rows_corr", "remapped_rows_unc",
    "bar1_used_bytes", "bar1_total_bytes",
)  # fmt: skip
_FLOAT_ATTRS = (
    "util_gpu_pct", "util_mem_pct", "enc_util_pct", "dec_util_pct", "power_w", "temperature_c",
    "memory_temperature_c", "nvlink_tx_kib_s", "nvlink_rx_kib_s",
)  # fmt: skip
_BOOL_ATTRS = ("retired_pages_pending", "remap_failure", "remap_pending")
_MEMORY_ATTRS = ("mem_total_bytes", "mem_reserved_bytes", "mem_used_bytes", "mem_free_bytes")


def _defaults(cls) -> tuple[tuple[str, object], ...]:
    """(name, default) of each field, in the order the class takes them positionally (None
    for a field without a default: always given)."""
    return tuple(
        (
            f.name,
            f.default
            if f.default is not MISSING
            else (None if f.default_factory is MISSING else f.default_factory()),
        )
        for f in fields(cls)
    )


_GPU_FIELDS = _defaults(GpuState)


def _memory_columns(c: dict, n: int) -> tuple[list, list, list, list]:
    """(total, reserved, used, free) per point, in bytes: DCGM's total is used + free +
    reserved and its used leaves the reserve out, as the collector's does."""
    none = [None] * n
    used_c, free_c = c.get("fb_used", none), c.get("fb_free", none)
    res_c, total_c = c.get("fb_reserved", none), c.get("fb_total", none)
    total, reserved, used, free = [None] * n, [None] * n, [None] * n, [None] * n
    for k in range(n):
        u, fr, r, t = used_c[k], free_c[k], res_c[k], total_c[k]
        total[k] = t
        if u is None:
            continue
        if r is None and t is not None and fr is not None:
            r = max(0.0, t - u - fr)
        if t is None and fr is not None:
            total[k] = u + (r or 0.0) + fr
        reserved[k], used[k], free[k] = r, u, fr
    return total, reserved, used, free


def _mig_columns(idx: int, static: GpuStatic, mig: dict, n: int) -> list[tuple]:
    """The GPU's MIG instances at each point: memory per instance, named as NVML names them
    ("<model> MIG 1g.10gb") so the classifier reads the profile back."""
    none = [None] * n
    out: list[tuple] = []
    for k in range(n):
        row = []
        for j, ((gi, profile), cols) in enumerate(sorted(mig.items())):
            used = cols.get("DCGM_FI_DEV_FB_USED", none)[k]
            total = cols.get("DCGM_FI_DEV_FB_TOTAL", none)[k]
            free = cols.get("DCGM_FI_DEV_FB_FREE", none)[k]
            if total is None and used is not None and free is not None:
                total = used + free
            if used is None and total is None:
                continue
            row.append(
                MigInstance(
                    parent_index=idx,
                    mig_index=j,
                    gpu_instance_id=gi,
                    memory_total_bytes=None if total is None else int(round(total * MIB)),
                    memory_used_bytes=None if used is None else int(round(used * MIB)),
                    name=f"{static.name or 'GPU'} MIG {profile}" if profile else None,
                )
            )
        out.append(tuple(row))
    return out


def _gpu_states(idx: int, static: GpuStatic, c: dict, n: int, mig: dict | None = None) -> list:
    """The GPU's state at each grid point after the baseline (None where it did not report,
    and at point 0). Each state is built from its fields in order, positionally: a batch of
    64 nodes makes ~13,000 of them."""
    cols: dict[str, list | repeat] = {"index": repeat(idx, n), "static": repeat(static, n)}
    for a in _FLOAT_ATTRS:
        if a in c:
            cols[a] = c[a]
    for a in _INT_ATTRS:
        if a in c:
            cols[a] = each_value(round, c[a])
    for a in _BOOL_ATTRS:
        if a in c:
            cols[a] = each_value(bool, c[a])
    total, reserved, used, free = _memory_columns(c, n)
    for a, col in zip(_MEMORY_ATTRS, (total, reserved, used, free), strict=True):
        cols[a] = each_value(round, col)
    if "clock_reasons" in c:
        cols["clock_event_reasons"] = [_reasons(v) for v in c["clock_reasons"]]
    if any("gpm." + a in c for a in _GPM_ATTRS):  # GpmMetrics' first fields, in order
        gpm: list[GpmMetrics | None] = []
        last_row, last = None, None
        for row in zip(*(c.get("gpm." + a) or repeat(None, n) for a in _GPM_ATTRS), strict=False):
            if row != last_row:  # a GPU's figures often hold from step to step: one object
                last_row = row
                last = GpmMetrics(*row) if any(v is not None for v in row) else None
            gpm.append(last)
        cols["gpm"] = gpm
    if mig:
        cols["mig_instances"] = _mig_columns(idx, static, mig, n)
    columns = [cols.get(a) or repeat(d, n) for a, d in _GPU_FIELDS]
    util = c.get("util_gpu_pct") or repeat(None, n)
    out: list[GpuState | None] = [None]
    last_row, last = None, None
    rows = zip(*columns, strict=False)
    next(rows, None)  # point 0, the baseline before the window
    for k, (row, u) in enumerate(zip(rows, islice(util, 1, None), strict=False), 1):
        if used[k] is None and u is None and total[k] is None:
            out.append(None)
        else:
            if row != last_row:  # the same figures as the step before: the same (frozen) state
                last_row = row
                last = GpuState(*row)
            out.append(last)
    return out


def each_value(convert, col: list) -> list:
    """`convert` of each value, None kept (`round` of a float is the int nearest it); by
    `map` where every point has one (most columns)."""
    if None in col:
        return [None if v is None else convert(v) for v in col]
    return list(map(convert, col))


_REASONS: dict[float | None, tuple[str, ...]] = {}


def _reasons(mask: float | None) -> tuple[str, ...]:
    got = _REASONS.get(mask)
    if got is None:
        got = _REASONS[mask] = decode_clock_reasons(mask)
    return got


def _host_states(d: NodeColumns, ne: dict | None, n: int) -> list[HostState | None]:
    """Our exporter's host figures where the node has them, else node-exporter's."""
    none = [None] * n
    if d.host:
        cpu, cpus = d.host.get("host_cpu_percent", none), d.host.get("host_cpus", none)
        iowait = d.host.get("host_iowait_percent", none)
        psi = [(res, col, d.pressure.get((res, "full"))) for (res, kind), col in
               d.pressure.items() if kind == "some"]  # fmt: skip
    elif ne:
        cpu, cpus, iowait = ne.get("cpu_pct", none), ne.get("cpus", none), ne.get(
            "iowait_pct", none)  # fmt: skip
        psi = [
            (res, ne[f"psi_{res}_some"], ne.get(f"psi_{res}_full"))
            for res in ("cpu", "io", "memory")
            if f"psi_{res}_some" in ne
        ]
    else:
        return none
    out: list[HostState | None] = []
    for k in range(n):
        if cpu[k] is None:
            out.append(None)
            continue
        pressure = {
            res: PressureStall(some[k], None if full is None else full[k])
            for res, some, full in psi
            if some[k] is not None
        }
        out.append(
            HostState(
                cpu_count=_int(cpus[k]) or 0,
                cpu_pct=cpu[k],
                iowait_pct=iowait[k],
                pressure=pressure,
            )  # fmt: skip
        )
    return out


def _process_states(d: NodeColumns, n: int) -> list[tuple[tuple, tuple]]:
    """(GPU processes, process infos) per grid point. Equal values make one shared object
    (they are frozen): a process's memory and its threads' CPU repeat from step to step."""
    gpu_procs: list[list[GpuProcess]] = [[] for _ in range(n)]
    for (gpu, pid), col in sorted(d.gpu_mem.items()):
        gi = d.gpu_instance.get((gpu, pid))
        made: dict[float, GpuProcess] = {}
        for k, v in enumerate(col):
            if v is not None:
                p = made.get(v)
                if p is None:
                    p = made[v] = GpuProcess(
                        pid=pid,
                        gpu_index=gpu,
                        kind="compute",
                        used_memory_bytes=int(v),
                        gpu_instance_id=gi,
                    )
                gpu_procs[k].append(p)
    threads = _busiest(d.threads, n, ThreadInfo)
    children = _busiest(d.children, n, ChildInfo)
    empty: tuple = ()
    out: list[tuple[tuple, tuple]] = [(empty, empty)]  # point 0, the baseline: not a snapshot
    for k in range(1, n):
        pids = {p.pid for p in gpu_procs[k]}
        pids.update(pid for pid, rows in threads.items() if rows[k])
        pids.update(pid for pid, rows in children.items() if rows[k])
        infos = tuple(
            ProcessInfo(
                pid=pid,
                busiest_threads=threads[pid][k] if pid in threads else empty,
                children=children[pid][k] if pid in children else empty,
            )
            for pid in sorted(pids)
        )
        out.append((tuple(gpu_procs[k]), infos))
    return out


def _busiest(cols: dict[tuple[int, int, str], list], n: int, make) -> dict[int, list[tuple]]:
    """pid -> at each grid point, its threads' (or helpers') infos, the busiest first (in the
    columns' order where equal)."""
    by_pid: dict[int, list[tuple[int, str, list]]] = defaultdict(list)
    for (pid, tid, name), col in cols.items():
        by_pid[pid].append((tid, name, col))
    out: dict[int, list[tuple]] = {}
    for pid, items in by_pid.items():
        infos = [_infos(tid, name, col, make) for tid, name, col in items]
        rows = []
        # every column holds an info (or None where it has no value) at each of the n points
        for made in zip(*infos, strict=True):
            row = [info for info in made if info is not None]
            # busiest first; a stable sort keeps the columns' order among equal figures
            row.sort(key=_CPU, reverse=True)
            rows.append(tuple(row))
        out[pid] = rows
    return out


def _infos(tid: int, name: str, col: list, make) -> list:
    """A thread's info at each point (None where it did not report): one object per figure."""
    made: dict[float, object] = {}
    out = []
    for v in col:
        if v is None:
            out.append(None)
            continue
        info = made.get(v)
        if info is None:
            info = made[v] = make(tid, name, v)
        out.append(info)
    return out


_CPU = attrgetter("cpu_pct")


@dataclass
class NodeSnapshots:
    snapshots: list[Snapshot]
    statics: dict[int, GpuStatic]
    sources: tuple[str, ...]
    last_seen: float | None  # the newest grid point with data (real time)


def node_snapshots(
    hostname: str, gpus: dict[int, GpuColumns], d: NodeColumns, ne: dict | None, grid: Grid
) -> NodeSnapshots:
    """A Snapshot per grid point with data after the baseline (point 0), at the point's time."""
    n = grid.n
    statics = {idx: _static(idx, g) for idx, g in gpus.items()}
    per_gpu = {
        idx: _gpu_states(idx, statics[idx], g.cols, n, g.mig) for idx, g in sorted(gpus.items())
    }
    xids: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for idx, g in gpus.items():
        for k, xid, count in g.xids:
            xids[k] += [(xid, idx)] * count
    hosts = _host_states(d, ne, n)
    procs = _process_states(d, n)
    snapshots: list[Snapshot] = []
    last_seen = None
    for k in range(1, n):  # point 0 is the baseline before the window
        states = []
        for idx, col in per_gpu.items():
            lost = d.lost.get(idx)
            if lost is not None and lost[k]:
                states.append(GpuState(index=idx, static=statics[idx], lost=True))
            elif col[k] is not None:
                states.append(col[k])
        if not states:
            continue
        last_seen = t = grid.time(k)
        snapshots.append(
            Snapshot(
                timestamp=t,
                system=SystemInfo(hostname=hostname, gpu_count=len(states)),
                gpus=tuple(states),
                host=hosts[k],
                gpu_processes=procs[k][0],
                processes=procs[k][1],
                xid_events=tuple(
                    XidEvent(timestamp=t, xid=x, gpu_index=i, source="nvml") for x, i in xids[k]
                ),
            )
        )
    return NodeSnapshots(snapshots, statics, _sources(statics, d, ne), last_seen)


def _sources(statics: dict[int, GpuStatic], d: NodeColumns, ne) -> tuple[str, ...]:
    sources = {"dcgm"}
    if any(s.gpm_supported for s in statics.values()):
        sources.add("profiling")
    if any(s.nvlink_supported for s in statics.values()):
        sources.add("nvlink")
    if d.host:
        sources.add("gputop_diag")
    elif ne:
        sources.add("node_exporter")
    if d.gpu_mem:
        sources.add("processes")
    if d.threads or d.children:
        sources.add("threads")
    return tuple(sorted(sources))
