"""Every threshold the classifier uses, with where it comes from. Percentages are 0-100."""

# Windows (seconds). The recent window decides the shape of the workload now; the long window
# judges slow trends such as memory growth.
RECENT_S = 15.0  # long enough for two periods of a typical dataloader sawtooth
MIN_SAMPLES = 5  # fewer samples than this cannot show a shape
HYSTERESIS_TICKS = 3  # a new class must win this many ticks in a row (1 s sampling: 3 s)

# Idle: nothing running and the GPUs not busy. (nvidia-smi's GpuIdle clock reason is a hint.)
IDLE_UTIL_PCT = 5.0

# Capacity. TB-plugin "Memory capacity" rule: peak allocated > 90 % of device memory; we call it
# the limit at 95 % of NVML used memory (which includes the driver's reserve).
CAPACITY_MEM_PCT = 95.0
CAPACITY_WARN_PCT = 90.0  # kineto tb_plugin RunProfileData.analyze
# Memory growth: SageMaker GPUMemoryIncrease rule (moving average rises > 5 points); we flag a
# steady rise of at least this many MiB/min over the long window...
GROWTH_MIB_PER_MIN = 30.0
GROWTH_MIN_MIB = 100.0  # ...that adds up to at least this much,
GROWTH_FULL_IN_MIN = 30.0  # and call it capacity when it fills the GPU within this time.

# Busy-time shape. SageMaker LowGPUUtilization: p95 < 70 % underused, p5 < 10 % fluctuating.
GAP_REL = 0.5  # a sample is a gap when utilization is below half the GPU's p90
GAPPY_FRACTION = 0.15  # the GPU is gappy when at least this share of samples are gaps
BUSY_UTIL_PCT = 70.0  # SageMaker: p95 below 70 % = underused

# Compute vs bandwidth (DCGM profiling guide; NVML GPM exposes the same family).
SM_ACTIVE_PCT = 70.0  # DCGM: SM_ACTIVE >= 0.8 necessary for efficient use; < 0.5 ineffective
TENSOR_ACTIVE_PCT = 30.0  # KempnerPulse "tensor-heavy" >= 50 with SM >= 60; we accept 30
DRAM_BW_PCT = 60.0  # DCGM DRAM_ACTIVE practical peak ~0.8; >= 0.5 heavy traffic
MEMCTL_BW_PCT = 75.0  # fallback without GPM: NVML memory-controller busy time
POWER_COMPUTE_PCT = 60.0  # fallback without GPM: power near the limit means the math units run

# Input pipeline. SageMaker CPUBottleneck (CPU > 90 %), IOBottleneck (iowait > 50 %), Dataloader
# rule (workers should use 70-200 % of the cores); PSI io "some" as the always-on I/O stall.
WORKER_BUSY_PCT = 70.0  # dataloader workers each this busy are the limit
HOST_CPU_SATURATED_PCT = 85.0
IOWAIT_PCT = 10.0
IO_PRESSURE_PCT = 10.0

# Synchronization: with cudaDeviceScheduleAuto the CUDA runtime spins while it waits, so one host
# thread near 100 % of a core while the GPU idles in gaps is a host-device sync.
MAIN_SPIN_PCT = 90.0
WORKERS_IDLE_PCT = 30.0

# Communication: dips correlated across GPUs with interconnect traffic (TB-plugin: comm > 10 %
# of step time). NVLink figures in KiB/s.
DIP_POINTS = 20.0  # a dip: SM (or busy time) this far below the GPU's p90
CORRELATED_DIPS = 0.75  # share of GPUs dipping at the same sample
NVLINK_DIP_KIB_S = 5.0e7  # ~50 GB/s during dips
NVLINK_DIP_RATIO = 3.0  # and at least this many times the traffic outside them

# Scheduler: a job pending longer than this is the limit, not the code.
PENDING_WAIT_S = 300.0
TIME_LIMIT_CLOSE_S = 600.0

# Alerts.
THROTTLE_FRACTION = 0.3  # clock-event reasons present in this share of busy samples
THERMAL_REASONS = ("sw_thermal", "hw_thermal", "hw_slowdown")
POWER_REASONS = ("sw_power_cap", "hw_power_brake")
