"""The NVML collector: real NVML calls through the `pynvml` module API.

Static facts are read once per GPU and cached; handles are looked up once. Every dynamic field
goes through `Query`, so an unsupported field is `None`, a missing function is not retried, and a
GPU that falls off the bus becomes `GpuState(lost=True)` instead of an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import CollectorError, GpuProcess, GpuState, GpuStatic, SystemInfo, XidEvent
from . import nvml_errors
from .nvml_extras import (
    BusySampleReader,
    EventWatcher,
    GpmSampler,
    read_mig_instances,
    read_mig_static,
)
from .nvml_query import GpuLost, Query, text, union_value

# nvmlClocksEventReason* bits -> decoded name (NVML API reference, "ClocksEventReasons").
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
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
ALL_LINKS = 0xFFFFFFFF  # scopeId asking NVML for the NVLink counter summed over every link
REINIT_AFTER_S = 30.0  # how long to wait before trying nvmlInit again after it failed


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
    nvlink_prev: tuple[float, int, int] | None = None
    proc_util_ts: int = 0
    migs: list[tuple[Any, Any]] = field(default_factory=list)


class NvmlCollector:
    def __init__(self, nvml: Any, clock: Any, hostname: str) -> None:
        self.nvml = nvml
        self.clock = clock
        self.hostname = hostname
        self.q = Query(nvml)
        self._gpus: list[_Gpu] = []
        self._system: SystemInfo | None = None
        self._init_error: CollectorError | None = None
        self._init_failed_at: float | None = None
        self._events: EventWatcher | None = None
        self._gpm: GpmSampler | None = None
        self._busy = BusySampleReader(nvml, self.q)

    # -- set-up ------------------------------------------------------------------------------
    def _ensure_init(self) -> bool:
        if self._system is not None:
            return True
        now = self.clock.now()
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
        self._init_error = None
        q = self.q
        # The plain call is NVML's own figure; _v2 asks libcuda, which containers may lack.
        cuda = q(None, "nvmlSystemGetCudaDriverVersion") or q(
            None, "nvmlSystemGetCudaDriverVersion_v2"
        )
        count = q(None, "nvmlDeviceGetCount") or 0
        self._system = SystemInfo(
            hostname=self.hostname,
            driver_version=text(q(None, "nvmlSystemGetDriverVersion")),
            nvml_version=text(q(None, "nvmlSystemGetNVMLVersion")),
            cuda_driver_version=cuda,
            gpu_count=count,
        )
        for i in range(count):
            try:
                h = q(i, "nvmlDeviceGetHandleByIndex", i)
            except GpuLost:
                h = None
            if h is None:
                self._gpus.append(_Gpu(i, None, GpuStatic(index=i), lost=True))
                continue
            try:
                g = _Gpu(i, h, self._read_static(i, h))
            except GpuLost:
                self._gpus.append(_Gpu(i, None, GpuStatic(index=i), lost=True))
                continue
            if g.static.mig_mode:
                g.migs = read_mig_static(q, i, self._mig_handles(i, h))
            self._gpus.append(g)
        live = [(g.index, g.handle) for g in self._gpus if not g.lost]
        self._events = EventWatcher(n, q, live)
        self._gpm = GpmSampler(
            n, q, [(g.index, g.handle) for g in self._gpus if g.static.gpm_supported]
        )
        return True

    def _read_static(self, i: int, h: Any) -> GpuStatic:
        """Facts that do not change while the driver is loaded. Raises GpuLost."""
        q, n = self.q, self.nvml
        pci = q(i, "nvmlDeviceGetPciInfo", h)
        mem = q(i, "nvmlDeviceGetMemoryInfo", h)
        limit_mw = q(i, "nvmlDeviceGetEnforcedPowerLimit", h)
        mig = q(i, "nvmlDeviceGetMigMode", h)
        gpm = q(i, "nvmlGpmQueryDeviceSupport", h)
        pers = q(i, "nvmlDeviceGetPersistenceMode", h)
        cmode = q(i, "nvmlDeviceGetComputeMode", h)
        cc = q(i, "nvmlDeviceGetCudaComputeCapability", h)
        return GpuStatic(
            index=i,
            name=text(q(i, "nvmlDeviceGetName", h)),
            uuid=text(q(i, "nvmlDeviceGetUUID", h)),
            serial=text(q(i, "nvmlDeviceGetSerial", h)),
            pci_bus_id=text(pci.busId) if pci is not None else None,
            minor_number=q(i, "nvmlDeviceGetMinorNumber", h),
            memory_total_bytes=mem.total if mem is not None else None,
            power_limit_w=limit_mw / 1000.0 if limit_mw is not None else None,
            max_sm_clock_mhz=q(
                i, "nvmlDeviceGetMaxClockInfo", h, n.NVML_CLOCK_SM, key="max_clock_sm"
            ),
            max_mem_clock_mhz=q(
                i, "nvmlDeviceGetMaxClockInfo", h, n.NVML_CLOCK_MEM, key="max_clock_mem"
            ),
            compute_capability=tuple(cc) if cc is not None else None,
            mig_mode=bool(mig[0]) if mig is not None else None,
            persistence_mode=bool(pers) if pers is not None else None,
            compute_mode=COMPUTE_MODES.get(cmode) if cmode is not None else None,
            pcie_max_gen=q(i, "nvmlDeviceGetMaxPcieLinkGeneration", h),
            pcie_max_width=q(i, "nvmlDeviceGetMaxPcieLinkWidth", h),
            gpm_supported=bool(gpm is not None and gpm.isSupportedDevice),
            nvlink_supported=self._has_nvlink(i, h),
        )

    def _has_nvlink(self, i: int, h: Any) -> bool:
        vals = self.q(
            i,
            "nvmlDeviceGetFieldValues",
            h,
            [(self.nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS)],
            key="nvlink_probe",
        )
        return bool(vals) and vals[0].nvmlReturn == self.nvml.NVML_SUCCESS

    def _mig_handles(self, i: int, h: Any) -> list[Any]:
        count = self.q(i, "nvmlDeviceGetMaxMigDeviceCount", h) or 0
        out = []
        for k in range(count):
            m = self.q(i, "nvmlDeviceGetMigDeviceHandleByIndex", h, k, key=f"mig_handle_{k}")
            if m is not None:
                out.append(m)
        return out

    # -- one tick ----------------------------------------------------------------------------
    def collect(self) -> NvmlResult:
        if not self._ensure_init():
            host_only = SystemInfo(hostname=self.hostname)
            return NvmlResult(system=host_only, errors=(self._init_error,))
        now = self.clock.now()
        gpus: list[GpuState] = []
        procs: list[GpuProcess] = []
        errors: list[CollectorError] = []
        gpm = self._gpm.sample(now) if self._gpm else {}
        for extra in (self._gpm, self._events):
            for i in extra.lost if extra else ():
                self._gpus[i].lost = True
        for g in self._gpus:
            if not g.lost:
                try:
                    state = self._read_dynamic(g, now, gpm.get(g.index))
                    procs.extend(self._read_processes(g))
                    gpus.append(state)
                    continue
                except GpuLost:
                    g.lost = True
                    self._busy.forget(g.index)
                    if self._gpm:
                        self._gpm.forget(g.index)
            gpus.append(GpuState(index=g.index, static=g.static, lost=True))
            errors.append(nvml_errors.gpu_lost(g.index))
        events = self._events.poll(now) if self._events else ()
        for ev in events:
            if ev.xid == 79 and ev.gpu_index is not None:
                self._gpus[ev.gpu_index].lost = True
        return NvmlResult(self._system, tuple(gpus), tuple(procs), tuple(events), tuple(errors))

    def _read_dynamic(self, g: _Gpu, now: float, gpm: Any) -> GpuState:
        q, n, i, h = self.q, self.nvml, g.index, g.handle
        mem = q(i, "nvmlDeviceGetMemoryInfo", h, n.nvmlMemory_v2, key="memory_v2")
        reserved = getattr(mem, "reserved", None) if mem is not None else None
        if mem is None:  # drivers without the v2 call
            mem = q(i, "nvmlDeviceGetMemoryInfo", h)
        bar1 = q(i, "nvmlDeviceGetBAR1MemoryInfo", h)
        util = q(i, "nvmlDeviceGetUtilizationRates", h)
        enc = q(i, "nvmlDeviceGetEncoderUtilization", h)
        dec = q(i, "nvmlDeviceGetDecoderUtilization", h)
        power_mw = q(i, "nvmlDeviceGetPowerUsage", h)
        reasons = q(i, "nvmlDeviceGetCurrentClocksEventReasons", h)
        tx, rx, mem_temp = self._field_values(g, now)
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
        return GpuState(
            index=i,
            static=g.static,
            mem_total_bytes=mem.total if mem is not None else None,
            mem_reserved_bytes=reserved,
            mem_used_bytes=mem.used if mem is not None else None,
            mem_free_bytes=mem.free if mem is not None else None,
            bar1_total_bytes=bar1.bar1Total if bar1 is not None else None,
            bar1_used_bytes=bar1.bar1Used if bar1 is not None else None,
            util_gpu_pct=float(util.gpu) if util is not None else None,
            util_mem_pct=float(util.memory) if util is not None else None,
            enc_util_pct=float(enc[0]) if enc is not None else None,
            dec_util_pct=float(dec[0]) if dec is not None else None,
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            temperature_c=q(i, "nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU),
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
            pcie_gen=q(i, "nvmlDeviceGetCurrPcieLinkGeneration", h),
            pcie_width=q(i, "nvmlDeviceGetCurrPcieLinkWidth", h),
            pcie_replay_count=q(i, "nvmlDeviceGetPcieReplayCounter", h),
            nvlink_tx_kib_s=tx,
            nvlink_rx_kib_s=rx,
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
            gpm=gpm,
            util_samples=self._busy.read(i, h),
            mig_instances=read_mig_instances(q, i, g.migs),
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
        got = [_field_value(n, v) for v in vals]
        if any(v.nvmlReturn == n.NVML_ERROR_GPU_IS_LOST for v in vals):
            raise GpuLost
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
        for kind, fn in (
            ("compute", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            for p in q(i, fn, h) or ():
                if p.pid in out:
                    continue
                sm, mu = util.get(p.pid, (None, None))
                gi = getattr(p, "gpuInstanceId", None)
                ci = getattr(p, "computeInstanceId", None)
                out[p.pid] = GpuProcess(
                    pid=p.pid,
                    gpu_index=i,
                    kind=kind,
                    used_memory_bytes=p.usedGpuMemory,
                    gpu_instance_id=None if gi in (None, 0xFFFFFFFF) else gi,
                    compute_instance_id=None if ci in (None, 0xFFFFFFFF) else ci,
                    sm_util_pct=sm,
                    mem_util_pct=mu,
                )
        return list(out.values())

    def close(self) -> None:
        if self._system is None:
            return
        if self._gpm:
            self._gpm.close()
        if self._events:
            self._events.close()
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass
        self._system = None
        self._gpus = []
        self._busy = BusySampleReader(self.nvml, self.q)


def _field_value(n: Any, v: Any) -> float | int | None:
    if v.nvmlReturn != n.NVML_SUCCESS:
        return None
    return union_value(v.value, v.valueType)
