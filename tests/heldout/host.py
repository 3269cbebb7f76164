"""The host's side of a job: its processes and threads as psutil and /proc show them, and the
machine's CPU, iowait, pressure and memory, consistent with what those processes burn.

Names follow what each stack really shows in /proc/<pid>/comm (15 characters at most): recent
PyTorch renames the main thread `pt_main_thread` and its DataLoader worker processes
`pt_data_worker` (older releases leave `python3`); multiprocessing pools, Grain and HF datasets
workers are interpreter processes (`python3`, `python`); tf.data and DALI run their pipelines
on threads inside the main process. Threads started after the rename inherit the main thread's
name, so only tid == pid marks the main thread.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from gputop_diag.model import GIB, ChildInfo, HostState, PressureStall, ProcessInfo, ThreadInfo

FRAMEWORKS = (
    "torch2",
    "torch1",
    "mp_pool",
    "tf_data",
    "dali",
    "grain",
    "hf_datasets",
    "torch_threads",
)
# The pipeline runs on threads of the main process. "torch_threads": a ThreadPoolExecutor
# started after `import torch`, so its threads inherit the name `pt_main_thread`.
THREAD_LOADERS = ("tf_data", "dali", "torch_threads")


@dataclass
class Entity:
    """A thread or a child process and the CPU it burns (% of one core)."""

    id: int
    name: str
    cpu: float
    sd: float
    cap: float = 100.0
    born_s: float = -1.0  # appears at (a respawned worker)
    gone_s: float = 1e9  # vanishes at (killed)


@dataclass
class Proc:
    pid: int
    name: str
    user: str
    cmdline: tuple[str, ...]
    gpus: tuple[int, ...]
    threads: list[Entity]  # the main thread first (id == pid)
    children: list[Entity]
    visibility: str = "full"  # "full", "denied" (another user, hidepid) or "absent"
    rss_gib: float = 8.0
    extra_threads: int = 30  # idle threads never in the busiest list
    start_s: float = 0.0
    gone_s: float = 1e9  # the process ended (its GPU fell off the bus)

    @property
    def loaders(self) -> list[Entity]:
        main = self.pid
        return [e for e in self.threads if e.id != main and e.sd >= 0] + list(self.children)


class Pids:
    """Plausible, distinct pids and tids for one case."""

    def __init__(self, rng: random.Random) -> None:
        self.next = rng.randrange(2_000, 3_000_000)

    def __call__(self) -> int:
        self.next += 1 + (self.next % 7)
        return self.next


def _draw(rng: random.Random, lo_hi: tuple[float, float]) -> float:
    return rng.uniform(*lo_hi)


def job_process(
    rng: random.Random,
    pids: Pids,
    framework: str,
    gpus: tuple[int, ...],
    user: str,
    *,
    main_cpu: tuple[float, float],
    loader_cpu: tuple[float, float],
    n_loaders: int,
    pin_cpu: tuple[float, float] = (1.0, 6.0),
) -> Proc:
    """One GPU process of a job with its loaders, named the way `framework` names them."""
    pid = pids()
    py = rng.choice(("python3", "python"))
    script = rng.choice(("train.py", "main.py", "pretrain_gpt.py", "finetune.py", "run_clm.py"))
    cmd = (f"/opt/conda/bin/{py}", "-u", script, "--config", "configs/run.yaml")
    main_name = "pt_main_thread" if framework in ("torch2", "hf_datasets", "torch_threads") else py
    if framework == "dali" and rng.random() < 0.5:
        main_name = "pt_main_thread"
    threads = [Entity(pid, main_name, _draw(rng, main_cpu), 2.0)]
    children: list[Entity] = []
    # idle or light threads every CUDA process has (sd < 0: not a loader)
    threads.append(Entity(pids(), "cuda-EvtHandlr", rng.uniform(0.0, 0.4), -0.2))
    inherit = main_name  # OpenMP / intra-op threads inherit the main thread's name
    for _ in range(rng.randrange(1, 5)):
        threads.append(Entity(pids(), inherit, rng.uniform(0.0, 3.0), -0.8))
    if framework in ("torch2", "torch1", "hf_datasets", "mp_pool", "torch_threads"):
        name = "pt_autograd_0" if framework != "torch1" else py
        threads.append(Entity(pids(), name, rng.uniform(1.0, 9.0), -1.5))
    loader_sd = 4.0
    if framework in ("torch2", "torch1", "hf_datasets") and rng.random() < 0.8:
        pin = "pt_pin_memory" if framework != "torch1" else py
        threads.append(Entity(pids(), pin, _draw(rng, pin_cpu), 2.0))
    if framework == "tf_data":
        names = ("tf_data_iterato", "tf_data_private")
        for _ in range(n_loaders):
            threads.append(Entity(pids(), rng.choice(names), _draw(rng, loader_cpu), loader_sd))
    elif framework == "torch_threads":
        for _ in range(n_loaders):
            threads.append(Entity(pids(), main_name, _draw(rng, loader_cpu), loader_sd))
    elif framework == "dali":
        dev = gpus[0] if gpus else 0
        for _ in range(n_loaders):
            threads.append(Entity(pids(), f"[DALI][TP{dev}]", _draw(rng, loader_cpu), loader_sd))
    else:
        worker = {"torch2": "pt_data_worker", "torch1": py, "hf_datasets": "python"}.get(
            framework, "python3"
        )
        for _ in range(n_loaders):
            cpu = _draw(rng, loader_cpu)
            children.append(Entity(pids(), worker, cpu, loader_sd, cap=400.0))
        if framework in ("mp_pool", "grain") or rng.random() < 0.3:
            # multiprocessing's resource tracker (spawn start method): a child that sleeps
            children.append(Entity(pids(), py, 0.0, -0.05))
    return Proc(
        pid,
        main_name,
        user,
        cmd,
        gpus,
        threads,
        children,
        rss_gib=rng.uniform(4, 40),
        extra_threads=rng.randrange(20, 90),
    )


def quiet_process(rng: random.Random, pids: Pids, gpus: tuple[int, ...], user: str) -> Proc:
    """A process that holds GPU memory and does nothing: a notebook kernel, a stopped job."""
    pid = pids()
    py = rng.choice(("python3", "python"))
    cmd = (f"/usr/bin/{py}", "-m", "ipykernel_launcher", "-f", "/tmp/kernel-7f3a.json")
    threads = [Entity(pid, py, rng.uniform(0.0, 2.0), 0.5)]
    threads += [Entity(pids(), py, 0.0, -0.05) for _ in range(rng.randrange(2, 6))]
    return Proc(pid, py, user, cmd, gpus, threads, [], rss_gib=rng.uniform(0.5, 6))


@dataclass
class HostPlan:
    cpu_count: int
    background_cores: float  # system and other tenants, in cores
    saturate: bool = False  # other tenants drive the CPU to ~100 %
    storage_stall: bool = False
    psi: bool = True  # /proc/pressure exists (kernel >= 4.20 with PSI enabled)
    mem_total_gib: float = 512.0
    mem_used_share: float = 0.3
    oom_tick: int | None = None
    stall_iowait: float = 0.0  # iowait % while storage stalls
    stall_io_psi: float = 0.0
    sat_level: float = 97.0
    base_iowait: float = 0.0  # iowait without a stall (checkpoint writes)
    extra: dict = field(default_factory=dict)


class HostSim:
    """Per tick: the ProcessInfo of every GPU process and the HostState, one consistent draw."""

    def __init__(self, rng: random.Random, plan: HostPlan, procs: list[Proc]) -> None:
        self.rng, self.plan, self.procs = rng, plan, procs
        self.psi_state: dict[str, float] = {}

    def _cpu(self, e: Entity) -> float:
        v = e.cpu + abs(e.sd) * 3.4 * (self.rng.random() - 0.5)  # sd-sized uniform jitter
        return round(min(e.cap, max(0.0, v)), 1)

    def tick(self, k: int, t: float) -> tuple[tuple[ProcessInfo, ...], HostState, float]:
        """ProcessInfos of the live processes, the host, and the job's CPU in cores."""
        rng, plan = self.rng, self.plan
        infos = []
        job_cores = 0.0
        busy_loads: list[float] = []
        for p in self.procs:
            if not (p.start_s <= t < p.gone_s):
                continue
            th = [(e, self._cpu(e)) for e in p.threads]
            ch = [(e, self._cpu(e)) for e in p.children if e.born_s <= t < e.gone_s]
            cores = (sum(c for _, c in th) + sum(c for _, c in ch)) / 100.0
            job_cores += cores
            busy_loads += [c for _, c in th + ch if c > 5.0]
            if p.visibility == "absent":
                continue
            if p.visibility == "denied":
                infos.append(ProcessInfo(pid=p.pid, name=p.name, user=p.user, access_denied=True))
                continue
            top = sorted(th, key=lambda ec: -ec[1])[:8]
            infos.append(
                ProcessInfo(
                    pid=p.pid,
                    name=p.name,
                    user=p.user,
                    cmdline=p.cmdline,
                    cpu_pct=round(sum(c for _, c in th), 1),
                    rss_bytes=int(p.rss_gib * GIB),
                    num_threads=len(p.threads) + p.extra_threads,
                    busiest_threads=tuple(ThreadInfo(e.id, e.name, c) for e, c in top),
                    children=tuple(ChildInfo(e.id, e.name, c) for e, c in ch),
                    start_time=None,
                    cuda_visible_devices=",".join(str(g) for g in p.gpus),
                    environ_readable=True,
                )
            )
        n = plan.cpu_count
        other = plan.background_cores * (1.0 + rng.gauss(0.0, 0.08))
        if plan.saturate:
            level = plan.sat_level + rng.gauss(0.0, 0.8)
            other = max(other, level / 100.0 * n - job_cores)
        # The busy threads each hold a core; the rest of the load spreads evenly. What does not
        # fit on a full core spills onto the next.
        r, spread = rng.random, min(97.0, 100.0 * other / n)
        per_cpu = [abs(spread + 6.0 * (r() - 0.5)) for _ in range(n)]
        core = rng.randrange(n)
        spill = sum(busy_loads)
        for _ in range(n):
            if spill <= 0:
                break
            core = (core + 1) % n
            add = min(spill, 100.0 - per_cpu[core])
            per_cpu[core] += add
            spill -= add
        cpu_pct = sum(per_cpu) / n
        iowait = plan.stall_iowait if plan.storage_stall else plan.base_iowait + rng.uniform(0, 1.5)
        iowait = round(max(0.0, iowait + rng.gauss(0.0, 1.2 if plan.storage_stall else 0.2)), 1)
        mem_total = plan.mem_total_gib * GIB
        used_share = plan.mem_used_share
        mem_psi = 0.0
        if plan.oom_tick is not None:
            dt = k - plan.oom_tick
            if -12 <= dt <= 0:
                used_share = 0.985 + 0.013 * (1 + dt / 12)
                mem_psi = 10.0 + 40.0 * (1 + dt / 12)
            elif dt > 0:
                used_share = 0.75 + 0.1 * rng.random()
        pressure = {}
        if plan.psi:
            targets = {
                "cpu": (
                    rng.uniform(25, 70) if cpu_pct > 90 else rng.uniform(0, 0.2 * cpu_pct / 10)
                ),
                "io": plan.stall_io_psi if plan.storage_stall else rng.uniform(0.0, 2.0),
                "memory": mem_psi,
            }
            a = 1.0 - math.exp(-1.0 / 10.0)  # avg10: a 10 s exponential average
            for key, target in targets.items():
                prev = self.psi_state.get(key, target)
                self.psi_state[key] = prev + a * (target - prev)
            pressure = {
                key: PressureStall(
                    some_avg10=round(v, 2),
                    full_avg10=round(v * 0.4, 2) if key != "cpu" else None,
                    some_avg60=round(v * 0.9, 2),
                )
                for key, v in self.psi_state.items()
            }
        loads = job_cores + other + (plan.stall_iowait / 100.0 * n if plan.storage_stall else 0)
        host = HostState(
            cpu_count=n,
            cpu_pct=round(min(100.0, cpu_pct), 1),
            per_cpu_pct=tuple(per_cpu),
            iowait_pct=iowait,
            load_avg=(round(loads, 2), round(loads * 0.97, 2), round(loads * 0.93, 2)),
            mem_total_bytes=int(mem_total),
            mem_available_bytes=int(mem_total * (1 - used_share)),
            mem_used_bytes=int(mem_total * used_share * 0.97),
            swap_total_bytes=int(8 * GIB),
            swap_used_bytes=int(GIB * (6.5 if used_share > 0.98 else rng.uniform(0.0, 0.3))),
            disk_read_bytes_s=(
                rng.uniform(80e6, 600e6) if plan.storage_stall else rng.uniform(0.0, 30e6)
            ),
            disk_write_bytes_s=rng.uniform(0.0, 20e6),
            pressure=pressure,
        )
        return tuple(infos), host, job_cores
