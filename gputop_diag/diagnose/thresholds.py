"""Every threshold the classifier uses, with where it comes from. Percentages are 0-100.

Sources named below: the diagnostic model in docs/diagnosis.md ("the model"), the DCGM user guide's
profiling metrics (docs.nvidia.com/datacenter/dcgm/latest/user-guide/feature-overview.html), the
PyTorch profiler TensorBoard plugin's recommendation rules (pytorch/kineto tb_plugin
`RunProfileData.analyze`, "TB-plugin"), the Amazon SageMaker Debugger profiler rules
(awslabs/sagemaker-debugger `smdebug/profiler/analysis/rules`, "SageMaker"), Nsight Systems' expert
rules ("nsys") and PyTorch's thread names (torch/utils/data/_utils/worker.py). "Ours" marks a
cut-off we chose where no source gives one; each says why.
"""

# -- windows -----------------------------------------------------------------------------------
# Ours: the shape of GPU busy time is judged over the last 15 s, long enough for two periods of
# a typical dataloader sawtooth (steps of a few seconds) and short enough to follow a change.
RECENT_S = 15.0
# Ours: host figures (CPU, iowait, thread CPU) over the last 8 s, so that a change in the host's
# load is seen within the 10 s the product promises; a median over 8 samples still ignores one
# outlier.
HOST_RECENT_S = 8.0
MIN_SAMPLES = 5  # ours: fewer samples than this show no shape at all
# Ours: a new class must win this many ticks in a row before it replaces the old one (1 s
# sampling: 3 s), so one noisy sample never flips the verdict. SageMaker uses a "patience" for
# the same purpose.
HYSTERESIS_TICKS = 3
# The windows above are sized for one sample a second. Judging samples taken every `tick_s`
# seconds (Prometheus scrapes, 15-30 s), each window keeps its number of samples and spans
# `tick_s` times its seconds: the shape window 15 samples, the host window 8, memory growth 20.
# DCGM's profiling ratios (SM activity) average the whole tick, while busy time is the driver's
# last 1/6-1 s: over ticks longer than this (ours: a collective's dip lasts about a second or
# two), dips show only in busy time, so the shared-dip shape is read there.
PROFILING_DIP_MAX_TICK_S = 3.0

# -- idle --------------------------------------------------------------------------------------
# SageMaker CPUBottleneck/IOBottleneck count a GPU under 10 % as idle; we call a GPU idle when
# even its busy time's p95 over the window stays under 10 % (NVML's GpuIdle clock reason agrees).
IDLE_UTIL_PCT = 10.0

# -- capacity ----------------------------------------------------------------------------------
# TB-plugin "memory capacity" rule: peak allocated > 90 % of device memory is a warning; we call
# it the limit at 95 % of NVML used memory, which also counts the driver's reserve and the
# allocator's cache.
CAPACITY_WARN_PCT = 90.0
CAPACITY_MEM_PCT = 95.0
# SageMaker GPUMemoryIncrease: a moving-average rise of more than 5 points. We fit a line over the
# window and flag a rise of at least 30 MiB/min that adds up to at least 100 MiB (ours: below that
# the allocator's cache growing after start-up looks the same)...
GROWTH_MIB_PER_MIN = 30.0
# Ours: memory this full beside a waiting GPU is named as a symptom, not the limit (the model:
# "is memory the limit, or a symptom of input/sync/comm stalls?").
MEMORY_SYMPTOM_PCT = 80.0
GROWTH_MIN_MIB = 100.0
# Ours: on a GPU already CAPACITY_WARN_PCT full a smaller steady rise counts, because a few
# hundred MiB are all that is left.
GROWTH_MIN_MIB_NEAR_FULL = 32.0
GROWTH_MIN_SPAN_S = 20.0
GROWTH_FULL_IN_MIN = 30.0  # ...and call it capacity when it fills the GPU within 30 min (ours)
# Ours: a leak grows a little every step; a job starting or changing phase jumps once. Growth
# counts only when each quarter of the window holds more than the last and no single tick adds
# more than half of the rise.
GROWTH_MAX_STEP_SHARE = 0.5

# -- busy-time shape ---------------------------------------------------------------------------
# SageMaker LowGPUUtilization: p95 < 70 % is under-used, p5 < 10 % with p95 >= 70 % fluctuating.
# Ours: a sample is a gap when busy time is under half the GPU's own p90, and the GPU waits in
# gaps when at least 15 % of samples are gaps (two gaps in a 15 s window; one outlier is 7 %).
GAP_REL = 0.5
GAPPY_FRACTION = 0.15
# Ours: GPUs that are idle a quarter of the time wait for something, whatever the amplitude or
# period of the stalls (a busy GPU in a compute- or bandwidth-bound loop idles under 10 %; the
# model: utilization is a symptom, t_step = t_input + t_host + ... + t_gpu).
WAIT_SHARE = 0.25
# NVML gives its ~1/6 s busy samples through nvmlDeviceGetSamples; under this many in the recent
# window (old drivers, vGPU) the tick figures judge the shape.
MIN_SUBSECOND_SAMPLES = 24
# Ours: a GPU idle at the start of the window and busy since is a job starting (ramp-up), not a
# wait; its leading idle run is left out of the shape when at least a third of the window is
# left.
START_MIN_SHARE = 1 / 3
# Ours: a job starts when it loads its weights; memory that rose by a quarter of what the GPU
# holds now within the recent window marks a start.
START_MEM_RISE_SHARE = 0.25
BUSY_UTIL_PCT = 70.0  # SageMaker: p95 busy time under 70 % is under-used

# -- compute vs bandwidth: each unit's share of its own peak (GPM) -------------------------------
# Like Nsight Compute's speed-of-light section, the unit nearest its own roof limits. DCGM: the
# practical peak of DRAM_ACTIVE is about 0.8 ("≥ 0.5 is heavy"); we take 85 % of cycles as
# DRAM's roof. The math pipes (tensor, fp16, fp32, fp64 activity) rarely exceed 90 % of cycles
# even in a tuned GEMM; 90 % is their roof. A unit at ROOF_SHARE_PCT of its roof limits; two
# units there are a mixed limit, the nearer one first.
DRAM_PEAK_PCT = 85.0
MATH_PIPE_PEAK_PCT = 90.0
ROOF_SHARE_PCT = 65.0
# Without a unit near its roof, SMs resident 80 % of cycles with busy pipes idle are latency- or
# issue-bound kernels: still the GPU's own work (compute), at lower confidence.
SM_ISSUE_BOUND_PCT = 80.0
# DCGM: SM_ACTIVE >= 0.8 is necessary (not sufficient) for effective use, < 0.5 ineffective. We
# take 70 % as the compute cut-off: between the two, with tensor pipes as the tie-breaker.
SM_ACTIVE_PCT = 70.0
# Fallbacks without GPM (lower confidence). NVML's memory utilization is memory-controller busy
# time, not a share of peak bandwidth (NVML nvmlUtilization_t docs): only a high value means much.
# Ours, set on the tuning seeds 0-599: kernels that keep the controller busy two thirds of the time
# stream memory; mixed training steps stay under it.
MEMCTL_BW_PCT = 65.0
# Ours: a busy GPU drawing 65 % of its power limit runs its math units hard; a GPU that is busy
# but draws little runs small or latency-bound kernels (tuning seeds 0-599).
POWER_COMPUTE_PCT = 65.0

# -- input pipeline ----------------------------------------------------------------------------
# SageMaker CPUBottleneck: CPU > 90 % while the GPU is under 10 %; IOBottleneck: iowait > 50 %;
# Dataloader rule: workers should use 70-200 % of the cores. Ours: a dataloader worker
# (`pt_data_worker`) at 70 % of a core works flat out; iowait 10 % or I/O pressure (PSI "some",
# avg10) 10 % is storage holding the loaders back; host CPU 85 % is a saturated machine.
WORKER_BUSY_PCT = 70.0
# Ours: a helper (child process or thread of the job) under 10 % of a core is idle.
HELPER_ACTIVE_PCT = 10.0
HOST_CPU_SATURATED_PCT = 85.0
# Ours: on a saturated host, other processes (not the GPU processes, their descendants or the
# watched job) holding half the machine are a finding of their own (`alerts`: host_cpu); they
# are the job's input pressure only where its loaders work (WORKERS_IDLE_PCT) and starve.
OTHERS_CPU_PCT = 50.0
IOWAIT_PCT = 10.0
IO_PRESSURE_PCT = 10.0

# -- synchronization ---------------------------------------------------------------------------
# CUDA runtime: with cudaDeviceScheduleAuto the host thread spins while it waits for the device,
# so one thread (`pt_main_thread`) near 100 % of a core while the GPU idles in gaps is a host-device
# sync (.item(), .cpu(), logging), not host work. Ours: 90 % of a core spins; loaders under 30 %
# are idle.
MAIN_SPIN_PCT = 90.0
WORKERS_IDLE_PCT = 30.0
# Launch-bound (synchronization's other form): NVML's busy time counts a GPU busy while any
# kernel is resident (nvmlUtilization_t), so small kernels back to back read busy while few SMs
# work. DCGM: SM_ACTIVE under 0.5 is ineffective use. Ours: busy 80 % of the time with SMs
# active under 25 % and no unit near its roof, while the launching thread spins
# (MAIN_SPIN_PCT), is the host's launch rate limiting the step; measured inside the job, the
# GPU busy under half the step while no wait takes MEASURED_WAIT_SHARE of it.
LAUNCH_BUSY_PCT = 80.0
LAUNCH_SM_PCT = 25.0
LAUNCH_MEASURED_GPU_SHARE = 0.5

# -- communication -----------------------------------------------------------------------------
# TB-plugin: communication over 10 % of step time is worth acting on. Ours: the GPUs of a job dip
# together (at least 75 % of them, 20 points under their p90) in at least 10 % of samples, and
# the interconnect carries at least 3x its traffic outside the dips: 50 GB/s of NVLink or 2 GB/s
# of PCIe per GPU.
DIP_POINTS = 20.0
CORRELATED_DIPS = 0.75
COMM_DIP_FRACTION = 0.10
NVLINK_DIP_KIB_S = 5.0e7
PCIE_DIP_KB_S = 2.0e6
INTERCONNECT_DIP_RATIO = 3.0
# Without interconnect counters: NCCL kernels keep the GPU "busy" (a kernel is resident) while
# its SMs wait, so busy time that stays above 50 % through SM dips is the collective's shape.
COMM_BUSY_IN_DIPS_PCT = 50.0

# -- measured inside the job (the probe: `gputop-diag watch --probe`) --------------------------
# A figure measured inside the process outranks one inferred from outside. Ours: a probe whose
# last step is older than 30 s (or three of its steps) has stopped and says nothing about now;
# three steps are a figure, one is an anecdote.
MEASURED_STALE_S = 30.0
MEASURED_MIN_STEPS = 3
# The TB-plugin flags DataLoader time over 5 % and communication over 10 % of the step as worth
# acting on. Ours: a waiting part *limits* the step when it takes a fifth of it or more and more
# than any other waiting part...
MEASURED_WAIT_SHARE = 0.2
# ...and the GPU is not busy through it: a GPU busy 90 % of the step (measured, CUDA events)
# waits on nothing, whatever the host waits on in the meantime (ours).
MEASURED_GPU_BUSY = 0.9
# TB-plugin "memory capacity": peak allocated over 90 % of the device's memory is true pressure.
MEASURED_PRESSURE_PCT = 90.0
# Ours: the allocator's cache holding a quarter of what it reserved (reserved >> allocated) is
# the cache or fragmentation, not the tensors; so is any cudaMalloc retry (the allocator freed
# its cache to make room: PyTorch's CUDA semantics notes, "Memory management").
MEASURED_CACHE_SHARE = 0.25
CONF_MEASURED = 0.9
# The probe's sampled step (measured_work.py). Ours: the dtype that runs half the matmul FLOPs
# or more is the step's precision; shapes the tensor cores want aligned (multiples of 8 in
# 16-bit, 16 in fp8: NVIDIA's "Matrix Multiplication Background User's Guide", Requirements to
# Use Tensor Cores) holding a fifth of the matmul FLOPs or more are worth padding.
WORK_DTYPE_SHARE = 0.5
MISALIGNED_FLOP_SHARE = 0.2

# -- scheduler (Slurm; slurm.schedmd.com/squeue.html, "JOB REASON CODES") ------------------------
# Ours: a job pending five minutes is waiting on the queue, not on start-up; a running job with
# less than ten minutes of its time limit left will be ended by the scheduler.
PENDING_WAIT_S = 300.0
TIME_LIMIT_CLOSE_S = 600.0

# -- alerts ------------------------------------------------------------------------------------
# Ours: clock-event reasons present in 30 % of busy samples hold the clocks down, not a blip.
# NVML clock event reasons: SwThermalSlowdown, HwThermalSlowdown, HwSlowdown; SwPowerCap,
# HwPowerBrakeSlowdown.
THROTTLE_FRACTION = 0.3
THERMAL_REASONS = ("sw_thermal", "hw_thermal", "hw_slowdown")
POWER_REASONS = ("sw_power_cap", "hw_power_brake")

# -- confidence (ours) ------------------------------------------------------------------------
# How sure a verdict is when its rule fires with all its evidence present: read straight off a
# counter or a state (GPM, NVML memory, Slurm) 0.85-0.9; from a proxy without GPM (memory-
# controller busy time, power) 0.55; from the GPU side alone, without the host or interconnect
# figure that would confirm it, 0.45-0.55.
CONF_STATE = 0.9  # idle and insufficient_data
CONF_BALANCED = 0.5
CONF_CAPACITY_FULL = 0.9
CONF_CAPACITY_GROWTH = 0.75
CONF_COMM_NVLINK = 0.85
CONF_COMM_PCIE = 0.7
CONF_COMM_SHAPE_ONLY = 0.55
CONF_INPUT_BASE = 0.6  # plus 0.1 for each host figure that shows pressure, at most 0.95
CONF_INPUT_PER_FIGURE = 0.1
CONF_INPUT_MAX = 0.95
CONF_SYNC_SPIN = 0.85
CONF_LAUNCH = 0.75  # SM activity and the launching thread: two figures, no measured launches
CONF_GPM = 0.85  # compute and bandwidth judged from GPM
CONF_ISSUE_BOUND = 0.6  # compute from SM residency alone (no pipe near its roof)
CONF_MIXED = 0.7  # two units near their roofs: the nearer one leads
CONF_FALLBACK = 0.55  # ... from memory-controller busy time or power and clocks
CONF_FALLBACK_NO_UTIL = 0.45  # ... and without busy time (MIG mode)
CONF_SCHEDULER = 0.9  # pending past PENDING_WAIT_S
CONF_SCHEDULER_SHORT_WAIT = 0.6
# A node or job health finding (docs/health.md) that bears on the class the figures decided:
# one that names the cause (CUDA_LAUNCH_BLOCKING=1 for synchronization, workers in D state on a
# network mount for the input pipeline, an NCCL transport turned off for communication) adds
# 0.1, one that only fits it (a PCIe link trained down, an InfiniBand port down) 0.05; once per
# verdict, never above 0.95. A finding never names a class on its own (absent figures never vote).
HEALTH_CAUSE_BONUS = 0.1
HEALTH_FITS_BONUS = 0.05
HEALTH_CONF_MAX = 0.95
# Each missing kind of evidence the verdict relies on takes 15 % off its confidence; a verdict
# held by hysteresis while its rule no longer fires keeps 80 %.
MISSING_EVIDENCE_FACTOR = 0.85
HELD_CONFIDENCE = 0.8
