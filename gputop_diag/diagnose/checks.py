"""The next checks per class: the seed's checks, made concrete where a command helps."""

from __future__ import annotations

from .features import Features

_QUERY = (
    "nvidia-smi --query-gpu=index,utilization.gpu,utilization.memory,memory.used,"
    "memory.total,power.draw,clocks.sm,clocks_event_reasons.active --format=csv -l 1"
)

CHECKS: dict[str, tuple[str, ...]] = {
    "capacity": (
        "Where does the memory go? weights + gradients + optimizer state + activations + "
        "buffers; for inference the KV cache is 2·L·H·T·d_head·b bytes",
        "In the job: print(torch.cuda.memory_summary()) — allocated vs reserved tells true "
        "pressure from fragmentation",
        "Try mixed precision, activation checkpointing, a smaller batch, a sharded optimizer "
        "(FSDP/ZeRO) or a shorter context",
        "Other processes on the GPU? nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
    ),
    "bandwidth": (
        "Profile one step: torch.profiler.profile(activities=[ProfilerActivity.CUDA]) and sort "
        "by cuda_time_total — look for elementwise/normalization kernels",
        "Fuse memory-bound ops (torch.compile, fused optimizers/norms) and use bf16/fp16 to "
        "halve the bytes moved",
        "A larger batch raises arithmetic intensity; check with Nsight Compute's memory chart "
        "(ncu --set full)",
    ),
    "compute": (
        "Tensor cores in use? enable AMP (torch.autocast) or TF32 if tensor activity is low",
        "Check clocks and throttling: " + _QUERY,
        "Profile the top kernels: nsys profile -t cuda,nvtx python train.py; the useful "
        "figure is work done per second, not utilization",
    ),
    "input_pipeline": (
        "Raise DataLoader num_workers and set pin_memory=True, persistent_workers=True, "
        "prefetch_factor",
        "Time the loader alone: iterate the DataLoader without the model and compare "
        "samples/s with the training step rate",
        "Storage: iostat -x 1 and cat /proc/pressure/io; move data to local NVMe or pre-decode it",
    ),
    "synchronization": (
        "Find the host syncs: torch.cuda.set_sync_debug_mode('warn') reports .item(), .cpu() "
        "and implicit copies",
        "See what the spinning thread does: py-spy dump --pid {main_pid}",
        "Log and aggregate metrics every N steps, not every step; nsys profile then "
        "nsys analyze -r cuda_api_sync",
    ),
    "communication": (
        "Run with NCCL_DEBUG=INFO to see the transport and the rings/trees chosen",
        "Check the topology: nvidia-smi topo -m (NVLink vs PCIe between the ranks)",
        "Overlap communication with compute: DDP bucket_cap_mb, gradient accumulation, "
        "larger per-GPU batch",
    ),
    "scheduler": (
        "Why is the job waiting: squeue -j {job} -o %r and squeue --start -j {job}",
        "Is the request larger than the free resources? sinfo -p <partition> -o '%n %G %t'; "
        "compare with the job's --gres/--time",
        "Priority and limits: sprio -j {job}; sacct -j {job} -o JobID,Submit,Eligible,Start",
    ),
    "idle": (
        "Nothing is running on the GPUs; if a job should be, check it started: "
        "ps aux | grep -i python, and its log",
        "Driver and runtime agree? compare the driver's max CUDA with torch.version.cuda",
    ),
    "balanced": (
        "No single class stands out: profile one representative step before changing code "
        "(torch.profiler or nsys)",
        "Measure step time and samples/s; utilization alone is a symptom, not a diagnosis",
    ),
    "insufficient_data": (
        "Wait for more samples, or check that the NVIDIA driver loads: nvidia-smi",
        "Without a driver: gputop-diag --demo shows what the tool reports",
    ),
}


def checks_for(cls: str, f: Features, job: str | None = None) -> tuple[str, ...]:
    pid = f.main_thread_pid or f.top_pid or "<pid>"
    return tuple(c.format(main_pid=pid, job=job or "<jobid>") for c in CHECKS[cls])
