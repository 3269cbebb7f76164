"""The device mapping of this machine: one row per GPU and MIG instance, the CUDA ordinals of
this shell and of each GPU process, Slurm's view, and the findings.

Reads what NVML already put in the snapshot, then the files that need no NVML (and still work
when it is broken): `/proc/driver/nvidia/gpus/<bus>/information`, the PCI device's NUMA node and
local CPUs in `/sys/bus/pci/devices/<bus>/`, each GPU process's `/proc/<pid>/environ`, and
`scontrol show job -d` for the Slurm jobs named in those environments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..mapping.checks import (
    Finding,
    JobGres,
    ProcView,
    SlurmGpus,
    minor_findings,
    parse_id_list,
    parse_scontrol_gres,
    process_findings,
    slurm_gpus,
    slurm_visibility,
    visibility_findings,
)
from ..mapping.ordinals import BusId, Device, Visibility, devices_of, parse_bus_id, resolve
from ..mapping.owners import Holder, OwnerUse, owner_of, owner_uses
from ..model import Owner, Snapshot, formats
from ..sources import Sources

SCONTROL_TIMEOUT_S = 5.0
MAX_JOBS_ASKED = 8
# The two commands a user runs to confirm the mapping (the second, in a private runbook
# only: it prints the per-node layout).
QUERY_COMMAND = "nvidia-smi --query-gpu=index,uuid,pci.bus_id,name --format=csv"
LOOP_COMMAND = """for i in $(nvidia-smi --query-gpu=index --format=csv,noheader); do
  nvidia-smi -q -i "$i" | awk -v idx="$i" '
    /Product Name/ {sub(/.*: /,""); name=$0}
    /GPU UUID/     {sub(/.*: /,""); uuid=$0}
    /Bus Id/       {sub(/.*: /,""); bus=$0}
    /Minor Number/ {sub(/.*: /,""); minor=$0}
    END {printf("index=%s minor=%s dev=/dev/nvidia%s bus=%s uuid=%s name=%s\\n",
                idx, minor, minor, bus, uuid, name)}
  '
done"""
PUBLIC_PATTERN = (
    'publish the logic and the conclusion only, e.g. "cuda:0 of the job is the GPU Slurm '
    'assigned: checked by UUID"; never the per-node layout (bus ids, UUIDs, minor numbers)'
)
_ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "SLURM_JOB_ID", "SLURM_JOBID")


@dataclass(frozen=True)
class DeviceRow:
    key: str
    nvml_index: int
    mig_index: int | None
    name: str | None
    uuid: str | None
    bus: BusId | None
    minor: int | None
    numa_node: int | None
    cpu_affinity: str | None  # the PCI device's local CPUs, as the kernel lists them
    info: dict[str, str]  # /proc/driver/nvidia/gpus/<bus>/information
    pids: tuple[int, ...]
    lost: bool = False
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None

    @property
    def device_node(self) -> str | None:
        return None if self.minor is None else f"/dev/nvidia{self.minor}"


@dataclass(frozen=True)
class ProcessMapping:
    pid: int
    user: str | None
    name: str | None
    gpus: tuple[int, ...]  # NVML indices NVML lists it on
    env_readable: bool
    cvd: str | None
    order: str | None
    visibility: Visibility | None
    slurm: SlurmGpus | None
    cuda: tuple[tuple[int, str], ...]  # (CUDA ordinal, device key) as the process sees them
    owner: Owner | None = None  # who it runs for, from its cgroup (`collect/owners.py`)
    memory_bytes: int | None = None  # the GPU memory NVML says it holds, its GPUs together

    @property
    def slurm_job(self) -> str | None:
        """Its Slurm job: the one its environment names, else its cgroup's."""
        if self.slurm is not None and self.slurm.in_job:
            return self.slurm.job_id
        o = self.owner
        return o.slurm_job if o is not None and o.kind == "slurm" else None


@dataclass(frozen=True)
class DeviceMapping:
    timestamp: float
    hostname: str
    rows: tuple[DeviceRow, ...]
    shell: Visibility
    shell_slurm: SlurmGpus
    processes: tuple[ProcessMapping, ...]
    jobs: tuple[JobGres, ...]
    findings: tuple[Finding, ...]
    conclusions: tuple[str, ...]
    errors: tuple[str, ...] = field(default_factory=tuple)
    shell_known: bool = True  # False for a recording: no shell environment was recorded
    owners: tuple[OwnerUse, ...] = ()  # who holds the GPUs (`mapping/owners.py`)

    def row(self, key: str) -> DeviceRow | None:
        return next((r for r in self.rows if r.key == key), None)


def parse_information(text: str) -> dict[str, str]:
    """`Key: \\t value` lines of /proc/driver/nvidia/gpus/<bus>/information."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip():
            out[k.strip()] = v.strip()
    return out


def parse_environ(raw: str) -> dict[str, str]:
    out = {}
    for item in raw.split("\0"):
        k, sep, v = item.partition("=")
        if sep and k:
            out[k] = v
    return out


def _read(sources: Sources, path: str) -> str | None:
    try:
        return sources.procfs.read_text(path)
    except (OSError, ValueError):
        return None


def collect_mapping(
    snap: Snapshot, sources: Sources | None, environ: dict[str, str] | None = None
) -> DeviceMapping:
    """The mapping of `snap`; `sources` (None for a recording or the live view) adds the files
    NVML does not read; `environ` is this shell's environment (default: the sources')."""
    devices = devices_of(snap.gpus)
    by_gpu: dict[int, list[int]] = {}
    by_mig: dict[tuple, list[int]] = {}
    for p in snap.gpu_processes:
        by_gpu.setdefault(p.gpu_index, []).append(p.pid)
        if p.gpu_instance_id is not None:
            by_mig.setdefault((p.gpu_index, p.gpu_instance_id), []).append(p.pid)
    rows = []
    for g in snap.gpus:
        s = g.static
        bus = parse_bus_id(s.pci_bus_id)
        info: dict[str, str] = {}
        numa = cpus = None
        if sources is not None and bus is not None:
            text = _read(sources, f"/proc/driver/nvidia/gpus/{bus.procfs}/information")
            info = parse_information(text) if text else {}
            sysfs = f"/sys/bus/pci/devices/{bus.procfs}"
            node = (_read(sources, f"{sysfs}/numa_node") or "").strip()
            numa = int(node) if node.lstrip("-").isdigit() and int(node) >= 0 else None
            cpus = (_read(sources, f"{sysfs}/local_cpulist") or "").strip() or None
        minor = s.minor_number
        if minor is None and info.get("Device Minor", "").isdigit():
            minor = int(info["Device Minor"])
        rows.append(
            DeviceRow(
                f"gpu{g.index}",
                g.index,
                None,
                s.name or info.get("Model"),
                s.uuid or info.get("GPU UUID"),
                bus,
                minor,
                numa,
                cpus,
                info,
                tuple(sorted(set(by_gpu.get(g.index, ())))),
                g.lost,
            )
        )
        for m in g.mig_instances:
            rows.append(
                DeviceRow(
                    f"gpu{g.index}-mig{m.mig_index}",
                    g.index,
                    m.mig_index,
                    m.name,
                    m.uuid,
                    bus,
                    None,
                    numa,
                    cpus,
                    {},
                    tuple(sorted(set(by_mig.get((g.index, m.gpu_instance_id), ())))),
                    g.lost,
                    m.gpu_instance_id,
                    m.compute_instance_id,
                )
            )
    if environ is not None:
        env = dict(environ)
    else:
        env = dict(sources.environ) if sources is not None else {}
    shell_slurm = slurm_gpus(env)
    shell = slurm_visibility(
        resolve(devices, env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER")),
        shell_slurm,
        [d.key for d in devices],
    )
    procs = _processes(snap, sources, devices)
    job_ids = [j for j in [shell_slurm.job_id, *(p.slurm_job for p in procs)] if j]
    jobs, errors = _ask_scontrol(sources, list(dict.fromkeys(job_ids))[:MAX_JOBS_ASKED])
    host = snap.system.hostname
    findings = list(minor_findings([(r.nvml_index, r.minor) for r in rows if r.mig_index is None]))
    findings += visibility_findings("this shell", shell)
    views = []
    for p in procs:
        if p.visibility is not None:
            findings += visibility_findings(f"pid {p.pid}", p.visibility, (p.pid,))
        views.append(_proc_view(p, snap, devices, jobs, host))
    findings += process_findings(views, _job_of)
    holders = _holders(procs, snap, devices)
    mapping = DeviceMapping(
        snap.timestamp,
        host,
        tuple(rows),
        shell,
        shell_slurm,
        tuple(procs),
        tuple(jobs),
        tuple(findings),
        (),
        tuple(errors),
        owners=owner_uses(holders),
    )
    if sources is None and environ is None:
        mapping = replace(mapping, shell_known=False)
    return _with_conclusions(mapping, devices)


def _processes(snap: Snapshot, sources: Sources | None, devices: Sequence[Device]):
    gpus_of: dict[int, list[int]] = {}
    memory: dict[int, list[int]] = {}
    for gp in snap.gpu_processes:
        gpus_of.setdefault(gp.pid, []).append(gp.gpu_index)
        if gp.used_memory_bytes is not None:
            memory.setdefault(gp.pid, []).append(gp.used_memory_bytes)
    out = []
    for pid in sorted(gpus_of):
        info = snap.process(pid)
        env: dict[str, str] | None = None
        if sources is not None:
            raw = _read(sources, f"/proc/{pid}/environ")
            env = parse_environ(raw) if raw is not None else None
        elif info is not None and info.environ_readable:
            env = {}
            if info.cuda_visible_devices is not None:
                env["CUDA_VISIBLE_DEVICES"] = info.cuda_visible_devices
        vis = slurm = None
        cuda: tuple = ()
        if env is not None:
            slurm = slurm_gpus(env)
            vis = slurm_visibility(
                resolve(devices, env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER")),
                slurm,
                [d.key for d in devices],
            )
            if vis.order_known:
                cuda = tuple(enumerate(vis.visible))
        out.append(
            ProcessMapping(
                pid,
                info.user if info else None,
                info.name if info else None,
                tuple(sorted(set(gpus_of[pid]))),
                env is not None,
                env.get("CUDA_VISIBLE_DEVICES") if env else None,
                env.get("CUDA_DEVICE_ORDER") if env else None,
                vis,
                slurm,
                cuda,
                info.owner if info else None,
                sum(memory[pid]) if pid in memory else None,
            )
        )
    return out


def _ask_scontrol(sources: Sources | None, job_ids: list[str]) -> tuple[list[JobGres], list[str]]:
    if sources is None or not job_ids:
        return [], []
    jobs, errors = [], []
    for jid in job_ids:
        try:
            r = sources.run_command(["scontrol", "show", "job", "-d", jid], SCONTROL_TIMEOUT_S)
        except FileNotFoundError:
            return jobs, ["scontrol is not installed here: the jobs' GRES were not read"]
        except Exception as e:  # noqa: BLE001 - a timeout or a dead controller is said, not raised
            errors.append(f"scontrol show job -d {jid} failed: {type(e).__name__}")
            continue
        if r.returncode != 0:
            errors.append(f"scontrol show job -d {jid}: {(r.stderr or r.stdout).strip()[:120]}")
            continue
        jobs.extend(parse_scontrol_gres(r.stdout))
    return jobs, errors


def _allowed(
    p: ProcessMapping, devices: Sequence[Device], jobs, host: str
) -> tuple[tuple[int, ...], str] | None:
    """The NVML indices a process was given, and where that was read: its Slurm job's (the GPUs
    its CUDA_VISIBLE_DEVICES names by UUID, else the global ids of its environment, else what
    `scontrol show job -d` says for this node of the job its environment or cgroup names), else
    what its CUDA_VISIBLE_DEVICES names."""
    keys = {d.key: d for d in devices}
    job_id = p.slurm_job
    if job_id is not None:
        s = p.slurm
        if s is not None and s.in_job and s.uuid_entries and p.visibility is not None:
            # UUIDs name the same GPU inside and outside the job's device cgroup
            named = {keys[k].nvml_index for k in p.visibility.visible if k in keys}
            return tuple(sorted(named)), "named by UUID in the CUDA_VISIBLE_DEVICES Slurm set"
        if s is not None and s.in_job and s.global_ids is not None:
            return tuple(s.global_ids), "Slurm's global ids, from its environment"
        job = next((j for j in jobs if j.job_id == job_id), None)
        ids = job.gpus_on(host) if job is not None else None
        if ids is not None:
            return tuple(ids), "its Slurm job's GRES IDX, from scontrol show job -d"
    if p.visibility is not None and p.cvd is not None:
        v = p.visibility
        if not v.order_known:
            return None
        return tuple(sorted({keys[k].nvml_index for k in v.visible})), (
            "NVML index, from its environment"
        )
    return None


def _proc_view(p: ProcessMapping, snap: Snapshot, devices, jobs, host) -> ProcView:
    where = tuple(
        sorted(
            {
                (gp.gpu_index, gp.gpu_instance_id, gp.compute_instance_id)
                for gp in snap.gpu_processes
                if gp.pid == p.pid
            },
            key=str,
        )
    )
    allowed = _allowed(p, devices, jobs, host)
    kind, _, name = owner_of(_holder(p, ()))
    return ProcView(
        p.pid,
        p.user,
        p.gpus,
        tuple((g, gi, None) for g, gi, _ in where),
        None,
        p.visibility,
        allowed[0] if allowed else None,
        allowed[1] if allowed else "",
        kind,
        name,
    )


def _job_of(v: ProcView) -> str:
    """The owner a process runs for, as the findings name it (`mapping/owners.py`)."""
    return v.owner_name or (f"user {v.user}" if v.user else f"pid {v.pid}")


def _holder(p: ProcessMapping, devices: tuple) -> Holder:
    env_job = p.slurm.job_id if p.slurm is not None and p.slurm.in_job else None
    cuda = {key: k for k, key in p.cuda}
    return Holder(p.pid, p.user, p.owner, env_job, devices, p.memory_bytes, cuda)


def _holders(procs: Sequence[ProcessMapping], snap: Snapshot, devices) -> list[Holder]:
    """Each process with the devices NVML lists it on (a MIG instance by its GPU instance)."""
    keys = {(d.nvml_index, d.gpu_instance_id): d for d in devices if d.is_mig}
    out = []
    for p in procs:
        held = {}
        for gp in snap.gpu_processes:
            if gp.pid != p.pid:
                continue
            d = keys.get((gp.gpu_index, gp.gpu_instance_id))
            if gp.gpu_instance_id is not None and d is not None:
                held[d.key] = (d.key, gp.gpu_index, d.mig_index)
            else:
                held[f"gpu{gp.gpu_index}"] = (f"gpu{gp.gpu_index}", gp.gpu_index, None)
        out.append(_holder(p, tuple(held.values())))
    return out


def _with_conclusions(m: DeviceMapping, devices: Sequence[Device]) -> DeviceMapping:
    keys = {d.key: d for d in devices}
    out = []
    grouped: dict[tuple, list[ProcessMapping]] = {}
    s = m.shell_slurm
    if s.in_job:
        out.append(_slurm_conclusion("this shell's job", s, None, _named(m.shell, keys)))
    for p in m.processes:
        if p.slurm is not None and p.slurm.in_job:
            named = _named(p.visibility, keys)
            out.append(_slurm_conclusion(f"pid {p.pid}", p.slurm, p.gpus, named))
        elif p.visibility is not None and p.cvd is not None and p.visibility.order_known:
            visible = [keys[k] for k in p.visibility.visible if k in keys]
            seen = tuple(dict.fromkeys(_label(d) for d in visible))
            by_uuid = any(e.text.upper().startswith(("GPU-", "MIG-")) for e in p.visibility.entries)
            ok = set(p.gpus) <= {d.nvml_index for d in visible}
            grouped.setdefault((len(p.visibility.visible), seen, by_uuid, ok), []).append(p)
        elif not p.env_readable:
            out.append(
                f"pid {p.pid}: environment not readable (another user's process): its CUDA "
                f"ordinals cannot be computed; NVML places it on {_gpus(p.gpus)}"
            )
    lines = []
    for (n, seen, by_uuid, ok), ps in grouped.items():
        how = "named by UUID" if by_uuid else "indices in PCI order"
        who = (
            f"pid {ps[0].pid}"
            if len(ps) == 1
            else f"{len(ps)} processes (pid {_ids(p.pid for p in ps)})"
        )
        where = _gpus(g for p in ps for g in p.gpus)
        each = "it runs" if len(ps) == 1 else "each runs"
        verdict = (
            f"{each} on the GPUs it was given: checked by UUID"
            if ok
            else f"NOT only on the GPUs {'it was' if len(ps) == 1 else 'they were'} given"
        )
        if n == 0:
            lines.append(
                f"{who}: CUDA_VISIBLE_DEVICES leaves no CUDA device visible ({how}); NVML sees "
                f"{'it' if len(ps) == 1 else 'them'} on {where}: {verdict}"
            )
            continue
        lines.append(
            f"{who}: CUDA_VISIBLE_DEVICES makes {_span(n)} {_labels(seen)} ({how}); NVML sees "
            f"{'it' if len(ps) == 1 else 'them'} on {where}: {verdict}"
        )
    out[:0] = lines
    if not m.processes and not s.in_job and m.shell_known:
        v = m.shell
        order = "" if v.order_known else " in an order only CUDA knows (FASTEST_FIRST, mixed)"
        out.append(
            f"this shell sees {formats.count(len(v.visible), 'CUDA device')}{order}; "
            "NVML and nvidia-smi number GPUs by PCI bus id"
        )
    return replace(m, conclusions=tuple(out))


def _named(v: Visibility | None, keys: dict[str, Device]) -> tuple[int, ...] | None:
    """The NVML indices of the GPUs a CUDA_VISIBLE_DEVICES of UUIDs names, in its order."""
    if (
        v is None
        or not v.cvd
        or not all(e.text.upper().startswith(("GPU-", "MIG-")) for e in v.entries)
    ):
        return None
    return tuple(keys[k].nvml_index for k in v.visible if k in keys)


def _slurm_conclusion(
    who: str, s: SlurmGpus, on: Sequence[int] | None, named: Sequence[int] | None = None
) -> str:
    """cuda:k -> step-local CUDA_VISIBLE_DEVICES entry k -> Slurm's global id -> the NVML GPU of
    that index (Slurm numbers in PCI order) -> its UUID, against where NVML sees the process.
    `named`: the NVML indices of the GPUs CUDA_VISIBLE_DEVICES names by UUID (gres.conf
    `Flags=env_uuid`), where it does."""
    glob = s.global_ids
    if glob is not None and s.uuid_entries is not None:
        return _slurm_uuid_conclusion(who, s, glob, on, named or ())
    if glob is None:
        return (
            f"{who}: Slurm job {s.job_id} without SLURM_JOB_GPUS/SLURM_STEP_GPUS: its GPUs "
            "are read from `scontrol show job -d` (GRES IDX)"
        )
    local = parse_id_list(s.cvd)
    c = s.constrained
    cvd = f"CUDA_VISIBLE_DEVICES={s.cvd or '(unset)'}"
    if local is None:
        how = f"{cvd} (no index list to renumber)"
    elif c is True:
        how = f"{cvd} is step-local (renumbered: ConstrainDevices)"
    elif c is False:
        how = f"{cvd} holds the global ids (not renumbered)"
    elif tuple(local) == tuple(glob):
        how = f"{cvd} reads the same as step-local or global ids"
    else:
        how = f"{cvd}: the variables cannot tell step-local ids (ConstrainDevices) from global ids"
    chain = []
    if local is not None and (c is not None or tuple(local) == tuple(glob)):
        chain = [
            f"cuda:{k}=GPU {g}"
            for k in range(len(local))
            if (g := s.global_of_local(k)) is not None
        ]
    head = f"{who}: Slurm job {s.job_id} was given {_gpus(glob)} (global ids); {how}"
    if chain:
        head += "; " + ", ".join(chain)
    if on is None:
        return head
    if set(on) <= set(glob):
        n = "cuda:0 of the job is" if len(set(on)) == 1 else "the job's devices are"
        return f"{head}: {n} the GPUs Slurm assigned: checked by UUID"
    return f"{head}: NVML sees it on {_gpus(on)}, NOT only the GPUs Slurm assigned"


def _slurm_uuid_conclusion(
    who: str, s: SlurmGpus, glob: Sequence[int], on: Sequence[int] | None, named: Sequence[int]
) -> str:
    """A job whose CUDA_VISIBLE_DEVICES Slurm wrote as UUIDs: entry k is the k-th global id
    (Slurm writes both lists in one pass over the job's GPUs), and the UUID names the NVML
    device whatever NVML's index for it here."""
    uuids = s.uuid_entries or ()
    var = "SLURM_STEP_GPUS" if s.step_gpus is not None else "SLURM_JOB_GPUS"
    head = (
        f"{who}: Slurm job {s.job_id} was given {_gpus(glob)} (global ids, {var}); "
        f"CUDA_VISIBLE_DEVICES names {formats.count(len(uuids), 'GPU')} by UUID "
        "(gres.conf Flags=env_uuid)"
    )
    if len(uuids) != len(glob):
        return (
            f"{head}, but {var} lists {len(glob)}: the entries cannot be paired with Slurm's "
            "ids; each UUID still names its GPU"
        )
    head += "; " + ", ".join(f"cuda:{k}=GPU {g}" for k, g in enumerate(glob))
    if len(named) == len(glob) and list(named) != list(glob):
        head += (
            f"; NVML numbers them {_ids(named)} here (it sees only the job's GPUs, or gres.conf "
            "is not in PCI order): compared by UUID"
        )
    if on is None:
        return head
    if named and set(on) <= set(named):
        n = "cuda:0 of the job is" if len(set(on)) == 1 else "the job's devices are"
        return f"{head}: {n} the GPUs Slurm assigned: checked by UUID"
    return f"{head}: NVML sees it on {_gpus(on)}, NOT only the GPUs Slurm assigned"


def _ids(ids) -> str:
    ids = sorted(set(ids))
    return ", ".join(map(str, ids)) if ids else "none"


def _gpus(ids) -> str:
    """ "GPU 3", "GPUs 0, 1", "no GPU": a list of GPU ids with its noun."""
    ids = sorted(set(ids))
    if not ids:
        return "no GPU"
    return f"GPU{'' if len(ids) == 1 else 's'} {', '.join(map(str, ids))}"


def _span(n: int) -> str:
    return "cuda:0" if n == 1 else f"cuda:0..{n - 1}"


def _label(d: Device) -> str:
    if d.mig_index is None:
        return f"GPU {d.nvml_index}"
    profile = (d.name or "").split()[-1] if d.name else ""
    return f"GPU {d.nvml_index} MIG {d.mig_index}" + (f" ({profile})" if profile else "")


def _labels(labels: Sequence[str]) -> str:
    """ "GPU 0, 1, 2" (NVML indices) or "GPU 0 MIG 1 (3g.40gb)"."""
    if all(x.startswith("GPU ") and x[4:].isdigit() for x in labels):
        return "the NVML " + _gpus(int(x[4:]) for x in labels)
    return "the NVML " + ", ".join(labels)
