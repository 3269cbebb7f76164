"""`gputop-diag mapping`'s document and text: which physical GPU each CUDA device is, for this
shell and for every GPU process; Slurm's view; the findings; the commands to confirm it.

Pure functions over a device mapping as the collector builds it (`collect.mapping`'s
`DeviceMapping`: rows, this shell's visibility and Slurm variables, the processes, the Slurm
jobs, the findings, the conclusions); the command hands in the commands that confirm it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..model.codec import iso_time
from ..model.formats import count, size
from .checks import GLOBAL_CAVEAT, SlurmGpus
from .ordinals import Visibility
from .owners import OwnerUse

TIE_NOTE = (
    "FASTEST_FIRST on one GPU model: CUDA's order usually follows the PCI bus id, as shown "
    "(the usual behaviour, not promised by NVIDIA); CUDA_DEVICE_ORDER=PCI_BUS_ID makes it sure"
)
# What the information file of a GPU says that the table does not
# (/proc/driver/nvidia/gpus/<bus>/information).
INFO_KEYS = ("Video BIOS", "GPU Firmware", "GPU Excluded", "Bus Type", "Blacklisted", "IRQ")


# -- JSON ---------------------------------------------------------------------------------------
def mapping_document(
    m, schema: str, findings: list[dict[str, Any]], confirm: Mapping[str, str]
) -> dict[str, Any]:
    """The document of `schema`; `findings`: the findings' documents, `confirm`: the commands
    that confirm the mapping (query, private_loop, publish)."""
    keys = {r.key: r for r in m.rows}
    return {
        "schema": schema,
        "timestamp": iso_time(m.timestamp),
        "hostname": m.hostname,
        "devices": [_device_doc(m, r) for r in m.rows],
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
        "owners": [owner_doc(u) for u in m.owners],
        "findings": findings,
        "conclusions": list(m.conclusions),
        "confirm": dict(confirm),
        "errors": list(m.errors),
    }


OWNER_FIELDS = (
    "pod_uid",
    "pod_namespace",
    "pod_name",
    "qos",
    "container_id",
    "container_runtime",
    "container_name",
    "slurm_job",
    "slurm_step",
    "unit",
)


def owner_doc(u: OwnerUse, name: str | None = None, public: bool = False) -> dict[str, Any]:
    """One owner: `kind`, `name` (as shown), the GPUs (`nvml_index`, `mig_index`,
    `cuda_ordinals` its processes see the GPU as), `memory_bytes`; and where not `public`,
    `users`, `pids` and the cgroup's fields (`owner`). `name`: the name to show instead (a
    pseudonym)."""
    doc: dict[str, Any] = {
        "kind": u.kind,
        "name": u.name if name is None else name,
        "gpus": [
            {
                "device": g.key,
                "nvml_index": g.nvml_index,
                "mig_index": g.mig_index,
                "cuda_ordinals": list(g.cuda),
            }
            for g in u.gpus
        ],
        "memory_bytes": u.memory_bytes,
        "processes": len(u.pids),
    }
    if not public:
        o = u.owner
        doc["users"] = list(u.users)
        doc["pids"] = list(u.pids)
        doc["owner"] = (
            None if o is None else {"kind": o.kind, **{k: getattr(o, k) for k in OWNER_FIELDS}}
        )
    return doc


def owner_lines(rows: Sequence[tuple[str, str, str, int]]) -> list[str]:
    """(name, GPUs, memory, processes) per owner, as the text and the public text print them."""
    if not rows:
        return []
    width = min(40, max(len(r[0]) for r in rows) + 2)
    lines = ["", "Owners (who holds each GPU; GPU memory their processes hold):"]
    for name, gpus, memory, n in rows:
        lines.append(f"  {name:<{width}}{gpus}  {memory}  {n} process{'es' * (n != 1)}")
    return lines


def owner_row(u: OwnerUse, name: str | None = None) -> tuple[str, str, str, int]:
    return (u.name if name is None else name, u.gpus_text(), size(u.memory_bytes), len(u.pids))


def _device_doc(m, r) -> dict[str, Any]:
    return {
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


def _visibility(v: Visibility, keys: Mapping[str, Any]) -> dict[str, Any]:
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


# -- text ---------------------------------------------------------------------------------------
def render_text(m, confirm: Mapping[str, str], no_gpu_why: str | None = None) -> str:
    """The mapping as text; `confirm`: the commands that confirm it (query, private_loop,
    publish); `no_gpu_why` says why no GPU could be read (NVML missing, the driver not loaded),
    when that is why the table is empty."""
    lines = [
        f"Device mapping  {m.hostname}  {iso_time(m.timestamp)}",
        "NVML and nvidia-smi number GPUs by PCI bus id; CUDA numbers the devices "
        "CUDA_VISIBLE_DEVICES leaves, in CUDA_DEVICE_ORDER; /dev/nvidiaN is the minor number.",
        "",
        f"this shell: {_env_line(m.shell)}"
        if m.shell_known
        else "this shell: not part of a recording (the processes' variables are)",
        "",
    ]
    if m.rows:
        lines += _device_lines(m)
    else:
        lines.append(
            f"no GPU to map: {no_gpu_why}" if no_gpu_why else "no GPU to map (NVML lists none)"
        )
    lines += _process_lines(m)
    lines += owner_lines([owner_row(u) for u in m.owners])
    lines += _slurm_lines(m)
    if m.conclusions:
        lines += ["", "Conclusions:", *(f"  - {c}" for c in m.conclusions)]
    lines += ["", "Findings:" if m.findings else "Findings: none"]
    for f in m.findings:
        lines += [f"  [{f.severity}] {f.text}", f"    next: {f.next_step}"]
    lines += [f"  ! {e}" for e in m.errors]
    lines += [
        "",
        f"Confirm: {confirm['query']}",
        "  per-node layout (private runbook only):",
        *("    " + x for x in confirm["private_loop"].splitlines()),
        f"Publish: {confirm['publish']} (`gputop-diag mapping --sanitize`)",
    ]
    return "\n".join(lines)


def _device_lines(m) -> list[str]:
    """One row per GPU and MIG instance, the CUDA column's key, the information files."""
    lines = [
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
        extra = {k: v for k, v in r.info.items() if k in INFO_KEYS}
        lines.append(
            f"/proc/driver/nvidia/gpus/<bus>/information read for {count(len(info_rows), 'GPU')}; "
            f"GPU {r.nvml_index}: " + ", ".join(f"{k} {v}" for k, v in extra.items())
        )
    return lines


def _process_lines(m) -> list[str]:
    """Each GPU process: its variables and the CUDA devices they leave it."""
    if not m.processes:
        return []
    lines = [
        "",
        f"{'PID':>8}  {'USER':<10}{'GPU':<6}{'CUDA_VISIBLE_DEVICES':<24}{'ORDER':<15}CUDA DEVICES",
    ]
    for p in m.processes:
        v = p.visibility
        cvd = "?" if v is None else ("(unset)" if v.cvd is None else v.cvd or "(empty)")
        if len(cvd) > 23:
            cvd = cvd[:10] + "…" + cvd[-12:]
        order = "?" if v is None else v.order
        gpus = ",".join(map(str, p.gpus))
        lines.append(
            f"{p.pid:>8}  {(p.user or '?')[:10]:<10}{gpus:<6}{cvd:<24}{order:<15}{_cuda_of(v)}"
        )
    return lines


def _slurm_lines(m) -> list[str]:
    """This shell's Slurm variables, the jobs' GRES as `scontrol show job -d` gives them."""
    s = m.shell_slurm
    lines = ["", "Slurm:"]
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
    return lines


def _env_line(v: Visibility) -> str:
    cvd = "(unset: all)" if v.cvd is None else v.cvd or "(empty: none)"
    return f"CUDA_VISIBLE_DEVICES={cvd}  CUDA_DEVICE_ORDER={v.order}"


def _cuda_of(v: Visibility | None) -> str:
    """The CUDA devices a process's variables leave it, in words."""
    if v is None:
        return "environment not readable"
    if not v.visible:
        return "no CUDA device visible"
    if not v.order_known:
        if v.unknown_why:
            return f"{count(len(v.visible), 'candidate device')}: {v.unknown_why}"
        return f"{count(len(v.visible), 'device')}"
        ", order only CUDA knows (FASTEST_FIRST, mixed models)"
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


def _ids(ids) -> str:
    return "-" if ids is None else ",".join(map(str, ids)) or "(none)"
