"""The next checks per class (docs/diagnosis.md), made concrete where a command helps. The
capacity class's first checks come from the memory planner (`planner.advice`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..model import Snapshot, formats
from . import thresholds as T
from .features import Features
from .job_kind import JOB_COMMAND, SERVING, job_kind
from .lead import GROWTH_STEP
from .measured_work import CONFIG_ASSUMPTIONS

# Clocks, power and the reasons a clock is held down (thermal, power cap), per GPU; short words
# only, so the command is never broken inside a word on a narrow panel.
_QUERY = "nvidia-smi -q -d PERFORMANCE,CLOCK,POWER"

CHECKS: dict[str, tuple[str, ...]] = {
    # The first checks of capacity come from the memory planner (`capacity_checks` below), in
    # training or inference words after the job's command line; these follow them.
    "capacity": (
        "In the job: print(torch.cuda.memory_summary()) — allocated vs reserved tells true "
        "pressure from fragmentation",
        "Other processes on the GPU? nvidia-smi -q -d PIDS lists each with its memory",
        "Memory growing every step? Look for tensors kept with their graph (total += loss instead "
        "of loss.item()) and logged tensors not detached; record it with torch.cuda.memory's "
        "_record_memory_history() and _dump_snapshot()",
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
        "Profile one step under torch.profiler.profile (CUDA activity) and list "
        "p.key_averages() by cuda_time_total — look for elementwise and normalization kernels",
        "Fuse memory-bound ops (torch.compile, fused optimizers and norms) and use bf16/fp16 to "
        "halve the bytes moved",
        "A larger batch raises arithmetic intensity; confirm with Nsight Compute's memory "
        "chart: ncu --set full -k <kernel> {cmd}",
    ),
    "compute": (
        "Tensor cores in use? enable AMP (torch.autocast) or TF32 if tensor activity is low",
        "Check clocks and throttling: " + _QUERY,
        "Profile the top kernels: nsys profile -t cuda,nvtx {cmd}; the useful "
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
        "Find the host syncs: torch.cuda.set_sync_debug_mode(1) (1: warn) reports .item(), "
        ".cpu() and implicit copies",
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
    # NVML does not answer (no driver, no GPU): a window that is only short waits instead
    # (`_insufficient_checks`), and tells a healthy machine nothing about its driver.
    "insufficient_data": (
        "Check that the NVIDIA driver loads: nvidia-smi (it names what is missing)",
        "Without a driver: gputop-diag --demo shows what the tool reports",
    ),
}


# A model server (or an inference run) is not trained: no optimizer, AMP or DataLoader advice; its
# figure of merit is requests or tokens per second. Classes not listed read as for any job.
SERVING_CHECKS: dict[str, tuple[str, ...]] = {
    "bandwidth": (
        "Decoding reads every weight once per token: batch more requests together (vLLM "
        "--max-num-seqs, TGI --max-batch-total-tokens) and serve fp8 or int8 weights and KV "
        "cache to move fewer bytes per token",
        "Profile the server under load: nsys profile -t cuda,nvtx --delay 60 --duration 30 "
        "{cmd} while a client sends requests",
    ),
    "compute": (
        "Tensor cores in use? serve in bf16/fp16, or fp8 where the GPU has it, if tensor "
        "activity is low",
        "Check clocks and throttling: " + _QUERY,
        "Profile the server under load: nsys profile -t cuda,nvtx --delay 60 --duration 30 "
        "{cmd} while a client sends requests; the useful figure is tokens or requests per "
        "second, not utilization",
    ),
    "input_pipeline": (
        "The GPU waits for requests or for their preparation: compare the request rate with "
        "what the server completes, and see where the host spends its time: "
        "py-spy top --pid {main_pid}",
        "Tokenizing, decoding images or streaming on the CPU? Move it off the serving "
        "process, or give it more CPU cores",
    ),
    "synchronization": (
        "Host work between decode steps (sampling, detokenizing, streaming): see where the "
        "server waits: py-spy dump --pid {main_pid}",
        "Keep CUDA graphs on (vLLM runs them unless --enforce-eager) so each step is one launch",
    ),
    "communication": (
        "Run with NCCL_DEBUG=INFO to see the transport between the tensor-parallel ranks",
        "Check the topology: nvidia-smi topo -m; tensor parallelism over PCIe waits on every "
        "layer: fewer GPUs per replica (--tensor-parallel-size), more replicas",
    ),
}


# The checks of a finding within a class (`Diagnosis.finding`), in place of the class's own.
# Launch-bound: fewer, larger launches. PyTorch: torch.compile's "reduce-overhead" mode runs the
# step as CUDA graphs (pytorch.org/docs/stable/generated/torch.compile.html); the fused and
# foreach optimizers launch a few kernels for all parameters (torch.optim docs, "fused").
FINDING_CHECKS: dict[str, tuple[str, ...]] = {
    "launch_bound": (
        "Give each kernel more work: a larger batch (or micro-batch), or fewer, larger "
        "operations per step; the GPU runs small kernels faster than the host launches them",
        "Launch the step as CUDA graphs: torch.compile(model, mode='reduce-overhead'), or "
        "torch.cuda.make_graphed_callables for a static part",
        "Fuse kernels: torch.compile; a fused optimizer (torch.optim.AdamW(..., fused=True), "
        "or foreach=True), fused norms and activations",
        "Count the launches: nsys profile -t cuda,nvtx --stats=true {cmd} (cuda_api_sum: "
        "cudaLaunchKernel calls; cuda_gpu_kern_sum: kernels of a few microseconds)",
    ),
}
SERVING_FINDING_CHECKS: dict[str, tuple[str, ...]] = {
    "launch_bound": (
        "Batch more requests per step (vLLM --max-num-seqs, TGI --max-batch-total-tokens): "
        "one decode step launches the same kernels for 1 request or 64",
        "Keep CUDA graphs on (vLLM runs them unless --enforce-eager; torch.compile "
        "mode='reduce-overhead' elsewhere) so each step is one launch",
        "Count the launches: nsys profile -t cuda,nvtx --stats=true --delay 60 --duration 30 "
        "{cmd} while a client sends requests",
    ),
}


# How to get the evidence a window lacked, keyed like features.EVIDENCE_NAMES.
MISSING_CHECKS: dict[str, str] = {
    "util": "No GPU busy time (MIG mode reports none per instance): read per-instance activity "
    "with dcgmi dmon -e 1002,1005 (DCGM profiles MIG instances), or judge with MIG off",
    "gpm": "No SM, tensor and DRAM activity counters (NVML's GPM needs a Hopper-class GPU or "
    "newer): on older GPUs read them with dcgmi dmon -e 1002,1003,1004,1005",
    "nvlink": "No NVLink figures: nvidia-smi nvlink --status shows whether the links are up; "
    "dcgmi dmon -e 1011,1012 reads their traffic",
    "processes": "No GPU process list: in a container, run with --pid=host; nvidia-smi -q -d PIDS",
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


def story_pid(cls: str, f: Features) -> int | None:
    """The one process the verdict is about, named in its scope and in its checks: for
    capacity the biggest holder of the fullest GPU (the one its evidence names), else the
    process holding most GPU memory; the busiest main thread where no memory holder is known."""
    if cls == "capacity" and f.mem_holders:
        return f.mem_holders[0][0]
    return f.top_pid or f.main_thread_pid


def checks_for(
    cls: str,
    f: Features,
    job: str | None = None,
    newest: Snapshot | None = None,
    plan: dict[str, Any] | None = None,
    finding: str | None = None,
) -> tuple[str, ...]:
    """The checks for `cls`, made concrete with this window's pids and job. For capacity, the
    planner's checks come first: `newest` (the window's last snapshot) gives the command line
    of the process holding most memory (training or inference, its batch and context) and its
    GPU; `plan` (`planner.render.document` of the job's model), where one was made, gives the
    figures and the what-ifs."""
    if cls == "insufficient_data" and f.nvml_ok and f.gpu_count:
        return _insufficient_checks(f)
    pid = story_pid(cls, f) or "<pid>"
    jobid = job if job and not job.startswith("pid ") else "<jobid>"
    kind = job_kind(newest, story_pid(cls, f))
    catalog = SERVING_CHECKS if kind == SERVING else CHECKS
    mine = catalog.get(cls, CHECKS[cls])
    if finding is not None:  # a finding within the class has checks of its own
        findings = SERVING_FINDING_CHECKS if kind == SERVING else FINDING_CHECKS
        mine = findings.get(finding, FINDING_CHECKS.get(finding, mine))
    out = [c.format(main_pid=pid, job=jobid, cmd=JOB_COMMAND) for c in mine]
    if cls == "capacity":
        from ..planner.advice import capacity_checks  # the planner loads with a capacity verdict
        from ..planner.hints import job_hints

        gpu = newest.gpu(f.mem_used_pct_gpu) if newest and f.mem_used_pct_gpu is not None else None
        out = [
            *capacity_checks(
                job_hints(newest, story_pid(cls, f)),
                gpu_bytes=gpu.mem_total_bytes if gpu is not None else None,
                gpu_name=gpu.static.name if gpu is not None else None,
                plan=plan,
            ),
            *out,
        ]
    growth = _growth_checks(cls, f)
    if growth:  # said first, with its rate: not again as a question
        out = [c for c in out if not c.startswith("Memory growing every step?")]
    saturated = _saturated_host_checks(cls, f)
    if saturated:  # more workers cannot help a host with no core to spare
        out = [c for c in out if not c.startswith("Raise DataLoader num_workers")]
    measured = _measured_checks(cls, f)
    ranks = f.ranks
    if cls == "communication" and ranks is not None and (ranks.straggler or ranks.hang):
        out = []  # the rank the others wait for is the story: not the network's checks
    out = [*measured, *growth, *saturated, *out]
    out += [MISSING_CHECKS[k] for k in _PRIMARY_WANTS.get(cls, ()) if k in f.missing]
    return tuple(out)


def planned_checks(
    checks: Sequence[str], f: Features, newest: Snapshot, plan: dict[str, Any]
) -> tuple[str, ...]:
    """`checks` (a capacity verdict's, health's causes included) with the planner's lines from
    the job's command line replaced by those of `plan`, the plan of the job's own model
    (`--model-config`): its terms and the what-ifs that make it fit."""
    from ..planner.advice import capacity_checks
    from ..planner.hints import job_hints

    pid = story_pid("capacity", f)
    gpu = newest.gpu(f.mem_used_pct_gpu) if f.mem_used_pct_gpu is not None else None
    sizes = dict(
        gpu_bytes=gpu.mem_total_bytes if gpu is not None else None,
        gpu_name=gpu.static.name if gpu is not None else None,
    )
    hinted = capacity_checks(job_hints(newest, pid), **sizes)
    planned = capacity_checks(job_hints(newest, pid), **sizes, plan=plan)
    at = next((k for k, c in enumerate(checks) if c in hinted), 0)
    kept = [c for c in checks if c not in hinted]
    return tuple(kept[:at] + _plan_mismatch(newest, pid, plan) + list(planned) + kept[at:])


PLAN_MISMATCH_RATIO = 2.0  # a plan this far from the job's measured memory, either way


def _plan_mismatch(newest: Snapshot, pid: int | None, plan: dict[str, Any]) -> list[str]:
    """A line saying the plan is not the running job's model, where its total per GPU and the
    memory the job holds on a GPU differ by more than PLAN_MISMATCH_RATIO (either way)."""
    total = plan.get("total_bytes")
    held = [
        g.used_memory_bytes for g in newest.gpu_processes if g.pid == pid and g.used_memory_bytes
    ]
    if pid is None or not total or not held:
        return []
    measured = max(held)
    if 1 / PLAN_MISMATCH_RATIO <= total / measured <= PLAN_MISMATCH_RATIO:
        return []
    return [
        f"The config does not look like the running job's model: its plan needs "
        f"{formats.gib(total)} GiB per GPU while pid {pid} holds {formats.gib(measured)} GiB "
        f"(more than {PLAN_MISMATCH_RATIO:g}x apart); {CONFIG_ASSUMPTIONS}"
    ]


def _insufficient_checks(f: Features) -> tuple[str, ...]:
    """Too little to judge on a machine whose driver answers: every GPU lost, or a short
    window (the first seconds of every run)."""
    if len(f.lost_gpus) == f.gpu_count:
        return ("Every GPU is lost: see the faults above; nvidia-smi shows whether any answers",)
    return (
        f"Wait a few seconds: a verdict needs {T.MIN_SAMPLES} samples "
        f"({f.samples} so far, one a tick)",
    )


def _saturated_host_checks(cls: str, f: Features) -> list[str]:
    """An input pipeline on a host whose cores are all busy: the lever is less CPU work per
    sample (or more cores), not more loader workers competing for the same cores."""
    cpu = f.host_cpu_median
    if cls != "input_pipeline" or cpu is None or cpu < T.HOST_CPU_SATURATED_PCT:
        return []
    others = f.others_cpu_pct
    whose = (
        f", {others:.0f} % of it other processes'"
        if others is not None and others >= T.OTHERS_CPU_PCT
        else ""
    )
    return [
        f"The host's {f.cpu_count} cores are {cpu:.0f} % busy{whose}: more DataLoader workers "
        "cannot help. Cut the CPU work per sample (decode and augment on the GPU: NVIDIA DALI, "
        "torchvision.io.decode_jpeg on cuda; pre-decoded or pre-resized data) or give the job "
        "more cores"
    ]


def _growth_checks(cls: str, f: Features) -> list[str]:
    """Memory growing every step while the GPU is not yet full: the leak is the story, and
    finding what grows comes before any capacity lever."""
    g, to_full = f.mem_growth_mib_per_min, f.minutes_to_full
    used = f.mem_used_pct_max
    if cls != "capacity" or g is None or to_full is None:
        return []
    if used is not None and used >= T.CAPACITY_WARN_PCT:
        return []
    return [
        f"Memory grows {g:.0f} MiB/min on GPU {f.mem_growth_gpu}, full in ~{to_full:.0f} min: "
        + GROWTH_STEP
    ]


def _measured_checks(cls: str, f: Features) -> list[str]:
    """What the probe measured points at, first: the sync line in the job's code, the
    allocator's cache rather than the tensors."""
    if cls == "capacity" and any(m.fragmented for m in f.measured_memory):
        return [
            "Restart with PYTORCH_CUDA_ALLOC_CONF set to expandable_segments:True: the "
            "allocator's cache, not the tensors, fills the GPU (torch.cuda.empty_cache() is not "
            "the fix)"
        ]
    ranks = f.ranks
    if cls == "communication" and ranks is not None and ranks.hang is not None:
        return [f"{ranks.hang.what[0].upper()}{ranks.hang.what[1:]}: {ranks.hang.next_step}"]
    if cls == "communication" and ranks is not None and ranks.straggler is not None:
        s = ranks.straggler
        return [
            f"The other ranks wait for rank {s.rank} ({s.cause}, {s.gap_s * 1000:.0f} ms more "
            f"work a step): {s.next_step}"
        ]
    if cls == "synchronization" and f.measured is not None and f.measured.sync_sites:
        top = f.measured.sync_sites[0]
        return [
            f"Remove or batch the sync at {top.site} ({top.call}): read the value every N steps, "
            "or keep it on the GPU"
        ]
    return []
