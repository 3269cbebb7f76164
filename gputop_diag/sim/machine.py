"""The simulated machine: a scenario's timeline evaluated at the clock's time.

The fakes (pynvml, psutil, /proc, commands) all read `SimMachine.state()`, which is computed
once per distinct time (quantised to 0.1 s, so a live view polling many times a second costs one
evaluation) and cached; a collection tick then costs about as much as reading a table.
Cumulative counters (thread CPU time, host CPU and iowait time, disk bytes, NVLink KiB, pressure
stall totals) are integrated as time advances, so rates computed from them by the collectors
agree with the instantaneous figures.

GPU busy time is one signal per GPU, sampled as the driver samples it (`driver_samples.py`).
"""

from __future__ import annotations

import math
import random
import shutil
import tempfile
import threading
import weakref
from collections import Counter
from dataclasses import dataclass

from .clock import SimClock
from .driver_samples import (  # noqa: F401 - the sample clock re-exported for the fakes
    DriverSamples,
    last_sample,
    sample_time_us,
)
from .drivers import DriverProfile, profile_for_version
from .faults import HANG_CAP_S, SimFaults  # noqa: F401 - HANG_CAP_S re-exported for the fakes
from .population import (
    MIB,
    SimGpu,
    SimProc,
    build_gpus,
    build_kernel_lines,
    build_procs,
    build_xids,
)
from .probe_files import PROBE_MAX_BYTES, PROBE_SCHEMA, RankProbes  # noqa: F401 - re-exported
from .profiles import GPU_KEYS, GPU_MODELS, NOISE_SD, profiles_of

HOST_CPUS = 32
CONTEXT_MIB = 510  # CUDA context per process
BOOT_AGO_S = 261_845.0  # the node booted about three days before the scenario starts
BACKGROUND_CPU_PCT = 2.0  # system daemons, as a share of all cores
STEP_S = 0.1
_KEYS = {k: n for n, k in enumerate(NOISE_SD)}
_NOISE_N = 4099
_PSI_TAU = (10.0, 60.0, 300.0)
# (figure, its offset into the noise table, its standard deviation): `SimMachine.noises`
_NOISE_OFFSETS = tuple((key, n * 31, NOISE_SD[key]) for key, n in _KEYS.items())
_NO_NOISE = dict.fromkeys(NOISE_SD, 0.0)
_GPU_MEMO_MAX = 4096


def _no_noise(k: int) -> float:
    return 0.0


# Noise tables by seed string: drawing 4099 Gaussians costs more than the rest of building a
# machine, and tests build thousands of machines from a few seeds. The tables are never written.
_NOISE_TABLES: dict[str, list[float]] = {}
_NOISE_TABLES_MAX = 256


def _noise_table(seed: str) -> list[float]:
    table = _NOISE_TABLES.get(seed)
    if table is None:
        rng = random.Random(seed)
        table = [rng.gauss(0.0, 1.0) for _ in range(_NOISE_N)]
        if len(_NOISE_TABLES) >= _NOISE_TABLES_MAX:
            _NOISE_TABLES.clear()
        _NOISE_TABLES[seed] = table
    return table


# A profile's figures as `_gpu_state` blends them, by the profile's identity (profiles are never
# written): (key, idle value, busy - idle or None where the device lacks the figure, noisy).
_FIGURES: dict[int, tuple[dict, tuple]] = {}


def _figures(prof: dict) -> tuple:
    hit = _FIGURES.get(id(prof))
    if hit is not None and hit[0] is prof:
        return hit[1]
    busy, idle, rows = prof["busy"], prof["idle"], []
    for key in GPU_KEYS:
        b, i = busy.get(key), idle.get(key)
        rows.append((key, i, None if b is None else b - i, bool(b or i)))
    if len(_FIGURES) >= _NOISE_TABLES_MAX:
        _FIGURES.clear()
    _FIGURES[id(prof)] = (prof, tuple(rows))
    return tuple(rows)


@dataclass(frozen=True)
class ScenarioInfo:
    name: str
    description: str
    expected_class: str
    gpu_count: int
    gpu_model: str
    duration_s: float


def scenario_info(name: str, spec: dict, gpu_count: int | None = None) -> ScenarioInfo:
    n = spec["gpus"] if gpu_count is None else gpu_count
    model = GPU_MODELS[spec["model"]]["name"] if n and not spec.get("no_driver") else "none"
    return ScenarioInfo(
        name, spec["description"], spec["expected"], n, model, float(spec["duration"])
    )


class SimMachine(DriverSamples, SimFaults, RankProbes):
    """A scenario's machine: its GPUs and processes, evaluated at the clock's time (`state`),
    with the driver's busy-time samples (`driver_samples.py`), the faults put into it
    (`faults.py`) and the probe files its ranks write (`probe_files.py`)."""

    def __init__(
        self,
        name: str,
        spec: dict,
        clock: SimClock,
        seed: int | None,
        noise: float,
        gpu_count: int | None,
        process_count: int | None,
        driver: DriverProfile | None = None,
    ) -> None:
        self.name, self.spec, self.clock, self.noise = name, spec, clock, noise
        self.model = GPU_MODELS[spec["model"]]
        self.info = scenario_info(name, spec, gpu_count)
        self.scenario = self.info
        n = 0 if spec.get("no_driver") and gpu_count is None else self.info.gpu_count
        self.user = "alice"  # who runs the tool
        self.no_driver = bool(spec.get("no_driver"))
        if driver is None:
            driver = profile_for_version(*spec.get("driver", ("570.124.06", 12080)))
        self.driver = driver  # what the simulated libnvidia-ml.so exports
        self.driver_version, self.cuda_version = driver.version, driver.cuda_version
        # The loaded kernel module: the library's version, unless a fault says otherwise (an
        # upgrade without a reboot: another version; None: not loaded).
        self.module_version: str | None = None if self.no_driver else driver.version
        self.boot_time = clock.start - BOOT_AGO_S
        self._noise = _noise_table(f"{name}-{seed}")
        self.call_counts: Counter = Counter()  # fake pynvml calls, per function
        self.raised: Counter = Counter()  # injected errors actually raised, per function
        self.errors: dict[str, list[list]] = {}
        self.hangs: dict[str, list[tuple[int | None, threading.Event]]] = {}
        self.foreign_event_handles = False  # events carry handles the caller never saw
        self.lost_at: dict[int, float] = {
            g: clock.start + t for g, t in spec.get("lost", []) if g < n
        }
        self.vanished: set[int] = set()
        self.idle_after: dict[int, float] = {}  # GPU -> when its last rank was signalled away
        self.exit_at: dict[int, float] = {}  # pid -> epoch it exits
        self.lock = threading.RLock()
        self.profiles = profiles_of(spec)
        self.gpus: list[SimGpu] = build_gpus(name, spec, self.model, n)
        self.procs: dict[int, SimProc] = build_procs(spec, self.gpus, clock.start, process_count)
        self.by_gpu: dict[int, list[SimProc]] = {}
        for p in self.procs.values():
            if p.gpu is not None:
                self.by_gpu.setdefault(p.gpu, []).append(p)
        self.xids = build_xids(spec, self.gpus, self.procs, clock.start)
        self._extra_lines: list[tuple[float, str]] = []
        if spec.get("oom_kill") is not None:
            self._oom_kill(clock.start + spec["oom_kill"])
        self.kernel_lines = self._kernel_lines()
        self.slurm: list[dict] = spec.get("slurm", [])
        self._t: float | None = None
        self._state: dict | None = None
        # (time, state, the clock's reading) of the newest evaluation, set in one assignment
        # once all its work is done, so that `state()` can answer a repeated time without
        # taking the lock (and an unmoved clock without rounding its reading).
        self._current: tuple[float, dict, float] | None = None
        self._avg_cache: dict[tuple, dict] = {}
        # (GPU, time) -> (when its last rank was signalled away, its figures): `_gpu_state`
        self._gpu_memo: dict[tuple[int, float], tuple[float | None, dict]] = {}
        self.disk_read = self.disk_write = 0.0
        self.host_busy_pct_s = self.host_iowait_pct_s = 0.0
        self.nvlink = [[0.0, 0.0] for _ in self.gpus]  # cumulative KiB tx, rx
        self.psi: dict[str, dict] = {}
        # $XDG_RUNTIME_DIR of the simulated shell: a directory of our own (the probe files of a
        # scenario with `probe` go there), removed with the machine.
        self.runtime_dir = tempfile.mkdtemp(prefix="gputop-diag-sim-")
        weakref.finalize(self, shutil.rmtree, self.runtime_dir, True)
        self._probed: dict[int, dict] = {}  # pid -> where its probe file stands

    def _kernel_lines(self) -> list[tuple[float, str]]:
        lines = build_kernel_lines(
            self.spec, self.gpus, self.xids, self.driver_version, self.clock.start, self.boot_time
        )
        return sorted([*lines, *self._extra_lines], key=lambda x: x[0])

    def _oom_kill(self, when: float) -> None:
        """The kernel's OOM killer ends the first dataloader worker (mm/oom_kill.c format)."""
        victim = next((p for p in self.procs.values() if p.role == "worker"), None)
        if victim is None:
            return
        self.exit_at[victim.pid] = when
        self._extra_lines.append(
            (
                when,
                f"Out of memory: Killed process {victim.pid} ({victim.name[:15]}) "
                f"total-vm:81234567kB, anon-rss:2345678kB, file-rss:10240kB, shmem-rss:0kB, "
                f"UID:1001 pgtables:5120kB oom_score_adj:0",
            )
        )

    # -- timeline ----------------------------------------------------------------------------
    def phase_at(self, t: float) -> tuple[str, float]:
        """The profile name at time t and the seconds since that phase began."""
        rel = t - self.clock.start
        if self.spec.get("loop") and rel >= 0:
            rel %= self.spec["duration"]
        name, began = self.spec["timeline"][0][1], 0.0
        for start, prof in self.spec["timeline"]:
            if rel >= start:
                name, began = prof, start
        return name, rel - began

    def n(self, key: str, k: int, t: float) -> float:
        """Seeded noise for figure `key` of item `k` at time t (constant over 0.25 s)."""
        if not self.noise:
            return 0.0
        i = (int(t * 4) * 7919 + k * 104729 + _KEYS[key] * 31) % _NOISE_N
        return self._noise[i] * NOISE_SD[key] * self.noise

    def noises(self, k: int, t: float) -> dict[str, float]:
        """`n(key, k, t)` of every figure at once: the same numbers, one table index each."""
        if not self.noise:
            return _NO_NOISE
        table, scale, base = self._noise, self.noise, int(t * 4) * 7919 + k * 104729
        return {
            key: table[(base + offset) % _NOISE_N] * sd * scale
            for key, offset, sd in _NOISE_OFFSETS
        }

    def noise_of(self, key: str, t: float):
        """`n(key, k, t)` as a function of the item k alone, for many items at one time."""
        if not self.noise:
            return _no_noise
        table, sd, scale = self._noise, NOISE_SD[key], self.noise
        base = int(t * 4) * 7919 + _KEYS[key] * 31
        return lambda k: table[(base + k * 104729) % _NOISE_N] * sd * scale

    def noise_series(self, key: str, items: range, t: float) -> list[float]:
        """`[n(key, k, t) for k in items]`, without a call per item."""
        if not self.noise:
            return [0.0] * len(items)
        table, sd, scale = self._noise, NOISE_SD[key], self.noise
        base = int(t * 4) * 7919 + _KEYS[key] * 31
        return [table[(base + k * 104729) % _NOISE_N] * sd * scale for k in items]

    def profile_at(self, t: float) -> dict:
        return self.profiles[self.phase_at(t)[0]]

    def sample_noise(self, key: str, k: int, sample: int) -> float:
        """Seeded noise for figure `key` of item `k` in the driver's sample number `sample`."""
        if not self.noise:
            return 0.0
        i = (sample * 6007 + k * 104729 + _KEYS[key] * 31 + 11) % _NOISE_N
        return self._noise[i] * NOISE_SD[key] * self.noise

    def job_on(self, prof: dict, t: float) -> bool:
        return prof.get("procs", True) and t >= self.clock.start + self.spec.get("jobs_from", 0)

    def alive(self, pid: int, t: float | None = None) -> SimProc | None:
        p = self.procs.get(pid)
        if p is None or pid in self.vanished:
            return None
        if t is None:
            t = self.clock.now()
        if p.create_time > t or (self.exit_at and t >= self.exit_at.get(pid, math.inf)):
            return None
        return p

    # -- evaluation --------------------------------------------------------------------------
    def state(self) -> dict:
        """The machine at the clock's now; computed once per 0.1 s."""
        now = self.clock.now()
        current = self._current
        if current is not None and current[2] == now:  # the clock has not moved
            return current[1]
        t = round(now / STEP_S) * STEP_S
        if current is not None and current[0] == t:
            return current[1]
        with self.lock:
            if self._state is not None and t == self._t:
                return self._state
            st = self._evaluate(t)
            if self._t is None or t > self._t:
                self._integrate(st, 0.0 if self._t is None else t - self._t)
                self._t, self._state = t, st
                if self.spec.get("probe") and st["job_on"]:
                    self._write_probes(st)
                self._current = (t, st, now)
            return st

    def disk_bytes(self) -> tuple[int, int]:
        """Bytes read and written so far, as a disk's counters run: on between the 0.1 s steps
        the machine is integrated in (a one-shot command's window can be shorter than a step)."""
        st = self.state()
        with self.lock:
            ahead = self.clock.now() - self._t if self._t is not None else 0.0
            if abs(ahead) < 1e-6:  # on a step
                ahead = 0.0
            return (
                int(self.disk_read + st["prof"]["host"].get("disk_read", 2.0e6) * ahead),
                int(self.disk_write + 1.5e6 * ahead),
            )

    def _evaluate(self, t: float) -> dict:
        pname, since = self.phase_at(t)
        prof = self.profiles[pname]
        gpus = [self._gpu_state(g, prof, since, t) for g in self.gpus]
        host = prof["host"]
        on = self.job_on(prof, t)
        cpu: dict[int, dict[int, float]] = {}
        noise = self.noise_of("cpu", t)
        for p in self.procs.values():
            if self.alive(p.pid, t):
                cpu[p.pid] = self._thread_cpu(p, host, gpus, noise, on)
        total = sum(sum(v.values()) for v in cpu.values()) + BACKGROUND_CPU_PCT * HOST_CPUS
        host_cpu = min(100.0, total / HOST_CPUS)
        iowait = min(max(0.0, host["iowait"] + self.n("iowait", 0, t)), 100.0 - host_cpu)
        io_some = max(0.0, host.get("io_psi", 0.0) + self.n("iowait", 7, t))
        cpu_some = max(0.0, (host_cpu - 70.0) * 0.8)
        return dict(
            t=t,
            profile=pname,
            prof=prof,
            since=since,
            gpus=gpus,
            cpu=cpu,
            host_cpu=host_cpu,
            iowait=iowait,
            psi=dict(cpu=(cpu_some, 0.0), io=(io_some, io_some * 0.55), memory=(0.0, 0.0)),
            job_on=on,
            gpu_procs={},
        )

    def _gpu_state(self, g: SimGpu, prof: dict, since: float, t: float) -> dict:
        """GPU g's figures at time t (`prof` and `since` are `phase_at(t)`'s). The state of a
        tick and GPM's average over the second before it both ask for the GPU at the tick's
        time: the answer is kept (`_gpu_memo`) while the GPU's ranks are where they were."""
        gi = g.index
        idle_since = self.idle_after.get(gi)
        hit = self._gpu_memo.get((gi, t))
        if hit is not None and hit[0] == idle_since:
            return hit[1]
        f = self.busy(t, gi)
        noise = self.noises(gi, t)
        busy, idle, m = prof["busy"], prof["idle"], self.model
        vals: dict = {}
        for key, i, span, noisy in _figures(prof):
            if span is None:
                vals[key] = None
                continue
            v = i + f * span + (noise[key] if noisy else 0.0)
            vals[key] = min(100.0, max(0.0, v)) if key != "temp" else v
        pw = idle["power"] + f * (busy["power"] - idle["power"]) + noise["power"]
        clk = idle["clock"] + f * (busy["clock"] - idle["clock"]) + noise["clock"]
        mem_frac = prof["mem_frac"] + prof.get("mem_growth_per_min", 0.0) * since / 60.0
        reasons: set[str] = set()
        if vals["util"] is not None and vals["util"] < 5:
            reasons.add("gpu_idle")
        elif f > 0.5:
            reasons.update(prof.get("reasons", ()))
        nv_rate = prof.get("nvlink_busy", 0.0) * f + prof.get("nvlink_idle", 0.0) * (1 - f)
        gs = dict(
            f=f,
            **vals,
            power_w=max(m["idle_w"], pw * m["power_limit_w"]),
            sm_mhz=int(max(m["idle_sm"], min(1.0, clk) * m["sm_max"])),
            mem_mhz=m["mem_max"],  # HBM runs at one clock
            pstate=0 if prof.get("procs", True) else m["idle_pstate"],
            mem_frac=min(0.995, mem_frac),
            reasons=reasons,
            pcie=prof.get("pcie_kbps", 0) * max(f, 0.05),
            nvlink=nv_rate if m["nvlinks"] else 0.0,
        )
        if len(self._gpu_memo) >= _GPU_MEMO_MAX:
            self._gpu_memo.clear()
        self._gpu_memo[gi, t] = (idle_since, gs)
        return gs

    def _thread_cpu(self, p: SimProc, host: dict, gpus: list, noise, on: bool) -> dict:
        """Each thread's CPU % (`noise`: `noise_of("cpu", t)`)."""
        k = p.pid % 97
        if p.role in ("host", "cotenant", "small", "launcher"):
            c = p.cpu_fixed if p.cpu_fixed is not None else 30.0
            share = max(0.0, c + (noise(k) if c else 0.0)) / len(p.threads)
            return {th.tid: share for th in p.threads}
        if not on:
            return {th.tid: 0.0 for th in p.threads}
        out = {}
        for th in p.threads:
            role = th.role
            if role == "main":
                c = host["main_cpu"]
            elif role == "worker":
                c = host["worker_cpu"] if p.worker_slot < host["workers"] else 0.3
            elif role == "pin":
                c = host.get("pin_cpu", 1.5)
            elif role == "autograd":
                f = gpus[p.gpu]["f"] if p.gpu is not None and p.gpu < len(gpus) else 0.5
                c = 8.0 * f
            elif role == "omp":
                out[th.tid] = 0.0
                continue
            else:
                c = 1.5
            out[th.tid] = min(100.0, max(0.0, c + noise(k + th.tid % 7)))
        return out

    def _integrate(self, st: dict, dt: float) -> None:
        for res, (some, full) in st["psi"].items():
            a = self.psi.get(res)
            if a is None:  # as if the machine had been like this for a while
                self.psi[res] = dict(some=[some] * 3, full=[full] * 3, total=[0.0, 0.0])
                continue
            for j, tau in enumerate(_PSI_TAU):
                w = 1.0 - math.exp(-dt / tau)
                a["some"][j] += (some - a["some"][j]) * w
                a["full"][j] += (full - a["full"][j]) * w
            a["total"][0] += some / 100.0 * dt * 1e6
            a["total"][1] += full / 100.0 * dt * 1e6
        if dt <= 0:
            return
        for p in self.procs.values():
            rates = st["cpu"].get(p.pid)
            if rates:
                for th in p.threads:
                    th.cum_s += rates.get(th.tid, 0.0) / 100.0 * dt
        host = st["prof"]["host"]
        self.disk_read += host.get("disk_read", 2.0e6) * dt
        self.disk_write += 1.5e6 * dt
        self.host_busy_pct_s += st["host_cpu"] * dt
        self.host_iowait_pct_s += st["iowait"] * dt
        for g, gs in zip(self.gpus, st["gpus"], strict=True):
            self.nvlink[g.index][0] += gs["nvlink"] * dt
            self.nvlink[g.index][1] += gs["nvlink"] * 0.98 * dt

    def gpu_average(self, gi: int, t1: float, t2: float) -> dict:
        """GPU figures averaged over (t1, t2], as GPM reports between two samples."""
        key = (gi, round(t1, 1), round(t2, 1))
        hit = self._avg_cache.get(key)
        if hit is not None:
            return hit
        span = t2 - t1
        k = 1 if span <= 1.0 else min(30, int(span + 1e-9))
        points = [t2 - j * span / k for j in range(k)]
        sums: dict = dict.fromkeys(GPU_KEYS, 0.0)
        for tp in points:
            pname, since = self.phase_at(tp)
            gs = self._gpu_state(self.gpus[gi], self.profiles[pname], since, tp)
            for name in GPU_KEYS:
                v = gs[name]
                sums[name] = None if v is None or sums[name] is None else sums[name] + v
        out = {name: None if v is None else v / k for name, v in sums.items()}
        if len(self._avg_cache) > 4096:
            self._avg_cache.clear()
        self._avg_cache[key] = out
        return out

    # -- the memory behind a rank's probe file (`probe_files.py`) -----------------------------
    def _probe_memory(self, p: SimProc, st: dict, ran_s: float) -> dict | None:
        """The caching allocator's figures behind the rank's NVML figure: what it reserved is
        the process's memory less its CUDA context."""
        if p.gpu is None:
            return None
        used = next((b for q, b in self.gpu_procs(p.gpu, st) if q.pid == p.pid), None)
        if used is None:
            return None
        spec = self.spec["probe"]
        reserved = max(0, used - CONTEXT_MIB * MIB)
        allocated = int(reserved * spec.get("allocated_share", 0.93))
        return dict(
            allocated=allocated,
            reserved=reserved,
            peak=min(reserved, int(allocated * 1.04)),
            inactive_split=int((reserved - allocated) * spec.get("split_share", 0.2)),
            retries=int(spec.get("retries_per_min", 0.0) * ran_s / 60.0),
            ooms=0,
        )

    # -- views the fakes share ---------------------------------------------------------------
    def gpu_procs(self, gi: int, st: dict) -> list[tuple[SimProc, int]]:
        """(process, used bytes) on GPU gi at the state's time."""
        cached = st["gpu_procs"].get(gi)
        if cached is not None:
            return cached
        g, gs, t = self.gpus[gi], st["gpus"][gi], st["t"]
        on = [
            p
            for p in self.by_gpu.get(gi, ())
            if self.alive(p.pid, t) and (p.role in ("small", "cotenant") or st["job_on"])
        ]
        out = [(p, int(p.mem_mib * MIB)) for p in on if p.mem_mib is not None]
        job = [p for p in on if p.mem_mib is None]
        fixed = sum(b for _, b in out)
        if job and g.mig:  # the processes fill their MIG instance to the profile's fraction
            per = Counter(p.mig for p in job)
            out += [(p, int(gs["mem_frac"] * g.mig[p.mig].mib * MIB / per[p.mig])) for p in job]
        elif job:
            budget = gs["mem_frac"] * g.total_bytes - self.model["reserved_mib"] * MIB - fixed
            share = max(CONTEXT_MIB * MIB, budget / len(job))
            out += [(p, int(share)) for p in job]
        st["gpu_procs"][gi] = out
        return out

    def used_bytes(self, gi: int, st: dict) -> int:
        """NVML's used memory: the driver's reserve plus every process's allocations."""
        g = self.gpus[gi]
        procs = sum(b for _, b in self.gpu_procs(gi, st))
        return min(g.total_bytes - 64 * MIB, self.model["reserved_mib"] * MIB + procs)

    def uid_of(self, user: str) -> int:
        """A simulated user's id (the same /proc/<pid>/status gives): root 0, the shell's user
        1001, anyone else 1002."""
        return 0 if user == "root" else 1001 if user == self.user else 1002

    # -- signals -----------------------------------------------------------------------------
    def kill(self, pid: int, sig: int) -> None:
        """`os.kill` on the simulated machine: never a real process. The process ends (a
        training script ends on SIGINT, SIGTERM and SIGKILL alike), so the next ticks show it
        gone; ProcessLookupError and PermissionError as the kernel gives them."""
        with self.lock:
            p = self.alive(pid)
            if p is None:
                raise ProcessLookupError(3, "No such process")
            if self.user != "root" and p.user != self.user:
                raise PermissionError(1, "Operation not permitted")
            if sig != 0:
                self.vanish_process(pid)
                self._idle_if_unused(p)

    def _idle_if_unused(self, p: SimProc) -> None:
        """A GPU whose last rank was signalled away stops working from now on (its kernels
        end with the process): busy time, clocks and power fall to idle."""
        if p.role != "rank" or p.gpu is None:
            return
        others = [q for q in self.procs.values() if q.role == "rank" and q.gpu == p.gpu]
        if not any(self.alive(q.pid) for q in others):
            self.idle_after.setdefault(p.gpu, self.clock.now())

    def vanish_process(self, pid: int) -> None:
        """The process exits: NVML stops listing it and psutil raises NoSuchProcess."""
        self.vanished.add(pid)
        with self.lock:
            if self._state is not None:
                self._state["gpu_procs"].clear()
