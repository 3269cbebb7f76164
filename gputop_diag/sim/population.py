"""What lives on the simulated machine: its GPUs, its processes and threads, its kernel log.

Built once from a scenario; the engine (`machine.py`) then only evaluates figures over time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from .profiles import profiles_of

MIB = 1024**2
SITE = "/opt/conda/envs/train/lib/python3.11/site-packages"
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)  # an HGX H100 board's GPU buses
_MIG_GI_IDS = (1, 5, 13, 9, 10, 11, 12)  # A100 GPU-instance ids of the placements used
OMP_THREADS = 6  # OpenMP workers created after torch renamed the main thread: they inherit it
XID_HORIZON_S = 86400.0  # looping scenarios repeat their Xids for a day


def _uuid(seed: str) -> str:
    h = hashlib.md5(seed.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass
class SimMig:
    profile: str  # "3g.40gb"
    mib: int
    uuid: str
    gi_id: int
    ci_id: int = 0


@dataclass
class SimGpu:
    index: int
    model: dict
    uuid: str
    serial: str
    bus: tuple[int, int, int]  # domain, bus, device
    minor: int
    mig: list[SimMig] = field(default_factory=list)

    @property
    def bus_id(self) -> str:
        """NVML's form: 00000000:3B:00.0."""
        d, b, dev = self.bus
        return f"{d:08X}:{b:02X}:{dev:02X}.0"

    @property
    def proc_bus_id(self) -> str:
        """/proc/driver/nvidia/gpus/ form: 0000:3b:00.0."""
        d, b, dev = self.bus
        return f"{d:04x}:{b:02x}:{dev:02x}.0"

    @property
    def xid_pci(self) -> str:
        """The kernel log's form: 0000:3b:00 (no function)."""
        d, b, dev = self.bus
        return f"{d:04x}:{b:02x}:{dev:02x}"

    @property
    def total_bytes(self) -> int:
        return self.model["mem_mib"] * MIB


@dataclass
class SimThread:
    tid: int
    name: str
    role: str  # "main", "pin", "autograd", "nccl", "omp", "worker", "other"
    cum_s: float = 0.0  # CPU seconds so far


@dataclass
class SimProc:
    pid: int
    ppid: int
    user: str
    name: str
    cmdline: tuple[str, ...]
    role: str  # "rank", "worker", "launcher", "cotenant", "host", "small"
    gpu: int | None = None
    mig: int | None = None  # MIG instance index on its GPU
    mem_mib: float | None = None  # fixed GPU memory (co-tenants)
    denied: bool = False  # another user's process: cmdline, environ, threads hidden
    environ: dict = field(default_factory=dict)
    threads: list[SimThread] = field(default_factory=list)
    children: list[int] = field(default_factory=list)
    create_time: float = 0.0
    cpu_fixed: float | None = None
    cuda_runtime: str | None = None  # the libcudart major it mapped ("12", "13")
    torch_cuda: str = "12.8"
    worker_slot: int = 0  # dataloader workers: active while slot < the phase's worker count
    owner: dict | None = None  # its job's `owner` (sim/owners.py): Slurm job, pod, container

    @property
    def cpu_s(self) -> float:
        return sum([th.cum_s for th in self.threads])


def build_gpus(name: str, spec: dict, model: dict, n: int) -> list[SimGpu]:
    gpus = []
    for i in range(n):
        bus = (i // 64, _HGX_BUSES[i] if n <= 8 else 0x10 + (i % 64) * 3, 0)
        g = SimGpu(
            i,
            model,
            "GPU-" + _uuid(f"{name}-gpu-{i}"),
            f"{model['serial_prefix']}{(i * 7919) % 100000:06d}",
            bus,
            i ^ 2 if n % 4 == 0 else i,  # minor numbers need not follow NVML order
        )
        for k, (prof, mib) in enumerate(spec.get("mig", [])):
            g.mig.append(SimMig(prof, mib, "MIG-" + _uuid(f"{name}-mig-{i}-{k}"), _MIG_GI_IDS[k]))
        gpus.append(g)
    return gpus


def _rank_threads(pid: int) -> list[SimThread]:
    out = [
        SimThread(pid, "pt_main_thread", "main"),
        SimThread(pid + 1, "pt_data_pin", "pin"),
        SimThread(pid + 2, "pt_autograd_0", "autograd"),
        SimThread(pid + 3, "pt_nccl_watchdg", "nccl"),
        SimThread(pid + 4, "NCCL Progress 0", "nccl"),
        SimThread(pid + 5, "cuda-EvtHandlr", "other"),
    ]
    out += [SimThread(pid + 6 + k, "pt_main_thread", "omp") for k in range(OMP_THREADS)]
    return out


def _rank_cmdline(job: dict, rank: int) -> tuple[str, ...]:
    cmd = job["cmdline"]
    if cmd[0] == "torchrun":  # torchrun's children run the script under the interpreter
        script = next((k for k, a in enumerate(cmd) if a.endswith(".py")), len(cmd) - 1)
        return ("/opt/conda/envs/train/bin/python3.11", "-u", *cmd[script:])
    return (*cmd, f"--local-rank={rank}")


def build_procs(
    spec: dict, gpus: list[SimGpu], start: float, process_count: int | None
) -> dict[int, SimProc]:
    procs: dict[int, SimProc] = {}
    # A job started half an hour before the view opens, or when the scenario starts it.
    began = start + spec["jobs_from"] - 0.5 if spec.get("jobs_from") else start - 1800.0
    pid = 41200
    if process_count is not None:
        for k in range(process_count):
            gi = k % max(1, len(gpus))
            procs[pid + k] = SimProc(
                pid + k,
                1,
                "alice",
                "python",
                ("python", "worker.py", f"--shard={k}"),
                "small",
                gpu=gi if gpus else None,
                mig=(k // len(gpus)) % len(gpus[gi].mig) if gpus and gpus[gi].mig else None,
                create_time=began,
                environ={"CUDA_VISIBLE_DEVICES": str(gi), "USER": "alice"},
                threads=[
                    SimThread(pid + k, "python", "main"),
                    SimThread(pid + k + 500000, "cuda-EvtHandlr", "other"),
                ],
            )
        return procs
    known = profiles_of(spec)
    profiles = [known[p] for _, p in spec["timeline"]]
    workers = max((p["host"]["workers"] for p in profiles), default=0)
    for job in spec.get("jobs", []):
        if job.get("single"):
            gi = job["gpus"][0]
            if gi >= len(gpus):
                continue
            procs[pid] = SimProc(
                pid,
                1,
                job["user"],
                "python",
                job["cmdline"],
                "cotenant",
                gpu=gi,
                mem_mib=job["mem_mib"],
                denied=job.get("denied", False),
                create_time=start - 9000,
                cpu_fixed=job.get("cpu", 5),
                environ={"CUDA_VISIBLE_DEVICES": str(gi), "USER": job["user"]},
                threads=[SimThread(pid, "python", "other"), SimThread(pid + 1, "python", "other")],
                owner=job.get("owner"),
            )
            pid += 100
            continue
        targets = (
            [(0, k) for k in range(len(gpus[0].mig))]
            if job.get("per_mig") and gpus
            else [(g.index, None) for g in gpus]
        )
        if not targets:  # no GPU to run on: the job is not there
            continue
        parent = 1
        if job["cmdline"][0] == "torchrun":
            parent = pid
            procs[pid] = SimProc(
                pid,
                1,
                job["user"],
                "torchrun",
                (
                    "/opt/conda/envs/train/bin/python3.11",
                    "/opt/conda/envs/train/bin/torchrun",
                    *job["cmdline"][1:],
                ),
                "launcher",
                create_time=began - 2,
                cpu_fixed=0.3,
                environ={"USER": job["user"], "HOME": f"/home/{job['user']}"},
                threads=[SimThread(pid, "torchrun", "other")],
                owner=job.get("owner"),
            )
            pid += 16
        ranks = []
        for rank, (gi, mig) in enumerate(targets):
            env = {
                "USER": job["user"],
                "HOME": f"/home/{job['user']}",
                "PATH": "/opt/conda/envs/train/bin:/usr/local/bin:/usr/bin:/bin",
                "CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in gpus),
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                "LOCAL_RANK": str(rank),
                "RANK": str(rank),
                "WORLD_SIZE": str(len(targets)),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "29500",
            }
            if mig is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpus[0].mig[mig].uuid
            p = SimProc(
                pid,
                parent,
                job["user"],
                "pt_main_thread",
                _rank_cmdline(job, rank),
                "rank",
                gpu=gi,
                mig=mig,
                create_time=began,
                environ=env,
                threads=_rank_threads(pid),
                owner=job.get("owner"),
            )
            procs[pid] = p
            if parent != 1:
                procs[parent].children.append(pid)
            ranks.append(p)
            pid += 16
        for w in range(workers):
            owner = ranks[w % len(ranks)]
            procs[pid] = SimProc(
                pid,
                owner.pid,
                owner.user,
                "pt_data_worker",
                owner.cmdline,
                "worker",
                create_time=began + 5,
                environ=dict(owner.environ),
                threads=[
                    SimThread(pid, "pt_data_worker", "worker"),
                    SimThread(pid + 1, "pt_data_worker", "omp"),
                ],
                worker_slot=w,
                owner=owner.owner,
            )
            owner.children.append(pid)
            pid += 3
        pid += 100
    for hp in spec.get("host_procs", []):
        procs[hp["pid"]] = SimProc(
            hp["pid"],
            1,
            hp["user"],
            hp["name"],
            hp["cmdline"],
            "host",
            create_time=start - 60,
            cpu_fixed=hp.get("cpu", 0.0),  # % of a core: another user's busy process
            environ={"USER": hp["user"], "HOME": f"/home/{hp['user']}"},
            cuda_runtime=hp.get("cuda_runtime"),
            torch_cuda=hp.get("torch_cuda", "12.8"),
            threads=[SimThread(hp["pid"], hp["name"], "other")],
        )
    return procs


def build_xids(spec: dict, gpus: list[SimGpu], procs: dict[int, SimProc], start: float) -> list:
    """(epoch, gpu, xid, pid, comm, text), sorted; looping scenarios repeat them each lap."""
    laps = int(XID_HORIZON_S // spec["duration"]) if spec.get("loop") else 1
    out = []
    for t, gi, xid, who, comm, msg in spec.get("xids", []):
        if gi >= len(gpus):
            continue
        pid = None
        if who and who.startswith("rank"):
            want = int(who[4:])
            pid = next((p.pid for p in procs.values() if p.role == "rank" and p.gpu == want), None)
        for lap in range(laps):
            out.append((start + t + lap * spec["duration"], gi, xid, pid, comm, msg))
    return sorted(out, key=lambda x: x[0])


def build_kernel_lines(
    spec: dict, gpus: list[SimGpu], xids: list, driver: str, start: float, boot: float
) -> list[tuple[float, str]]:
    """Kernel messages with their epoch times, in the driver's own formats."""
    lines: list[tuple[float, str]] = []
    if not spec.get("no_driver"):
        lines += [
            (
                boot + 4.2,
                "nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
            ),
            (
                boot + 4.3,
                f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release "
                f"Build  (dvs-builder@U16-I3-B03-4-3)  Tue Nov 26 01:14:39 UTC 2024",
            ),
            (
                boot + 4.9,
                f"nvidia-modeset: Loading NVIDIA UNIX Open Kernel Mode Setting Driver for x86_64  "
                f"{driver}  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Nov 26 01:02:31 UTC "
                f"2024",
            ),
            (boot + 5.1, "[drm] [nvidia-drm] [GPU ID 0x00001800] Loading driver"),
        ]
    announced: set[int] = set()
    for t, gi, xid, pid, comm, msg in xids:
        g = gpus[gi]
        if gi not in announced:
            announced.add(gi)
            lines.append((t, f"NVRM: GPU at PCI:{g.xid_pci}: {g.uuid}"))
            lines.append((t, f"NVRM: GPU Board Serial Number: {g.serial}"))
        p = "'<unknown>'" if pid is None else str(pid)
        lines.append(
            (t, f"NVRM: Xid (PCI:{g.xid_pci}): {xid}, pid={p}, name={comm or '<unknown>'}, {msg}")
        )
        if xid == 79:
            lines.append((t, f"NVRM: GPU {g.proc_bus_id}: GPU has fallen off the bus."))
    for t, text in spec.get("kernel_lines", []):
        lines.append((start + t, text))
    lines.sort(key=lambda x: x[0])
    return lines
