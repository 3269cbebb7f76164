"""The driver's ~1/6 s busy-time samples: `nvmlDeviceGetSamples` in the simulator, read by the
real collector into `GpuState.util_samples`."""

from __future__ import annotations

import statistics

import pynvml
import pytest

from gputop_diag import sim
from gputop_diag.collect.nvml.collector import NvmlCollector
from gputop_diag.collect.nvml.extras import MAX_BUSY_SAMPLES_PER_TICK
from gputop_diag.monitor.sampler import Sampler

UTIL = pynvml.NVML_GPU_UTILIZATION_SAMPLES


def nvml(name="sync-step", **kw):
    src = sim.build(name, **kw)
    src.nvml.nvmlInit()
    return src, src.nvml, src.nvml.nvmlDeviceGetHandleByIndex(0)


def sampler(name="sync-step", **kw) -> Sampler:
    return Sampler(sim.build(name, **kw), interval=1.0)


def run(s: Sampler, ticks: int, seconds: float = 1.0):
    snaps = [s.sample()]
    for _ in range(ticks):
        s.sources.clock.sleep(seconds)
        snaps.append(s.sample())
    return snaps


def values(samples) -> list[int]:
    return [x.sampleValue.uiVal for x in samples]


# -- the simulated driver ---------------------------------------------------------------------
def test_same_types_as_the_real_binding_returns(monkeypatch):
    """The real `pynvml.nvmlDeviceGetSamples`, over a C function answered from the simulator,
    gives exactly what the fake gives: same types, same timestamps, same values."""
    src, n, h = nvml()
    src.clock.sleep(3.3)
    calls = []

    def c_function(device, c_type, c_ts, value_type, count, buf):
        calls.append(buf is None)
        try:
            vt, got = n.nvmlDeviceGetSamples(device, c_type.value, c_ts.value)
        except pynvml.NVMLError as e:
            return e.value
        value_type._obj.value = vt
        if buf is None:  # the sizing call
            count._obj.value = len(got)
            return pynvml.NVML_SUCCESS
        for k in range(min(len(buf), len(got))):
            buf[k] = got[k]
        count._obj.value = min(len(buf), len(got))
        return pynvml.NVML_SUCCESS

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lambda name: c_function)
    fake = n.nvmlDeviceGetSamples(h, UTIL, 0)
    real = pynvml.nvmlDeviceGetSamples(h, UTIL, 0)
    assert calls == [True, False]
    assert type(fake) is type(real) is tuple
    assert type(fake[0]) is type(real[0]) is int
    assert fake[0] == real[0] == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert type(fake[1]) is type(real[1]) is list
    assert all(isinstance(x, pynvml.c_nvmlSample_t) for x in fake[1])
    assert all(isinstance(x.sampleValue, pynvml.c_nvmlValue_t) for x in fake[1])
    assert [x.timeStamp for x in fake[1]] == [x.timeStamp for x in real[1]]
    assert values(fake[1]) == values(real[1])
    newest = fake[1][-1].timeStamp
    with pytest.raises(pynvml.NVMLError_NotFound):  # the real wrapper raises it too
        pynvml.nvmlDeviceGetSamples(h, UTIL, newest)


def test_timestamps_are_the_clock_in_microseconds_every_sixth_of_a_second():
    src, n, h = nvml()
    src.clock.sleep(7.45)
    now_us = src.clock.now() * 1e6
    _, got = n.nvmlDeviceGetSamples(h, UTIL, 0)
    ts = [x.timeStamp for x in got]
    assert now_us - 1e6 / 6 < ts[-1] <= now_us
    assert {b - a for a, b in zip(ts, ts[1:], strict=False)} <= {166_666, 166_667}
    assert all(0 <= v <= 100 for v in values(got))


def test_only_samples_newer_than_last_seen():
    src, n, h = nvml()
    src.clock.sleep(5)
    _, got = n.nvmlDeviceGetSamples(h, UTIL, 0)
    _, tail = n.nvmlDeviceGetSamples(h, UTIL, got[-4].timeStamp)
    assert [x.timeStamp for x in tail] == [x.timeStamp for x in got[-3:]]
    assert values(tail) == values(got[-3:])
    _, between = n.nvmlDeviceGetSamples(h, UTIL, got[-4].timeStamp - 1)
    assert len(between) == 4
    src.clock.sleep(0.5)
    _, new = n.nvmlDeviceGetSamples(h, UTIL, got[-1].timeStamp)
    assert len(new) == 3 and new[0].timeStamp > got[-1].timeStamp


def test_not_found_when_nothing_new():
    src, n, h = nvml()
    _, got = n.nvmlDeviceGetSamples(h, UTIL, 0)
    with pytest.raises(pynvml.NVMLError_NotFound):  # asked again at the same time
        n.nvmlDeviceGetSamples(h, UTIL, got[-1].timeStamp)
    src.clock.sleep(0.1)  # less than one sample period
    with pytest.raises(pynvml.NVMLError_NotFound):
        n.nvmlDeviceGetSamples(h, UTIL, got[-1].timeStamp)
    with pytest.raises(pynvml.NVMLError_NotFound):  # a timestamp from the future
        n.nvmlDeviceGetSamples(h, UTIL, int(src.clock.now() * 1e6) + 10_000_000)
    src.clock.sleep(0.1)
    assert len(n.nvmlDeviceGetSamples(h, UTIL, got[-1].timeStamp)[1]) == 1


def test_the_ring_buffer_is_bounded_like_the_drivers():
    src, n, h = nvml()
    first = n.nvmlDeviceGetSamples(h, UTIL, 0)[1]
    assert len(first) == 100  # the driver's buffer, full since long before we started
    src.clock.sleep(60)
    _, got = n.nvmlDeviceGetSamples(h, UTIL, first[-1].timeStamp)
    assert len(got) == 100  # 360 were taken; the oldest 260 are gone
    assert got[0].timeStamp > first[-1].timeStamp + 40e6
    power = n.nvmlDeviceGetSamples(h, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)[1]
    assert len(power) == 120


def test_other_sampling_types_follow_the_same_signal():
    src, n, h = nvml(noise=0)
    src.clock.sleep(10)
    util = values(n.nvmlDeviceGetSamples(h, UTIL, 0)[1])
    power = values(n.nvmlDeviceGetSamples(h, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)[1][-100:])
    memctl = values(n.nvmlDeviceGetSamples(h, pynvml.NVML_MEMORY_UTILIZATION_SAMPLES, 0)[1])
    busiest, idlest = util.index(max(util)), util.index(min(util))
    assert power[busiest] > 500_000 > power[idlest] >= 72_000  # mW: 0.9 of 700 W vs idle
    assert memctl[busiest] > 35 > memctl[idlest]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        n.nvmlDeviceGetSamples(h, pynvml.NVML_SAMPLINGTYPE_COUNT, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        n.nvmlDeviceGetSamples(h, pynvml.NVML_MODULE_POWER_SAMPLES, 0)


@pytest.mark.parametrize("name", ["sync-step", "sync-stall", "input-starved", "comm-bound"])
def test_the_tick_figure_is_the_mean_of_the_last_seconds_samples(name):
    """One signal: NVML's utilization (sample period 1 s here) is the mean of the six ~1/6 s
    samples of that second."""
    src, n, h = nvml(name, noise=0)
    ticks, means = [], []
    for _ in range(24):
        src.clock.sleep(1)
        since = int(src.clock.now() * 1e6) - 1_000_000
        got = values(n.nvmlDeviceGetSamples(h, UTIL, since)[1])
        assert len(got) == 6
        ticks.append(n.nvmlDeviceGetUtilizationRates(h).gpu)
        means.append(statistics.fmean(got))
    assert all(abs(t - m) <= 1 for t, m in zip(ticks, means, strict=True)), (ticks, means)
    assert max(ticks) - min(ticks) > 15  # the workloads vary: equal figures prove nothing


def test_mig_mode_and_mig_handles_are_not_supported():
    src, n, h = nvml("mig")
    with pytest.raises(pynvml.NVMLError_NotSupported):
        n.nvmlDeviceGetSamples(h, UTIL, 0)
    m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        n.nvmlDeviceGetSamples(m, UTIL, 0)


def test_a_lost_gpu_raises_gpu_is_lost():
    src, n, _ = nvml("xid-79")
    h3, h2 = n.nvmlDeviceGetHandleByIndex(3), n.nvmlDeviceGetHandleByIndex(2)
    assert n.nvmlDeviceGetSamples(h3, UTIL, 0)[1]
    src.clock.sleep(95)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        n.nvmlDeviceGetSamples(h3, UTIL, 0)
    assert n.nvmlDeviceGetSamples(h2, UTIL, 0)[1]


# -- the collector ----------------------------------------------------------------------------
def test_sub_second_gaps_show_in_the_samples_while_the_tick_figure_hides_them():
    snaps = run(sampler("sync-step"), 30)
    for gi in (0, 5):
        gpus = [sn.gpu(gi) for sn in snaps[1:]]
        ticks = [g.util_gpu_pct for g in gpus]
        fine = [v for g in gpus for v in g.util_samples]
        assert all(len(g.util_samples) == 6 for g in gpus)
        assert min(ticks) >= 40  # no tick looks like a gap
        assert sum(v < 25 for v in fine) / len(fine) >= 0.2  # ~1/6 s idle gaps every step
        assert max(fine) >= 95
        spread = [max(g.util_samples) - min(g.util_samples) for g in gpus]
        assert statistics.median(spread) > 60  # not copies of the tick figure
        # the mean of a tick's samples is its figure: one signal, two resolutions
        means = [statistics.fmean(g.util_samples) for g in gpus]
        assert statistics.median(abs(t - m) for t, m in zip(ticks, means, strict=True)) < 4
    steady = run(sampler("compute-bound"), 10)
    assert min(v for sn in steady[1:] for v in sn.gpus[0].util_samples) > 85


def test_samples_are_the_drivers_values_oldest_first():
    s = sampler("input-starved", seed=7)
    snaps = run(s, 4, seconds=2.5)
    twin, n, h = nvml("input-starved", seed=7)
    twin.clock.sleep(10)
    got = n.nvmlDeviceGetSamples(h, UTIL, 0)[1]
    drivers = [float(x.sampleValue.uiVal) for x in got]
    collected = [v for sn in snaps for v in sn.gpus[0].util_samples]
    assert collected == drivers[-len(collected) :]
    assert len(collected) == 6 + 4 * 15  # first tick: the last second; then 2.5 s per tick
    assert all(isinstance(v, float) for v in collected)
    assert len(set(collected)) > 5


def test_first_tick_keeps_only_the_last_second():
    first = sampler().sample()
    assert [len(g.util_samples) for g in first.gpus] == [6] * 8  # not the 100 in the buffer


class SinceBootDriver:
    """The fake NVML, but its sample timestamps count from boot rather than from the epoch."""

    def __init__(self, nvml, shift_us: int) -> None:
        self._n, self._shift = nvml, shift_us

    def __getattr__(self, name):
        return getattr(self._n, name)

    def nvmlDeviceGetSamples(self, device, sampling_type, timeStamp):
        vt, got = self._n.nvmlDeviceGetSamples(
            device, sampling_type, timeStamp + self._shift if timeStamp else 0
        )
        for x in got:
            x.timeStamp -= self._shift
        return vt, got


def test_samples_keep_coming_when_the_drivers_clock_is_not_ours():
    src = sim.build("sync-step")
    shift = int(src.sim.boot_time * 1e6)
    c = NvmlCollector(SinceBootDriver(src.nvml, shift), src.clock, "node")
    counts = []
    for _ in range(5):
        counts.append(len(c.collect().gpus[0].util_samples))
        src.clock.sleep(1)
    assert counts == [6] * 5


def test_a_long_pause_is_capped():
    s = sampler()
    s.sample()
    s.sources.clock.sleep(5)
    assert len(s.sample().gpus[0].util_samples) == 30
    s.sources.clock.sleep(30)  # 180 samples taken, 100 still in the driver's buffer
    snap = s.sample()
    got = snap.gpus[0].util_samples
    assert len(got) == MAX_BUSY_SAMPLES_PER_TICK == 64
    twin, n, h = nvml()
    twin.clock.sleep(35)
    newest = [float(v) for v in values(n.nvmlDeviceGetSamples(h, UTIL, 0)[1])]
    assert list(got) == newest[-64:]  # the newest, oldest first
    s.sources.clock.sleep(1)
    assert len(s.sample().gpus[0].util_samples) == 6


def test_not_found_is_an_empty_tick_not_an_error_and_nothing_is_lost():
    s = sampler(gpu_count=2)
    s.sample()
    s.sources.sim.inject_error("nvmlDeviceGetSamples", pynvml.NVML_ERROR_NOT_FOUND, gpu=0, times=1)
    s.sources.clock.sleep(1)
    snap = s.sample()
    assert snap.gpus[0].util_samples == () and len(snap.gpus[1].util_samples) == 6
    assert not snap.errors and not s.nvml.q.last_error
    s.sources.clock.sleep(1)
    assert len(s.sample().gpus[0].util_samples) == 12  # the missed second comes next tick


@pytest.mark.parametrize(
    "code",
    [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND],
    ids=["not_supported", "function_not_found"],
)
def test_unsupported_is_empty_and_not_asked_again(code):
    s = sampler(gpu_count=2)
    s.sources.sim.inject_error("nvmlDeviceGetSamples", code, gpu=0)
    calls = s.sources.sim.call_counts
    snaps = run(s, 5)
    assert all(sn.gpus[0].util_samples == () for sn in snaps)
    assert all(len(sn.gpus[1].util_samples) == 6 for sn in snaps)
    assert s.sources.sim.raised["nvmlDeviceGetSamples"] == 1
    assert calls["nvmlDeviceGetSamples"] == 1 + 6  # GPU 0 once, GPU 1 every tick
    assert all(sn.gpus[0].util_gpu_pct is not None for sn in snaps)  # the rest still read


def test_mig_gpu_is_asked_once():
    s = sampler("mig")
    snaps = run(s, 4)
    assert all(sn.gpus[0].util_samples == () for sn in snaps)
    assert s.sources.sim.call_counts["nvmlDeviceGetSamples"] == 1


def test_other_errors_are_empty_and_retried():
    s = sampler(gpu_count=1)
    s.sample()
    s.sources.sim.inject_error(
        "nvmlDeviceGetSamples", pynvml.NVML_ERROR_NO_PERMISSION, gpu=0, times=1
    )
    s.sources.clock.sleep(1)
    assert s.sample().gpus[0].util_samples == ()
    s.sources.clock.sleep(1)
    assert len(s.sample().gpus[0].util_samples) == 12


def test_gpu_lost_mid_run():
    s = sampler("xid-79")
    snaps = run(s, 100)
    before, after = snaps[85].gpu(3), snaps[95].gpu(3)
    assert len(before.util_samples) == 6 and not before.lost
    assert after.lost and after.util_samples == ()
    assert all(len(snaps[95].gpu(i).util_samples) == 6 for i in (0, 1, 2, 4, 5, 6, 7))
    calls = s.sources.sim.call_counts["nvmlDeviceGetSamples"]
    s.sources.clock.sleep(1)
    s.sample()
    assert s.sources.sim.call_counts["nvmlDeviceGetSamples"] - calls == 7


def test_gpu_is_lost_from_the_samples_call_marks_the_gpu_lost():
    s = sampler(gpu_count=2)
    s.sample()
    s.sources.sim.inject_error("nvmlDeviceGetSamples", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=1)
    s.sources.clock.sleep(1)
    snap = s.sample()
    assert snap.gpu(1).lost and not snap.gpu(0).lost
    assert any(e.gpu_index == 1 and "lost" in e.message for e in snap.errors)


def test_out_of_range_values_are_dropped():
    s = sampler(gpu_count=1, noise=0)
    s.sample()
    real = s.sources.sim.driver_sample
    s.sources.sim.driver_sample = lambda gi, k, fig: 4e9 if k % 3 == 0 else real(gi, k, fig)
    s.sources.clock.sleep(2)
    got = s.sample().gpus[0].util_samples
    assert len(got) == 8 and all(0 <= v <= 100 for v in got)
