"""The simulated machine: a scenario's timeline evaluated at the clock's time.

The fakes (pynvml, psutil, /proc, commands) all read `SimMachine.state()`, which is computed
once per distinct time and cached, so one collection tick costs the same as reading a table.
Cumulative counters (thread CPU time, disk bytes, NVLink KiB) are integrated as time advances.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import Counter
from dataclasses import dataclass, field

from .clock import SimClock
from .scenarios import GPU_MODELS, NOISE_SD, PROFILES, SCENARIOS

MIB = 1024**2
HOST_CPUS = 32
RESERVED_MIB = 470  # what the driver keeps on an H100-class GPU with nothing running
CONTEXT_MIB = 510  # CUDA context per process
_KEYS = {k: n for n, k in enumerate(NOISE_SD)}
_NOISE_N = 4099


@dataclass(frozen=True)
class ScenarioInfo:
    name: str
    description: str
    expected_class: str
    gpu_count: int
    gpu_model: str
    duration_s: float


@dataclass
class SimGpu:
    index: int
    model: dict
    uuid: str
    serial: str
    bus: tuple[int, int, int]  # domain, bus, device
    minor: int
    mig: list[tuple[str, int, str]] = field(default_factory=list)  # (profile, MiB, uuid)

    @property
    def bus_id(self) -> str:
        d, b, dev = self.bus
        return f"{d:08X}:{b:02X}:{dev:02X}.0"

    @property
    def total_bytes(self) -> int:
        return self.model["mem_mib"] * MIB


@dataclass
class SimThread:
    tid: int
    name: str
    role: str  # "main", "pin", "autograd", "nccl", "worker", "other"
    cum_s: float = 0.0


@dataclass
class SimProc:
    pid: int
    ppid: int
    user: str
    name: str
    cmdline: tuple[str, ...]
    role: str  # "rank", "worker", "cotenant", "host", "small"
    gpu: int | None = None
    mig: int | None = None  # MIG instance index on its GPU
    mem_mib: float | None = None  # fixed memory (co-tenants)
    denied: bool = False
    environ: dict = field(default_factory=dict)
    threads: list[SimThread] = field(default_factory=list)
    children: list[int] = field(default_factory=list)
    create_time: float = 0.0
    cpu_fixed: float | None = None
    cuda_runtime: str | None = None


def _uuid(seed: str) -> str:
    h = hashlib.md5(seed.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


class SimMachine:
    def __init__(
        self,
        name: str,
        spec: dict,
        clock: SimClock,
        seed: int | None,
        noise: float,
        gpu_count: int | None,
        process_count: int | None,
    ) -> None:
        self.name, self.spec, self.clock, self.noise = name, spec, clock, noise
        self.model = GPU_MODELS[spec["model"]]
        n = spec["gpus"] if gpu_count is None else gpu_count
        self.info = ScenarioInfo(
            name,
            spec["description"],
            spec["expected"],
            n,
            self.model["name"],
            float(spec["duration"]),
        )
        self.scenario = self.info
        self.no_driver = bool(spec.get("no_driver"))
        self.driver_version, self.cuda_version = spec.get("driver", ("570.124.06", 12080))
        rng = random.Random(f"{name}-{seed}")
        self._noise = [rng.gauss(0.0, 1.0) for _ in range(_NOISE_N)]
        self.call_counts: Counter = Counter()
        self.raised: Counter = Counter()  # injected errors actually raised, per function
        self.errors: dict[str, list[list]] = {}
        self.lost_at: dict[int, float] = {
            g: clock.start + t for g, t in spec.get("lost", []) if g < n
        }
        self.vanished: set[int] = set()
        self.lock = threading.RLock()
        self.gpus = [self._gpu(i, n) for i in range(n)]
        self.procs: dict[int, SimProc] = {}
        self._build_procs(process_count)
        self.xids = self._xids()
        self.kernel_lines = self._kernel_lines()
        self._t: float | None = None
        self._state: dict | None = None
        self.disk_read = 0.0
        self.disk_write = 0.0
        self.nvlink = [[0.0, 0.0] for _ in self.gpus]

    # -- construction ------------------------------------------------------------------------
    def _gpu(self, i: int, n: int) -> SimGpu:
        bus = (i // 64, _HGX_BUSES[i] if n <= 8 else 0x10 + (i % 64) * 3, 0)
        minor = i ^ 2 if n % 4 == 0 else i  # minor numbers need not follow NVML order
        g = SimGpu(
            i,
            self.model,
            "GPU-" + _uuid(f"{self.name}-gpu-{i}"),
            f"{self.model['serial_prefix']}{(i * 7919) % 100000:06d}",
            bus,
            minor,
        )
        for k, (prof, mib) in enumerate(self.spec.get("mig", [])):
            g.mig.append((prof, mib, "MIG-" + _uuid(f"{self.name}-mig-{i}-{k}")))
        return g

    def _build_procs(self, process_count: int | None) -> None:
        start = self.clock.start - 1800.0
        pid = 41200
        if process_count is not None:
            for k in range(process_count):
                gi = k % max(1, len(self.gpus))
                self._add(
                    SimProc(
                        pid + k,
                        1,
                        "alice",
                        "python",
                        ("python", "worker.py", f"--shard={k}"),
                        "small",
                        gpu=gi,
                        create_time=start,
                        environ={"CUDA_VISIBLE_DEVICES": str(gi)},
                        threads=[
                            SimThread(pid + k, "python", "main"),
                            SimThread(pid + k + 500000, "cuda-EvtHandlr", "other"),
                        ],
                    )
                )
            return
        for job in self.spec.get("jobs", []):
            if job.get("single"):
                gi = job["gpus"][0]
                p = SimProc(
                    pid,
                    1,
                    job["user"],
                    "python",
                    job["cmdline"],
                    "cotenant",
                    gpu=gi,
                    mem_mib=job["mem_mib"],
                    denied=job.get("denied", False),
                    create_time=start - 7200,
                    cpu_fixed=job.get("cpu", 5),
                    environ={"CUDA_VISIBLE_DEVICES": str(gi), "USER": job["user"]},
                    threads=[SimThread(pid, "python", "other")],
                )
                self._add(p)
                pid += 100
                continue
            targets = (
                [(0, k) for k in range(len(self.gpus[0].mig))]
                if job.get("per_mig")
                else [(g.index, None) for g in self.gpus]
            )
            host_workers = PROFILES[self._profile_names()[0]]["host"]["workers"]
            workers = max(
                host_workers,
                max((PROFILES[p]["host"]["workers"] for p in self._profile_names()), default=0),
            )
            ranks = []
            for rank, (gi, mig) in enumerate(targets):
                env = {
                    "CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in self.gpus),
                    "LOCAL_RANK": str(rank),
                    "USER": job["user"],
                }
                if mig is not None:
                    env["CUDA_VISIBLE_DEVICES"] = self.gpus[0].mig[mig][2]
                p = SimProc(
                    pid,
                    1,
                    job["user"],
                    "pt_main_thread",
                    job["cmdline"] + (f"--local-rank={rank}",),
                    "rank",
                    gpu=gi,
                    mig=mig,
                    create_time=start,
                    environ=env,
                )
                p.threads = [
                    SimThread(pid, "pt_main_thread", "main"),
                    SimThread(pid + 1, "pt_data_pin", "pin"),
                    SimThread(pid + 2, "pt_autograd_0", "autograd"),
                    SimThread(pid + 3, "pt_nccl_watchdg", "nccl"),
                    SimThread(pid + 4, "cuda-EvtHandlr", "other"),
                ]
                self._add(p)
                ranks.append(p)
                pid += 10
            for w in range(workers):
                owner = ranks[w % len(ranks)]
                wp = SimProc(
                    pid,
                    owner.pid,
                    owner.user,
                    "pt_data_worker",
                    owner.cmdline,
                    "worker",
                    create_time=start + 5,
                    environ=dict(owner.environ),
                    threads=[SimThread(pid, "pt_data_worker", "worker")],
                )
                owner.children.append(pid)
                self._add(wp)
                pid += 3
            pid += 100
        for hp in self.spec.get("host_procs", []):
            self._add(
                SimProc(
                    hp["pid"],
                    1,
                    hp["user"],
                    hp["name"],
                    hp["cmdline"],
                    "host",
                    create_time=self.clock.start - 60,
                    cpu_fixed=0.0,
                    environ={"USER": hp["user"]},
                    cuda_runtime=hp.get("cuda_runtime"),
                    threads=[SimThread(hp["pid"], hp["name"], "other")],
                )
            )

    def _add(self, p: SimProc) -> None:
        self.procs[p.pid] = p

    def _profile_names(self) -> list[str]:
        return [p for _, p in self.spec["timeline"]]

    def _xids(self) -> list[tuple[float, int, int, int | None, str | None, str]]:
        out = []
        for t, gi, xid, who, pname, msg in self.spec.get("xids", []):
            if gi >= len(self.gpus):
                continue
            pid = None
            if who and who.startswith("rank"):
                pid = next(
                    (
                        p.pid
                        for p in self.procs.values()
                        if p.role == "rank" and p.gpu == int(who[4:])
                    ),
                    None,
                )
            out.append((self.clock.start + t, gi, xid, pid, pname, msg))
        return sorted(out)

    def _kernel_lines(self) -> list[tuple[float, str]]:
        lines: list[tuple[float, str]] = []
        announced = set()
        for t, gi, xid, pid, pname, msg in self.xids:
            g = self.gpus[gi]
            pci = f"{g.bus[0]:04x}:{g.bus[1]:02x}:{g.bus[2]:02x}"
            if gi not in announced:
                announced.add(gi)
                lines.append((t, f"NVRM: GPU at PCI:{pci}: {g.uuid}"))
                lines.append((t, f"NVRM: GPU Board Serial Number: {g.serial}"))
            if xid == 79:
                lines.append((t, f"NVRM: Xid (PCI:{pci}): 79, {msg}"))
                lines.append((t, f"NVRM: GPU {pci}.0: GPU has fallen off the bus."))
            else:
                p = pid if pid is not None else "'<unknown>'"
                lines.append(
                    (
                        t,
                        f"NVRM: Xid (PCI:{pci}): {xid}, pid={p}, "
                        f"name={pname or '<unknown>'}, {msg}",
                    )
                )
        workers = [p.pid for p in self.procs.values() if p.role == "worker"]
        for t, text in self.spec.get("kernel_lines", []):
            lines.append((self.clock.start + t, text.format(pid1=workers[0] if workers else 4242)))
        return sorted(lines, key=lambda x: x[0])

    # -- evaluation --------------------------------------------------------------------------
    def phase_at(self, t: float) -> tuple[str, float]:
        """The profile name at time t and the time since that phase began."""
        rel = t - self.clock.start
        if self.spec.get("loop") and rel >= 0:
            rel %= self.spec["duration"]
        name, began = self.spec["timeline"][0][1], 0.0
        for start, prof in self.spec["timeline"]:
            if rel >= start:
                name, began = prof, start
        return name, rel - began

    def n(self, key: str, k: int, t: float) -> float:
        if not self.noise:
            return 0.0
        i = (int(t * 4) * 7919 + k * 104729 + _KEYS[key] * 31) % _NOISE_N
        return self._noise[i] * NOISE_SD[key] * self.noise

    def busy(self, prof: dict, t: float, gi: int) -> float:
        shape = prof["shape"]
        if shape == "steady":
            return 1.0
        period, busy_s = prof["period"], prof["busy_s"]
        offset = 0.0 if shape == "dips" else 0.37 * gi
        hits = sum(1 for k in range(4) if (t - 0.125 - 0.25 * k - offset) % period < busy_s)
        return hits / 4.0

    def state(self) -> dict:
        """The machine at the clock's now; computed once per time."""
        t = self.clock.now()
        with self.lock:
            if self._t is not None and t == self._t:
                return self._state
            dt = 0.0 if self._t is None else max(0.0, t - self._t)
            st = self._evaluate(t)
            self._integrate(st, dt)
            self._t, self._state = t, st
            return st

    def _evaluate(self, t: float) -> dict:
        pname, since = self.phase_at(t)
        prof = PROFILES[pname]
        gpus = []
        for g in self.gpus:
            gpus.append(self._gpu_state(g, prof, since, t))
        host = prof["host"]
        cpu: dict[int, dict[int, float]] = {}
        job_on = prof.get("procs", True) and t - self.clock.start >= self.spec.get("jobs_from", 0)
        for p in self.procs.values():
            cpu[p.pid] = self._thread_cpu(p, host, gpus, t, job_on)
        total = sum(sum(v.values()) for v in cpu.values()) + 0.02 * HOST_CPUS * 100
        iowait = max(0.0, host["iowait"] + self.n("iowait", 0, t))
        return dict(
            t=t,
            profile=pname,
            prof=prof,
            since=since,
            gpus=gpus,
            cpu=cpu,
            host_cpu=min(100.0, total / HOST_CPUS),
            iowait=iowait,
            job_on=job_on,
        )

    def _gpu_state(self, g: SimGpu, prof: dict, since: float, t: float) -> dict:
        f = self.busy(prof, t, g.index)
        busy, idle, m = prof["busy"], prof["idle"], self.model
        vals = {}
        for key in ("util", "memctl", "sm", "occ", "tensor", "dram", "fp16", "fp32", "temp"):
            b, i = busy.get(key), idle.get(key)
            if b is None:
                vals[key] = None
                continue
            v = i + f * (b - i) + (self.n(key, g.index, t) if b or i else 0.0)
            vals[key] = min(100.0, max(0.0, v)) if key != "temp" else v
        pw = idle["power"] + f * (busy["power"] - idle["power"]) + self.n("power", g.index, t)
        clk = idle["clock"] + f * (busy["clock"] - idle["clock"]) + self.n("clock", g.index, t)
        mem_frac = prof["mem_frac"] + prof.get("mem_growth_per_min", 0.0) * since / 60.0
        reasons = set()
        if (vals["util"] or 0) < 5 and vals["util"] is not None:
            reasons.add("gpu_idle")
        elif f > 0.5:
            reasons.update(prof.get("reasons", ()))
        nv_rate = prof.get("nvlink_busy", 0.0) * f + prof.get("nvlink_idle", 0.0) * (1 - f)
        return dict(
            lost=g.index in self.lost_at and t >= self.lost_at[g.index],
            f=f,
            **vals,
            power_w=max(m["idle_w"], pw * m["power_limit_w"]),
            sm_mhz=int(max(m["idle_sm"], min(1.0, clk) * m["sm_max"])),
            mem_mhz=m["mem_max"] if f > 0.05 or prof.get("procs", True) else 405,
            mem_frac=min(0.995, mem_frac),
            reasons=reasons,
            pcie=prof.get("pcie_kbps", 0) * max(f, 0.05),
            nvlink=nv_rate if m["nvlink"] else 0.0,
        )

    def _thread_cpu(self, p: SimProc, host: dict, gpus: list, t: float, job_on: bool):
        k = p.pid % 97
        if p.role in ("host", "cotenant", "small"):
            c = p.cpu_fixed if p.cpu_fixed is not None else 30.0
            return {
                th.tid: max(0.0, c + (self.n("cpu", k, t) if c else 0.0)) / len(p.threads)
                for th in p.threads
            }
        if not job_on or p.pid in self.vanished:
            return {th.tid: 0.0 for th in p.threads}
        out = {}
        for th in p.threads:
            if th.role == "main":
                c = host["main_cpu"]
            elif th.role == "worker":
                c = host["worker_cpu"]
            elif th.role == "autograd":
                f = gpus[p.gpu]["f"] if p.gpu is not None and p.gpu < len(gpus) else 0.5
                c = 8.0 * f
            else:
                c = 1.5
            out[th.tid] = min(100.0, max(0.0, c + self.n("cpu", k + th.tid % 7, t)))
        return out

    def _integrate(self, st: dict, dt: float) -> None:
        if dt <= 0:
            return
        for p in self.procs.values():
            rates = st["cpu"][p.pid]
            for th in p.threads:
                th.cum_s += rates.get(th.tid, 0.0) / 100.0 * dt
        host = st["prof"]["host"]
        self.disk_read += host.get("disk_read", 2.0e6) * dt
        self.disk_write += 1.5e6 * dt
        for g, gs in zip(self.gpus, st["gpus"], strict=True):
            self.nvlink[g.index][0] += gs["nvlink"] * dt
            self.nvlink[g.index][1] += gs["nvlink"] * 0.98 * dt

    # -- views the fakes share ---------------------------------------------------------------
    def gpu_procs(self, gi: int, st: dict) -> list[tuple[SimProc, int]]:
        """(process, used bytes) on GPU gi now."""
        g = self.gpus[gi]
        gs = st["gpus"][gi]
        on = [
            p
            for p in self.procs.values()
            if p.gpu == gi
            and p.pid not in self.vanished
            and (p.role in ("small", "cotenant") or st["job_on"])
        ]
        fixed = sum(p.mem_mib or 0 for p in on) * MIB
        job = [p for p in on if p.mem_mib is None]
        budget = max(0, gs["mem_frac"] * g.total_bytes - RESERVED_MIB * MIB - fixed)
        out = [(p, int(p.mem_mib * MIB)) for p in on if p.mem_mib is not None]
        if job and g.mig:  # each process fills its MIG instance to the profile's fraction
            out += [(p, int(gs["mem_frac"] * g.mig[p.mig][1] * MIB)) for p in job]
        elif job:
            share = max(CONTEXT_MIB * MIB, budget / len(job))
            out += [(p, int(share)) for p in job]
        return out

    def used_bytes(self, gi: int, st: dict) -> int:
        g = self.gpus[gi]
        procs = sum(b for _, b in self.gpu_procs(gi, st))
        return min(g.total_bytes - 64 * MIB, RESERVED_MIB * MIB + procs)

    def take_error(self, fn: str, gpu: int | None) -> int | None:
        rules = self.errors.get(fn)
        if not rules:
            return None
        for r in rules:
            g, code, times = r
            if g is None or g == gpu:
                if times is not None:
                    if times <= 0:
                        continue
                    r[2] = times - 1
                self.raised[fn] += 1
                return code
        return None

    # -- test hooks --------------------------------------------------------------------------
    def inject_error(
        self, function_name: str, code: int, gpu: int | None = None, times: int | None = None
    ) -> None:
        self.errors.setdefault(function_name, []).append([gpu, code, times])

    def clear_errors(self) -> None:
        self.errors.clear()

    def lose_gpu(self, index: int, at: float | None = None) -> None:
        self.lost_at[index] = self.clock.now() if at is None else at

    def vanish_process(self, pid: int) -> None:
        self.vanished.add(pid)


def scenario_spec(name: str) -> dict:
    return SCENARIOS[name]
