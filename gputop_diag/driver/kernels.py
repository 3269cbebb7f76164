"""The chain's last layer, the application kernel: each framework build's GPU architectures
against each GPU's compute capability (`kernel_images.check`, nvcc's rules), so that "no kernel
image is available for this device" is said before the job meets it, with the build that
would carry one.

A build's list comes from `--probe-python` (`torch._C._cuda_getArchFlags()`, the list
`torch.cuda.get_arch_list()` returns once CUDA is available) or, without it, from the
`.nv_fatbin` section of the `libtorch_cuda.so` a process mapped (`fatbin.py`); the GPUs'
capabilities from NVML (`nvmlDeviceGetCudaComputeCapability`). Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

from .facts import Problem
from .kernel_images import (
    CC,
    BuildArchs,
    BuildOnGpus,
    GpuCapability,
    KernelImages,
    judge_builds,
    parse_arch,
    runs_on,
)
from .problem import problem

# the builds' types live beside the check, so that the chain's facts can carry them
__all__ = [
    "BuildArchs",
    "BuildOnGpus",
    "GpuCapability",
    "gpus_named",
    "judge_builds",
    "kernel_problems",
    "sm_of",
    "wheel_for",
    "wheel_for_driver",
]

# PyTorch's Linux x86_64 wheels by index and the architectures their builds carry: the
# TORCH_CUDA_ARCH_LIST of https://github.com/pytorch/pytorch/blob/main/.ci/manywheel/
# build_cuda.sh for the 2.8 release (12.6: 5.0;6.0;7.0;7.5;8.0;8.6;9.0; 12.8:
# 7.0;7.5;8.0;8.6;9.0;10.0;12.0; 12.9: the same and 12.0+PTX). Each index serves
# https://download.pytorch.org/whl/<index>; the lowest CUDA that carries an architecture is
# named first (it runs on the most drivers).
TORCH_WHEELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cu126", ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")),
    ("cu128", ("sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")),
    ("cu129", ("sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120")),
)
WHEELS_SOURCE = (
    "PyTorch's wheel builds, TORCH_CUDA_ARCH_LIST per CUDA (.ci/manywheel/build_cuda.sh, "
    "https://github.com/pytorch/pytorch)"
)


def sm_of(cc: CC) -> str:
    return f"{cc[0]}{cc[1]}"


def wheel_for(cc: CC, cuda: str | None = None) -> tuple[str, tuple[str, ...]] | None:
    """The PyTorch wheel index whose builds run natively (a cubin) on `cc`, else through PTX:
    the index of `cuda` (the build's own CUDA, "12.8") when it does, else the lowest CUDA's;
    None when none does."""
    own = f"cu{cuda.replace('.', '')}" if cuda else None
    wheels = sorted(TORCH_WHEELS, key=lambda w: w[0] != own)  # stable: the rest by CUDA
    for want_cubin in (True, False):
        for index, archs in wheels:
            fits = [a for a in archs if runs_on(a, cc)]
            if any(parse_arch(a)[0] == "sm" for a in fits) or (fits and not want_cubin):
                return index, archs
    return None


def wheel_for_driver(driver_max: CC | None) -> str | None:
    """The PyTorch wheel index of the newest CUDA the driver runs ("cu128" under a 12.8
    driver); under an older driver of the same major, the lowest of that major (minor-version
    compatibility: https://docs.nvidia.com/deploy/cuda-compatibility/); None when the driver's
    CUDA is not known or no index fits."""
    if driver_max is None:
        return None
    cudas = sorted((int(i[2:-1]), int(i[-1])) for i, _ in TORCH_WHEELS)
    fits = [c for c in cudas if c <= driver_max] or [c for c in cudas if c[0] == driver_max[0]]
    if not fits:
        return None
    best = max(fits) if fits[0] <= driver_max else min(fits)
    return f"cu{best[0]}{best[1]}"


def gpus_named(indices: Sequence[int]) -> str:
    """ "GPU 0" / "GPUs 0-7" / "GPUs 0, 2, 5"."""
    idx = sorted(indices)
    if len(idx) == 1:
        return f"GPU {idx[0]}"
    if idx == list(range(idx[0], idx[-1] + 1)):
        return f"GPUs {idx[0]}-{idx[-1]}"
    return "GPUs " + ", ".join(str(i) for i in idx)


def kernel_problems(judged: Sequence[BuildOnGpus]) -> tuple[Problem, ...]:
    """A problem per build and compute capability without a kernel image (critical), or with
    only PTX (a warning: the driver compiles every kernel at start)."""
    out: list[Problem] = []
    for j in judged:
        by_cc: dict[CC, list[tuple[GpuCapability, KernelImages]]] = {}
        for g, k in j.checks:
            if k is not None and k.problem:
                by_cc.setdefault(g.capability, []).append((g, k))
        for cc, hits in by_cc.items():
            gpus = [g for g, _ in hits]
            k = hits[0][1]
            wheel = wheel_for(cc, j.build.cuda)
            facts = {
                "who": j.build.who,
                "built": " ".join(j.build.arch_list),
                "source": j.build.source,
                "gpus": gpus_named([g.index for g in gpus]),
                "gpu_name": gpus[0].name or "this GPU",
                "cc": f"{cc[0]}.{cc[1]}",
                "sm": sm_of(cc),
                "ptx": k.by,
                "index": wheel[0] if wheel else None,
                "wheel_archs": " ".join(wheel[1]) if wheel else None,
            }
            key = "no_kernel_image" if not k.runs else "ptx_only"
            out.append(problem(key, j.build.pids, **facts))
    return tuple(out)
