"""The real NVML collector over the simulator's pynvml stand-in."""

from __future__ import annotations

import re
from pathlib import Path

import pynvml
import pytest

from gputop_diag import sim
from gputop_diag.collect.nvml import errors as nvml_errors
from gputop_diag.monitor.sampler import Sampler

ALL_CODES = sorted(pynvml.NVMLError._valClassMapping)
NVML_DIR = Path(__file__).resolve().parent.parent / "gputop_diag" / "collect" / "nvml"


def handled_codes() -> list[int]:
    """The codes the collector tells apart (each `NVML_ERROR_<NAME>` its code names: lost,
    skipped from then on, absent this tick, a timeout, a short buffer), and three it does not
    (all the others take that one path, `Query.__call__`'s last branch): UNKNOWN, and two that
    mean the driver itself is in trouble. Every code's meaning and advice is checked, on each
    NVML call site, in tests/test_nvml_faults.py."""
    named = set()
    for path in NVML_DIR.glob("*.py"):
        if path.name != "errors.py":  # the table of every code's words
            named |= set(re.findall(r"NVML_ERROR_([A-Z_]+)", path.read_text(encoding="utf-8")))
    named |= {"UNKNOWN", "DRIVER_NOT_LOADED", "UNINITIALIZED"}
    codes = [c for c in ALL_CODES if nvml_errors.code_name(pynvml, c) in named]
    assert len(codes) < len(ALL_CODES), "every code is named: test them all"
    return codes


def tick(sampler: Sampler, seconds: float = 1.0):
    sampler.sources.clock.sleep(seconds)
    return sampler.sample()


def make(name="compute-bound", **kw) -> Sampler:
    return Sampler(sim.build(name, **kw), interval=1.0)


def test_static_fields_read_once_and_handles_looked_up_once():
    s = make(gpu_count=2)
    s.sample()
    counts = s.sources.sim.call_counts
    first = dict(counts)
    for _ in range(5):
        tick(s)
    for fn in (
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetSerial",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetMaxClockInfo",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlGpmQueryDeviceSupport",
        "nvmlSystemGetDriverVersion",
        "nvmlInit",
    ):
        assert counts[fn] == first.get(fn, 0), f"{fn} was called again on later ticks"
    assert counts["nvmlDeviceGetUtilizationRates"] == 6 * 2


def test_snapshot_fields_and_shapes():
    s = make()
    s.sample()
    snap = tick(s)
    assert len(snap.gpus) == 8
    g = snap.gpus[0]
    st = g.static
    assert st.name.startswith("NVIDIA H100")
    assert st.uuid.startswith("GPU-")
    assert st.pci_bus_id.count(":") == 2
    assert st.compute_capability == (9, 0)
    assert st.gpm_supported and st.nvlink_supported
    assert g.mem_reserved_bytes  # v2: the reserve apart from `used`
    assert g.mem_total_bytes == g.mem_reserved_bytes + g.mem_used_bytes + g.mem_free_bytes
    assert 0 <= g.util_gpu_pct <= 100 and g.power_w > 0
    assert g.gpm is not None and g.gpm.sm_util_pct is not None
    assert g.nvlink_tx_kib_s is not None  # a rate from two readings of the counters
    assert snap.gpu_processes and all(p.used_memory_bytes for p in snap.gpu_processes)
    assert {p.pid for p in snap.processes} <= {p.pid for p in snap.gpu_processes}
    assert not snap.errors


def test_first_tick_has_no_rates_yet():
    s = make()
    g = s.sample().gpus[0]
    assert g.nvlink_tx_kib_s is None and g.gpm is None


@pytest.mark.parametrize(
    "code", handled_codes(), ids=lambda c: pynvml.NVMLError(c).__class__.__name__
)
def test_every_error_class_on_every_field(code):
    """Each NVML function the collector calls fails with each error class it tells apart (and
    with the generic one), on GPU 0 only."""
    probe = make(gpu_count=2)
    probe.sample()
    tick(probe)
    functions = sorted(
        f
        for f in probe.sources.sim.call_counts
        if f.startswith("nvmlDevice") or f.startswith("nvmlGpm")
    )
    assert len(functions) > 25
    for fn in functions:
        s = make(gpu_count=2)
        s.sources.sim.inject_error(fn, code, gpu=0)
        s.sample()
        snap = tick(s)
        assert len(snap.gpus) == 2, fn
        assert not snap.gpus[1].lost, fn  # the other GPU keeps reporting
        assert snap.gpus[1].util_gpu_pct is not None, fn
        if code == pynvml.NVML_ERROR_GPU_IS_LOST and s.sources.sim.raised[fn]:
            assert snap.gpus[0].lost, fn
            assert any(e.gpu_index == 0 and "lost" in e.message for e in snap.errors), fn


def test_not_supported_is_none_and_not_asked_again():
    s = make(gpu_count=1)
    s.sources.sim.inject_error("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED)
    snap = s.sample()
    assert snap.gpus[0].power_w is None
    n = s.sources.sim.call_counts["nvmlDeviceGetPowerUsage"]
    tick(s)
    tick(s)
    assert s.sources.sim.call_counts["nvmlDeviceGetPowerUsage"] == n


def test_function_not_found_is_remembered():
    s = make(gpu_count=1)
    s.sources.sim.inject_error(
        "nvmlDeviceGetCurrentClocksEventReasons", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    )
    assert s.sample().gpus[0].clock_event_reasons == ()
    n = s.sources.sim.call_counts["nvmlDeviceGetCurrentClocksEventReasons"]
    tick(s)
    assert s.sources.sim.call_counts["nvmlDeviceGetCurrentClocksEventReasons"] == n


def test_no_permission_is_none_and_retried():
    s = make(gpu_count=1)
    s.sources.sim.inject_error("nvmlDeviceGetTemperature", pynvml.NVML_ERROR_NO_PERMISSION, times=1)
    assert s.sample().gpus[0].temperature_c is None
    assert tick(s).gpus[0].temperature_c is not None


def test_gpu_lost_mid_run():
    s = make("xid-79")
    snaps = [s.sample()]
    for _ in range(150):
        snaps.append(tick(s))
    lost_at = next(i for i, sn in enumerate(snaps) if any(g.lost for g in sn.gpus))
    lost = [g.index for g in snaps[lost_at].gpus if g.lost]
    assert len(lost) == 1
    last = snaps[-1]
    assert last.gpu(lost[0]).lost
    assert sum(1 for g in last.gpus if not g.lost) == len(last.gpus) - 1
    xids = [x for sn in snaps for x in sn.xid_events]
    assert [x.xid for x in xids].count(79) == 1
    assert xids[0].gpu_index == lost[0]
    assert not any(p.gpu_index == lost[0] for p in last.gpu_processes)


def test_lost_gpu_via_hook():
    s = make(gpu_count=4)
    s.sample()
    s.sources.sim.lose_gpu(2)
    snap = tick(s)
    assert snap.gpu(2).lost and not snap.gpu(1).lost
    assert snap.gpu(2).static.uuid  # cached facts stay, for the report and the mapping


def test_no_driver_is_a_collector_error_not_an_exception():
    s = make("no-gpu")
    snap = s.sample()
    assert snap.gpus == ()
    err = snap.errors[0]
    assert err.source == "nvml" and err.gpu_index is None
    assert "libnvidia-ml.so.1" in err.message and err.next_step
    assert snap.host is not None


def test_init_failure_codes_have_their_own_advice():
    for code, words in (
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "kernel module"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "mismatch"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "permission"),
    ):
        s = make(gpu_count=1)
        s.sources.sim.inject_error("nvmlInit", code)
        err = s.sample().errors[0]
        assert words in err.message, err


def test_mig_instances_and_no_gpm_on_a100():
    s = make("mig")
    s.sample()
    g = tick(s).gpus[0]
    assert g.static.mig_mode is True
    assert not g.static.gpm_supported and g.gpm is None
    assert len(g.mig_instances) >= 2
    assert all(m.uuid and m.uuid.startswith("MIG-") for m in g.mig_instances)
    assert all(m.memory_total_bytes for m in g.mig_instances)


def test_xid_app_events_arrive_once_each():
    s = make("xid-app")
    seen = [x for _ in range(200) for x in tick(s).xid_events]
    assert {x.xid for x in seen} & {13, 31, 43}
    assert len({x.gpu_index for x in seen}) == 1


def test_clock_event_reasons_decoded_under_thermal_throttle():
    s = make("thermal-throttle")
    s.sample()
    g = tick(s, 5).gpus[0]
    assert {"sw_thermal", "hw_thermal", "hw_slowdown"} & set(g.clock_event_reasons)
    assert g.sm_clock_pct_of_max < 70


def test_close_shuts_nvml_down():
    s = make(gpu_count=1)
    s.sample()
    s.close()
    assert s.sources.sim.call_counts["nvmlShutdown"] == 1
