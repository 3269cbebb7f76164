"""The slowly changing NVML fields (error counters, BAR1, the PCIe link) are read every
`SLOW_FIELDS_EVERY_S` and carried in every snapshot in between; a GPU lost between two slow reads
is found lost on the next tick by the calls made every tick; GPM sample buffers are allocated
once per GPU and reused."""

from __future__ import annotations

import pynvml

from gputop_diag import sim
from gputop_diag.collect.nvml.collector import SLOW_FIELDS_EVERY_S
from gputop_diag.monitor.sampler import Sampler

# GpuState field -> the pynvml function it comes from (the H100 of these scenarios remaps rows
# and has no retired pages: those stay None, as before)
SLOW = {
    "bar1_total_bytes": "nvmlDeviceGetBAR1MemoryInfo",
    "bar1_used_bytes": "nvmlDeviceGetBAR1MemoryInfo",
    "pcie_gen": "nvmlDeviceGetCurrPcieLinkGeneration",
    "pcie_width": "nvmlDeviceGetCurrPcieLinkWidth",
    "pcie_replay_count": "nvmlDeviceGetPcieReplayCounter",
    "ecc_corrected": "nvmlDeviceGetTotalEccErrors",
    "ecc_uncorrected": "nvmlDeviceGetTotalEccErrors",
    "remapped_rows_corr": "nvmlDeviceGetRemappedRows",
    "remapped_rows_unc": "nvmlDeviceGetRemappedRows",
    "remap_pending": "nvmlDeviceGetRemappedRows",
    "remap_failure": "nvmlDeviceGetRemappedRows",
}


def make(name: str = "compute-bound", gpus: int | None = 2) -> Sampler:
    return Sampler(sim.build(name, gpu_count=gpus, noise=0), interval=1.0)


def tick(s: Sampler, seconds: float = 1.0):
    s.sources.clock.sleep(seconds)
    return s.sample()


def test_slow_fields_are_read_every_10_s_and_are_in_every_snapshot():
    assert SLOW_FIELDS_EVERY_S == 10.0
    s = make()
    counts = s.sources.sim.call_counts
    snaps = [s.sample()] + [tick(s) for _ in range(25)]  # t = 0 .. 25 s: slow reads at 0, 10, 20
    assert counts["nvmlDeviceGetUtilizationRates"] == 26 * 2  # the per-tick calls: every tick
    assert counts["nvmlDeviceGetTotalEnergyConsumption"] == 26 * 2  # a counter: every tick
    for fn in set(SLOW.values()):
        per_read = 2 if fn == "nvmlDeviceGetTotalEccErrors" else 1  # corrected, uncorrected
        assert counts[fn] == 3 * 2 * per_read, fn
    first = snaps[0]
    for snap in snaps:
        for g in snap.gpus:
            for fld in SLOW:
                assert getattr(g, fld) is not None, (snap.timestamp, g.index, fld)
                assert getattr(g, fld) == getattr(first.gpu(g.index), fld)


def test_a_slow_field_changed_shows_at_the_next_slow_read():
    s = make()
    t0 = s.sample().timestamp
    tick(s, 3)
    s.sources.sim.pcie_replays = {1: 17}  # the link of GPU 1 retried, at t = 3 s
    for _ in range(6):  # t = 4 .. 9 s: the reading of t = 0, carried
        snap = tick(s)
        assert (snap.gpu(0).pcie_replay_count, snap.gpu(1).pcie_replay_count) == (0, 0)
    assert snap.timestamp - t0 == 9
    snap = tick(s)  # t = 10 s
    assert (snap.gpu(0).pcie_replay_count, snap.gpu(1).pcie_replay_count) == (0, 17)


def test_an_xid_has_the_counters_of_its_gpu_read_on_the_next_tick():
    s = make("xid-app", gpus=None)  # Xids 13 and 43 on GPU 5 at 35 s and 36 s
    counts = s.sources.sim.call_counts
    s.sample()
    tick(s, 30)  # a slow read of every GPU at t = 30 s
    snap = tick(s, 5)  # t = 35 s: Xid 13
    assert [x.xid for x in snap.xid_events] == [13]
    before = counts["nvmlDeviceGetTotalEccErrors"]
    tick(s)  # t = 36 s: GPU 5's counters, not the others' (due at 40 s)
    assert counts["nvmlDeviceGetTotalEccErrors"] - before == 2


def test_a_gpu_lost_between_slow_reads_is_lost_on_the_next_tick():
    s = make(gpus=4)
    # no Xid 79 reaches the collector: the event set failed, so only the per-tick calls can tell
    s.sources.sim.inject_error("nvmlEventSetCreate", pynvml.NVML_ERROR_UNKNOWN)
    counts = s.sources.sim.call_counts
    s.sample()
    tick(s, 3)
    before_rows = counts["nvmlDeviceGetRemappedRows"]
    s.sources.sim.lose_gpu(2)
    snap = tick(s)  # t = 4 s: no slow read due
    assert counts["nvmlDeviceGetRemappedRows"] == before_rows
    assert snap.gpu(2).lost and not snap.xid_events
    assert [e.gpu_index for e in snap.errors if "lost" in e.message] == [2]
    assert not any(g.lost for g in snap.gpus if g.index != 2)
    later = tick(s, SLOW_FIELDS_EVERY_S)
    assert later.gpu(2).lost and later.gpu(2).remapped_rows_corr is None
    assert later.gpu(0).remapped_rows_corr is not None


def test_gpm_sample_buffers_are_allocated_once_and_freed_at_close():
    s = make()
    counts = s.sources.sim.call_counts
    snaps = [s.sample()] + [tick(s) for _ in range(10)]
    assert all(g.gpm is not None for snap in snaps[1:] for g in snap.gpus)
    assert counts["nvmlGpmSampleGet"] == 11 * 2
    assert counts["nvmlGpmSampleAlloc"] == 2 * 2 and counts["nvmlGpmSampleFree"] == 0
    s.close()
    assert counts["nvmlGpmSampleFree"] == 2 * 2


def test_gpm_of_reused_buffers_covers_the_last_interval():
    """Each tick's metrics are over the interval since the previous tick, not since the first
    sample: input-starved's GPU computes for 2.5 s, then waits for input."""
    s = make("input-starved", gpus=1)
    m = s.sources.sim
    t = [s.sample().timestamp]
    sm = []
    for _ in range(6):
        snap = tick(s)
        t.append(snap.timestamp)
        sm.append(snap.gpu(0).gpm.sm_util_pct)
    want = [m.gpu_average(0, a, b)["sm"] for a, b in zip(t, t[1:], strict=False)]
    assert sm == want and sm[0] > 50 and sm[-1] == 0
    assert m.call_counts["nvmlGpmSampleAlloc"] == 2
