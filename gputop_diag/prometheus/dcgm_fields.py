"""dcgm-exporter's vocabulary: the metric names, types, units and labels we export and read back.

Names, types and help texts follow NVIDIA/dcgm-exporter `etc/default-counters.csv` (all 25 of
its counters) and `etc/dcp-metrics-included.csv`
(https://github.com/NVIDIA/dcgm-exporter/blob/main/etc/default-counters.csv); fields outside
those two files keep their DCGM field name from `dcgm_fields.h` (`DCGM_FI_DEV_FB_TOTAL`,
`DCGM_FI_DEV_ENFORCED_POWER_LIMIT`, ...). Units are DCGM's: memory in MiB, power in W, energy in
mJ, clocks in MHz, temperatures in °C, utilization in percent, the profiling (DCP) activities as
ratios 0-1, PCIe and NVLink throughput in bytes per second.

Each `Field` says how to read its value off a `GpuState` (the exporter) and where the value goes
back into one (the fleet reader), so the two directions cannot drift apart.

DCGM declares some fields counters whose names do not end in `_total`
(`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, `..._REMAPPED_ROWS`) and one whose name holds "counter"
(`DCGM_FI_DEV_PCIE_REPLAY_COUNTER`). They are exported as dcgm-exporter exports them, `# TYPE
... counter` under DCGM's exact name, so a dashboard or alert written for dcgm-exporter reads
them unchanged; `promtool check metrics` lints them (as it lints dcgm-exporter's own output).
`exporter --lint-clean` gives what the lint accepts instead: those counters untyped, the replay
count as `gputop_diag_pcie_replays_total`, the model label `model_name`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..collect.nvml.collector import CLOCK_EVENT_REASONS
from ..collect.nvml.collector import decode_clock_reasons as decode_nvml_reasons
from ..model import MIB, GpuState, MigInstance

# dcgm-exporter's per-GPU labels (internal/pkg/rendermetrics/render_metrics.go: gpu, UUID,
# pci_bus_id, device, modelName, hostname), then each "label" field of its counter file as a label
# of its own (DCGM_FI_DRIVER_VERSION, in default-counters.csv), and its label for the HPC job that
# holds a GPU (--hpc-job-mapping-dir).
HOST_LABEL = "hostname"
# dcgm-exporter named it `Hostname` until NVIDIA/dcgm-exporter#655 (merged 2026-05-12, after
# release 4.5.3-4.8.2); `exporter --hostname-label Hostname` keeps the old spelling, and the fleet
# reader takes either.
HOST_LABEL_BEFORE_655 = "Hostname"
HOST_LABELS = (HOST_LABEL, HOST_LABEL_BEFORE_655)
DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", HOST_LABEL, DRIVER_LABEL)
# promtool's lint rejects camelCase label names (`modelName`), as it rejects dcgm-exporter's own
# output: `exporter --lint-clean` names the GPU model `model_name`. The fleet reader takes either.
MODEL_LABEL = "modelName"
MODEL_LABEL_LINT_CLEAN = "model_name"
JOB_LABEL = "hpc_job"
# dcgm-exporter's labels on a MIG instance's series (the GPU instance's profile and id), added
# to its parent GPU's labels.
MIG_PROFILE_LABEL = "GPU_I_PROFILE"
MIG_ID_LABEL = "GPU_I_ID"
# Labels that identify a machine or a device: dropped under --sanitize.
IDENTIFYING_LABELS = ("UUID", "pci_bus_id", *HOST_LABELS, JOB_LABEL)

# The clock-reason bitmask: DCGM's DCGM_CLOCKS_EVENT_REASON_* bits are a 1:1 map of NVML's, so
# the collector's table decodes both.


def encode_clock_reasons(reasons: tuple[str, ...]) -> int:
    return sum(bit for bit, name in CLOCK_EVENT_REASONS if name in reasons)


def decode_clock_reasons(mask: float | None) -> tuple[str, ...]:
    return decode_nvml_reasons(int(mask) if mask else None)


def _mib(b: int | None) -> float | None:
    return None if b is None else b / MIB


def _ratio(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


def _gpm(name: str) -> Callable[[GpuState], float | None]:
    def get(g: GpuState) -> float | None:
        return None if g.gpm is None else _ratio(getattr(g.gpm, name))

    return get


def _fb_used(g: GpuState) -> float | None:
    # DCGM's FB_USED leaves the reserve out, as our `mem_used_bytes` does (NVML v2: FB_USED +
    # FB_RESERVED + FB_FREE = FB_TOTAL; FB_USED_PERCENT is Used / (Total - Reserved):
    # https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html)
    return _mib(g.mem_used_bytes)


def _flag(v: bool | None) -> float | None:
    return None if v is None else float(v)


def _nvlink_mb_s(g: GpuState) -> float | None:
    if g.nvlink_tx_kib_s is None or g.nvlink_rx_kib_s is None:
        return None
    return (g.nvlink_tx_kib_s + g.nvlink_rx_kib_s) * 1024 / 1e6


@dataclass(frozen=True, slots=True)
class Field:
    """One dcgm-exporter metric: name, DCGM's type, help, how to read it off a GpuState, and
    where the fleet reader puts it back (`target`: a GpuState field, "static.<field>",
    "gpm.<field>", or a key the reader combines, such as "fb_used")."""

    name: str
    kind: str  # DCGM's Prometheus type: "gauge" or "counter"
    help: str
    get: Callable[[GpuState], float | None]
    target: str
    scale: float = 1.0  # model value = DCGM value * scale

    def exposed_type(self, lint_clean: bool = False) -> str:
        """The TYPE line we write: DCGM's own, or under `lint_clean` its counters untyped (see
        the module docstring)."""
        return "unknown" if lint_clean and self.kind == "counter" else self.kind


def _attr(name: str) -> Callable[[GpuState], float | None]:
    def get(g: GpuState) -> float | None:
        v = getattr(g, name)
        return None if v is None else float(v)

    return get


def _static(name: str) -> Callable[[GpuState], float | None]:
    def get(g: GpuState) -> float | None:
        v = getattr(g.static, name)
        return None if v is None else float(v)

    return get


FIELDS: tuple[Field, ...] = (
    # utilization (the sample period varies by product)
    Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", _attr("util_gpu_pct"),
          "util_gpu_pct"),
    Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).",
          _attr("util_mem_pct"), "util_mem_pct"),
    Field("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", _attr("enc_util_pct"),
          "enc_util_pct"),
    Field("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", _attr("dec_util_pct"),
          "dec_util_pct"),
    # memory
    Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", _fb_used,
          "fb_used", MIB),
    Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
          lambda g: _mib(g.mem_free_bytes), "fb_free", MIB),
    Field("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).",
          lambda g: _mib(g.mem_reserved_bytes), "fb_reserved", MIB),
    Field("DCGM_FI_DEV_FB_TOTAL", "gauge", "Framebuffer memory total (in MiB).",
          lambda g: _mib(g.mem_total_bytes), "fb_total", MIB),
    Field("DCGM_FI_DEV_BAR1_USED", "gauge", "BAR1 memory used (in MiB).",
          lambda g: _mib(g.bar1_used_bytes), "bar1_used_bytes", MIB),
    Field("DCGM_FI_DEV_BAR1_TOTAL", "gauge", "BAR1 memory total (in MiB).",
          lambda g: _mib(g.bar1_total_bytes), "bar1_total_bytes", MIB),
    # power, clocks, temperature
    Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", _attr("power_w"),
          "power_w"),
    Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
          "Total energy consumption since boot (in mJ).", _attr("energy_mj"), "energy_mj"),
    Field("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "gauge",
          "Power limit the driver enforces after all limiters (in W).",
          _static("power_limit_w"), "static.power_limit_w"),
    Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", _attr("sm_clock_mhz"),
          "sm_clock_mhz"),
    Field("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
          _attr("mem_clock_mhz"), "mem_clock_mhz"),
    Field("DCGM_FI_DEV_MAX_SM_CLOCK", "gauge", "Maximum SM clock frequency (in MHz).",
          _static("max_sm_clock_mhz"), "static.max_sm_clock_mhz"),
    Field("DCGM_FI_DEV_MAX_MEM_CLOCK", "gauge", "Maximum memory clock frequency (in MHz).",
          _static("max_mem_clock_mhz"), "static.max_mem_clock_mhz"),
    Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", _attr("temperature_c"),
          "temperature_c"),
    Field("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).",
          _attr("memory_temperature_c"), "memory_temperature_c"),
    Field("DCGM_FI_DEV_PSTATE", "gauge", "Performance state (P-State) 0-15, 0 is highest.",
          _attr("pstate"), "pstate"),
    Field("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge",
          "Current clock throttle reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
          lambda g: float(encode_clock_reasons(g.clock_event_reasons)), "clock_reasons"),
    # interconnect
    Field("DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "PCIe current link generation.",
          _attr("pcie_gen"), "pcie_gen"),
    Field("DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "PCIe current link width.",
          _attr("pcie_width"), "pcie_width"),
    # NVML's PCIe throughput is in KB/s (1000 bytes): the classifier's PCIe figures are too.
    Field("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
          "The rate of data transmitted over the PCIe bus - including both protocol headers "
          "and data payloads - in bytes per second.",
          lambda g: None if g.pcie_tx_kbps is None else g.pcie_tx_kbps * 1000.0,
          "pcie_tx_kbps", 1e-3),
    Field("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
          "The rate of data received over the PCIe bus - including both protocol headers and "
          "data payloads - in bytes per second.",
          lambda g: None if g.pcie_rx_kbps is None else g.pcie_rx_kbps * 1000.0,
          "pcie_rx_kbps", 1e-3),
    # Not under --lint-clean: promtool rejects a name holding "counter" under any type.
    Field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.",
          _attr("pcie_replay_count"), "pcie_replay_count"),
    # DCGM types it a counter, but its value is a rate: the traffic of every link, both ways
    # (NVIDIA/dcgm-exporter#195, #472; measured against nvidia-smi in
    # KempnerInstitute/kempnerpulse#10: MB/s). Ours: NVML's data counters of every link
    # (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX + _RX) over the last tick, in MB/s.
    Field("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
          "Total number of NVLink bandwidth counters for all lanes.", _nvlink_mb_s,
          "nvlink_total_mb_s"),
    Field("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge",
          "The rate of data transmitted over NVLink, not including protocol headers, in bytes "
          "per second.",
          lambda g: None if g.nvlink_tx_kib_s is None else g.nvlink_tx_kib_s * 1024.0,
          "nvlink_tx_kib_s", 1 / 1024),
    Field("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge",
          "The rate of data received over NVLink, not including protocol headers, in bytes per "
          "second.",
          lambda g: None if g.nvlink_rx_kib_s is None else g.nvlink_rx_kib_s * 1024.0,
          "nvlink_rx_kib_s", 1 / 1024),
    # profiling (DCP): ratios 0-1. GR engine active is the one that works per MIG instance in
    # DCGM; ours is NVML's GPM (Hopper and newer), absent elsewhere.
    Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.",
          _gpm("graphics_util_pct"), "gpm.graphics_util_pct", 100.0),
    Field("DCGM_FI_PROF_SM_ACTIVE", "gauge",
          "The ratio of cycles an SM has at least 1 warp assigned.", _gpm("sm_util_pct"),
          "gpm.sm_util_pct", 100.0),
    Field("DCGM_FI_PROF_SM_OCCUPANCY", "gauge",
          "The ratio of number of warps resident on an SM.", _gpm("sm_occupancy_pct"),
          "gpm.sm_occupancy_pct", 100.0),
    Field("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
          "Ratio of cycles the tensor (HMMA) pipe is active.", _gpm("tensor_util_pct"),
          "gpm.tensor_util_pct", 100.0),
    Field("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
          "Ratio of cycles the device memory interface is active sending or receiving data.",
          _gpm("dram_bw_util_pct"), "gpm.dram_bw_util_pct", 100.0),
    Field("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active.",
          _gpm("fp64_util_pct"), "gpm.fp64_util_pct", 100.0),
    Field("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active.",
          _gpm("fp32_util_pct"), "gpm.fp32_util_pct", 100.0),
    Field("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active.",
          _gpm("fp16_util_pct"), "gpm.fp16_util_pct", 100.0),
    # errors and health
    Field("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
          "Total number of single-bit volatile ECC errors.", _attr("ecc_corrected"),
          "ecc_corrected"),
    Field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
          "Total number of double-bit volatile ECC errors.", _attr("ecc_uncorrected"),
          "ecc_uncorrected"),
    Field("DCGM_FI_DEV_RETIRED_SBE", "counter",
          "Total number of retired pages due to single-bit errors.",
          _attr("retired_pages_sbe"), "retired_pages_sbe"),
    Field("DCGM_FI_DEV_RETIRED_DBE", "counter",
          "Total number of retired pages due to double-bit errors.",
          _attr("retired_pages_dbe"), "retired_pages_dbe"),
    Field("DCGM_FI_DEV_RETIRED_PENDING", "counter",
          "Total number of pages pending retirement.",
          lambda g: _flag(g.retired_pages_pending), "retired_pages_pending"),
    Field("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
          "Number of remapped rows for uncorrectable errors", _attr("remapped_rows_unc"),
          "remapped_rows_unc"),
    Field("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
          "Number of remapped rows for correctable errors", _attr("remapped_rows_corr"),
          "remapped_rows_corr"),
    Field("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed",
          lambda g: _flag(g.remap_failure), "remap_failure"),
    Field("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether remapping of rows is pending",
          lambda g: _flag(g.remap_pending), "remap_pending"),
    # 1 licensed, 0 not; only on a vGPU inside a virtual machine (`collect/nvml/extras.py`)
    Field("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status",
          lambda g: _flag(g.vgpu_licensed), "vgpu_licensed"),
)  # fmt: skip

# Filled by the exporter from its own state, not read off one GpuState.
XID_FIELD = Field(
    "DCGM_FI_DEV_XID_ERRORS",
    "gauge",
    "Value of the last XID error encountered.",
    lambda g: None,
    "xid_last",
)
# DCGM's newer name for the clock-reason bitmask (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS is its
# deprecated alias, the one dcgm-exporter's counter files use); the reader takes either.
CLOCK_REASONS_ALIASES = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")

BY_NAME: dict[str, Field] = {f.name: f for f in (*FIELDS, XID_FIELD)}
BY_NAME[CLOCK_REASONS_ALIASES[1]] = BY_NAME[CLOCK_REASONS_ALIASES[0]]
GPM_FIELDS = tuple(f.name for f in FIELDS if f.target.startswith("gpm."))
NVLINK_FIELDS = ("DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES")
# Exported under dcgm-exporter's own names only: promtool rejects the name under any type.
NOT_LINT_CLEAN = frozenset({"DCGM_FI_DEV_PCIE_REPLAY_COUNTER"})


def _mig_used(m: MigInstance) -> float | None:
    return _mib(m.memory_used_bytes)


def _mig_free(m: MigInstance) -> float | None:
    if m.memory_total_bytes is None or m.memory_used_bytes is None:
        return None
    return _mib(max(0, m.memory_total_bytes - m.memory_used_bytes))


# The fields dcgm-exporter also writes per MIG instance (DCGM's GPU-instance entities) that we
# have per instance: its memory, by field name.
MIG_FIELDS: dict[str, Callable[[MigInstance], float | None]] = {
    "DCGM_FI_DEV_FB_USED": _mig_used,
    "DCGM_FI_DEV_FB_FREE": _mig_free,
    "DCGM_FI_DEV_FB_TOTAL": lambda m: _mib(m.memory_total_bytes),
}


def mig_profile(m: MigInstance) -> str:
    """The instance's profile ("1g.10gb") as dcgm-exporter's GPU_I_PROFILE, from NVML's name
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb")."""
    name = m.name or ""
    return name.rsplit(" MIG ", 1)[-1] if " MIG " in name else ""
