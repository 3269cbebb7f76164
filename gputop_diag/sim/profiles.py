"""GPU models and workload profiles: what a GPU and its host look like under each kind of work.

A profile gives the shape of GPU busy time over time (`steady`; `sawtooth`, a GPU waiting on
data; `gaps`, host synchronizations, staggered across GPUs; `dips`, collective communication,
at the same moment on every GPU), the GPU figures when busy and when idle, and the host side
(dataloader workers, the main thread, iowait, I/O pressure). Scenarios (`scenarios.py`) put
profiles on a timeline.

A shape other than `steady` is a square wave: busy `busy_s` of every `period` seconds (one
training step and its duty cycle). `busy_share` integrates it exactly over any interval, so
the driver's ~1/6 s samples and the 1 s utilization figure are two views of one signal, and a
period shorter than a tick (`sync_step`) shows in the samples while the tick figure stays
smooth.

GPU figures: util (busy time %), memctl (memory-controller busy %), GPM sm / occ / tensor /
dram / fp16 / fp32 (%), power (fraction of the power limit), clock (fraction of max SM clock),
temp (°C). `None` means the device does not report the figure (MIG mode).

`wait` names the part of the step the GPU's idle time is spent in, as a probe inside the job
measures it (`probe_step`): a step is one period of the wave; a steady profile's step is the
scenario's `probe["step_s"]`, the GPU busy through it.
"""

from __future__ import annotations

import math

# Public spec-sheet figures of each model (NVIDIA H100 SXM5 and A100 SXM4 datasheets).
GPU_MODELS = {
    "H100": dict(
        name="NVIDIA H100 80GB HBM3",
        mem_mib=81559,
        cc=(9, 0),
        arch=9,  # NVML_DEVICE_ARCH_HOPPER
        gpm=True,
        nvlinks=18,
        mig_capable=True,
        power_limit_w=700.0,
        idle_w=72.0,
        sm_max=1980,
        mem_max=2619,
        idle_sm=345,
        pcie=(5, 16),
        pci_device_id=0x233010DE,
        bar1_mib=131072,
        reserved_mib=470,  # what the driver keeps with nothing running
        idle_pstate=0,  # HBM data-centre parts idle in P0 at low SM clock (persistence mode)
        serial_prefix="1654922",
        vbios="96.00.99.00.01",
        slowdown_c=87,
        shutdown_c=92,
    ),
    "A100": dict(
        name="NVIDIA A100-SXM4-80GB",
        mem_mib=81920,
        cc=(8, 0),
        arch=7,  # NVML_DEVICE_ARCH_AMPERE
        gpm=False,
        nvlinks=12,
        mig_capable=True,
        power_limit_w=400.0,
        idle_w=55.0,
        sm_max=1410,
        mem_max=1593,
        idle_sm=210,
        pcie=(4, 16),
        pci_device_id=0x20B210DE,
        bar1_mib=131072,
        reserved_mib=420,
        idle_pstate=0,
        serial_prefix="1323021",
        vbios="92.00.45.00.06",
        slowdown_c=89,
        shutdown_c=94,
    ),
}

IDLE_GPU = dict(
    util=0, memctl=0, sm=0, occ=0, tensor=0, dram=0, fp16=0, fp32=0, power=0.0, clock=0.0, temp=33
)
COMPUTE_GPU = dict(
    util=99,
    memctl=42,
    sm=89,
    occ=46,
    tensor=67,
    dram=37,
    fp16=24,
    fp32=12,
    power=0.9,
    clock=0.98,
    temp=72,
)
_TRAIN_HOST = dict(workers=4, worker_cpu=22, main_cpu=62, iowait=0.8, io_psi=0.4)

PROFILES: dict[str, dict] = {
    "idle": dict(
        shape="steady",
        busy=IDLE_GPU,
        idle=IDLE_GPU,
        mem_frac=0.006,
        host=dict(workers=0, worker_cpu=0, main_cpu=0, iowait=0.2, io_psi=0.0),
        procs=False,
    ),
    "compute": dict(
        shape="steady",
        busy=COMPUTE_GPU,
        idle=IDLE_GPU,
        mem_frac=0.74,
        nvlink_busy=9.0e6,  # KiB/s per GPU: gradient all-reduce overlapped with compute
        nvlink_idle=9.0e6,
        pcie_kbps=180_000,
        host=_TRAIN_HOST,
    ),
    "bandwidth": dict(
        shape="steady",
        busy=dict(
            util=97,
            memctl=93,
            sm=82,
            occ=31,
            tensor=7,
            dram=87,
            fp16=6,
            fp32=28,
            power=0.76,
            clock=0.98,
            temp=69,
        ),
        idle=IDLE_GPU,
        mem_frac=0.62,
        nvlink_busy=4.0e6,
        nvlink_idle=4.0e6,
        pcie_kbps=150_000,
        host=dict(workers=4, worker_cpu=20, main_cpu=58, iowait=0.6, io_psi=0.3),
    ),
    "input": dict(
        shape="sawtooth",
        period=8.0,
        busy_s=2.5,
        wait="t_input",
        busy=COMPUTE_GPU,
        idle=IDLE_GPU,
        mem_frac=0.55,
        nvlink_busy=6.0e6,
        nvlink_idle=2.0e5,
        pcie_kbps=900_000,
        host=dict(
            workers=20,
            worker_cpu=96,
            main_cpu=35,
            pin_cpu=14,
            iowait=24,
            io_psi=31.0,
            disk_read=1.4e9,
        ),
    ),
    # the loaders wait on storage that stopped answering (uninterruptible sleep on a network
    # mount): the GPUs wait as long, the workers burn no CPU, the reads are not on a local disk
    "input_stalled": dict(
        shape="sawtooth",
        period=8.0,
        busy_s=1.5,
        wait="t_input",
        busy=COMPUTE_GPU,
        idle=IDLE_GPU,
        mem_frac=0.55,
        nvlink_busy=6.0e6,
        nvlink_idle=2.0e5,
        pcie_kbps=300_000,
        host=dict(workers=20, worker_cpu=2, main_cpu=8, pin_cpu=1, iowait=38, io_psi=64.0),
    ),
    "input_step": dict(  # the loaders fall behind every step: idle 0.75 s of each 1.2 s step
        shape="sawtooth",
        period=1.2,
        busy_s=0.45,
        wait="t_input",
        busy=COMPUTE_GPU,
        idle=IDLE_GPU,
        mem_frac=0.55,
        nvlink_busy=6.0e6,
        nvlink_idle=2.0e5,
        pcie_kbps=900_000,
        host=dict(
            workers=8,
            worker_cpu=97,
            main_cpu=30,
            pin_cpu=12,
            iowait=15.0,
            io_psi=18.0,
            disk_read=9.0e8,
        ),
    ),
    "sync": dict(
        shape="gaps",
        period=3.0,
        busy_s=1.5,
        wait="t_sync",
        busy=COMPUTE_GPU,
        idle=IDLE_GPU,
        mem_frac=0.58,
        nvlink_busy=3.0e6,
        nvlink_idle=1.0e5,
        pcie_kbps=60_000,
        host=dict(workers=4, worker_cpu=3, main_cpu=99.5, iowait=0.3, io_psi=0.1),
    ),
    "sync_step": dict(  # a host sync every step: idle 0.3 s of each 0.8 s step
        shape="gaps",
        period=0.8,
        busy_s=0.5,
        wait="t_sync",
        busy=COMPUTE_GPU,
        idle=IDLE_GPU,
        mem_frac=0.58,
        nvlink_busy=3.0e6,
        nvlink_idle=1.0e5,
        pcie_kbps=60_000,
        host=dict(workers=4, worker_cpu=3, main_cpu=99.5, iowait=0.3, io_psi=0.1),
    ),
    # launch-bound: small kernels back to back (batch 8, eager mode, an unfused optimizer): a
    # kernel is always resident, so busy time reads ~97 %, while a few SMs work and the main
    # thread launches flat out
    "launch": dict(
        shape="steady",
        busy=dict(
            util=97,
            memctl=6,
            sm=9,
            occ=4,
            tensor=2,
            dram=7,
            fp16=1,
            fp32=4,
            power=0.22,
            clock=0.98,
            temp=45,
        ),
        idle=IDLE_GPU,
        mem_frac=0.18,
        nvlink_busy=2.0e5,
        nvlink_idle=2.0e5,
        pcie_kbps=40_000,
        host=dict(workers=2, worker_cpu=3, main_cpu=99.5, iowait=0.3, io_psi=0.1),
    ),
    "comm": dict(
        shape="dips",
        period=6.0,
        busy_s=3.5,
        wait="t_comm_exposed",
        busy=COMPUTE_GPU,
        idle=dict(  # NCCL kernels keep the GPU "busy" while the SMs wait on NVLink
            util=62,
            memctl=20,
            sm=14,
            occ=8,
            tensor=1,
            dram=22,
            fp16=0,
            fp32=2,
            power=0.42,
            clock=0.98,
            temp=66,
        ),
        mem_frac=0.71,
        nvlink_busy=8.0e6,
        nvlink_idle=2.6e8,  # ~270 GB/s per GPU during the all-reduce
        pcie_kbps=300_000,
        host=dict(workers=4, worker_cpu=18, main_cpu=55, iowait=0.5, io_psi=0.2),
    ),
    "capacity": dict(
        shape="steady",
        busy=dict(
            util=84,
            memctl=48,
            sm=61,
            occ=38,
            tensor=41,
            dram=44,
            fp16=18,
            fp32=10,
            power=0.7,
            clock=0.98,
            temp=66,
        ),
        idle=IDLE_GPU,
        mem_frac=0.983,
        nvlink_busy=5.0e6,
        nvlink_idle=5.0e6,
        pcie_kbps=200_000,
        host=dict(workers=4, worker_cpu=25, main_cpu=60, iowait=1.0, io_psi=0.5),
    ),
    "leak": dict(
        shape="steady",
        busy=COMPUTE_GPU,
        idle=IDLE_GPU,
        mem_frac=0.52,
        mem_growth_per_min=0.025,  # of the GPU's memory: ~2 GiB/min, full in ~19 min
        nvlink_busy=9.0e6,
        nvlink_idle=9.0e6,
        pcie_kbps=180_000,
        host=_TRAIN_HOST,
    ),
    "thermal": dict(
        shape="steady",
        busy=dict(
            util=99,
            memctl=40,
            sm=87,
            occ=45,
            tensor=64,
            dram=35,
            fp16=22,
            fp32=11,
            power=0.63,
            clock=0.58,
            temp=90,
        ),
        idle=IDLE_GPU,
        mem_frac=0.7,
        reasons=("sw_thermal", "hw_thermal", "hw_slowdown"),
        nvlink_busy=7.0e6,
        nvlink_idle=7.0e6,
        pcie_kbps=160_000,
        host=dict(workers=4, worker_cpu=20, main_cpu=60, iowait=0.7, io_psi=0.3),
    ),
    "mig": dict(
        shape="steady",
        busy=dict(
            util=None,
            memctl=None,
            sm=None,
            occ=None,
            tensor=None,
            dram=None,
            fp16=None,
            fp32=None,
            power=0.86,
            clock=0.99,
            temp=70,
        ),
        idle=IDLE_GPU,
        mem_frac=0.6,
        nvlink_busy=0.0,
        nvlink_idle=0.0,
        pcie_kbps=90_000,
        host=dict(workers=2, worker_cpu=20, main_cpu=60, iowait=0.5, io_psi=0.2),
    ),
}

# Noise amplitude (standard deviation at noise=1.0) per figure.
NOISE_SD = dict(
    util=2.0,
    memctl=2.0,
    sm=2.5,
    occ=1.5,
    tensor=2.5,
    dram=2.5,
    fp16=1.5,
    fp32=1.5,
    power=0.02,
    clock=0.01,
    temp=0.8,
    cpu=3.0,
    iowait=1.5,
)
GPU_KEYS = ("util", "memctl", "sm", "occ", "tensor", "dram", "fp16", "fp32", "temp")


def _busy_seconds(prof: dict, x: float, gpu: int) -> float:
    """Busy seconds of the square wave from its origin up to time x (epoch seconds)."""
    period, busy_s = prof["period"], prof["busy_s"]
    offset = 0.0 if prof["shape"] == "dips" else 0.37 * gpu  # only collectives line GPUs up
    laps = math.floor((x - offset) / period)
    return laps * busy_s + min(x - offset - laps * period, busy_s)


def busy_share(prof: dict, t0: float, t1: float, gpu: int) -> float:
    """Share of (t0, t1] that GPU `gpu` is busy under profile `prof` (exact, 0..1)."""
    shape = prof["shape"]
    if shape == "steady":
        return 1.0
    if t1 <= t0:  # an instant: busy or not
        return float(_busy_seconds(prof, t1 + 1e-6, gpu) > _busy_seconds(prof, t1, gpu))
    # `_busy_seconds` at t1 and t0, written out (the driver's samples ask this most)
    period, busy_s = prof["period"], prof["busy_s"]
    offset = 0.0 if shape == "dips" else 0.37 * gpu
    laps = math.floor((t1 - offset) / period)
    busy1 = laps * busy_s + min(t1 - offset - laps * period, busy_s)
    laps = math.floor((t0 - offset) / period)
    busy0 = laps * busy_s + min(t0 - offset - laps * period, busy_s)
    return min(1.0, max(0.0, (busy1 - busy0) / (t1 - t0)))


def profiles_of(spec: dict) -> dict[str, dict]:
    """The profiles a scenario can name: these, and any it defines itself (`profiles`)."""
    return {**PROFILES, **spec.get("profiles", {})}


def probe_step(prof: dict, step_s: float, k: int, world: int) -> dict:
    """Step k of a rank as the probe inside it measures it (the `step` record's parts, seconds):
    the GPU's busy time, the wait in the profile's `wait` part, the small waits every step has
    (one `loss.item()`, the next batch ready at once), and the host's own time as the rest."""
    period = prof.get("period", step_s)
    busy = prof.get("busy_s", 0.97 * period)
    wait = (period - busy) * (1.0 + 0.04 * math.sin(1.7 * k))  # steps differ a little
    part = prof.get("wait")
    multi = world > 1
    parts = dict(
        t_input_s=wait if part == "t_input" else 0.004 * period,
        t_sync_s=wait if part == "t_sync" else 0.002 * period,
        t_comm_exposed_s=wait if part == "t_comm_exposed" else (0.01 * period if multi else None),
    )
    if parts["t_comm_exposed_s"] is not None:
        parts["t_comm_s"] = parts["t_comm_exposed_s"] + 0.3 * busy
    wall = busy + wait if part else period
    waits = sum(v for k_, v in parts.items() if v is not None and k_ != "t_comm_s")
    return dict(
        wall_s=wall,
        **parts,
        sync_count=3 if part == "t_sync" else 1,
        t_gpu_s=None,  # as the real probe: busy time is not measured in the job
        gpu_span_s=wall,  # the stream's span between step boundaries, gaps included
        t_host_s=max(0.0, wall - waits),
    )
