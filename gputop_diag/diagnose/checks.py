"""The next checks per class (docs/diagnosis.md), made concrete where a command helps. The
capacity class's first checks come from the memory planner (`planner.advice`)."""

from __future__ import annotations

from typing import Any

from ..model import Snapshot
from ..planner.advice import capacity_checks
from ..planner.hints import job_hints
from .features import Features

_QUERY = (
    "nvidia-smi --query-gpu=index,utilization.gpu,utilization.memory,memory.used,"
    "memory.total,power.draw,clocks.sm,clocks_event_reasons.active --format=csv -l 1"
)

CHECKS: dict[str, tuple[str, ...]] = {
    # The first checks of capacity come from the memory planner (`capacity_checks` below), in
    # training or inference words after the job's command line; these follow them.
    "capacity": (
        "In the job: print(torch.cuda.memory_summary()) — allocated vs reserved tells true "
        "pressure from fragmentation",
        "Other processes on the GPU? nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
        "Memory growing every step? Look for tensors kept with their graph (total += loss instead "
        "of loss.item()) and logged tensors not detached; record it with "
        "torch.cuda.memory._record_memory_history() and torch.cuda.memory._dump_snapshot()",
    ),
    "undetermined": (
        "See the job's threads: run gputop-diag as the job's user or as root (another user's "
        "/proc/<pid>/task is hidden); in a container start it with --pid=host",
        "Where does the main thread wait? py-spy dump --pid {main_pid} (a stack in .item(), "
        ".cpu() or a logging call is a host-device sync; in a DataLoader __next__ it is input)",
        "Is storage the limit? iostat -x 1 and cat /proc/pressure/io while the job runs",
        "On several GPUs: NCCL_DEBUG=INFO and nvidia-smi nvlink -gt d show whether collectives "
        "fill the gaps",
    ),
    "bandwidth": (
        "Profile one step: with torch.profiler.profile(activities=[ProfilerActivity.CUDA]) as p: "
        "step(); print(p.key_averages().table(sort_by='cuda_time_total', row_limit=15)) "
        "— look for elementwise and normalization kernels",
        "Fuse memory-bound ops (torch.compile, fused optimizers and norms) and use bf16/fp16 to "
        "halve the bytes moved",
        "A larger batch raises arithmetic intensity; confirm with Nsight Compute's memory "
        "chart: ncu --set full -k <kernel> python train.py",
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
        "See where the loaders spend their time (decode, augmentation, reads): "
        "py-spy top --subprocesses --pid {main_pid}",
        "Storage: iostat -x 1 and cat /proc/pressure/io; move data to local NVMe or pre-decode it",
    ),
    "synchronization": (
        "Find the host syncs: torch.cuda.set_sync_debug_mode('warn') reports .item(), .cpu() "
        "and implicit copies",
        "See what the spinning thread waits on: py-spy dump --pid {main_pid}",
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


# How to get the evidence a window lacked, keyed like features.EVIDENCE_NAMES.
MISSING_CHECKS: dict[str, str] = {
    "util": "No GPU busy time (MIG mode reports none per instance): read per-instance activity "
    "with dcgmi dmon -e 1002,1005 (DCGM profiles MIG instances), or judge with MIG off",
    "gpm": "No GPM figures (they need a Hopper-class GPU or newer): on older GPUs read SM and "
    "DRAM activity with dcgmi dmon -e 1002,1003,1004,1005",
    "nvlink": "No NVLink figures: nvidia-smi nvlink --status shows whether the links are up; "
    "dcgmi dmon -e 1011,1012 reads their traffic",
    "processes": "No GPU process list: in a container, run with --pid=host; "
    "nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
    "threads": "No per-process thread data (another user's process?): run as the job's user or "
    "root to see the dataloader workers",
    "host": "No host CPU figures: check that /proc is readable",
}

_PRIMARY_WANTS = {
    "compute": ("gpm",),
    "bandwidth": ("gpm",),
    "balanced": ("gpm", "threads"),
    "communication": ("nvlink", "gpm"),
    "input_pipeline": ("threads", "host"),
    "synchronization": ("threads",),
    "undetermined": ("util", "threads", "nvlink", "host"),
    "capacity": ("processes",),
}


def checks_for(
    cls: str,
    f: Features,
    job: str | None = None,
    newest: Snapshot | None = None,
    plan: dict[str, Any] | None = None,
) -> tuple[str, ...]:
    """The checks for `cls`, made concrete with this window's pids and job. For capacity, the
    planner's checks come first: `newest` (the window's last snapshot) gives the command line
    of the process holding most memory (training or inference, its batch and context) and its
    GPU; `plan` (`planner.render.document` of the job's model), where one was made, gives the
    figures and the what-ifs."""
    pid = f.main_thread_pid or f.top_pid or "<pid>"
    jobid = job if job and not job.startswith("pid ") else "<jobid>"
    out = [c.format(main_pid=pid, job=jobid) for c in CHECKS[cls]]
    if cls == "capacity":
        gpu = newest.gpu(f.mem_used_pct_gpu) if newest and f.mem_used_pct_gpu is not None else None
        out = [
            *capacity_checks(
                job_hints(newest, f.top_pid),
                gpu_bytes=gpu.mem_total_bytes if gpu is not None else None,
                gpu_name=gpu.static.name if gpu is not None else None,
                plan=plan,
            ),
            *out,
        ]
    out = [*_measured_checks(cls, f), *out]
    out += [MISSING_CHECKS[k] for k in _PRIMARY_WANTS.get(cls, ()) if k in f.missing]
    return tuple(out)


def _measured_checks(cls: str, f: Features) -> list[str]:
    """What the probe measured points at, first: the sync line in the job's code, the
    allocator's cache rather than the tensors."""
    if cls == "capacity" and any(m.fragmented for m in f.measured_memory):
        return [
            "Restart with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the allocator's cache, "
            "not the tensors, fills the GPU (torch.cuda.empty_cache() is not the fix)"
        ]
    if cls == "synchronization" and f.measured is not None and f.measured.sync_sites:
        top = f.measured.sync_sites[0]
        return [
            f"Remove or batch the sync at {top.site} ({top.call}): read the value every N steps, "
            "or keep it on the GPU"
        ]
    return []
