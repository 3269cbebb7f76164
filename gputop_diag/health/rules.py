"""The health checks' thresholds and tables: data with their sources, in one place."""

from __future__ import annotations

# A GPU counts as busy ("under load") at or above this utilization. A PCIe link idles down to a
# lower generation to save power (NVIDIA: "the link generation may be reduced when the GPU is
# not in use", nvidia-smi -q "PCIe Generation Current"), so a link below its maximum is judged
# only on a busy GPU.
BUSY_UTIL_PCT = 30.0

# Environment variables that change how a job runs, what they do, the class they bear on and
# the severity. Sources: CUDA C Programming Guide "CUDA Environment Variables"
# (https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars), NCCL
# "Environment Variables" (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html),
# PyTorch "CUDA semantics", memory management
# (https://pytorch.org/docs/stable/notes/cuda.html#memory-management).
# name -> (value that triggers: None = any non-empty value but "0", finding id, title, what it
# does, classes, severity)
ENV_RULES: dict[str, tuple[str, str, str, tuple[str, ...], str]] = {
    "CUDA_LAUNCH_BLOCKING": (
        "env.cuda_launch_blocking",
        "CUDA_LAUNCH_BLOCKING=1 in a GPU job's environment",
        "every kernel launch waits until the kernel has finished: the CPU and GPU never overlap",
        ("synchronization",),
        "warning",
    ),
    "NCCL_P2P_DISABLE": (
        "env.nccl_p2p_disable",
        "NCCL_P2P_DISABLE set: GPU-to-GPU traffic avoids NVLink and PCIe peer-to-peer",
        "NCCL sends GPU-to-GPU traffic through host memory instead of NVLink or PCIe P2P",
        ("communication",),
        "warning",
    ),
    "NCCL_SHM_DISABLE": (
        "env.nccl_shm_disable",
        "NCCL_SHM_DISABLE set: no shared-memory transport between processes",
        "where P2P is not possible, NCCL falls back to the network instead of shared memory",
        ("communication",),
        "warning",
    ),
    "NCCL_IB_DISABLE": (
        "env.nccl_ib_disable",
        "NCCL_IB_DISABLE set: NCCL does not use InfiniBand/RoCE",
        "NCCL uses TCP sockets between nodes instead of InfiniBand/RoCE verbs",
        ("communication",),
        "warning",
    ),
    "PYTORCH_NO_CUDA_MEMORY_CACHING": (
        "env.pytorch_no_cuda_memory_caching",
        "PYTORCH_NO_CUDA_MEMORY_CACHING=1: PyTorch's caching allocator is off",
        "every allocation and free calls cudaMalloc/cudaFree, which synchronize the device, and "
        "memory fragments",
        ("capacity", "synchronization"),
        "warning",
    ),
}
ENV_NEXT = {
    "CUDA_LAUNCH_BLOCKING": "unset CUDA_LAUNCH_BLOCKING  # in the job's launch script, then "
    "restart the job (it is for debugging only)",
    "NCCL_P2P_DISABLE": "unset NCCL_P2P_DISABLE  # then check P2P between the GPUs: "
    "nvidia-smi topo -p2p r",
    "NCCL_SHM_DISABLE": "unset NCCL_SHM_DISABLE  # in the job's launch script, then restart it",
    "NCCL_IB_DISABLE": "unset NCCL_IB_DISABLE  # then check the ports: ibstat",
    "PYTORCH_NO_CUDA_MEMORY_CACHING": "unset PYTORCH_NO_CUDA_MEMORY_CACHING  # in the job's "
    "launch script (it is for debugging memory only)",
}


def env_is_set(value: str) -> bool:
    """A variable counts as set when it is not empty and not "0" (CUDA and NCCL read 1 as on;
    PyTorch's allocator reads any value but "0" as off)."""
    return value.strip() not in ("", "0")


# PCIe transfer rate per lane (GT/s) of each generation (PCI-SIG); sysfs writes "32.0 GT/s PCIe".
PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}

# ACS controls that send peer-to-peer requests up to the root complex (PCIe Base Specification,
# ACS Extended Capability; NCCL troubleshooting, "PCI Access Control Services (ACS)",
# https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html).
ACS_P2P_FLAGS = ("SrcValid", "ReqRedir", "CmpltRedir")

# Kernel functions a process waits in when it waits on a network file system (wchan).
NETWORK_WAITS = ("rpc_", "nfs", "cifs", "smb", "lustre", "ll_", "ceph", "fuse")

# InfiniBand port states (include/rdma/ib_verbs.h enum ib_port_state, ib_port_phys_state).
IB_ACTIVE = "ACTIVE"
IB_LINKUP = "LinkUp"
