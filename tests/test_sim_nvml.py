"""The simulator's pynvml stand-in against the real `pynvml` module: names, signatures, error
classes, struct types, and driver-like behaviour (init, lost GPUs, events, MIG, GPM)."""

from __future__ import annotations

import ctypes
import inspect

import pynvml
import pytest

from gputop_diag import sim
from gputop_diag.sim.fake_nvml import FakeNvml

MIB = 1024**2


def nvml(name="compute-bound", **kw):
    src = sim.build(name, **kw)
    src.nvml.nvmlInit()
    return src, src.nvml


def fake_functions():
    for name, fn in inspect.getmembers(FakeNvml, inspect.isfunction):
        if name.startswith("nvml") and fn is not getattr(pynvml, name, None):
            yield name, fn


def test_every_fake_function_exists_in_pynvml_with_the_same_parameters():
    names = []
    for name, fn in fake_functions():
        real = getattr(pynvml, name, None)
        assert callable(real), f"{name} is not in pynvml"
        fake = list(inspect.signature(fn).parameters.values())[1:]  # without self
        want = list(inspect.signature(real).parameters.values())
        assert [(p.name, p.kind, p.default) for p in fake] == [
            (p.name, p.kind, p.default) for p in want
        ], name
        names.append(name)
    assert len(names) > 60


def test_constants_errors_and_structs_are_the_real_objects():
    _, n = nvml()
    for k in (
        "NVML_CLOCK_SM",
        "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
        "NVML_GPM_METRIC_SM_UTIL",
        "nvmlClocksEventReasonHwThermalSlowdown",
        "nvmlEventTypeXidCriticalError",
        "nvmlMemory_v2",
        "NVML_ERROR_GPU_IS_LOST",
    ):
        assert getattr(n, k) == getattr(pynvml, k)
    assert n.NVMLError is pynvml.NVMLError and n.NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost
    assert n.c_nvmlGpmMetricsGet_t is pynvml.c_nvmlGpmMetricsGet_t
    obj = n.nvmlStructToFriendlyObject(pynvml.c_nvmlProcessInfo_v3_t())
    assert hasattr(obj, "pid")


def test_returned_structs_are_real_ctypes_classes():
    src, n = nvml()
    src.clock.sleep(1)
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(h, pynvml.c_nvmlDevice_t)
    assert n.nvmlDeviceGetHandleByIndex(0) is h  # stable handles
    pci = n.nvmlDeviceGetPciInfo(h)
    assert isinstance(pci, pynvml.nvmlPciInfo_t)
    assert isinstance(pci.busId, str) and pci.busId == "00000000:18:00.0"
    assert pci.busIdLegacy == "0000:18:00.0" and pci.bus == 0x18
    assert isinstance(n.nvmlDeviceGetUtilizationRates(h), pynvml.c_nvmlUtilization_t)
    v1 = n.nvmlDeviceGetMemoryInfo(h)
    v2 = n.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert type(v1) is pynvml.c_nvmlMemory_t and type(v2) is pynvml.c_nvmlMemory_v2_t
    assert v2.version == pynvml.nvmlMemory_v2
    # the same GPU through both structs, as a driver fills them: v1 `used` holds the reserve
    # (total = used + free), v2 keeps it apart (total = reserved + used + free)
    assert v1.total == v1.used + v1.free and v2.total == v2.reserved + v2.used + v2.free
    assert 0 < v2.reserved and v1.used == v2.used + v2.reserved and v1.free == v2.free
    fv = n.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_MEMORY_TEMP, 9999])
    assert isinstance(fv[0], pynvml.c_nvmlFieldValue_t)
    assert fv[0].nvmlReturn == pynvml.NVML_SUCCESS and fv[0].value.uiVal > 20
    assert fv[1].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    procs = n.nvmlDeviceGetComputeRunningProcesses(h)
    assert procs and all(p.usedGpuMemory > 0 and p.gpuInstanceId == 0xFFFFFFFF for p in procs)
    samples = n.nvmlDeviceGetProcessUtilization(h, 0)
    assert isinstance(samples, list) and isinstance(
        samples[0], pynvml.c_nvmlProcessUtilizationSample_t
    )
    assert isinstance(n.nvmlGpmQueryDeviceSupport(h), pynvml.c_nvmlGpmSupport_t)
    vt, busy = n.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert vt == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT and isinstance(busy, list)
    assert isinstance(busy[0], pynvml.c_nvmlSample_t) and busy[-1].sampleValue.uiVal > 90
    assert isinstance(n.nvmlDeviceIsMigDeviceHandle(h), ctypes.c_uint)


def test_errors_are_real_classes_with_their_codes():
    src = sim.build("idle")
    with pytest.raises(pynvml.NVMLError_Uninitialized) as e:
        src.nvml.nvmlDeviceGetCount()
    assert e.value.value == pynvml.NVML_ERROR_UNINITIALIZED
    src.nvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        src.nvml.nvmlDeviceGetHandleByIndex(8)
    h = src.nvml.nvmlDeviceGetHandleByIndex(1)
    src.sim.inject_error("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=1, times=1)
    src.nvml.nvmlDeviceGetPowerUsage(src.nvml.nvmlDeviceGetHandleByIndex(0))  # other GPU: fine
    with pytest.raises(pynvml.NVMLError_NotSupported) as e:
        src.nvml.nvmlDeviceGetPowerUsage(h)
    assert e.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED and isinstance(
        e.value, pynvml.NVMLError
    )
    assert src.nvml.nvmlDeviceGetPowerUsage(h) > 0  # `times=1` used up
    assert src.sim.raised["nvmlDeviceGetPowerUsage"] == 1
    assert src.sim.call_counts["nvmlDeviceGetPowerUsage"] == 3
    src.sim.inject_error("nvmlDeviceGetName", pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(pynvml.NVMLError_Unknown):
        src.nvml.nvmlDeviceGetName(h)
    src.sim.clear_errors()
    assert src.nvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    src.nvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        src.nvml.nvmlDeviceGetName(h)


def test_no_driver_is_library_not_found():
    src = sim.build("no-gpu")
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        src.nvml.nvmlInit()


def test_lost_gpu_raises_gpu_is_lost_on_every_call_and_the_xid_arrives_once():
    src, n = nvml("xid-79")
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    es = n.nvmlEventSetCreate()
    for h in handles:
        n.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    with pytest.raises(pynvml.NVMLError_Timeout):
        n.nvmlEventSetWait_v2(es, 1000)  # nothing yet, and no real wait
    src.clock.sleep(95)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        n.nvmlDeviceGetSamples(handles[3], pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    for fn in (
        "nvmlDeviceGetName",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetPowerUsage",
    ):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            getattr(n, fn)(handles[3])
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        n.nvmlDeviceGetHandleByIndex(3)
    assert n.nvmlDeviceGetCount() == 8
    assert n.nvmlDeviceGetUtilizationRates(handles[2]).gpu > 90
    ev = n.nvmlEventSetWait_v2(es, 0)
    assert isinstance(ev, pynvml.c_nvmlEventData_t)
    assert ev.eventData == 79 and ev.eventType == pynvml.nvmlEventTypeXidCriticalError
    assert (
        ctypes.cast(ev.device, ctypes.c_void_p).value
        == ctypes.cast(handles[3], ctypes.c_void_p).value
    )
    with pytest.raises(pynvml.NVMLError_Timeout):
        n.nvmlEventSetWait(es, 0)
    src.clock.sleep(100)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):  # lost GPUs stay lost
        n.nvmlDeviceGetName(handles[3])


def test_events_only_after_registration_and_each_once():
    src, n = nvml("xid-app")
    src.clock.sleep(40)  # Xid 13 and 43 at 35-36 s happened before anyone listened
    es = n.nvmlEventSetCreate()
    for i in range(8):
        n.nvmlDeviceRegisterEvents(
            n.nvmlDeviceGetHandleByIndex(i), pynvml.nvmlEventTypeXidCriticalError, es
        )
    got = []
    for _ in range(200):
        src.clock.sleep(1)
        while True:
            try:
                got.append(n.nvmlEventSetWait_v2(es, 0).eventData)
            except pynvml.NVMLError_Timeout:
                break
    assert got == [31, 43, 13, 43]


def test_lose_gpu_hook_also_logs_xid_79():
    src, n = nvml(gpu_count=2)
    h = n.nvmlDeviceGetHandleByIndex(1)
    src.sim.lose_gpu(1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        n.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    log = src.run_command(["journalctl", "-k", "-o", "short-iso"], 5).stdout
    assert "): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus." in log


def test_mig_instances_on_a100():
    src, n = nvml("mig")
    src.clock.sleep(2)
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetMigMode(h) == [1, 1]
    assert n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        n.nvmlDeviceGetUtilizationRates(h)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        n.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    count = n.nvmlDeviceGetMaxMigDeviceCount(h)
    migs = []
    for k in range(count):
        try:
            migs.append(n.nvmlDeviceGetMigDeviceHandleByIndex(h, k))
        except pynvml.NVMLError_NotFound:
            continue
    assert len(migs) == 3
    m = migs[0]
    assert n.nvmlDeviceIsMigDeviceHandle(m).value == 1
    assert n.nvmlDeviceGetName(m) == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert n.nvmlDeviceGetUUID(m).startswith("MIG-")
    parent = n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
    assert ctypes.cast(parent, ctypes.c_void_p).value == ctypes.cast(h, ctypes.c_void_p).value
    gi = n.nvmlDeviceGetGpuInstanceId(m)
    assert n.nvmlDeviceGetComputeInstanceId(m) == 0
    mem = n.nvmlDeviceGetMemoryInfo(m)
    assert 39 * 1024 * MIB < mem.total < 41 * 1024 * MIB and 0 < mem.used < mem.total
    on_m = n.nvmlDeviceGetComputeRunningProcesses(m)
    on_all = n.nvmlDeviceGetComputeRunningProcesses(h)
    assert len(on_m) == 1 and len(on_all) == 3 and on_m[0].gpuInstanceId == gi


def test_h100_supports_mig_but_has_it_off():
    _, n = nvml("idle")
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetMigMode(h) == [0, 0]
    assert n.nvmlDeviceGetMaxMigDeviceCount(h) == 0


def gpm(n, h, s1, s2, ids):
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(ids)
    mg.sample1, mg.sample2 = s1, s2
    for k, i in enumerate(ids):
        mg.metrics[k].metricId = i
    n.nvmlGpmMetricsGet(mg)
    return [(mg.metrics[k].nvmlReturn, mg.metrics[k].value) for k in range(len(ids))]


def test_gpm_metrics_average_over_the_interval_between_samples():
    src, n = nvml("input-starved", noise=0)
    h = n.nvmlDeviceGetHandleByIndex(0)
    ids = [pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, 999]
    s1, s2 = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    n.nvmlGpmSampleGet(h, s1)
    src.clock.sleep(8)  # one whole period of the sawtooth: busy 2.5 s of 8
    n.nvmlGpmSampleGet(h, s2)
    (r1, sm), (r2, tensor), (r3, _) = gpm(n, h, s1, s2, ids)
    assert r1 == r2 == pynvml.NVML_SUCCESS and r3 == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert 89 * 2.0 / 8 < sm < 89 * 3.0 / 8 and tensor < sm
    per_second = []
    for _ in range(8):
        n.nvmlGpmSampleGet(h, s1)
        src.clock.sleep(1)
        n.nvmlGpmSampleGet(h, s2)
        per_second.append(gpm(n, h, s1, s2, ids[:1])[0][1])
    assert min(per_second) < 5 and max(per_second) > 80  # the sawtooth shows at 1 s
    n.nvmlGpmSampleFree(s1)
    n.nvmlGpmSampleFree(s2)


def test_nvlink_counters_are_cumulative_kib():
    src, n = nvml("comm-bound", noise=0)
    h = n.nvmlDeviceGetHandleByIndex(0)
    tx = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
    read = lambda: n.nvmlDeviceGetFieldValues(h, [(tx, 0xFFFFFFFF)])[0].value.ullVal  # noqa: E731
    a = read()
    src.clock.sleep(6)
    b = read()
    rate = (b - a) / 6
    assert 5e7 < rate < 3e8  # KiB/s: tens to hundreds of GB/s over a dip cycle
    link0 = n.nvmlDeviceGetFieldValues(h, [(tx, 0)])[0].value.ullVal
    assert link0 == pytest.approx(b / 18, rel=0.01)
    bad = n.nvmlDeviceGetFieldValues(h, [(tx, 30)])[0]
    assert bad.nvmlReturn == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_process_utilization_samples_are_new_or_not_found():
    src, n = nvml()
    h = n.nvmlDeviceGetHandleByIndex(0)
    s = n.nvmlDeviceGetProcessUtilization(h, 0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        n.nvmlDeviceGetProcessUtilization(h, s[0].timeStamp)
    src.clock.sleep(1)
    assert n.nvmlDeviceGetProcessUtilization(h, s[0].timeStamp)


def test_thermal_throttle_reasons_and_clocks():
    src, n = nvml("thermal-throttle", noise=0)
    src.clock.sleep(3)
    h = n.nvmlDeviceGetHandleByIndex(0)
    mask = n.nvmlDeviceGetCurrentClocksEventReasons(h)
    assert mask & pynvml.nvmlClocksEventReasonSwThermalSlowdown
    assert mask & pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert not mask & pynvml.nvmlClocksEventReasonGpuIdle
    sm = n.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    assert 0.5 < sm / n.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) < 0.65
    assert 88 <= n.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) <= 92


def test_energy_is_a_counter_in_millijoules_of_the_draw():
    src, n = nvml("compute-bound", noise=0)
    h = n.nvmlDeviceGetHandleByIndex(0)
    a = n.nvmlDeviceGetTotalEnergyConsumption(h)
    assert isinstance(a, int) and a > 0
    readings, watts = [a], []
    for _ in range(5):
        watts.append(n.nvmlDeviceGetPowerUsage(h) / 1000)
        src.clock.sleep(1)
        readings.append(n.nvmlDeviceGetTotalEnergyConsumption(h))
    assert readings == sorted(readings)  # never goes back, whatever the draw does
    assert readings[-1] - a == pytest.approx(sum(watts) * 1000, rel=0.1)  # mJ: W x s x 1000


def test_energy_and_replays_are_not_supported_on_a_mig_handle():
    _, n = nvml("mig")
    h = n.nvmlDeviceGetHandleByIndex(0)
    mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    for fn in (n.nvmlDeviceGetTotalEnergyConsumption, n.nvmlDeviceGetPcieReplayCounter):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            fn(mig)
    assert n.nvmlDeviceGetPcieReplayCounter(h) == 0


def test_a_vgpu_guest_answers_its_mode_and_license_in_the_real_struct():
    _, n = nvml("idle")
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetVirtualizationMode(h) == pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE
    with pytest.raises(pynvml.NVMLError_NotSupported):
        n.nvmlDeviceGetGridLicensableFeatures_v4(h)
    for state in ("licensed", "unlicensed"):
        _, n = nvml("idle", faults=f"vgpu:{state}")
        h = n.nvmlDeviceGetHandleByIndex(0)
        assert n.nvmlDeviceGetVirtualizationMode(h) == pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU
        got = n.nvmlDeviceGetGridLicensableFeatures_v4(h)
        assert type(got) is pynvml.c_nvmlGridLicensableFeatures_v4_t
        assert got.isGridLicenseSupported and got.licensableFeaturesCount == 1
        f = got.gridLicensableFeatures[0]
        assert f.featureCode == pynvml.NVML_GRID_LICENSE_FEATURE_CODE_COMPUTE and f.featureEnabled
        assert f.featureState == (state == "licensed")
