"""The NVML collector: real NVML calls through the `pynvml` module API.

`nvmlInit` is called once (retried every `REINIT_AFTER_S` while it fails) and balanced by one
`nvmlShutdown` in `close()`. Static facts are read once per GPU; handles are looked up once. Every
dynamic field goes through `Query`, so an unsupported field is `None` and a missing function is
not retried; calls whose newest form an older driver lacks go through `NvmlCompat`.

No NVML failure escapes as an exception (docs/nvml.md has the whole policy):

- `nvmlInit` / `nvmlDeviceGetCount` failing: a collector error without a GPU index;
- a handle look-up failing with GPU_IS_LOST: the GPU is *lost* (final); with any other code it
  is *unavailable* (its own error with that code's explanation) and tried again every
  `HANDLE_RETRY_S`;
- a GPU-specific call failing with GPU_IS_LOST: the GPU is lost, keeping its identity;
- machine-wide queries (`nvmlSystemGet*`, the event set): an error for what they feed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ...model import CollectorError, GpuProcess, GpuState, GpuStatic, SystemInfo, XidEvent
from ..owners import foreign_pids_notice, proc_is_the_hosts
from . import errors as nvml_errors
from .compat import NA, NvmlCompat
from .extras import (
    BusySampleReader,
    EventWatcher,
    GpmSampler,
    is_vgpu_guest,
    read_mig_instances,
    read_mig_static,
    read_vgpu_license,
)
from .identity import bus_key, fill_identities
from .memory import Forms, memory_forms, read_memory
from .query import GpuLost, Query, text, union_value
from .static import ALL_LINKS, mig_handles, read_static

# nvmlClocksEventReason* bits -> decoded name (NVML API reference, "ClocksEventReasons"; the
# ClocksThrottleReasons of drivers before R535 have the same bits).
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)
REINIT_AFTER_S = 30.0  # how long to wait before trying nvmlInit again after it failed
RECOUNT_AFTER_S = 10.0  # ... nvmlDeviceGetCount again after it failed
HANDLE_RETRY_S = 5.0  # ... the handle of an unavailable GPU again
# How often the slowly changing fields are read (`_read_slow`): the error counters (ECC, retired
# pages, remapped rows), BAR1 and the PCIe link. In between, each snapshot carries their last
# reading. dcgm-exporter samples every field every 30 s by default (its `-c 30000`:
# https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html).
SLOW_FIELDS_EVERY_S = 10.0


def decode_clock_reasons(mask: int | None) -> tuple[str, ...]:
    if not mask:
        return ()
    return tuple(name for bit, name in CLOCK_EVENT_REASONS if mask & bit)


@dataclass(frozen=True, slots=True)
class NvmlResult:
    system: SystemInfo
    gpus: tuple[GpuState, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()
    errors: tuple[CollectorError, ...] = ()


@dataclass
class _Gpu:
    index: int
    handle: Any
    static: GpuStatic
    lost: bool = False
    failure: BaseException | None = None  # why NVML gave no handle (unavailable)
    retry_at: float = 0.0
    nvlink_prev: tuple[float, int, int] | None = None
    proc_util_ts: int = 0
    migs: list[tuple[Any, Any]] = field(default_factory=list)
    vgpu_guest: bool | None = None  # a vGPU in a virtual machine (license read); None: unknown
    slow: dict[str, Any] | None = None  # the last reading of the slow fields (GpuState's names)
    slow_at: float = 0.0  # when it was taken

    @property
    def live(self) -> bool:
        return not self.lost and self.handle is not None


# SystemInfo field -> (what it is in words, pynvml functions to try in turn)
_SYSTEM_FIELDS = {
    "driver_version": ("the driver version", ("nvmlSystemGetDriverVersion",)),
    "nvml_version": ("the NVML version", ("nvmlSystemGetNVMLVersion",)),
    # the plain call is NVML's own figure; _v2 asks libcuda, which containers may lack
    "cuda_driver_version": (
        "the driver's CUDA version",
        ("nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2"),
    ),
}


class NvmlCollector:
    def __init__(self, nvml: Any, clock: Any, hostname: str, procfs: Any = None) -> None:
        self.nvml = nvml
        self.clock = clock
        self.hostname = hostname
        self.procfs = procfs  # for the identity of GPUs NVML cannot describe
        self.q = Query(nvml)
        self.compat: NvmlCompat | None = None
        self._inited = False
        self._init_error: CollectorError | None = None
        self._init_failed_at: float | None = None
        self._count: int | None = None
        self._count_error: CollectorError | None = None
        self._count_failed_at: float | None = None
        self._system: dict[str, Any] = {}
        self._system_errors: dict[str, CollectorError] = {}
        self._system_done: set[str] = set()
        self._gpus: list[_Gpu] = []
        self._events: EventWatcher | None = None
        self._gpm: GpmSampler | None = None
        self._busy = BusySampleReader(nvml, self.q)
        self._mem_forms: Forms = []
        self._host_proc: bool | None = None  # whether procfs is the host's, where NVML's pids are
        self._host_proc_read = False
        self._head: Any = None  # a one-shot command's first GPM samples (`take_head`)

    def take_head(self, head: Any) -> None:
        """Use the GPM samples a `head.GpmHeadStart` took before this collector's first tick as
        its own first ones; the head's NVML reference is given back once this collector holds
        its own (`_adopt_head`, or `close`)."""
        self._head = head

    def _adopt_head(self) -> None:
        head, self._head = self._head, None
        if self._gpm is not None:
            for i in list(head.samples):
                when, sample = head.take(i)
                self._gpm.seed(i, when, sample)
        head.close()

    # -- set-up ------------------------------------------------------------------------------
    def _ensure_init(self, now: float) -> bool:
        if self._inited:
            return True
        if self._init_failed_at is not None and now - self._init_failed_at < REINIT_AFTER_S:
            return False
        n = self.nvml
        try:
            n.nvmlInit()
        except n.NVMLError as e:
            self._init_error = nvml_errors.init_failure(n, e)
            self._init_failed_at = now
            return False
        except OSError as e:  # a broken library that fails to load
            self._init_error = CollectorError(
                "nvml", f"the NVML library failed to load: {e}", nvml_errors.DEMO_HINT
            )
            self._init_failed_at = now
            return False
        self._inited, self._init_error = True, None
        self.compat = NvmlCompat(n)
        self._mem_forms = memory_forms(n)
        return True

    def _read_system(self) -> list[CollectorError]:
        """The machine-wide facts not read yet; an error for each that failed (asked again next
        tick, unless the driver does not have it)."""
        n = self.nvml
        for fld, (what, names) in _SYSTEM_FIELDS.items():
            if fld in self._system_done:
                continue
            for name in names:
                fn = getattr(n, name, None)
                if fn is None:
                    continue
                try:
                    value = fn()
                except self.q._mismatch:
                    continue
                except n.NVMLError as e:
                    if e.value in (n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_FUNCTION_NOT_FOUND):
                        continue
                    self._system_errors[fld] = nvml_errors.system_failure(n, what, e)
                    break
                self._system[fld] = text(value) if fld != "cuda_driver_version" else value
                self._system_errors.pop(fld, None)
                self._system_done.add(fld)
                break
            else:
                self._system_done.add(fld)  # no form of it here: n/a, not an error
        return list(self._system_errors.values())

    def _system_info(self) -> SystemInfo:
        return SystemInfo(hostname=self.hostname, gpu_count=self._count or 0, **self._system)

    def _ensure_gpus(self, now: float) -> bool:
        """Count the GPUs and open each (once); False while the count fails."""
        if self._count is not None:
            return True
        if self._count_failed_at is not None and now - self._count_failed_at < RECOUNT_AFTER_S:
            return False
        n = self.nvml
        try:
            count = int(n.nvmlDeviceGetCount())
        except n.NVMLError as e:
            self._count_error = nvml_errors.count_failure(n, e)
            self._count_failed_at = now
            return False
        self._count, self._count_error = count, None
        self._gpus = [_Gpu(i, None, GpuStatic(index=i)) for i in range(count)]
        self._events = EventWatcher(n, self.q, self.compat, self._index_of_bus)
        self._gpm = GpmSampler(n, self.q, [])
        for g in self._gpus:
            self._open(g, now)
        incomplete = [g.index for g in self._gpus if not (g.static.uuid and g.static.name)]
        if incomplete and self.procfs is not None:
            statics = {g.index: g.static for g in self._gpus}
            fill_identities(statics, incomplete, self.procfs)
            for g in self._gpus:
                g.static = statics[g.index]
        return True

    def _open(self, g: _Gpu, now: float) -> None:
        """Look up GPU g's handle and read its facts; a failure makes it lost or unavailable."""
        n = self.nvml
        try:
            h = n.nvmlDeviceGetHandleByIndex(g.index)
        except n.NVMLError as e:
            if e.value == n.NVML_ERROR_GPU_IS_LOST:
                g.lost, g.failure = True, None
            else:
                g.failure, g.retry_at = e, now + HANDLE_RETRY_S
            return
        static, lost = read_static(self.q, n, g.index, h)
        g.static = _keep_known(g.static, static)
        g.failure = None
        if lost:
            g.lost = True
            return
        g.handle = h
        try:
            g.vgpu_guest = is_vgpu_guest(self.q, n, g.index, h)
        except GpuLost:
            g.lost = True
            return
        if g.static.mig_mode:
            g.migs = read_mig_static(self.q, g.index, mig_handles(self.q, g.index, h))
        if self._events is not None:
            self._events.add(g.index, h, g.static.pci_bus_id)
        if self._gpm is not None and g.static.gpm_supported:
            self._gpm.add(g.index, h)

    def _index_of_bus(self, bus: str) -> int | None:
        key = bus_key(bus)
        for g in self._gpus:
            if key is not None and bus_key(g.static.pci_bus_id) == key:
                return g.index
        return None

    # -- one tick ----------------------------------------------------------------------------
    def collect(self) -> NvmlResult:
        now = self.clock.now()
        if not self._ensure_init(now):
            return NvmlResult(system=SystemInfo(hostname=self.hostname), errors=(self._init_error,))
        errors = self._read_system()
        if not self._ensure_gpus(now):
            return NvmlResult(self._system_info(), errors=(self._count_error, *errors))
        if self._head is not None:
            self._adopt_head()
        if self._count == 0:
            return NvmlResult(self._system_info(), errors=(nvml_errors.no_gpus(), *errors))
        for g in self._gpus:
            if g.failure is not None and now >= g.retry_at:
                self._open(g, now)
        gpus: list[GpuState] = []
        procs: list[GpuProcess] = []
        gpm = self._gpm.sample(now) if self._gpm else {}
        for extra in (self._gpm, self._events):
            for i in extra.lost if extra else ():
                self._mark_lost(self._gpus[i])
        for g in self._gpus:
            if g.live:
                try:
                    state = self._read_dynamic(g, now, gpm.get(g.index))
                    procs.extend(self._read_processes(g))
                    gpus.append(state)
                    continue
                except GpuLost:
                    self._mark_lost(g)
            if g.lost:
                gpus.append(GpuState(index=g.index, static=g.static, lost=True))
                errors.append(nvml_errors.gpu_lost(g.index, g.static.name, g.static.pci_bus_id))
            else:  # unavailable: no handle
                gpus.append(GpuState(index=g.index, static=g.static))
                errors.append(
                    nvml_errors.gpu_unavailable(
                        self.nvml, g.index, g.failure, g.static.name, g.static.pci_bus_id
                    )
                )
        events: tuple[XidEvent, ...] = ()
        if self._events is not None:
            events, failed = self._events.poll(now)
            errors.extend(failed)
            errors.extend(self._events.errors.values())
            for ev in events:
                if ev.gpu_index is None:
                    continue
                if ev.xid == 79:
                    self._mark_lost(self._gpus[ev.gpu_index])
                else:  # an Xid may come with new error counts (ECC, rows): read them next tick
                    self._gpus[ev.gpu_index].slow_at = now - SLOW_FIELDS_EVERY_S
        if procs and self._pids_are_foreign():
            errors.append(foreign_pids_notice())
        return NvmlResult(
            self._system_info(), tuple(gpus), tuple(procs), tuple(events), tuple(errors)
        )

    def _pids_are_foreign(self) -> bool:
        """This program's /proc is a container's, while NVML's pids are the host's (the driver
        knows no PID namespace): read once, when NVML first lists a process."""
        if self.procfs is None:
            return False
        if not self._host_proc_read:
            self._host_proc, self._host_proc_read = proc_is_the_hosts(self.procfs), True
        return self._host_proc is False

    def _mark_lost(self, g: _Gpu) -> None:
        g.lost = True
        self._busy.forget(g.index)
        if self._gpm:
            self._gpm.forget(g.index)

    def _read_dynamic(self, g: _Gpu, now: float, gpm: Any) -> GpuState:
        q, n, i, h = self.q, self.nvml, g.index, g.handle
        if g.slow is None or not 0 <= now - g.slow_at < SLOW_FIELDS_EVERY_S:
            g.slow, g.slow_at = self._read_slow(g), now
        mem = read_memory(q, i, h, self._mem_forms)
        util = q(i, "nvmlDeviceGetUtilizationRates", h)
        enc = q(i, "nvmlDeviceGetEncoderUtilization", h)
        dec = q(i, "nvmlDeviceGetDecoderUtilization", h)
        power_mw = q(i, "nvmlDeviceGetPowerUsage", h)
        reasons = q.first(
            i,
            [
                ("clock_reasons", "nvmlDeviceGetCurrentClocksEventReasons", (h,)),
                ("throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", (h,)),
            ],
        )
        tx, rx, mem_temp = self._field_values(g, now)
        return GpuState(
            index=i,
            static=g.static,
            mem_total_bytes=mem.total if mem is not None else None,
            mem_reserved_bytes=mem.reserved if mem is not None else None,
            mem_used_bytes=mem.used if mem is not None else None,
            mem_free_bytes=mem.free if mem is not None else None,
            util_gpu_pct=float(util.gpu) if util is not None else None,
            util_mem_pct=float(util.memory) if util is not None else None,
            enc_util_pct=float(enc[0]) if enc is not None else None,
            dec_util_pct=float(dec[0]) if dec is not None else None,
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            # a counter exported as such (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION): read every tick
            energy_mj=q(i, "nvmlDeviceGetTotalEnergyConsumption", h),
            temperature_c=q(i, "nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU),
            # A board without fans (SXM, passively cooled) answers NOT_SUPPORTED: None, and
            # the call is not made again (Query's skip list)
            fan_speed_pct=q(i, "nvmlDeviceGetFanSpeed", h),
            memory_temperature_c=mem_temp,
            sm_clock_mhz=q(i, "nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_SM, key="clock_sm"),
            mem_clock_mhz=q(i, "nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_MEM, key="clock_mem"),
            pstate=q(i, "nvmlDeviceGetPerformanceState", h),
            clock_event_reasons=decode_clock_reasons(reasons),
            pcie_tx_kbps=q(
                i, "nvmlDeviceGetPcieThroughput", h, n.NVML_PCIE_UTIL_TX_BYTES, key="pcie_tx"
            ),
            pcie_rx_kbps=q(
                i, "nvmlDeviceGetPcieThroughput", h, n.NVML_PCIE_UTIL_RX_BYTES, key="pcie_rx"
            ),
            nvlink_tx_kib_s=tx,
            nvlink_rx_kib_s=rx,
            vgpu_licensed=_vgpu_licensed(q, i, h, g.vgpu_guest),
            gpm=gpm,
            util_samples=self._busy.read(i, h),
            mig_instances=read_mig_instances(q, i, g.migs, self._mem_forms),
            **g.slow,
        )

    def _read_slow(self, g: _Gpu) -> dict[str, Any]:
        """The fields that change rarely (counters of rare errors, BAR1, the PCIe link), by
        GpuState's names: read every `SLOW_FIELDS_EVERY_S`. Raises GpuLost."""
        q, n, i, h = self.q, self.nvml, g.index, g.handle
        bar1 = q(i, "nvmlDeviceGetBAR1MemoryInfo", h)
        rows = q(i, "nvmlDeviceGetRemappedRows", h)
        sbe = q(
            i,
            "nvmlDeviceGetRetiredPages",
            h,
            n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            key="retired_sbe",
        )
        dbe = q(
            i,
            "nvmlDeviceGetRetiredPages",
            h,
            n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
            key="retired_dbe",
        )
        pending = q(i, "nvmlDeviceGetRetiredPagesPendingStatus", h)
        return dict(
            bar1_total_bytes=bar1.bar1Total if bar1 is not None else None,
            bar1_used_bytes=bar1.bar1Used if bar1 is not None else None,
            pcie_gen=q(i, "nvmlDeviceGetCurrPcieLinkGeneration", h),
            pcie_width=q(i, "nvmlDeviceGetCurrPcieLinkWidth", h),
            pcie_replay_count=q(i, "nvmlDeviceGetPcieReplayCounter", h),
            ecc_corrected=q(
                i,
                "nvmlDeviceGetTotalEccErrors",
                h,
                n.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                n.NVML_VOLATILE_ECC,
                key="ecc_corrected",
            ),
            ecc_uncorrected=q(
                i,
                "nvmlDeviceGetTotalEccErrors",
                h,
                n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                n.NVML_VOLATILE_ECC,
                key="ecc_uncorrected",
            ),
            retired_pages_sbe=len(sbe) if sbe is not None else None,
            retired_pages_dbe=len(dbe) if dbe is not None else None,
            retired_pages_pending=bool(pending) if pending is not None else None,
            remapped_rows_corr=rows[0] if rows is not None else None,
            remapped_rows_unc=rows[1] if rows is not None else None,
            remap_pending=bool(rows[2]) if rows is not None else None,
            remap_failure=bool(rows[3]) if rows is not None else None,
        )

    def _field_values(self, g: _Gpu, now: float) -> tuple[float | None, float | None, Any]:
        """NVLink TX/RX rates (KiB/s) from the cumulative counters, and memory temperature."""
        n = self.nvml
        ids: list[Any] = [n.NVML_FI_DEV_MEMORY_TEMP]
        if g.static.nvlink_supported:
            ids += [
                (n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS),
                (n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS),
            ]
        vals = self.q(g.index, "nvmlDeviceGetFieldValues", g.handle, ids)
        if not vals:
            return None, None, None
        got = []
        for v in vals:
            ret = v.nvmlReturn
            if ret == n.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost
            got.append(union_value(v.value, v.valueType) if ret == n.NVML_SUCCESS else None)
        mem_temp = got[0]
        if not g.static.nvlink_supported or got[1] is None or got[2] is None:
            return None, None, mem_temp
        prev, g.nvlink_prev = g.nvlink_prev, (now, int(got[1]), int(got[2]))
        if prev is None or now <= prev[0]:
            return None, None, mem_temp
        dt = now - prev[0]
        return max(0.0, (got[1] - prev[1]) / dt), max(0.0, (got[2] - prev[2]) / dt), mem_temp

    def _read_processes(self, g: _Gpu) -> list[GpuProcess]:
        q, i, h = self.q, g.index, g.handle
        samples = q(
            i,
            "nvmlDeviceGetProcessUtilization",
            h,
            g.proc_util_ts,
            absent=(self.nvml.NVML_ERROR_NOT_FOUND,),  # no new sample since the last tick
        )
        util: dict[int, tuple[float, float]] = {}
        for s in samples or ():
            util[s.pid] = (float(s.smUtil), float(s.memUtil))
            g.proc_util_ts = max(g.proc_util_ts, int(s.timeStamp))
        out: dict[int, GpuProcess] = {}
        for kind in ("compute", "graphics"):
            listed = q(
                i,
                lambda h, kind=kind: self.compat.running_processes(kind, h),
                h,
                key=f"{kind}_processes",
            )
            for p in listed or ():
                if p.pid in out:
                    continue
                sm, mu = util.get(p.pid, (None, None))
                gi, ci = p.gpuInstanceId, p.computeInstanceId
                out[p.pid] = GpuProcess(
                    pid=p.pid,
                    gpu_index=i,
                    kind=kind,
                    used_memory_bytes=p.usedGpuMemory,
                    gpu_instance_id=None if gi in (None, NA) else gi,
                    compute_instance_id=None if ci in (None, NA) else ci,
                    sm_util_pct=sm,
                    mem_util_pct=mu,
                )
        return list(out.values())

    def close(self) -> None:
        """Free the event set and GPM samples and shut NVML down (once per successful init)."""
        if self._head is not None:  # never adopted (NVML failed): its own reference goes too
            self._head.close()
            self._head = None
        if not self._inited:
            return
        if self._gpm:
            self._gpm.close()
        if self._events:
            self._events.close()
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass
        self._inited = False
        self._count = self._count_failed_at = None
        self._system, self._system_errors, self._system_done = {}, {}, set()
        self._gpus, self._events, self._gpm = [], None, None
        self.q = Query(self.nvml)
        self._busy = BusySampleReader(self.nvml, self.q)


def _keep_known(before: GpuStatic, after: GpuStatic) -> GpuStatic:
    """`after`, with the identity fields it could not read taken from `before`."""
    return replace(
        after,
        name=after.name or before.name,
        uuid=after.uuid or before.uuid,
        pci_bus_id=after.pci_bus_id or before.pci_bus_id,
        minor_number=after.minor_number if after.minor_number is not None else before.minor_number,
    )


def _vgpu_licensed(q: Query, i: int, h: Any, guest: bool | None) -> bool | None:
    """A vGPU guest's license as NVML reads it; False where NVML says the GPU is no vGPU (bare
    metal, passthrough: no license is held, and dcgm-exporter's DCGM_FI_DEV_VGPU_LICENSE_STATUS
    reads 0 there, NVIDIA/dcgm-exporter#317); None where NVML cannot say."""
    if guest is None:
        return None
    return read_vgpu_license(q, i, h) if guest else False
