"""Driver skew: the collector against every simulated driver profile, and the simulated library
against the real `pynvml` module's wrappers."""

from __future__ import annotations

import ctypes
import inspect
import re

import pynvml
import pytest

from gputop_diag import sim
from gputop_diag.collect.nvml.compat import NvmlCompat
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.sim.drivers import DRIVERS, SYMBOL_SINCE, profile_for_version
from gputop_diag.sim.fake_libnvml import FakeLib
from gputop_diag.sim.fake_nvml import FakeNvml
from gputop_diag.sim.fake_nvml_base import C_SYMBOLS, VERSION_CHECKED, c_symbol

PROFILES = list(DRIVERS)


def run(name="compute-bound", ticks=3, **kw):
    s = Sampler(sim.build(name, **kw), interval=1.0)
    snaps = [s.sample()]
    for _ in range(ticks - 1):
        s.sources.clock.sleep(1)
        snaps.append(s.sample())
    return s, snaps


def truth(src):
    """(pid, bytes, gi, ci) per process and GPU, straight from the simulated machine."""
    m = src.sim
    st = m.state()
    out = set()
    for gi in range(len(m.gpus)):
        for p, used in m.gpu_procs(gi, st):
            out.add((p.pid, gi, used))
    return out


@pytest.mark.parametrize("driver", PROFILES)
def test_every_driver_gives_processes_memory_and_clock_reasons(driver):
    s, snaps = run("thermal-throttle", ticks=6, driver=driver)
    snap = snaps[-1]
    assert not snap.errors, snap.errors
    got = {(p.pid, p.gpu_index, p.used_memory_bytes) for p in snap.gpu_processes}
    assert got and got == truth(s.sources)  # right pids and memory whatever the struct
    assert {p.pid for p in snap.processes} == {p.pid for p in snap.gpu_processes}
    g = snap.gpus[0]
    assert g.mem_used_bytes and g.mem_total_bytes
    assert {"sw_thermal", "hw_thermal", "hw_slowdown"} & set(g.clock_event_reasons)
    has_v2 = DRIVERS[driver].exports("nvmlDeviceGetMemoryInfo_v2")
    assert (g.mem_reserved_bytes is not None) == has_v2
    has_gpm = DRIVERS[driver].exports("nvmlGpmSampleGet")
    assert (g.gpm is not None) == has_gpm


@pytest.mark.parametrize("driver", PROFILES)
def test_every_driver_delivers_xid_events(driver):
    s, snaps = run("xid-app", ticks=200, driver=driver)
    xids = [x for sn in snaps for x in sn.xid_events]
    assert {x.xid for x in xids} & {13, 31, 43}
    assert all(x.gpu_index is not None and x.pci_bus_id for x in xids)
    g = snaps[-1].gpu(xids[0].gpu_index)
    assert xids[0].pci_bus_id == g.static.pci_bus_id


@pytest.mark.parametrize("driver", PROFILES)
def test_every_driver_keeps_mig_instance_ids_where_it_has_them(driver):
    s, snaps = run("mig", ticks=2, driver=driver)
    procs = snaps[-1].gpu_processes
    assert procs
    if DRIVERS[driver].exports("nvmlDeviceGetComputeRunningProcesses_v2"):
        assert all(p.gpu_instance_id is not None for p in procs)
    else:  # v1 entries have no MIG ids: unknown, not 0
        assert all(p.gpu_instance_id is None for p in procs)


def test_each_driver_takes_the_newest_form_it_has():
    want = {
        "R418": ("nvmlDeviceGetComputeRunningProcesses", 16, "nvmlEventSetWait"),
        "R470": ("nvmlDeviceGetComputeRunningProcesses_v2", 24, "nvmlEventSetWait_v2"),
        "R525": ("nvmlDeviceGetComputeRunningProcesses_v3", 24, "nvmlEventSetWait_v2"),
        "R535.54": ("nvmlDeviceGetComputeRunningProcesses_v3", 32, "nvmlEventSetWait_v2"),
        "R535": ("nvmlDeviceGetComputeRunningProcesses_v3", 24, "nvmlEventSetWait_v2"),
        "R580": ("nvmlDeviceGetComputeRunningProcesses_v3", 24, "nvmlEventSetWait_v2"),
    }
    for driver, (fn, size, wait) in want.items():
        s, _ = run(ticks=2, driver=driver)
        d = s.nvml.compat.describe()
        assert d["processes"] == f"{fn} ({size}-byte entries)", driver
        assert d["event_wait"] == wait, driver
        counts = s.sources.sim.call_counts
        # a missing form is asked once, then remembered
        if not DRIVERS[driver].exports("nvmlDeviceGetCurrentClocksEventReasons"):
            assert counts["nvmlDeviceGetCurrentClocksEventReasons"] == 8, driver
            assert counts["nvmlDeviceGetCurrentClocksThrottleReasons"] == 16, driver


def test_the_plain_binding_fails_where_the_compat_layer_does_not():
    """What the issue saw: pynvml's plain process call on an R470 raises a non-NVML error, and
    on 535.54 it misreads every entry after the first."""
    src = sim.build("compute-bound", driver="R470")
    n = src.nvml
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLLibraryMismatchError):
        n.nvmlDeviceGetComputeRunningProcesses(h)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        n.nvmlDeviceGetCurrentClocksEventReasons(h)
    assert [p.pid for p in NvmlCompat(n).running_processes("compute", h)]

    src = sim.build("compute-bound", driver="R535.54")
    n = src.nvml
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    real = sorted(p.pid for p, _ in src.sim.gpu_procs(0, src.sim.state()))
    assert len(real) >= 2
    plain = sorted(p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(h))
    assert plain != real  # the binding's 24-byte struct over 32-byte entries
    assert sorted(p.pid for p in NvmlCompat(n).running_processes("compute", h)) == real


def test_scenario_driver_versions_map_to_profiles():
    assert profile_for_version("550.54.15", 12040).name == "R550"
    assert profile_for_version("550.54.15", 12040).version == "550.54.15"
    assert profile_for_version("470.82.01", 11040).name == "R470"
    assert profile_for_version("535.104.05", 12020).name == "R535"
    assert profile_for_version("390.157", 9010).name == "R418"
    assert profile_for_version("595.45.04", 13020).name == "R580"
    src = sim.build("driver-mismatch")
    assert src.sim.driver.name == "R550"
    with pytest.raises(ValueError, match="R470"):
        sim.build("idle", driver="R999")


def test_driver_profile_from_the_environment(monkeypatch):
    monkeypatch.setenv(sim.DRIVER_ENV, "R470")
    s, snaps = run(ticks=2)
    assert snaps[-1].system.driver_version.startswith("470.")
    assert snaps[-1].system.cuda_driver_version == 11040
    assert s.nvml.compat.describe()["processes"].endswith("_v2 (24-byte entries)")


# -- the simulated library is faithful to the real pynvml ------------------------------------
def _pynvml_symbols(fn_name: str) -> set[str]:
    """The C symbols the real pynvml wrapper `fn_name` looks up, following delegation."""
    src = inspect.getsource(getattr(pynvml, fn_name))
    syms = set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', src))
    for callee in re.findall(r"^\s+(?:return )?(nvml\w+)\(", src, re.M):
        if callee != fn_name and callable(getattr(pynvml, callee, None)):
            syms |= _pynvml_symbols(callee)
    return syms


def fake_wrappers():
    for name, fn in inspect.getmembers(FakeNvml, inspect.isfunction):
        if name.startswith("nvml") and fn is not getattr(pynvml, name, None):
            yield name


@pytest.mark.parametrize("name", sorted(fake_wrappers()))
def test_each_fake_wrapper_needs_the_symbol_pynvml_calls(name):
    real = _pynvml_symbols(name)
    if name == "nvmlDeviceGetMemoryInfo":
        assert real == {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"}
        assert c_symbol(name, (None,)) == "nvmlDeviceGetMemoryInfo"
        assert c_symbol(name, (None, pynvml.nvmlMemory_v2)) == "nvmlDeviceGetMemoryInfo_v2"
        return
    assert real == {c_symbol(name)}, (
        f"{name}: pynvml calls {real}, the fake checks {c_symbol(name)}"
    )
    decorated = (
        "@throwOnVersionMismatch"
        in inspect.getsource(inspect.getmodule(pynvml))
        .split(f"def {name}(")[0]
        .rsplit("\n\n", 1)[-1]
    )
    assert decorated == (name in VERSION_CHECKED), name


def test_symbol_table_names_real_symbols():
    for name in C_SYMBOLS:
        assert callable(getattr(pynvml, name)), name
    for sym in SYMBOL_SINCE:
        assert sym in inspect.getsource(pynvml), sym  # pynvml knows every symbol a profile drops


def test_lookup_has_pynvmls_signature():
    fake = list(inspect.signature(FakeNvml._nvmlGetFunctionPointer).parameters)[1:]
    assert fake == list(inspect.signature(pynvml._nvmlGetFunctionPointer).parameters)


@pytest.fixture
def real_pynvml_over(monkeypatch):
    """The real pynvml module talking to a simulated libnvidia-ml of a given driver."""

    def make(driver: str, name: str = "mig"):
        src = sim.build(name, driver=driver)
        src.nvml.nvmlInit()
        monkeypatch.setattr(pynvml, "nvmlLib", FakeLib(src.nvml))
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        return src

    return make


@pytest.mark.parametrize("driver", PROFILES)
def test_the_fake_wrappers_behave_as_the_real_pynvml_over_the_same_library(
    driver, real_pynvml_over
):
    src = real_pynvml_over(driver)
    fake = src.nvml
    h = fake.nvmlDeviceGetHandleByIndex(0)

    def outcome(module, fn):
        try:
            return [(p.pid, p.usedGpuMemory) for p in getattr(module, fn)(h)]
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as e:
            return type(e)

    for fn in (
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses",
    ):
        assert outcome(fake, fn) == outcome(pynvml, fn), (driver, fn)
    # and the compatibility layer reads the same through either
    via_real = NvmlCompat(pynvml).running_processes("compute", h)
    via_fake = NvmlCompat(fake).running_processes("compute", h)
    assert via_real == via_fake and via_real
    real = {(p.pid, used) for p, used in src.sim.gpu_procs(0, src.sim.state())}
    assert {(p.pid, p.usedGpuMemory) for p in via_real} == real


def test_v1_event_wait_through_the_real_pynvml(real_pynvml_over):
    src = real_pynvml_over("R418", "xid-app")
    fake = src.nvml
    es = fake.nvmlEventSetCreate()
    for i in range(len(src.sim.gpus)):
        fake.nvmlDeviceRegisterEvents(
            fake.nvmlDeviceGetHandleByIndex(i), pynvml.nvmlEventTypeXidCriticalError, es
        )
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlEventSetWait(es, 0)  # the binding asks for _v2
    compat = NvmlCompat(pynvml)
    src.clock.sleep(200)
    ev = compat.event_wait(es, 0)
    assert ev.eventData in (13, 31, 43) and ev.gpuInstanceId == 0xFFFFFFFF
    idx = fake._gpu_of(ctypes.cast(ev.device, type(fake.nvmlDeviceGetHandleByIndex(0))))
    assert idx is not None


def test_a_driver_before_r470_has_no_licensable_features_v4_and_the_collector_goes_on():
    _, snaps = run("idle", ticks=2, driver="R418", faults="vgpu:licensed")
    assert all(g.vgpu_licensed is None and g.util_gpu_pct is not None for g in snaps[-1].gpus)
    _, snaps = run("idle", ticks=2, driver="R470", faults="vgpu:unlicensed")
    assert {g.vgpu_licensed for g in snaps[-1].gpus} == {False}
    src = sim.build("idle", driver="R418", faults="vgpu:licensed")
    src.nvml.nvmlInit()
    h = src.nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        src.nvml.nvmlDeviceGetGridLicensableFeatures_v4(h)
