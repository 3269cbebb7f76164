"""Every scenario builds and runs; seeds are reproducible; each scenario shows the signals of
its class; a large machine stays cheap to read."""

from __future__ import annotations

import statistics
import threading
import time

import psutil
import pynvml
import pytest

from gputop_diag import sim
from gputop_diag.sim.clock import EPOCH0

CLASSES = {
    "capacity",
    "bandwidth",
    "compute",
    "input_pipeline",
    "synchronization",
    "communication",
    "scheduler",
    "idle",
    "balanced",
    "insufficient_data",
}
GPM_IDS = (
    pynvml.NVML_GPM_METRIC_SM_UTIL,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
)
TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX


class Reader:
    """Reads everything a collection tick reads, as a collector would (handles and Process
    objects kept between ticks, GPM samples paired)."""

    def __init__(self, src) -> None:
        self.src, self.n = src, src.nvml
        self.ok = True
        try:
            self.n.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            self.ok = False
            return
        self.handles = [
            self.n.nvmlDeviceGetHandleByIndex(i) for i in range(self.n.nvmlDeviceGetCount())
        ]
        self.samples = {}
        self.procs = {}

    def _call(self, fn, *args):
        try:
            return getattr(self.n, fn)(*args)
        except (
            pynvml.NVMLError_NotSupported,
            pynvml.NVMLError_GpuIsLost,
            pynvml.NVMLError_NotFound,
        ):
            return None

    def tick(self) -> dict:
        out = {"gpus": [], "host": self._host()}
        if not self.ok:
            return out
        for i, h in enumerate(self.handles):
            c = self._call
            g = dict(
                util=c("nvmlDeviceGetUtilizationRates", h),
                mem=c("nvmlDeviceGetMemoryInfo", h, pynvml.nvmlMemory_v2),
                power=c("nvmlDeviceGetPowerUsage", h),
                temp=c("nvmlDeviceGetTemperature", h, pynvml.NVML_TEMPERATURE_GPU),
                sm_clock=c("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_SM),
                reasons=c("nvmlDeviceGetCurrentClocksEventReasons", h),
                pcie=c("nvmlDeviceGetPcieThroughput", h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
                fields=c(
                    "nvmlDeviceGetFieldValues",
                    h,
                    [(TX, 0xFFFFFFFF), pynvml.NVML_FI_DEV_MEMORY_TEMP],
                ),
                procs=c("nvmlDeviceGetComputeRunningProcesses", h) or [],
                pstate=c("nvmlDeviceGetPerformanceState", h),
                gpm=self._gpm(i, h),
            )
            for p in g["procs"]:
                self._process(p.pid)
            out["gpus"].append(g)
        return out

    def _gpm(self, i, h):
        sup = self._call("nvmlGpmQueryDeviceSupport", h)
        if sup is None or not sup.isSupportedDevice:
            return None
        s = self.n.nvmlGpmSampleAlloc()
        if self._call("nvmlGpmSampleGet", h, s) is None:
            return None
        prev, self.samples[i] = self.samples.get(i), s
        if prev is None:
            return None
        mg = pynvml.c_nvmlGpmMetricsGet_t()
        mg.version, mg.numMetrics, mg.sample1, mg.sample2 = 1, len(GPM_IDS), prev, s
        for k, m in enumerate(GPM_IDS):
            mg.metrics[k].metricId = m
        self.n.nvmlGpmMetricsGet(mg)
        self.n.nvmlGpmSampleFree(prev)
        return [mg.metrics[k].value for k in range(len(GPM_IDS))]

    def _process(self, pid):
        p = self.procs.get(pid)
        try:
            if p is None:
                p = self.procs[pid] = self.src.psutil.Process(pid)
            with p.oneshot():
                p.name(), p.cpu_percent(None), p.memory_info()
                try:
                    p.threads(), p.cmdline(), p.environ()
                except psutil.AccessDenied:
                    pass
            for k in p.children(recursive=True):
                k.name()
        except psutil.NoSuchProcess:
            self.procs.pop(pid, None)

    def _host(self):
        ps, fs = self.src.psutil, self.src.procfs
        return dict(
            cpu=ps.cpu_percent(percpu=True),
            times=ps.cpu_times_percent(),
            vm=ps.virtual_memory(),
            disk=ps.disk_io_counters(),
            io=fs.read_text("/proc/pressure/io"),
        )


def run(name, seconds=120, **kw):
    src = sim.build(name, **kw)
    r = Reader(src)
    ticks = [r.tick()]
    for _ in range(seconds):
        src.clock.sleep(1.0)
        ticks.append(r.tick())
    return src, ticks


def util(ticks, gpu=0):
    return [t["gpus"][gpu]["util"].gpu for t in ticks if t["gpus"] and t["gpus"][gpu]["util"]]


def gpm(ticks, k, gpu=0):
    return [t["gpus"][gpu]["gpm"][k] for t in ticks if t["gpus"] and t["gpus"][gpu]["gpm"]]


def p(values, q):
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def test_scenarios_are_listed_with_known_classes():
    infos = sim.list_scenarios()
    names = [i.name for i in infos]
    assert {
        "idle",
        "compute-bound",
        "bandwidth-bound",
        "input-starved",
        "sync-stall",
        "sync-step",
        "comm-bound",
        "capacity",
        "memory-leak",
        "thermal-throttle",
        "xid-79",
        "xid-app",
        "driver-mismatch",
        "scheduler-wait",
        "mig",
        "no-gpu",
        "tour",
        "compute-then-input",
    } <= set(names)
    assert all(i.expected_class in CLASSES and i.description and i.duration_s > 0 for i in infos)
    with pytest.raises(sim.UnknownScenario, match="compute-bound") as e:
        sim.build("nope")
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("name", [i.name for i in sim.list_scenarios()])
def test_every_scenario_runs_for_two_minutes(name):
    src, ticks = run(name)
    assert src.scenario == name and src.sim.scenario.name == name
    assert src.clock.now() == EPOCH0 + 120
    assert src.hostname() == "gpu-node-07" and src.environ["USER"] == "alice"
    assert len(ticks) == 121 and all(t["host"]["vm"].total > 0 for t in ticks)


def test_seeds_are_reproducible_and_differ():
    a = util(run("compute-bound", 30, seed=3)[1], 1)
    b = util(run("compute-bound", 30, seed=3)[1], 1)
    c = util(run("compute-bound", 30, seed=4)[1], 1)
    d = util(run("compute-bound", 30)[1], 1)
    assert a == b and a != c and d == util(run("compute-bound", 30, seed=None)[1], 1)
    assert util(run("compute-bound", 10, noise=0)[1]) == [99] * 11


def test_compute_bound_signals():
    src, t = run("compute-bound", 30)
    u = util(t)
    assert min(u) >= 93 and statistics.median(u) >= 97
    assert statistics.median(gpm(t, 0)) >= 85 and statistics.median(gpm(t, 2)) >= 60
    assert 30 <= statistics.median(gpm(t, 3)) <= 45
    power = statistics.median(x["gpus"][0]["power"] for x in t) / 700_000
    assert 0.85 <= power <= 0.95
    assert statistics.median(x["gpus"][0]["sm_clock"] for x in t) > 0.95 * 1980
    assert statistics.median(x["host"]["times"].iowait for x in t) < 3


def test_bandwidth_bound_signals():
    _, t = run("bandwidth-bound", 30)
    assert statistics.median(util(t)) >= 93
    assert 80 <= statistics.median(gpm(t, 3)) <= 92 and statistics.median(gpm(t, 2)) < 15
    assert statistics.median(gpm(t, 1)) < 40  # occupancy moderate
    assert statistics.median(x["gpus"][0]["util"].memory for x in t) > 85


def test_input_starved_signals():
    src, t = run("input-starved", 30)
    u = util(t)
    assert p(u, 5) < 10 and max(u) > 90
    assert 15 <= statistics.median(x["host"]["times"].iowait for x in t) <= 35
    workers = [q for q in src.sim.procs.values() if q.role == "worker"]
    cpu = [w.cpu_s / 30 * 100 for w in workers]
    assert len(workers) >= 8 and min(cpu) > 85


def test_sync_stall_signals():
    src, t = run("sync-stall", 30)
    u = util(t)
    assert p(u, 10) < 10 and max(u) > 90 and 30 <= statistics.median(u) <= 80
    main = [
        th
        for q in src.sim.procs.values()
        if q.role == "rank"
        for th in q.threads
        if th.role == "main"
    ]
    assert min(th.cum_s / 30 * 100 for th in main) > 95
    workers = [q.cpu_s / 30 * 100 for q in src.sim.procs.values() if q.role == "worker"]
    assert max(workers) < 15
    assert statistics.median(x["host"]["times"].iowait for x in t) < 2


def test_sync_step_gaps_are_shorter_than_a_tick():
    """Idle 0.3 s of every 0.8 s step: the 1 s figures stay between 50 and 70 % (one step and
    a quarter per second), while the driver's 1/6 s samples fall to the floor every step."""
    src, t = run("sync-step", 30, noise=0)
    u = util(t)
    assert all(49 <= v <= 70 for v in u) and max(u) - min(u) >= 10
    assert 30 <= statistics.median(gpm(t, 0)) <= 70  # GPM averages over the tick too
    h = src.nvml.nvmlDeviceGetHandleByIndex(0)
    fine = [
        s.sampleValue.uiVal
        for s in src.nvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)[1]
    ]
    assert min(fine) < 10 and max(fine) == 99 and sum(v < 50 for v in fine) >= 25
    main = [th for q in src.sim.procs.values() if q.role == "rank" for th in q.threads]
    assert max(th.cum_s for th in main if th.role == "main") / 30 * 100 > 95


def test_a_scenario_can_bring_its_own_profiles(monkeypatch):
    fast = dict(sim.scenarios.PROFILES["sync"], period=0.5, busy_s=0.25)
    spec = dict(sim.scenarios.SCENARIOS["sync-stall"], timeline=[(0, "half")])
    monkeypatch.setitem(sim.scenarios.SCENARIOS, "own", dict(spec, profiles={"half": fast}))
    src, t = run("own", 10, noise=0)
    assert set(util(t)[1:]) == {50}  # whole steps per second: a flat 50 %
    assert "half" not in sim.scenarios.PROFILES


def test_comm_bound_dips_together_with_nvlink_traffic():
    _, t = run("comm-bound", 30, noise=0)
    sm = [[x["gpus"][g]["gpm"][0] for g in range(8)] for x in t[1:]]
    dips = [row for row in sm if max(row) < 50]
    busy = [row for row in sm if min(row) > 80]
    assert dips and busy and len(dips) + len(busy) >= len(sm) - 10  # all GPUs at once
    nv = [x["gpus"][0]["fields"][0].value.ullVal for x in t]
    rates = [b - a for a, b in zip(nv, nv[1:], strict=False)]
    assert max(rates) > 2e8 and min(rates) < 2e7  # hundreds of GB/s in the dips


def test_capacity_and_memory_leak_signals():
    _, t = run("capacity", 10)
    m = t[-1]["gpus"][0]["mem"]
    assert 0.97 <= m.used / m.total <= 0.99 and m.reserved > 0
    _, t = run("memory-leak", 120, noise=0)
    used = [x["gpus"][1]["mem"].used for x in t]
    assert all(b >= a for a, b in zip(used, used[1:], strict=False))
    assert (used[-1] - used[0]) / 2**20 / 2 > 1000  # MiB per minute


def test_idle_signals():
    _, t = run("idle", 10)
    g = t[-1]["gpus"][0]
    assert g["util"].gpu == 0 and g["reasons"] & pynvml.nvmlClocksEventReasonGpuIdle
    assert 60_000 <= g["power"] <= 80_000 and g["pstate"] in (0, 8) and not g["procs"]
    assert g["sm_clock"] < 400


def test_scale_64_gpus_and_1000_processes_is_cheap():
    src = sim.build("compute-bound", gpu_count=64, process_count=1000)
    assert src.nvml.nvmlInit() is None and src.nvml.nvmlDeviceGetCount() == 64
    r = Reader(src)
    r.tick()
    times = []
    for _ in range(5):
        src.clock.sleep(1)
        t0 = time.perf_counter()
        tick = r.tick()
        times.append(time.perf_counter() - t0)
    assert sum(len(g["procs"]) for g in tick["gpus"]) == 1000
    assert statistics.median(times) < 0.25, times


def test_realtime_clock_follows_the_wall_clock():
    src = sim.build("idle", realtime=True)
    t0 = src.clock.now()
    assert abs(t0 - EPOCH0) < 1
    cancel = threading.Event()
    cancel.set()
    assert src.clock.sleep(5, cancel) is True  # returns at once when cancelled
    assert src.clock.sleep(0.05) is False
    assert 0.04 < src.clock.now() - t0 < 1
    instant = sim.build("idle")
    assert instant.clock.sleep(3600) is False and instant.clock.now() == EPOCH0 + 3600


def test_tour_passes_through_its_phases():
    src = sim.build("tour", noise=0)
    seen = []
    for _ in range(0, 300, 10):
        seen.append(src.sim.phase_at(src.clock.now())[0])
        src.clock.sleep(10)
    assert seen[0] == "idle" and {"compute", "input", "sync", "comm"} <= set(seen)
    assert src.sim.phase_at(src.clock.now())[0] == "idle"  # and it loops


@pytest.mark.parametrize(
    "kw", [dict(gpu_count=0), dict(gpu_count=1, process_count=3), dict(process_count=0)]
)
def test_overrides_work_on_every_scenario(kw):
    for info in sim.list_scenarios():
        src, ticks = run(info.name, 5, **kw)
        if kw.get("gpu_count") is not None and ticks[-1]["gpus"]:
            assert len(ticks[-1]["gpus"]) == kw["gpu_count"]
        started = not src.sim.spec.get("jobs_from")  # the tour starts its job at 20 s
        if kw.get("process_count") is not None and info.name != "no-gpu" and started:
            listed = {p.pid for g in ticks[-1]["gpus"] for p in g["procs"]}
            assert len(listed) == kw["process_count"] or not ticks[-1]["gpus"]
