"""GPU models as NVML names and sizes them, and one GPU's tick as NVML and GPM report it."""

from __future__ import annotations

import random
from dataclasses import dataclass

from gputop_diag.model import MIB, GpmMetrics, GpuState, GpuStatic, MigInstance

from .timeline import Tick

GB_S_AS_KIB_S = 1e9 / 1024  # NVLink counters read KiB/s
GB_S_AS_KB_S = 1e6  # NVML's PCIe throughput reads KB/s


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str  # as nvmlDeviceGetName returns it
    memory_mib: int  # nvmlDeviceGetMemoryInfo total
    power_limit_w: float
    idle_power_w: float
    max_sm_clock_mhz: int
    idle_sm_clock_mhz: int
    max_mem_clock_mhz: int
    cc: tuple[int, int]
    gpm: bool  # NVML GPM: Hopper and newer
    nvlink_gb_s: float  # per direction, all links; 0: no NVLink
    pcie: tuple[int, int]  # max generation, width
    ecc: bool
    remap: bool  # row remapping (Ampere and newer datacenter parts); Volta retires pages
    mig: bool
    reserved_mib: int  # the driver's reserve, part of "used" (NVML v2 memory info)
    datacenter: bool = True


MODELS = (
    GpuModel("NVIDIA H100 80GB HBM3", 81559, 700, 72, 1980, 345, 2619, (9, 0), True, 450,
             (5, 16), True, True, True, 531),
    GpuModel("NVIDIA H200", 143771, 700, 76, 1980, 345, 3201, (9, 0), True, 450, (5, 16),
             True, True, True, 587),
    GpuModel("NVIDIA GH200 480GB", 97871, 900, 95, 1980, 345, 2619, (9, 0), True, 450,
             (5, 16), True, True, True, 555),
    GpuModel("NVIDIA B200", 183359, 1000, 140, 1965, 345, 3996, (10, 0), True, 900, (6, 16),
             True, True, True, 1150),
    GpuModel("NVIDIA H100 PCIe", 81559, 350, 48, 1755, 345, 1593, (9, 0), True, 0, (5, 16),
             True, True, True, 531),
    GpuModel("NVIDIA A100-SXM4-80GB", 81920, 400, 62, 1410, 210, 1593, (8, 0), False, 300,
             (4, 16), True, True, True, 521),
    GpuModel("NVIDIA A100-SXM4-40GB", 40960, 400, 55, 1410, 210, 1215, (8, 0), False, 300,
             (4, 16), True, True, True, 408),
    GpuModel("NVIDIA A100 80GB PCIe", 81920, 300, 45, 1410, 210, 1512, (8, 0), False, 0,
             (4, 16), True, True, True, 521),
    GpuModel("NVIDIA L40S", 46068, 350, 35, 2520, 210, 9001, (8, 9), False, 0, (4, 16),
             True, True, False, 440),
    GpuModel("NVIDIA A10", 23028, 150, 22, 1695, 210, 6251, (8, 6), False, 0, (4, 16),
             True, True, False, 300),
    GpuModel("Tesla V100-SXM2-32GB", 32768, 300, 42, 1530, 135, 877, (7, 0), False, 150,
             (3, 16), True, False, False, 320),
    GpuModel("NVIDIA RTX A6000", 49140, 300, 25, 2100, 210, 8001, (8, 6), False, 0, (4, 16),
             True, True, False, 450, False),
    GpuModel("NVIDIA GeForce RTX 4090", 24564, 450, 20, 2520, 210, 10501, (8, 9), False, 0,
             (4, 16), False, False, False, 306, False),
)  # fmt: skip
BY_NAME = {m.name: m for m in MODELS}


def pick_model(
    rng: random.Random,
    *,
    nvlink: bool | None = None,
    mig: bool = False,
    datacenter: bool = False,
    gpm: bool | None = None,
) -> GpuModel:
    """A model meeting the needs, Hopper-class parts about half the time."""
    ok = [
        m
        for m in MODELS
        if (nvlink is None or (m.nvlink_gb_s > 0) == nvlink)
        and (not mig or m.mig)
        and (not datacenter or m.datacenter)
        and (gpm is None or m.gpm == gpm)
    ]
    weights = [3.0 if m.gpm else 1.6 for m in ok]
    return rng.choices(ok, weights)[0]


def static_for(model: GpuModel, index: int, rng: random.Random, mig_mode: bool) -> GpuStatic:
    hexes = [f"{rng.getrandbits(32):08x}", *(f"{rng.getrandbits(16):04x}" for _ in range(3))]
    uuid = "GPU-" + "-".join(hexes) + f"-{rng.getrandbits(48):012x}"
    bus = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)[index % 8] + index // 8
    return GpuStatic(
        index=index,
        name=model.name,
        uuid=uuid,
        serial=str(1650000000000 + rng.randrange(10**9)),
        pci_bus_id=f"00000000:{bus & 0xFF:02X}:00.0",
        minor_number=index,
        memory_total_bytes=model.memory_mib * MIB,
        power_limit_w=float(model.power_limit_w),
        max_sm_clock_mhz=model.max_sm_clock_mhz,
        max_mem_clock_mhz=model.max_mem_clock_mhz,
        compute_capability=model.cc,
        mig_mode=mig_mode if model.mig else None,
        persistence_mode=True if model.datacenter else False,
        compute_mode="default",
        pcie_max_gen=model.pcie[0],
        pcie_max_width=model.pcie[1],
        gpm_supported=model.gpm,
        nvlink_supported=model.nvlink_gb_s > 0,
    )


@dataclass(frozen=True, slots=True)
class Reading:
    """How this case's driver and permissions report: fixed for the whole window."""

    sample_period_s: float  # NVML busy-time sample period: 1/6 s or 1 s
    samples: bool  # nvmlDeviceGetSamples answers
    gpm: bool  # GPM figures readable
    mig: bool  # MIG mode: no busy time, no GPM
    power_appetite: float  # how hard this silicon and its kernels pull on the power limit
    memctl_gain: float  # memory-controller busy time per unit of DRAM bandwidth share


def _clamp(x: float, lo: float = 0.0, hi: float = 100.0) -> float:
    return lo if x < lo else hi if x > hi else x


def gpu_state(
    static: GpuStatic,
    model: GpuModel,
    tick: Tick,
    reading: Reading,
    rng: random.Random,
    used_mib: float,
    scale: float = 1.0,
    mig_instances: tuple[MigInstance, ...] = (),
    health: dict | None = None,
) -> GpuState:
    """NVML's and GPM's view of one GPU over one tick; `scale` varies GPUs of one job a little."""
    m, last = tick.mean, tick.last

    r = rng.random

    def noisy(x: float, sd: float = 1.2) -> float:  # triangular noise of deviation `sd`
        return round(_clamp(100.0 * x * scale + (r() + r() - 1.0) * 2.45 * sd), 1)

    busy = m["busy"]
    util = util_mem = None
    samples: tuple[float, ...] = ()
    if not reading.mig:
        fine = reading.sample_period_s < 0.5
        util = round(_clamp(100.0 * (tick.busy_bins[-1] if fine else busy)))
        dram_seen = last["dram"] if fine else m["dram"]
        util_mem = round(_clamp(100.0 * dram_seen * reading.memctl_gain + rng.gauss(0, 1.0)))
        if reading.samples:
            shares = tick.busy_bins if fine else (busy,)
            samples = tuple(float(round(_clamp(100.0 * b))) for b in shares)
    gpm = None
    if reading.gpm and not reading.mig:
        gpm = GpmMetrics(
            sm_util_pct=noisy(m["sm"]),
            sm_occupancy_pct=noisy(m["occupancy"], 0.8),
            dram_bw_util_pct=noisy(m["dram"]),
            tensor_util_pct=noisy(m["tensor"]),
            fp16_util_pct=noisy(m["fp16"], 0.5),
            fp32_util_pct=noisy(m["fp32"], 0.8),
            fp64_util_pct=noisy(m["fp64"], 0.3),
        )
    # Power rises with the math pipes and DRAM traffic; a demand above the limit is held at it
    # by the driver (SwPowerCap), which lowers the SM clock.
    math = max(m["tensor"], 0.8 * m["fp32"], 0.9 * m["fp64"], 0.6 * m["fp16"])
    demand = busy * 0.12 + 0.55 * math + 0.3 * m["dram"] + 0.1 * m["sm"]
    demand *= reading.power_appetite * scale
    headroom = model.power_limit_w - model.idle_power_w
    capped = demand > 1.0
    power = model.idle_power_w + headroom * min(demand, 1.0) + rng.gauss(0.0, 0.01 * headroom)
    reasons: tuple[str, ...] = ()
    if busy < 0.03:
        clock = model.idle_sm_clock_mhz
        reasons = ("gpu_idle",)
        power = model.idle_power_w * (1.0 + rng.uniform(-0.05, 0.08))
    elif capped:
        clock = int(model.max_sm_clock_mhz / demand**0.5 / 15) * 15
        reasons = ("sw_power_cap",)
        power = model.power_limit_w * rng.uniform(0.965, 1.0)
    else:
        clock = model.max_sm_clock_mhz - 15 * rng.randrange(0, 4)
    total = model.memory_mib * MIB
    used = min(total, int(used_mib * MIB))
    health = health or {}
    nv = model.nvlink_gb_s > 0
    return GpuState(
        index=static.index,
        static=static,
        mem_total_bytes=total,
        mem_reserved_bytes=model.reserved_mib * MIB,
        mem_used_bytes=used,
        mem_free_bytes=total - used,
        bar1_total_bytes=(256 if model.datacenter else 32) * 1024 * MIB,
        bar1_used_bytes=int(rng.uniform(2, 40) * MIB),
        util_gpu_pct=util,
        util_mem_pct=util_mem,
        enc_util_pct=None if reading.mig else 0.0,
        dec_util_pct=None if reading.mig else 0.0,
        power_w=round(max(power, 5.0), 1),
        temperature_c=round(30 + 48 * (power / model.power_limit_w) + rng.gauss(0, 0.6)),
        memory_temperature_c=(
            round(34 + 40 * (power / model.power_limit_w)) if model.datacenter else None
        ),
        sm_clock_mhz=clock,
        mem_clock_mhz=model.max_mem_clock_mhz,
        pstate=8 if reasons == ("gpu_idle",) and not model.datacenter else 0,
        clock_event_reasons=reasons,
        pcie_tx_kbps=int(last["pcie_tx_kb_s"] * rng.uniform(0.85, 1.15) + rng.uniform(0, 900)),
        pcie_rx_kbps=int(last["pcie_rx_kb_s"] * rng.uniform(0.85, 1.15) + rng.uniform(0, 900)),
        pcie_gen=model.pcie[0] if busy > 0.02 else 1 if not model.datacenter else model.pcie[0],
        pcie_width=model.pcie[1],
        pcie_replay_count=0,
        nvlink_tx_kib_s=round(m["nvlink_kib_s"] * scale + rng.uniform(0, 900), 1) if nv else None,
        nvlink_rx_kib_s=round(m["nvlink_kib_s"] * scale + rng.uniform(0, 900), 1) if nv else None,
        ecc_corrected=health.get("ecc_corrected", 0) if model.ecc else None,
        ecc_uncorrected=health.get("ecc_uncorrected", 0) if model.ecc else None,
        retired_pages_sbe=0 if model.ecc and not model.remap else None,
        retired_pages_dbe=0 if model.ecc and not model.remap else None,
        retired_pages_pending=False if model.ecc and not model.remap else None,
        remapped_rows_corr=health.get("remapped_rows_corr", 0) if model.remap else None,
        remapped_rows_unc=health.get("remapped_rows_unc", 0) if model.remap else None,
        remap_pending=health.get("remap_pending", False) if model.remap else None,
        remap_failure=health.get("remap_failure", False) if model.remap else None,
        gpm=gpm,
        util_samples=samples,
        mig_instances=mig_instances,
    )


def lost_state(static: GpuStatic) -> GpuState:
    """A GPU that fell off the bus: NVML answers GPU_IS_LOST for every query."""
    return GpuState(index=static.index, static=static, lost=True)
