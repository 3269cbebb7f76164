"""The fault matrix: every NVML error code on a handle look-up and on each machine-wide call, GPUs
lost before and during a run, a hung NVML call at close, vanished and unreadable processes, and
the whole program under injected faults — no exception, no hang, errors that say what to do."""

from __future__ import annotations

import threading
import time

import pynvml
import pytest

from gputop_diag import sim
from gputop_diag.collect.nvml import errors as nvml_errors
from gputop_diag.collect.nvml.collector import HANDLE_RETRY_S, RECOUNT_AFTER_S, REINIT_AFTER_S
from gputop_diag.monitor.core import Monitor
from gputop_diag.monitor.sampler import Sampler

ALL_CODES = sorted(pynvml.NVMLError._valClassMapping)
LOST = pynvml.NVML_ERROR_GPU_IS_LOST
ABSENT = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def code_id(code: int) -> str:
    return pynvml.NVMLError(code).__class__.__name__.removeprefix("NVMLError_")


def make(name="compute-bound", gpus=2, **kw) -> Sampler:
    return Sampler(sim.build(name, gpu_count=gpus, **kw), interval=1.0)


def tick(s: Sampler, seconds: float = 1.0):
    s.sources.clock.sleep(seconds)
    return s.sample()


def meaning(code: int) -> str:
    return nvml_errors.MEANINGS[nvml_errors.code_name(pynvml, code)][0]


# -- a GPU's handle ------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ALL_CODES, ids=code_id)
def test_every_code_on_a_handle_look_up(code):
    s = make()
    s.sources.sim.inject_error("nvmlDeviceGetHandleByIndex", code, gpu=1, times=1)
    snap = s.sample()
    g0, g1 = snap.gpus
    assert not g0.lost and g0.util_gpu_pct is not None  # the other GPU is read
    sim_gpu = s.sources.sim.gpus[1]
    # identity from /proc/driver/nvidia when NVML gave no handle
    assert g1.static.uuid == sim_gpu.uuid and g1.static.name == sim_gpu.model["name"]
    assert g1.static.pci_bus_id == sim_gpu.bus_id
    errs = [e for e in snap.errors if e.gpu_index == 1]
    assert len(errs) == 1 and errs[0].source == "nvml"
    err = errs[0]
    assert sim_gpu.bus_id in err.message and err.next_step
    if code == LOST:
        assert g1.lost and "lost" in err.message
        assert tick(s, HANDLE_RETRY_S + 1).gpu(1).lost  # final: not asked again
        assert s.sources.sim.call_counts["nvmlDeviceGetHandleByIndex"] == 2
        return
    assert not g1.lost and g1.util_gpu_pct is None
    assert "unavailable" in err.message and meaning(code) in err.message
    assert err.code == pynvml.NVMLError(code).__class__.__name__
    assert not tick(s).gpu(1).util_gpu_pct  # not retried before HANDLE_RETRY_S
    back = tick(s, HANDLE_RETRY_S)  # retried, and this time it answers
    assert back.gpu(1).util_gpu_pct is not None and not back.gpu(1).lost
    assert not [e for e in back.errors if e.gpu_index == 1]
    assert back.gpu_processes and {p.gpu_index for p in back.gpu_processes} == {0, 1}


# -- machine-wide calls --------------------------------------------------------------------------
@pytest.mark.parametrize("code", ALL_CODES, ids=code_id)
def test_every_code_on_init(code):
    s = make()
    s.sources.sim.inject_error("nvmlInit", code)
    snap = s.sample()
    assert snap.gpus == () and snap.host is not None
    (err,) = snap.errors
    assert err.source == "nvml" and err.gpu_index is None and err.next_step
    tick(s, REINIT_AFTER_S - 1)
    assert s.sources.sim.call_counts["nvmlInit"] == 1  # not hammered every tick
    tick(s, 2)
    assert s.sources.sim.call_counts["nvmlInit"] == 2
    s.close()
    assert s.sources.sim.call_counts["nvmlShutdown"] == 0  # never initialised


@pytest.mark.parametrize("code", ALL_CODES, ids=code_id)
def test_every_code_on_the_device_count(code):
    s = make()
    s.sources.sim.inject_error("nvmlDeviceGetCount", code, times=1)
    snap = s.sample()
    assert snap.gpus == () and snap.host is not None
    errs = [e for e in snap.errors if e.source == "nvml"]
    assert len(errs) == 1 and errs[0].gpu_index is None
    assert "could not count" in errs[0].message and meaning(code) in errs[0].message
    assert snap.system.driver_version  # what NVML could say, it said
    later = tick(s, RECOUNT_AFTER_S)
    assert len(later.gpus) == 2 and not later.errors
    counts = s.sources.sim.call_counts
    assert counts["nvmlInit"] == 1  # one init, however many ticks
    s.close()
    assert counts["nvmlShutdown"] == 1


SYSTEM_CALLS = ("nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion")


@pytest.mark.parametrize("fn", SYSTEM_CALLS)
@pytest.mark.parametrize("code", ALL_CODES, ids=code_id)
def test_every_code_on_a_system_query(fn, code):
    s = make()
    s.sources.sim.inject_error(fn, code, times=1)
    snap = s.sample()
    assert len(snap.gpus) == 2 and not any(g.lost for g in snap.gpus)
    assert all(g.util_gpu_pct is not None for g in snap.gpus)
    errs = [e for e in snap.errors if e.source.startswith("nvml")]
    if code in ABSENT:
        assert not errs
        return
    assert len(errs) == 1 and errs[0].source == "nvml-system" and errs[0].gpu_index is None
    assert not tick(s).errors  # asked again, and it answered
    assert tick(s).system.driver_version


@pytest.mark.parametrize("code", ALL_CODES, ids=code_id)
def test_every_code_on_the_event_set(code):
    s = make("xid-app")
    s.sources.sim.inject_error("nvmlEventSetCreate", code)
    snap = s.sample()
    assert len(snap.gpus) == len(s.sources.sim.gpus)
    assert all(not g.lost and g.util_gpu_pct is not None for g in snap.gpus)
    errs = [e for e in snap.errors if e.source == "nvml-events"]
    assert len(errs) == 1 and "Xid events from NVML are off" in errs[0].message
    assert "kernel log" in errs[0].next_step
    assert [e.source for e in tick(s).errors] == ["nvml-events"]  # it stays said


@pytest.mark.parametrize("code", ALL_CODES, ids=code_id)
def test_every_code_on_an_event_wait(code):
    s = make("xid-app", gpus=None)  # Xids 13 and 43 on GPU 5 at 35 s and 36 s
    s.sample()
    s.sources.sim.inject_error("nvmlEventSetWait_v2", code, times=1)
    snap = tick(s, 40)
    assert all(not g.lost and g.util_gpu_pct is not None for g in snap.gpus)
    errs = [e for e in snap.errors if e.source == "nvml-events"]
    if code == pynvml.NVML_ERROR_TIMEOUT:
        assert not errs and not snap.xid_events  # a timeout is "nothing came"
    else:
        assert len(errs) == 1 and errs[0].gpu_index is None
    assert [x.xid for x in tick(s).xid_events] == [13, 43]  # nothing lost, the stream goes on


@pytest.mark.parametrize("code", ALL_CODES, ids=code_id)
def test_every_code_on_event_registration(code):
    s = make("xid-app")
    s.sources.sim.inject_error("nvmlDeviceRegisterEvents", code, gpu=0)
    snap = s.sample()
    if code == LOST:
        assert snap.gpu(0).lost and snap.gpu(0).static.uuid
        return
    assert all(not g.lost and g.util_gpu_pct is not None for g in snap.gpus)
    errs = [e for e in snap.errors if e.source == "nvml-events"]
    assert len(errs) == (0 if code in ABSENT else 1)


def test_gpu_is_lost_from_a_system_call_is_an_error_not_an_exception():
    s = make()
    s.sources.sim.inject_error("nvmlSystemGetDriverVersion", LOST)
    for _ in range(3):
        snap = tick(s)
        assert len(snap.gpus) == 2 and snap.system.driver_version is None
        (err,) = snap.errors
        assert err.source == "nvml-system" and "fell off the bus" in err.message
    assert s.sources.sim.call_counts["nvmlInit"] == 1


# -- lost GPUs -----------------------------------------------------------------------------------
def test_gpu_lost_before_the_run_keeps_its_identity():
    s = make(gpus=4)
    s.sources.sim.lose_gpu(2, at=0.0)
    snap = s.sample()
    g = snap.gpu(2)
    want = s.sources.sim.gpus[2]
    assert g.lost
    assert (g.static.name, g.static.uuid, g.static.pci_bus_id, g.static.minor_number) == (
        want.model["name"],
        want.uuid,
        want.bus_id,
        want.minor,
    )
    (err,) = [e for e in snap.errors if e.gpu_index == 2]
    assert want.bus_id in err.message and want.model["name"] in err.message
    assert [g.index for g in snap.gpus if not g.lost] == [0, 1, 3]


def test_gpu_lost_while_its_facts_are_read_keeps_what_was_read():
    s = make()
    s.sources.sim.inject_error("nvmlDeviceGetMaxClockInfo", LOST, gpu=1)
    snap = s.sample()
    g = snap.gpu(1)
    assert g.lost and g.static.name and g.static.uuid and g.static.pci_bus_id
    assert g.static.memory_total_bytes  # read before the failing call
    assert g.static.max_sm_clock_mhz is None


def test_gpu_lost_mid_run_keeps_its_identity_and_says_which_board():
    s = make(gpus=4)
    s.sample()
    before = s.sample().gpu(3).static
    s.sources.sim.lose_gpu(3)
    snap = tick(s)
    g = snap.gpu(3)
    assert g.lost and g.static == before
    (err,) = [e for e in snap.errors if e.gpu_index == 3]
    assert before.pci_bus_id in err.message and before.name in err.message


def test_every_gpu_lost():
    s = make(gpus=2)
    for i in range(2):
        s.sources.sim.lose_gpu(i, at=0.0)
    snap = s.sample()
    assert all(g.lost and g.static.uuid for g in snap.gpus)
    assert snap.gpu_processes == () and snap.host is not None


def test_xid_events_attributed_by_bus_id_when_the_handle_is_unknown():
    s = make("xid-app", gpus=None, faults="foreign-event-handles")
    seen = [x for _ in range(200) for x in tick(s).xid_events]
    assert seen
    for x in seen:
        assert x.gpu_index is not None
        assert x.pci_bus_id == s.sources.sim.gpus[x.gpu_index].bus_id


def test_a_raising_nvml_collector_is_an_error_and_the_host_is_still_read(monkeypatch):
    s = make()
    first = s.sample()

    def boom():
        raise RuntimeError("a bug")

    monkeypatch.setattr(s.nvml, "collect", boom)
    snap = tick(s)
    assert snap.host is not None and snap.gpus == ()
    assert snap.system == first.system  # the last facts NVML gave
    (err,) = snap.errors
    assert err.source == "nvml" and "RuntimeError: a bug" in err.message
    assert "gputop-diag report" not in err.next_step  # no command that does not exist


# -- a hung call -------------------------------------------------------------------------------
def test_close_waits_at_most_a_second_for_a_hung_tick_and_skips_shutdown():
    s = make()
    s.sample()
    release = s.sources.sim.hang("nvmlDeviceGetPowerUsage", gpu=1)
    worker = threading.Thread(target=s.sample, daemon=True)
    worker.start()
    time.sleep(0.2)
    assert worker.is_alive()  # stuck in the driver
    t0 = time.monotonic()
    assert s.close() is False
    assert time.monotonic() - t0 < 1.5
    assert s.sources.sim.call_counts["nvmlShutdown"] == 0  # never while a call is in flight
    assert s.busy  # the app can tell a tick is stuck and exit without waiting for it
    release.set()
    worker.join(5)
    assert not worker.is_alive()
    assert s.close() is True and s.sources.sim.call_counts["nvmlShutdown"] == 1


def test_a_monitor_closes_promptly_over_a_hung_call():
    src = sim.build("compute-bound", gpu_count=2)
    monitor = Monitor(src, slow_sources=False)
    monitor.tick()
    release = src.sim.hang("nvmlDeviceGetUtilizationRates")
    worker = threading.Thread(target=monitor.tick, daemon=True)
    worker.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    monitor.close()
    assert time.monotonic() - t0 < 1.5
    assert src.sim.call_counts["nvmlShutdown"] == 0
    release.set()
    worker.join(5)


def test_a_hang_is_released_by_its_cap_not_forever(monkeypatch):
    from gputop_diag.sim import fake_nvml_base

    monkeypatch.setattr(fake_nvml_base, "HANG_CAP_S", 0.2)
    s = make()
    s.sources.sim.hang("nvmlDeviceGetPowerUsage")
    t0 = time.monotonic()
    s.sample()
    assert 0.2 <= time.monotonic() - t0 < 5


# -- processes that vanish or hide ----------------------------------------------------------------
def test_vanished_gpu_process_is_skipped():
    s = make("compute-bound", gpus=2)
    snap = s.sample()
    pid = snap.gpu_processes[0].pid
    infos = s.procs.collect([pid, 999_999])  # 999999: listed by NVML, gone for the host
    assert [p.pid for p in infos] == [pid]
    s.sources.sim.vanish_process(pid)
    after = tick(s)
    assert pid not in {p.pid for p in after.gpu_processes} | {p.pid for p in after.processes}
    assert not [e for e in after.errors if e.source == "process"]


def test_another_users_process_shows_what_can_be_read():
    s = make("compute-bound", gpus=None)  # bob's notebook shares GPU 0
    snap = tick(s)
    hidden = [p for p in snap.processes if p.access_denied]
    assert hidden, "the scenario has another user's process"
    for p in hidden:
        assert p.name and p.cmdline is None and not p.environ_readable
    assert not [e for e in snap.errors if e.source == "process"]
