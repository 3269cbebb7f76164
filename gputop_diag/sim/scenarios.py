"""Scenarios as data: a GPU model and count, the jobs on it, a timeline of profiles, events.

Each scenario names the bottleneck class the tool should find in it (`expected`). Keys:
- `timeline` [(seconds from start, profile)]; `loop`: repeat every `duration`; `profiles`:
  profiles of the scenario's own, by name, besides those of `profiles.py`;
- `jobs` (see `_job`; a job's `owner`: its Slurm job, pod or container, `owners.py`);
  `jobs_from`: seconds before the job starts; `host_procs`: processes that are not on a GPU;
- `xids` [(t, gpu, xid, who, comm, text)]; `lost` [(gpu, t)]; `oom_kill`: t at which the
  kernel's OOM killer ends a dataloader worker;
- `slurm`: the jobs `squeue`, `scontrol` and `sacct` know; `driver`: (version, max CUDA);
  `mig` [(profile, MiB)]; `no_driver`;
- `probe`: the job's ranks run with the probe (`gputop-diag watch --probe`): the simulator
  writes their probe files, marked as simulated, with the step split of each profile
  (`profiles.probe_step`; `step_s` for steady profiles), the model's `params` (parameters,
  bf16 weights and gradients, fp32 Adam state), the host-sync `sites` [(file:line, call, share
  of the sync time)], the allocator's `allocated_share` of what it reserved, the share of the
  cache that is split (`split_share`) and its `retries_per_min`; where it names the job's
  `model` (`layers`, `hidden`, `intermediate`, `vocab`, `gated`, `bias`) and `batch` (`samples`,
  `seq`, `ids`: token ids, else images), a step is sampled as the probe samples one
  (`probe_files.sample_record`): the matmuls in `dtype` (the head in `head_dtype`), `autocast`,
  `tf32`, the `h2d` copies (`bytes`, `count`, `pinned`, `non_blocking`), the `loss` falling from
  `start` to `floor` over `steps` steps, the misaligned head's `head_site`.
"""

from __future__ import annotations

from .profiles import COMPUTE_GPU, GPU_MODELS, NOISE_SD, PROFILES

__all__ = ["GPU_MODELS", "NOISE_SD", "PROFILES", "SCENARIOS"]

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
    owner=dict(docker="bob-notebook", ns_first=7),  # a Jupyter container's kernel
)

# The models the probed jobs train (`probe["model"]`): ViT-L/16 and a GPT of 1.3B parameters.
_VIT_L = dict(layers=24, hidden=1024, intermediate=4096, bias=True)
_GPT_1B = dict(layers=24, hidden=2048, intermediate=8192, vocab=50304, bias=True)

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
        jobs=[_job(owner=dict(slurm="424242")), _COTENANT],
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
    "sync-step": dict(
        description="a host sync in every 0.8 s step: the GPUs idle 0.3 s of each step, gaps "
        "that only the driver's 1/6 s samples show (the 1 s figure sits at 50-70 %)",
        expected="synchronization",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "sync_step")],
        jobs=[_job(cmd=("python", "train.py", "--log-every", "1", "--sync-metrics"))],
    ),
    "launch-bound": dict(
        description="a small-batch job in eager mode: GPU busy 97 % but SMs active 9 %, the "
        "main thread launching kernels flat out (synchronization, launch-bound: CUDA graphs, "
        "torch.compile, a larger batch)",
        expected="synchronization",
        model="H100",
        gpus=2,
        duration=300,
        timeline=[(0, "launch")],
        jobs=[_job(cmd=("python", "train_gnn.py", "--batch-size", "8"))],
    ),
    "comm-bound": dict(
        description="8 GPUs dip together while NVLink carries all-reduce traffic",
        expected="communication",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "comm")],
        jobs=[
            _job(
                cmd=("torchrun", "--nproc-per-node", "8", "train_ddp.py"),
                owner=dict(pod=("ml-research", "llama-ddp-0"), qos="burstable"),
            )
        ],
    ),
    "capacity": dict(
        description="memory at ~98 % of every GPU (driver reserve and a co-tenant's notebook "
        "included): the batch size is what fits",
        expected="capacity",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "capacity")],
        jobs=[_job(cmd=("python", "train.py", "--batch-size", "6")), _COTENANT],
        oom_kill=40.0,  # the kernel's OOM killer ends a dataloader worker at 40 s
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
                torch_cuda="13.0",
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
            ),
            dict(
                id="48190",
                name="sweep-lr",
                user="bob",
                state="RUNNING",
                reason="None",
                submitted_ago=19800,
                started_ago=18000,
                limit="1-00:00:00",
                gres="gres/gpu:8",
                nodes=4,
                nodelist="gpu-node-[01-04]",
            ),
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
        "Xid 13, comm-bound, compute again; listed as balanced because the class changes as "
        "it goes",
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
    "sync-shared-host": dict(
        description="the sync-stall job on a shared node: other users' multi-threaded "
        "processes keep the host's 32 CPUs busy; the job's own processes are judged apart "
        "(synchronization, with the busy host as a finding of its own)",
        expected="synchronization",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "sync")],
        jobs=[_job(cmd=("python", "train.py", "--log-every", "1"))],
        host_procs=[
            dict(
                pid=61000 + k,
                user=("bob", "carol", "dmitri")[k % 3],
                name="python3" if k % 2 else "cc1plus",
                cmdline=("python3", "preprocess.py", "--workers", "4", f"--shard={k}")
                if k % 2
                else ("cc1plus", "-O2", "kernel.cpp"),
                cpu=396.0,  # % of a core: four busy threads
            )
            for k in range(7)
        ],
    ),
    "input-measured": dict(
        description="the input-starved job run with the probe (watch --probe): the step split "
        "measured inside each rank, t_input ~60 % of every 1.2 s step",
        expected="input_pipeline",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "input_step")],
        jobs=[_job(cmd=("python", "train_vit.py", "--data", "/data/imagenet", "--workers", "8"))],
        probe=dict(
            params=300e6,
            model=_VIT_L,
            batch=dict(samples=256, seq=197, ids=False),  # 224 px images: 196 patches + CLS
            h2d=dict(bytes=256 * 3 * 224 * 224 * 4, count=2, pinned=True, non_blocking=True),
            loss=(6.9, 1.9, 20000.0),
        ),
    ),
    "sync-measured": dict(
        description="the sync-step job run with the probe: t_sync measured in every step, with "
        "the lines of code that wait (.item(), .cpu(), synchronize)",
        expected="synchronization",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "sync_step")],
        jobs=[_job(cmd=("python", "train.py", "--log-every", "1", "--sync-metrics"))],
        probe=dict(
            params=1.3e9,
            model=_GPT_1B,
            batch=dict(samples=8, seq=2048),
            h2d=dict(bytes=2 * 8 * 2048 * 8, count=2, pinned=True, non_blocking=True),
            sites=(
                ("/home/alice/llm/train.py:88", ".item", 0.62),
                ("/home/alice/llm/metrics.py:41", ".cpu", 0.3),
                ("/home/alice/llm/train.py:102", "torch.cuda.synchronize", 0.08),
            ),
        ),
    ),
    "capacity-fragmented": dict(
        description="memory ~98 % used, but the probe shows the allocator's cache, not the "
        "tensors: reserved 77 GiB, allocated 40 GiB, cudaMalloc retries",
        expected="capacity",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "capacity")],
        jobs=[_job(cmd=("python", "train.py", "--batch-size", "6"))],
        probe=dict(
            params=1.3e9,
            step_s=0.9,
            allocated_share=0.52,
            split_share=0.6,
            retries_per_min=4.0,
            model=_GPT_1B,
            batch=dict(samples=6, seq=2048),
            h2d=dict(bytes=2 * 6 * 2048 * 8, count=2, pinned=True, non_blocking=True),
        ),
    ),
    "precision-measured": dict(
        description="a GPT-2 job run with the probe on H100s, compute-bound on the CUDA cores: "
        "its sampled step shows fp32 matmuls with TF32 off, the head's vocabulary of 50257 not "
        "a multiple of 8 in bf16, and the batch copied non_blocking from pageable memory",
        expected="compute",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "compute_fp32")],
        profiles={
            "compute_fp32": dict(
                PROFILES["compute"],
                # fp32 FMA pipes near their roof, the tensor cores idle (no TF32)
                busy=dict(COMPUTE_GPU, sm=93, occ=52, tensor=3, fp16=1, fp32=81, dram=31),
            )
        },
        jobs=[_job(cmd=("python", "train_gpt2.py", "--model", "gpt2", "--batch-size", "16"))],
        probe=dict(
            params=124e6,
            step_s=0.45,
            model=dict(layers=12, hidden=768, intermediate=3072, vocab=50257, bias=True),
            batch=dict(samples=16, seq=1024),
            dtype="float32",  # TF32 off: torch's default "highest" float32 matmul precision
            head_dtype="bfloat16",  # only the head and the loss under autocast
            autocast={"cuda": "bfloat16"},
            tf32=False,
            h2d=dict(bytes=2 * 16 * 1024 * 8, count=2, pinned=False, non_blocking=True),
            head_site="/home/alice/train_gpt2.py:131",
            loss=(10.9, 3.3, 3000.0),
        ),
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
    # -- node and job health (gputop-diag health, docs/health.md) -------------------------------
    "launch-blocking": dict(
        description="CUDA_LAUNCH_BLOCKING=1 left in the job's environment: every kernel launch "
        "waits, the GPUs idle between launches",
        expected="synchronization",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "sync")],
        jobs=[_job(cmd=("python", "train.py", "--config", "configs/llama-7b.yaml"))],
        health=dict(env={"CUDA_LAUNCH_BLOCKING": "1"}),
    ),
    "nccl-p2p-disabled": dict(
        description="NCCL_P2P_DISABLE=1 in the job's environment: all-reduce goes through host "
        "memory instead of NVLink, the GPUs dip together",
        expected="communication",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "comm")],
        jobs=[_job(cmd=("torchrun", "--nproc-per-node", "8", "train_ddp.py"))],
        health=dict(env={"NCCL_P2P_DISABLE": "1"}),
    ),
    "pcie-downtrained": dict(
        description="GPU 5's PCIe link trained at gen 4 x8 of gen 5 x16 under load, with "
        "correctable AER errors; the job is otherwise compute-bound",
        expected="compute",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "compute")],
        jobs=[_job()],
        health=dict(
            pcie={5: (4, 8)},
            idle_gen1=True,
            aer={5: {"correctable": {"BadTLP": 37, "BadDLLP": 12, "Timeout": 3}}},
        ),
    ),
    "fabric-manager-down": dict(
        description="an NVSwitch node after a driver update: the fabric manager, still the old "
        "version, failed to start; CUDA fails with error 802 and the GPUs sit idle",
        expected="idle",
        model="H100",
        gpus=8,
        duration=120,
        timeline=[(0, "idle")],
        jobs=[],
        health=dict(fabric_manager="failed", fm_version="570.86.15"),
    ),
    "dataloader-d-state": dict(
        description="data-loader workers stuck in D state reading an NFS mount that stopped "
        "answering: the GPUs wait for input",
        expected="input_pipeline",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "input_stalled")],
        jobs=[_job(cmd=("python", "train_vit.py", "--data", "/data/imagenet", "--workers", "20"))],
        health=dict(
            d_state=dict(
                workers=6, wchan="rpc_wait_bit_killable", mount=("/data", "nfs4", "fs01:/export")
            )
        ),
    ),
    "gpu-missing-from-nvml": dict(
        description="8 GPUs on the PCI bus, 7 in NVML: one failed to initialise when the driver "
        "loaded (RmInitAdapter failed); the job runs on the other seven",
        expected="compute",
        model="H100",
        gpus=7,
        duration=300,
        timeline=[(0, "compute")],
        jobs=[_job()],
        health=dict(pci_only_gpus=1),
        kernel_lines=[
            (-261830.0, "NVRM: GPU 0000:db:00.0: RmInitAdapter failed! (0x26:0x56:1474)"),
            (-261830.0, "NVRM: GPU 0000:db:00.0: rm_init_adapter failed, device minor number 7"),
        ],
    ),
    "acs-enabled": dict(
        description="ACS redirects peer-to-peer requests on the PCIe switches above the GPUs "
        "(read as root): GPU-to-GPU traffic goes through the root complex",
        expected="communication",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "comm")],
        jobs=[_job(cmd=("torchrun", "--nproc-per-node", "8", "train_ddp.py"))],
        health=dict(root=True, acs=True),
    ),
    "ib-port-down": dict(
        description="one InfiniBand port down and one at 200 Gb/s of 400, nvidia_peermem not "
        "loaded: a multi-node job's all-reduce waits on the network",
        expected="communication",
        model="H100",
        gpus=8,
        duration=300,
        timeline=[(0, "comm")],
        jobs=[_job(cmd=("torchrun", "--nproc-per-node", "8", "train_ddp.py"))],
        health=dict(
            ib=[("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")] * 5
            + [
                ("1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)"),
                ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)"),
                ("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)"),
            ],
            peermem=False,
        ),
    ),
}
