"""The data model: frozen snapshots that cross every layer.

A collector builds one `Snapshot` per tick. Everything downstream (history, diagnosis, views)
reads these and never sees NVML handles, psutil objects or live buffers. A value the machine
could not give is `None`; a GPU that fell off the bus is `GpuState.lost`, not an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when a health report is made or read (`model.codec`), not at start
    from .health import HealthReport

GIB = 1024**3
MIB = 1024**2


def __getattr__(name: str) -> object:
    """`model.HealthReport`, imported on first use and kept as the module's own name from then
    on (https://peps.python.org/pep-0562/)."""
    if name == "HealthReport":
        from .health import HealthReport

        globals()[name] = HealthReport
        return HealthReport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class CollectorError:
    """A source that failed, said in words a user can act on."""

    source: str  # "nvml", "host", "process", "kernel-log", "slurm"
    message: str  # what went wrong
    next_step: str  # what to do about it
    gpu_index: int | None = None
    code: str | None = None  # e.g. the NVML error class name


@dataclass(frozen=True, slots=True)
class SystemInfo:
    hostname: str
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: int | None = None  # as NVML returns it, e.g. 12080
    gpu_count: int = 0

    @property
    def driver_max_cuda(self) -> str | None:
        """The driver's highest supported CUDA version as "12.8"."""
        v = self.cuda_driver_version
        if not v:
            return None
        return f"{v // 1000}.{(v % 1000) // 10}"


@dataclass(frozen=True, slots=True)
class GpuStatic:
    """Per-GPU facts read once and cached."""

    index: int
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None  # NVML form: 00000000:3B:00.0
    minor_number: int | None = None
    memory_total_bytes: int | None = None
    power_limit_w: float | None = None  # enforced limit
    max_sm_clock_mhz: int | None = None
    max_mem_clock_mhz: int | None = None
    compute_capability: tuple[int, int] | None = None
    mig_mode: bool | None = None  # current mode; None where MIG is not supported
    persistence_mode: bool | None = None
    compute_mode: str | None = None  # "default", "exclusive_process", "prohibited"
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    gpm_supported: bool = False
    nvlink_supported: bool = False

    @property
    def device_node(self) -> str | None:
        return None if self.minor_number is None else f"/dev/nvidia{self.minor_number}"


@dataclass(frozen=True, slots=True)
class GpmMetrics:
    """GPU Performance Monitoring figures (Hopper and newer), percent over the last interval."""

    sm_util_pct: float | None = None
    sm_occupancy_pct: float | None = None
    dram_bw_util_pct: float | None = None
    tensor_util_pct: float | None = None  # any tensor pipe
    fp16_util_pct: float | None = None
    fp32_util_pct: float | None = None
    fp64_util_pct: float | None = None
    graphics_util_pct: float | None = None  # any graphics or compute engine busy (GR engine)


@dataclass(frozen=True, slots=True)
class MigInstance:
    parent_index: int
    mig_index: int
    uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU at one tick. Every dynamic field is `None` when the device can't give it."""

    index: int
    static: GpuStatic
    lost: bool = False
    # memory: total = reserved + used + free, as NVML v2 and nvidia-smi count it (`used`: what
    # contexts allocated, not the driver's reserve); reserved None where the driver has only
    # v1, whose `used` includes the reserve (collect/nvml/memory.py)
    mem_total_bytes: int | None = None
    mem_reserved_bytes: int | None = None
    mem_used_bytes: int | None = None
    mem_free_bytes: int | None = None
    bar1_total_bytes: int | None = None
    bar1_used_bytes: int | None = None
    # utilization, percent
    util_gpu_pct: float | None = None  # busy time: one or more kernels running
    util_mem_pct: float | None = None  # memory-controller busy time
    enc_util_pct: float | None = None
    dec_util_pct: float | None = None
    # power, thermal, clocks
    power_w: float | None = None
    energy_mj: int | None = None  # energy used since the driver was loaded, millijoules
    temperature_c: float | None = None
    fan_speed_pct: int | None = None  # of the fans' top speed; None: no fans (SXM boards), n/a
    memory_temperature_c: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    pstate: int | None = None
    clock_event_reasons: tuple[str, ...] = ()
    # interconnect
    pcie_tx_kbps: int | None = None
    pcie_rx_kbps: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_replay_count: int | None = None
    nvlink_tx_kib_s: float | None = None
    nvlink_rx_kib_s: float | None = None
    # health
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_corr: int | None = None
    remapped_rows_unc: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    # whether a vGPU license is held: a vGPU guest's as NVML reads it; False where NVML says the
    # GPU is no vGPU (bare metal, passthrough: none is held; dcgm-exporter's 0); None where NVML
    # cannot say (an old driver, an error)
    vgpu_licensed: bool | None = None
    gpm: GpmMetrics | None = None
    # The driver's own busy-time samples since the previous tick (nvmlDeviceGetSamples with
    # NVML_GPU_UTILIZATION_SAMPLES: one every ~1/6 s), oldest first, percent. Empty where the
    # driver gives none; they show gaps shorter than one tick.
    util_samples: tuple[float, ...] = ()
    mig_instances: tuple[MigInstance, ...] = ()

    @property
    def mem_used_pct(self) -> float | None:
        """Used of what processes can use: Used / (Total - Reserved), as DCGM's
        FB_USED_PERCENT (of total under v1, whose used holds the reserve)."""
        usable = (self.mem_total_bytes or 0) - (self.mem_reserved_bytes or 0)
        if self.mem_used_bytes is None or usable <= 0:
            return None
        return 100.0 * self.mem_used_bytes / usable

    @property
    def power_pct_of_limit(self) -> float | None:
        if self.power_w is None or not self.static.power_limit_w:
            return None
        return 100.0 * self.power_w / self.static.power_limit_w

    @property
    def sm_clock_pct_of_max(self) -> float | None:
        if self.sm_clock_mhz is None or not self.static.max_sm_clock_mhz:
            return None
        return 100.0 * self.sm_clock_mhz / self.static.max_sm_clock_mhz


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process NVML lists on a GPU."""

    pid: int
    gpu_index: int
    kind: str  # "compute" or "graphics"
    used_memory_bytes: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    sm_util_pct: float | None = None  # per-process samples, where the driver gives them
    mem_util_pct: float | None = None


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    tid: int
    name: str
    cpu_pct: float | None = None


@dataclass(frozen=True, slots=True)
class ChildInfo:
    pid: int
    name: str
    cpu_pct: float | None = None


@dataclass(frozen=True, slots=True)
class Owner:
    """Who a process runs for, read from its cgroup and its PID namespace (`owner/`): a
    Kubernetes pod, a container, a Slurm job, a systemd unit or a user's session. Only `kind`
    is always known; the rest is what the node said."""

    kind: str  # "pod", "container", "slurm", "unit" or "user"
    pod_uid: str | None = None  # with dashes, as `kubectl get pod -o yaml` shows it
    pod_namespace: str | None = None
    pod_name: str | None = None
    qos: str | None = None  # the pod's QoS class: "guaranteed", "burstable", "besteffort"
    container_id: str | None = None  # the full id (64 hex digits)
    container_runtime: str | None = None  # "docker", "containerd", "cri-o", "podman", "lxc"
    container_name: str | None = None
    slurm_job: str | None = None  # "424242"
    slurm_step: str | None = None  # "0", "batch", "extern", "interactive"
    unit: str | None = None  # the systemd unit ("foo.service") or user slice ("user-1000.slice")
    ns_pid: int | None = None  # its pid inside its own PID namespace, where that differs

    @property
    def label(self) -> str | None:
        """The few characters a process table shows: `job 424242`, `pod NS/NAME` (`pod` and the
        uid's first 8 characters without names), `ctr 8e1f0d2c`; None for a unit or a user's
        session, which the user column already says. A container is named by the first 8 hex
        digits of its id: unique among the containers of one node (the birthday bound gives
        about 1 in 9,000 for 1,000 containers), and `docker`, `crictl` and `podman` take any
        unique prefix of an id where they take an id."""
        if self.kind == "slurm":
            return f"job {self.slurm_job}" if self.slurm_job else "job"
        if self.kind == "pod":
            if self.pod_namespace and self.pod_name:
                return f"pod {self.pod_namespace}/{self.pod_name}"
            return f"pod {_id_prefix(self.pod_uid)}" if self.pod_uid else "pod"
        if self.kind == "container":
            if self.container_id:
                return f"ctr {_id_prefix(self.container_id)}"
            return f"ctr {self.container_name}" if self.container_name else "container"
        return None


def _id_prefix(ident: str) -> str:
    """An id's first 8 characters where it is the hex of a real id; whole where it is not (a
    sanitized surface's pseudonym, `container-aixa`, cut would read as another)."""
    return ident[:8] if all(c in "0123456789abcdefABCDEF-" for c in ident) else ident


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """The host's view of a GPU process. Fields another user's process hides are `None`."""

    pid: int
    name: str | None = None
    user: str | None = None
    cmdline: tuple[str, ...] | None = None
    cpu_pct: float | None = None
    rss_bytes: int | None = None
    num_threads: int | None = None
    busiest_threads: tuple[ThreadInfo, ...] = ()
    children: tuple[ChildInfo, ...] = ()
    start_time: float | None = None
    cuda_visible_devices: str | None = None
    environ_readable: bool = False
    access_denied: bool = False
    ppid: int | None = None  # its parent (the tree view)
    parent_name: str | None = None
    uid: int | None = None  # its real user id (who may signal it)
    parent_user: str | None = None  # its parent's user (the tree view's launcher row)
    owner: Owner | None = None  # its pod, container or batch job, read once (collect/owners.py)


@dataclass(frozen=True, slots=True)
class PressureStall:
    """One line of /proc/pressure/<resource>: percent of time stalled, 10 s average."""

    some_avg10: float
    full_avg10: float | None = None
    some_avg60: float | None = None


@dataclass(frozen=True, slots=True)
class HostState:
    cpu_count: int
    cpu_pct: float
    per_cpu_pct: tuple[float, ...] = ()
    iowait_pct: float | None = None
    load_avg: tuple[float, float, float] | None = None
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    mem_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    disk_read_bytes_s: float | None = None
    disk_write_bytes_s: float | None = None
    pressure: dict[str, PressureStall] = field(default_factory=dict)  # "cpu", "io", "memory"


@dataclass(frozen=True, slots=True)
class XidEvent:
    timestamp: float
    xid: int
    gpu_index: int | None = None
    source: str = "nvml"  # "nvml" or "kernel-log"
    pci_bus_id: str | None = None
    pid: int | None = None
    process_name: str | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class SchedulerEvidence:
    job_id: str
    state: str  # PENDING, RUNNING, ...
    reason: str | None = None
    wait_s: float | None = None  # queue wait so far (pending) or before the start (running)
    time_limit_s: float | None = None
    time_used_s: float | None = None
    name: str | None = None
    user: str | None = None
    # From `scontrol show job` (a watched job); None where only `squeue` was read.
    submit_time: float | None = None  # epoch s
    start_time: float | None = None  # epoch s: actual, or expected while pending
    nodes: str | None = None  # NodeList
    partition: str | None = None
    gpus_requested: int | None = None  # gres/gpu in the job's TRES
    tres: str | None = None  # AllocTRES, else ReqTRES
    restarts: int | None = None  # Restarts=: requeued this many times
    exit_code: str | None = None  # ExitCode=, "0:0"
    stdout_path: str | None = None  # StdOut=

    @property
    def pending(self) -> bool:
        return self.state.upper() in ("PENDING", "PD")

    @property
    def time_left_s(self) -> float | None:
        if self.time_limit_s is None or self.time_used_s is None:
            return None
        return self.time_limit_s - self.time_used_s


@dataclass(frozen=True, slots=True)
class JobProcess:
    """One process of a watched job's tree (`depth` 0: a root of the tree)."""

    pid: int
    ppid: int | None = None
    depth: int = 0
    name: str | None = None
    cmdline: tuple[str, ...] | None = None
    cpu_pct: float | None = None
    rss_bytes: int | None = None
    num_threads: int | None = None
    busiest_threads: tuple[ThreadInfo, ...] = ()
    cuda_visible_devices: str | None = None  # from its environment, where readable


@dataclass(frozen=True, slots=True)
class OutputEvent:
    """A line of the job's output that names a failure ("cuda_oom", "nccl_timeout", ...)."""

    kind: str
    line: str
    line_no: int
    timestamp: float | None = None


@dataclass(frozen=True, slots=True)
class StepStats:
    """Step times read from the job's output: the recent ones, oldest first."""

    # "tqdm", "lightning", "hf-trainer", "deepspeed", "step-loss", "iteration-ms", "regex"
    source: str
    step: int | None = None  # the last step counter seen
    total: int | None = None
    step_times_s: tuple[float, ...] = ()
    # a counter without printed times: its steps over the time they took across the window
    # (job/steps.py), the figure steps/s and the step time are read from; None: from the times
    steps_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class JobState:
    """The watched job at one tick: its processes, its output, its scheduler record."""

    target: str  # "pid", "command", "slurm"
    label: str  # what the user named: "pid 4242", the command line, "Slurm job 17"
    root_pids: tuple[int, ...] = ()
    running: bool = True
    exit_code: int | None = None  # the command's own code (a started command, once ended)
    exit_signal: str | None = None  # "SIGKILL" when a signal ended it
    processes: tuple[JobProcess, ...] = ()  # the tree, parents before their children
    log_path: str | None = None  # where its output is (captured, --log, StdOut=)
    output_tail: tuple[str, ...] = ()  # the last lines of its output
    output_lines: int = 0  # lines read so far
    output_events: tuple[OutputEvent, ...] = ()  # the latest failure lines, oldest first
    steps: StepStats | None = None
    visible_gpus: str | None = None  # CUDA_VISIBLE_DEVICES (or SLURM_JOB_GPUS) of the job
    slurm: SchedulerEvidence | None = None
    slurm_stale_s: float | None = None  # `slurm` is this old: Slurm stopped answering since
    problem: str | None = None  # why something could not be read, said for the user


@dataclass(frozen=True, slots=True)
class OomKill:
    """The kernel's OOM killer ended a process (host memory, or a cgroup's memory limit)."""

    timestamp: float | None
    pid: int
    process_name: str
    cgroup: bool = False  # "Memory cgroup out of memory": the job's own memory limit


@dataclass(frozen=True, slots=True)
class CudaLibrary:
    """A CUDA library a process mapped (from /proc/<pid>/maps; no path: it may name a home)."""

    kind: str  # "cudart", "cuda" (the driver's libcuda), "torch_cuda", "nccl", "cudnn"
    version: str | None = None  # "12.8.90", "13" (major only), "570.124.06" (libcuda)
    origin: str = "other"  # "pip", "conda", "system", "torch-bundled", "compat", "other"
    deleted: bool = False  # replaced on disk since it was mapped (a driver or package upgrade)
    # the GPU architectures its device code carries (libtorch_cuda's .nv_fatbin: "sm_80",
    # "compute_90"); None: not read (another kind, not readable, or recorded before it was read)
    arch_list: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ProcessCuda:
    """A process with CUDA libraries mapped, whether or not NVML lists it on a GPU."""

    pid: int
    name: str | None = None
    user: str | None = None
    libraries: tuple[CudaLibrary, ...] = ()
    framework: str | None = None  # "torch 2.9.0+cu128"
    framework_cuda: str | None = None  # torch.version.cuda, read from the framework's files

    def library(self, kind: str) -> CudaLibrary | None:
        return next((lib for lib in self.libraries if lib.kind == kind), None)


@dataclass(frozen=True, slots=True)
class DriverChain:
    """The driver -> CUDA runtime chain below NVML: the kernel module, the user-space library on
    disk, and the CUDA runtimes processes loaded (a slow source: read every few seconds)."""

    module_version: str | None = None  # /proc/driver/nvidia/version
    module_flavour: str | None = None  # "open" or "proprietary"
    module_loaded: bool | None = None  # None: not read
    library_version: str | None = None  # libnvidia-ml.so.<version> on disk
    processes: tuple[ProcessCuda, ...] = ()
    scanned: int = 0  # processes whose maps were read
    unreadable: int = 0  # processes whose maps were not ours to read


@dataclass(frozen=True, slots=True)
class SyncSite:
    """A line of the job's code where the host waited for the GPU (`.item()`, `.cpu()`, ...)."""

    site: str  # "train.py:42": the file and line, as the probe found it (a path: sanitized)
    call: str  # ".item", ".cpu", "torch.cuda.synchronize", ...
    count: int  # syncs there so far
    seconds: float  # time spent waiting there so far


@dataclass(frozen=True, slots=True)
class ProbeMemory:
    """PyTorch's caching allocator in one process at its latest step (`torch.cuda.memory_stats`),
    as the probe measured it. Bytes, except the two counters."""

    allocated_bytes: int | None = None  # held by live tensors
    reserved_bytes: int | None = None  # held by the allocator from CUDA (allocated + cache)
    peak_bytes: int | None = None  # the most ever allocated at once
    inactive_split_bytes: int | None = None  # cached blocks split and not reusable whole
    alloc_retries: int | None = None  # cudaMalloc failed, the cache was freed and it retried
    ooms: int | None = None  # CUDA out-of-memory errors the allocator raised

    @property
    def cached_bytes(self) -> int | None:
        """Reserved but not allocated: the allocator's cache (fragmentation where split)."""
        if self.reserved_bytes is None or self.allocated_bytes is None:
            return None
        return max(0, self.reserved_bytes - self.allocated_bytes)


# The parts of a training step (t_step = t_input + t_host + t_gpu + t_sync + t_comm; the
# seed's model), as the probe names them in a step's "measured" list.
STEP_PARTS = ("t_input", "t_sync", "t_comm", "t_gpu", "t_host")


@dataclass(frozen=True, slots=True)
class ProbeSteps:
    """The latest steps of one probed process, aggregated: the mean seconds per step of each
    part over `steps` steps. A part the probe did not measure is None, never a guess."""

    steps: int  # steps aggregated (the newest ones)
    last_step: int  # the newest step's number
    last_at: float  # when it ended (wall clock)
    wall_s: float
    t_input_s: float | None = None  # waiting for the next batch
    t_sync_s: float | None = None  # host blocked in host-device syncs
    sync_count: float | None = None  # syncs per step
    t_comm_s: float | None = None  # collective communication in all
    t_comm_exposed_s: float | None = None  # ...of which not hidden behind compute
    t_gpu_s: float | None = None  # the GPU busy on the step's work
    t_host_s: float | None = None  # the rest of the wall time: the host's own work
    measured: tuple[str, ...] = ()  # the parts measured in every step aggregated (STEP_PARTS)
    # As a rank is compared with the others (diagnose/ranks.py), over a longer window of its
    # steps (collect/probe.py RANK_WINDOW_S, `median_steps` of them): the step's
    # median and 95th percentile; the median of its own work (the step minus its exposed
    # communication) and of that exposed communication, None where communication was not
    # measured; the collectives entered by the newest step (probe/accounts.py's sequence).
    wall_p50_s: float | None = None
    wall_p95_s: float | None = None
    own_p50_s: float | None = None
    wait_p50_s: float | None = None
    input_p50_s: float | None = None
    sync_p50_s: float | None = None
    coll_seq: int | None = None
    median_steps: int | None = None  # the steps those medians cover (a longer window)


@dataclass(frozen=True, slots=True)
class ProbeProgress:
    """Where a probed process stood while its current step ran long (the probe's "progress"
    record): in which collective of its sequence, since when."""

    at: float  # wall clock of the record
    step: int  # the boundaries so far: the step it is in is the next one
    stalled_s: float  # since the newest step boundary
    entered: int  # collectives entered so far (the sequence number of the newest)
    done: int  # collectives finished so far
    op: str | None = None  # the newest collective's name ("all_reduce", "barrier", ...)
    nbytes: int | None = None  # its bytes, where known
    in_s: float | None = None  # in that collective for this long; None: in none

    @property
    def in_collective(self) -> bool:
        return self.in_s is not None and self.entered > self.done


@dataclass(frozen=True, slots=True)
class ProbeShape:
    """A matrix multiplication or convolution of a sampled step (probe/sample.py): the dtype it
    computed in, its dimensions (M, N, K; a convolution's channels C, O), how often it ran and
    its FLOPs in the step, the dimensions the tensor cores want aligned, the job's line."""

    op: str
    dtype: str
    dims: tuple[int, ...]
    dim_names: str  # "MNK", "CO"
    count: int
    flops: int
    misaligned: tuple[str, ...] = ()
    site: str | None = None  # "train.py:42" (sanitized as a line of the job's code)


@dataclass(frozen=True, slots=True)
class ProbeTransfer:
    """Copies between host and device in a sampled step, one direction: the host's seconds in
    them (a pageable copy blocks it; a pinned non_blocking one returns at once)."""

    count: int
    nbytes: int
    seconds: float
    pinned_bytes: int = 0
    non_blocking: int = 0  # copies asked non_blocking


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """One step the probe looked at closely (its "sample" record, probe/sample.py)."""

    step: int
    at: float
    wall_s: float  # the sampled step itself (slowed by the sampling: not a step time)
    flops: int = 0  # every operator torch counts FLOPs of, forward and backward
    matmul_flops: int = 0
    misaligned_flops: int = 0  # of the matmuls and convolutions with a misaligned dimension
    dtype_flops: tuple[tuple[str, int], ...] = ()  # matmul FLOPs by the dtype they ran in
    shapes: tuple[ProbeShape, ...] = ()
    h2d: ProbeTransfer | None = None
    d2h: ProbeTransfer | None = None
    samples: int | None = None  # the step's batch: samples, token ids
    tokens: int | None = None
    batch_from: str | None = None  # where the batch was read ("batch", "the batch's input_ids")
    loss: float | None = None
    backward: bool = False  # the step ran a backward pass (training)
    grad_scaler: bool | None = None  # a GradScaler scaled the loss; None: no backward
    autocast: tuple[tuple[str, str], ...] = ()  # (device type, dtype) of autocast regions
    matmul_precision: str | None = None  # torch.get_float32_matmul_precision()
    allow_tf32: bool | None = None
    capability: tuple[int, int] | None = None  # the job's CUDA device, where it uses one
    device_name: str | None = None


@dataclass(frozen=True, slots=True)
class ProbeState:
    """What the probe inside one process measured (`gputop-diag watch --probe`), as read from
    its file: the process is `pid` started at `start_ticks` (/proc/<pid>/stat field 22)."""

    pid: int
    start_ticks: int
    python: str | None = None
    torch: str | None = None  # torch.__version__, None without torch
    cuda: bool = False  # torch.cuda is initialised in the process
    rank: int | None = None  # torch.distributed rank and world size, where set
    world: int | None = None
    local_rank: int | None = None  # LOCAL_RANK, where the launcher set it
    node: str | None = None  # the host the process runs on (its uname; sanitized)
    cuda_device: int | None = None  # its current CUDA device, an index among the visible ones
    run_id: str | None = None  # the run its job's ranks share on every node (torchrun's)
    can_measure: tuple[str, ...] = ()  # what this process can measure ("t_input", "memory", ...)
    steps: ProbeSteps | None = None  # None: no step seen yet
    memory: ProbeMemory | None = None  # the latest step's allocator figures
    params_bytes: int | None = None  # exact sums over the optimizer's parameter groups
    grads_bytes: int | None = None
    optimizer_bytes: int | None = None  # the optimizer's state tensors
    kv_cache_bytes: int | None = None
    sync_sites: tuple[SyncSite, ...] = ()  # the top call sites, most time first
    notes: tuple[str, ...] = ()  # what the probe said of itself (a hook that disabled itself)
    updated_at: float | None = None  # the newest record's time
    ended: bool = False  # the process said goodbye (exiting normally)
    malformed_lines: int = 0  # lines of its file that were not records (skipped)
    gone: bool = False  # the process ended without a goodbye (killed, crashed, os._exit)
    progress: ProbeProgress | None = None  # the newest, while its current step runs long
    stack_signal: int | None = None  # the signal that makes the probe write its stacks
    stack: str | None = None  # the stepping thread's Python stack, dumped while it stalled
    stack_at: float | None = None  # when that stack was read
    exit_error: str | None = None  # the uncaught exception it ended on ("RuntimeError: ...")
    gone_at: float | None = None  # when the Monitor first found it gone
    sample: ProbeSample | None = None  # the newest sampled step
    arch_list: tuple[str, ...] = ()  # the GPU architectures torch was built for ("sm_80")
    torch_cuda: str | None = None  # the CUDA release torch was built with

    @property
    def activations_bytes(self) -> int | None:
        """Activations and temporaries at the peak: peak - parameters - gradients - optimizer
        state, where all four were measured."""
        parts = (self.params_bytes, self.grads_bytes, self.optimizer_bytes)
        peak = self.memory.peak_bytes if self.memory is not None else None
        if peak is None or any(p is None for p in parts):
            return None
        return max(0, peak - sum(parts))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one collection tick saw."""

    timestamp: float
    system: SystemInfo
    gpus: tuple[GpuState, ...] = ()
    host: HostState | None = None
    gpu_processes: tuple[GpuProcess, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()  # host view of the pids in gpu_processes
    xid_events: tuple[XidEvent, ...] = ()  # events that arrived this tick
    errors: tuple[CollectorError, ...] = ()
    # The slow sources (queried every few seconds, not every tick): the latest answer rides in
    # every snapshot, so a recording holds everything the diagnosis read. `None`: not queried
    # yet (or the source is not part of this run); `()`: queried, nothing found.
    scheduler_jobs: tuple[SchedulerEvidence, ...] | None = None  # `squeue --me`
    kernel_ooms: tuple[OomKill, ...] | None = None  # OOM kills from the kernel log
    slow_sources_at: float | None = None  # when the slow sources above were read
    job: JobState | None = None  # the watched job (`gputop-diag watch`), None otherwise
    driver_chain: DriverChain | None = None  # slow source: module, library, loaded runtimes
    # What the probes inside the tracked processes measured (the GPU processes and the watched
    # job's): None when no probe files were read (a replay of an older recording), () none.
    probes: tuple[ProbeState, ...] | None = None
    # Slow source (every 30 s, `monitor/health.py`): the node and job health findings and when
    # they were read; None: not read (a headless command's single tick, an older recording).
    health: HealthReport | None = None

    def gpu(self, index: int) -> GpuState | None:
        for g in self.gpus:
            if g.index == index:
                return g
        return None

    def process(self, pid: int) -> ProcessInfo | None:
        for p in self.processes:
            if p.pid == pid:
                return p
        return None

    def probe(self, pid: int) -> ProbeState | None:
        return next((p for p in self.probes or () if p.pid == pid), None)

    def job_process(
        self, gpu_index: int | None = None, pids: tuple[int, ...] = ()
    ) -> GpuProcess | None:
        """The job's process: the one holding most memory (on `gpu_index`, among `pids` where
        given)."""
        procs = [
            p
            for p in self.gpu_processes
            if p.used_memory_bytes
            and (gpu_index is None or p.gpu_index == gpu_index)
            and (not pids or p.pid in pids)
        ]
        return max(procs, key=lambda p: p.used_memory_bytes or 0) if procs else None

    @property
    def nvml_available(self) -> bool:
        return not any(e.source == "nvml" and e.gpu_index is None for e in self.errors)
