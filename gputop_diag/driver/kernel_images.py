"""Whether a framework build has kernels for a GPU: its architectures (`torch.cuda.get_arch_list()`,
"sm_80", "compute_90") against the GPU's compute capability, so that "no kernel image is
available for this device" is said before the job meets it.

The rules are nvcc's (https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc/
index.html#gpu-compilation, "GPU Generations" and "Just-in-Time Compilation"): a cubin built for
sm_XY runs on a GPU of the same major version X and a minor version of Y or more (binary
compatibility within a major version); PTX built for compute_XY is compiled by the driver, when
the program loads, for any GPU of capability XY or more. An architecture-specific target
("sm_90a") runs only on exactly that capability; a family-specific one ("sm_100f") on the same
major version with a minor version of Y or more. PyTorch checks the same at its first CUDA call
(`torch.cuda._check_capability`, https://github.com/pytorch/pytorch/blob/main/torch/cuda/
__init__.py) and warns "... is not compatible with the current PyTorch installation".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

CC = tuple[int, int]
_ARCH = re.compile(r"(sm|compute)_(\d+)(\d)([af]?)")


@dataclass(frozen=True, slots=True)
class KernelImages:
    """A build's architectures against one GPU: `runs` says whether any of them runs there."""

    capability: CC
    arch_list: tuple[str, ...]
    runs: bool
    by: str | None  # the architecture that runs there ("sm_80" as a cubin, "compute_80" as PTX)
    jit: bool  # only PTX fits: the driver compiles it at load (slow start, cached after)

    @property
    def problem(self) -> str | None:
        """The sentence a user must read; None where the build runs on the GPU natively."""
        cc = f"{self.capability[0]}.{self.capability[1]}"
        built = ", ".join(self.arch_list)
        if not self.runs:
            return (
                f"no kernel image is available for this device: torch is built for {built}, "
                f"none of which runs on compute capability {cc} (sm_{cc.replace('.', '')}); "
                "install a build that lists it (https://pytorch.org/get-started/locally/)"
            )
        if self.jit:
            return (
                f"torch has no cubin for compute capability {cc}, only PTX ({self.by}): the "
                "driver compiles every kernel when the job starts (minutes, cached after)"
            )
        return None


@lru_cache(maxsize=1024)  # the same few names, judged at every tick of a live view
def parse_arch(arch: str) -> tuple[str, CC, str] | None:
    """("sm" or "compute", (major, minor), "" or "a" or "f") of "sm_86", "compute_90",
    "sm_90a", "sm_100f"; None for anything else."""
    m = _ARCH.fullmatch(arch.strip())
    if m is None:
        return None
    return m.group(1), (int(m.group(2)), int(m.group(3))), m.group(4)


def runs_on(arch: str, cc: CC) -> bool:
    """Whether code built for `arch` runs on a GPU of compute capability `cc`."""
    parsed = parse_arch(arch)
    if parsed is None:
        return False
    kind, built, suffix = parsed
    if suffix == "a":
        return cc == built
    if kind == "compute":
        return cc >= built
    return cc[0] == built[0] and cc[1] >= built[1]


def check(arch_list: Iterable[str], cc: CC) -> KernelImages | None:
    """The build's architectures against the GPU of compute capability `cc`; None where the list
    is empty (a CPU build, or a torch too old to say)."""
    archs = tuple(a for a in arch_list if parse_arch(a) is not None)
    if not archs:
        return None
    cubins = [a for a in archs if parse_arch(a)[0] == "sm" and runs_on(a, cc)]
    if cubins:
        return KernelImages(cc, archs, True, cubins[-1], False)
    ptx = [a for a in archs if parse_arch(a)[0] == "compute" and runs_on(a, cc)]
    if ptx:
        return KernelImages(cc, archs, True, ptx[-1], True)
    return KernelImages(cc, archs, False, None, False)


@dataclass(frozen=True, slots=True)
class BuildArchs:
    """One framework build's architectures and where they were read."""

    who: str  # "pid 4242 (python)", "/opt/venv/bin/python (probed)"
    arch_list: tuple[str, ...]
    source: str  # "torch._C._cuda_getArchFlags()", "libtorch_cuda.so .nv_fatbin (...)"
    pids: tuple[int, ...] = ()
    cuda: str | None = None  # its torch.version.cuda: a wheel of that CUDA is named first


@dataclass(frozen=True, slots=True)
class GpuCapability:
    index: int
    name: str | None
    capability: CC


@dataclass(frozen=True, slots=True)
class BuildOnGpus:
    """One build against every GPU: each GPU's check (None: the list named no architecture)."""

    build: BuildArchs
    checks: tuple[tuple[GpuCapability, KernelImages | None], ...]


def judge_builds(
    builds: Sequence[BuildArchs], gpus: Sequence[GpuCapability]
) -> tuple[BuildOnGpus, ...]:
    """Each build against each GPU."""
    return tuple(
        BuildOnGpus(b, tuple((g, check(b.arch_list, g.capability)) for g in gpus)) for b in builds
    )
