"""Scenarios as data: GPU models, workload profiles and timelines.

A profile says what a workload looks like: the shape of GPU busy time over time (`steady`,
`sawtooth` for a GPU waiting on data, `gaps` for host synchronizations, `dips` for collective
communication, correlated across GPUs), the GPU figures when busy and when idle, and the host
side (dataloader workers, the main thread, iowait). A scenario is a GPU model and count, the jobs
on it, a timeline of profiles, and events (Xids, a GPU falling off the bus, Slurm jobs).
"""

from __future__ import annotations

MIB = 1024**2

# Public spec-sheet figures of each model.
GPU_MODELS = {
    "H100": dict(
        name="NVIDIA H100 80GB HBM3",
        mem_mib=81559,
        cc=(9, 0),
        gpm=True,
        nvlink=True,
        power_limit_w=700.0,
        idle_w=72.0,
        sm_max=1980,
        mem_max=2619,
        idle_sm=345,
        pcie=(5, 16),
        mig=False,
        serial_prefix="1654922",
        vbios="96.00.99.00.01",
    ),
    "A100": dict(
        name="NVIDIA A100-SXM4-80GB",
        mem_mib=81920,
        cc=(8, 0),
        gpm=False,
        nvlink=True,
        power_limit_w=400.0,
        idle_w=55.0,
        sm_max=1410,
        mem_max=1593,
        idle_sm=210,
        pcie=(4, 16),
        mig=True,
        serial_prefix="1323021",
        vbios="92.00.45.00.06",
    ),
}

# GPU figures: util (busy time %), memctl (memory-controller busy %), GPM sm / occ / tensor /
# dram / fp16 / fp32 (%), power (fraction of limit), clock (fraction of max SM clock), temp.
_IDLE_GPU = dict(
    util=0, memctl=0, sm=0, occ=0, tensor=0, dram=0, fp16=0, fp32=0, power=0.0, clock=0.0, temp=33
)
_COMPUTE_GPU = dict(
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

PROFILES: dict[str, dict] = {
    "idle": dict(
        shape="steady",
        busy=_IDLE_GPU,
        idle=_IDLE_GPU,
        mem_frac=0.006,
        host=dict(workers=0, worker_cpu=0, main_cpu=0, iowait=0.2, io_psi=0.0),
        procs=False,
    ),
    "compute": dict(
        shape="steady",
        busy=_COMPUTE_GPU,
        idle=_IDLE_GPU,
        mem_frac=0.74,
        nvlink_busy=9.0e6,
        nvlink_idle=9.0e6,
        pcie_kbps=180_000,
        host=dict(workers=4, worker_cpu=22, main_cpu=62, iowait=0.8, io_psi=0.4),
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
        idle=_IDLE_GPU,
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
        busy=_COMPUTE_GPU,
        idle=_IDLE_GPU,
        mem_frac=0.55,
        nvlink_busy=6.0e6,
        nvlink_idle=2.0e5,
        pcie_kbps=900_000,
        host=dict(workers=20, worker_cpu=96, main_cpu=35, iowait=24, io_psi=31.0, disk_read=1.4e9),
    ),
    "sync": dict(
        shape="gaps",
        period=3.0,
        busy_s=1.5,
        busy=_COMPUTE_GPU,
        idle=_IDLE_GPU,
        mem_frac=0.58,
        nvlink_busy=3.0e6,
        nvlink_idle=1.0e5,
        pcie_kbps=60_000,
        host=dict(workers=4, worker_cpu=3, main_cpu=99.5, iowait=0.3, io_psi=0.1),
    ),
    "comm": dict(
        shape="dips",
        period=6.0,
        busy_s=3.5,
        busy=_COMPUTE_GPU,
        idle=dict(
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
        nvlink_idle=2.6e8,
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
        idle=_IDLE_GPU,
        mem_frac=0.983,
        nvlink_busy=5.0e6,
        nvlink_idle=5.0e6,
        pcie_kbps=200_000,
        host=dict(workers=4, worker_cpu=25, main_cpu=60, iowait=1.0, io_psi=0.5),
    ),
    "leak": dict(
        shape="steady",
        busy=_COMPUTE_GPU,
        idle=_IDLE_GPU,
        mem_frac=0.52,
        mem_growth_per_min=0.025,
        nvlink_busy=9.0e6,
        nvlink_idle=9.0e6,
        pcie_kbps=180_000,
        host=dict(workers=4, worker_cpu=22, main_cpu=62, iowait=0.8, io_psi=0.4),
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
        idle=_IDLE_GPU,
        mem_frac=0.7,
        reasons=("sw_thermal", "hw_thermal"),
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
        idle=_IDLE_GPU,
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

_TRAIN = ("python", "train.py", "--config", "configs/llama-7b.yaml")


def _job(user="alice", cmd=_TRAIN, gpus="all", **kw):
    return dict(user=user, cmdline=cmd, gpus=gpus, **kw)


_COTENANT = _job(
    user="bob",
    cmd=(
        "python",
        "-m",
        "ipykernel_launcher",
        "-f",
        "/home/bob/.local/share/jupyter/runtime/kernel-1.json",
    ),
    gpus=(0,),
    single=True,
    mem_mib=3100,
    denied=True,
    cpu=4,
)

SCENARIOS: dict[str, dict] = {
    "idle": dict(
        description="8×H100, nothing running",
        expected="idle",
        model="H100",
        gpus=8,
        duration=120,
        timeline=[(0, "idle")],
        jobs=[],
    ),
    "compute-bound": dict(
        description="8-rank training job; kernels dominate, tensor cores busy, input keeps up",
        expected="compute",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "compute")],
        jobs=[_job(), _COTENANT],
    ),
    "bandwidth-bound": dict(
        description="memory-bound kernels: DRAM bandwidth 85-90 % (GPM), tensor pipes nearly idle",
        expected="bandwidth",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "bandwidth")],
        jobs=[_job(cmd=("python", "finetune_norms.py", "--fused", "false"))],
    ),
    "input-starved": dict(
        description="GPU busy time a sawtooth while 20 dataloader workers keep the CPUs busy and "
        "iowait is high",
        expected="input_pipeline",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "input")],
        jobs=[_job(cmd=("python", "train_vit.py", "--data", "/data/imagenet", "--workers", "20"))],
    ),
    "sync-stall": dict(
        description="GPUs idle in regular gaps while the main thread spins in host syncs "
        "(.item(), logging); loaders idle",
        expected="synchronization",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "sync")],
        jobs=[_job(cmd=("python", "train.py", "--log-every", "1"))],
    ),
    "comm-bound": dict(
        description="8 GPUs dip together while NVLink carries all-reduce traffic",
        expected="communication",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "comm")],
        jobs=[_job(cmd=("torchrun", "--nproc-per-node", "8", "train_ddp.py"))],
    ),
    "capacity": dict(
        description="memory at 97-99 % of every GPU; the batch size is what fits",
        expected="capacity",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "capacity")],
        jobs=[_job(cmd=("python", "train.py", "--batch-size", "6")), _COTENANT],
        kernel_lines=[
            (
                40,
                "Out of memory: Killed process {pid1} (pt_data_worker) "
                "total-vm:81234567kB, anon-rss:2345678kB",
            )
        ],
    ),
    "memory-leak": dict(
        description="process memory grows every step (graph retention or a logging leak) "
        "towards the limit: the capacity class, with a memory-growth alert",
        expected="capacity",
        model="H100",
        gpus=8,
        duration=600,
        timeline=[(0, "leak")],
        jobs=[_job()],
    ),
    "thermal-throttle": dict(
        description="compute-bound work held at ~58 % of max SM clock by thermal slowdown: "
        "compute class with a thermal alert",
        expected="compute",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "thermal")],
        jobs=[_job()],
    ),
    "xid-79": dict(
        description="a training job runs until GPU 3 falls off the bus at 90 s (Xid 79); the "
        "other seven keep computing",
        expected="compute",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "compute")],
        jobs=[_job()],
        lost=[(3, 90.0)],
        xids=[(90.0, 3, 79, None, None, "GPU has fallen off the bus.")],
    ),
    "xid-app": dict(
        description="the same job hits Xid 13, 31 and 43 again and again on GPU 5; its work "
        "is otherwise compute-bound",
        expected="compute",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "compute")],
        jobs=[_job()],
        xids=[
            (t, 5, x, "rank5", "pt_main_thread", m)
            for t, x, m in (
                (
                    35.0,
                    13,
                    "Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address",
                ),
                (36.0, 43, "Ch 00000008"),
                (
                    95.0,
                    31,
                    "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS "
                    "GPCCLIENT_T1_3 faulted @ 0x7f3e_12340000. Fault is of type "
                    "FAULT_PDE ACCESS_TYPE_VIRT_READ",
                ),
                (96.0, 43, "Ch 00000010"),
                (155.0, 13, "Graphics Exception: ESR 0x514648=0x1000000e"),
                (156.0, 43, "Ch 00000018"),
            )
        ],
    ),
    "driver-mismatch": dict(
        description="a job loaded a CUDA 13.0 runtime on a driver that supports CUDA 12.4 at "
        "most; it failed to start and the GPUs sit idle",
        expected="idle",
        model="H100",
        gpus=8,
        duration=120,
        timeline=[(0, "idle")],
        jobs=[],
        driver=("550.54.15", 12040),
        host_procs=[
            dict(
                pid=52011,
                user="alice",
                name="python",
                cmdline=("python", "train.py"),
                cuda_runtime="13",
            )
        ],
    ),
    "scheduler-wait": dict(
        description="the user's Slurm job has been PENDING for Resources for 2 h while this "
        "node's GPUs sit idle",
        expected="scheduler",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "idle")],
        jobs=[],
        slurm=[
            dict(
                id="48213",
                name="llm-pretrain",
                user="alice",
                state="PENDING",
                reason="Resources",
                submitted_ago=7260,
                limit="2-00:00:00",
                gres="gres/gpu:8",
                nodes=2,
            )
        ],
    ),
    "mig": dict(
        description="an A100 split into three MIG instances (3g.40gb, 2g.20gb, 1g.10gb) with a "
        "job on each; no GPM, no per-GPU utilization in MIG mode: compute, judged from power "
        "and clocks at lower confidence",
        expected="compute",
        model="A100",
        gpus=1,
        duration=300,
        timeline=[(0, "mig")],
        mig=[("3g.40gb", 40192), ("2g.20gb", 19968), ("1g.10gb", 9728)],
        jobs=[_job(cmd=("python", "serve.py", "--model", "mistral-7b"), gpus=(0,), per_mig=True)],
    ),
    "no-gpu": dict(
        description="no NVIDIA driver: the NVML library is missing; host figures only",
        expected="insufficient_data",
        model="H100",
        gpus=0,
        duration=60,
        timeline=[(0, "idle")],
        jobs=[],
        no_driver=True,
    ),
    "tour": dict(
        description="a five-minute loop: idle, compute-bound, input-starved, sync-stall with an "
        "Xid 13, comm-bound; the class changes as it goes",
        expected="balanced",
        model="H100",
        gpus=8,
        duration=300,
        loop=True,
        timeline=[
            (0, "idle"),
            (20, "compute"),
            (80, "input"),
            (140, "sync"),
            (200, "comm"),
            (260, "compute"),
        ],
        jobs=[_job(cmd=("torchrun", "--nproc-per-node", "8", "train.py"))],
        jobs_from=20,
        xids=[
            (185.0, 2, 13, "rank2", "pt_main_thread", "Graphics Exception: ESR 0x50e648=0x102000e")
        ],
    ),
    "compute-then-input": dict(
        description="compute-bound for 60 s, then the input pipeline falls behind",
        expected="input_pipeline",
        model="H100",
        gpus=8,
        duration=180,
        timeline=[(0, "compute"), (60, "input")],
        jobs=[_job()],
    ),
}
