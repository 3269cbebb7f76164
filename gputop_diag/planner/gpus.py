"""GPU memory by model name, for `--gpu MODEL` when the GPU is not the machine's own.

Where the figure is what NVML reports as memory.total on that model (nvidia-smi's
"memory.total"), the entry says "nvml"; elsewhere it is the data sheet's capacity in decimal
gigabytes ("data sheet", 10^9 bytes: on the safe side of what NVML reports, never above it).
The "nvml" figures are nvidia-smi's memory.total as those boards print it. The machine's own
GPUs are always read from NVML instead.
Data sheets: https://www.nvidia.com/en-us/data-center/ (H100, H200, A100, L40S, L40, A40, L4,
A10, V100, T4, B200) and https://www.nvidia.com/en-us/geforce/graphics-cards/ (RTX 4090, RTX 3090).
Each model's compute capability is NVIDIA's (https://developer.nvidia.com/cuda-gpus): Volta 7.0,
Turing 7.5, Ampere 8.0 (A100) and 8.6 (A10, A40, RTX A6000, RTX 30xx), Ada 8.9 (L4, L40, L40S,
RTX 40xx), Hopper 9.0 (H100, H200, GH200), Blackwell 10.0 (B200); `precision.py` checks the
dtypes against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 2**20
GIB = 2**30


@dataclass(frozen=True, slots=True)
class GpuMemory:
    name: str
    bytes: int  # what a process can fill, before the CUDA context
    source: str  # "nvml", "data sheet", "given"; the machine's: "NVML on this machine", ...
    count: int = 1  # GPUs of this model on the machine (NVML)
    compute_capability: tuple[int, int] | None = None  # None: not known (a size was given)
    origin: str = "--gpu"  # where the GPU came from: "--gpu", else whose NVML read it


# name -> (bytes, source, compute capability); the names users type (`--gpu H100-80GB`)
GB = 10**9  # a data sheet's gigabyte


TABLE: dict[str, tuple[int, str, tuple[int, int]]] = {
    "H100-80GB": (81559 * MIB, "nvml", (9, 0)),
    "H100-PCIE-80GB": (81559 * MIB, "nvml", (9, 0)),
    "H100-NVL-94GB": (94 * GB, "data sheet", (9, 0)),
    "H200-141GB": (143771 * MIB, "nvml", (9, 0)),
    "GH200-96GB": (96 * GB, "data sheet", (9, 0)),
    "B200-180GB": (180 * GB, "data sheet", (10, 0)),
    "A100-80GB": (81920 * MIB, "nvml", (8, 0)),
    "A100-40GB": (40960 * MIB, "nvml", (8, 0)),
    "L40S-48GB": (46068 * MIB, "nvml", (8, 9)),
    "L40-48GB": (46068 * MIB, "nvml", (8, 9)),
    "A40-48GB": (48 * GB, "data sheet", (8, 6)),
    "A6000-48GB": (49140 * MIB, "nvml", (8, 6)),
    "A10-24GB": (23028 * MIB, "nvml", (8, 6)),
    "L4-24GB": (23034 * MIB, "nvml", (8, 9)),
    "RTX4090-24GB": (24564 * MIB, "nvml", (8, 9)),
    "RTX3090-24GB": (24576 * MIB, "nvml", (8, 6)),
    # NVML's memory.total on the V100s depends on the driver: the 4xx drivers print 16160 MiB
    # for the 16 GB board (driver 440.64: https://github.com/4paradigm/k8s-vgpu-scheduler/
    # issues/7) and 32510 MiB for the 32 GB one; 525 and later print 32768 MiB (SXM2:
    # https://github.com/Wan-Video/Wan2.1/issues/5; PCIe: https://github.com/akash-network/
    # provider-configs/pull/90). The smaller, on the safe side.
    "V100-32GB": (32510 * MIB, "nvml", (7, 0)),
    "V100-16GB": (16160 * MIB, "nvml", (7, 0)),
    "T4-16GB": (15360 * MIB, "nvml", (7, 5)),
}

# How each source of a `--gpu` figure reads in the plan
SOURCE_WORDS = {
    "nvml": "what NVML reports on that model",
    "data sheet": "the data sheet's capacity",
    "given": "the size given",
}

_CUSTOM = re.compile(r"^(\d+(?:\.\d+)?)\s*(gib|gb|g)$", re.IGNORECASE)


def _words(text: str) -> str:
    """Lower case, with letters and digits apart: "RTX4090-24GB" -> "rtx 4090 24 gb"."""
    spaced = re.sub(r"(?<=[a-z])(?=\d)|(?<=\d)(?=[a-z])", " ", text.lower())
    return " " + " ".join(re.findall(r"[a-z]+|\d+", spaced)) + " "


def _score(entry: str, text: str) -> int:
    """How well `text` (as `_words`) names `entry`: 0 not at all; the model's name must appear
    whole (A10 is not A100), a matching variant (PCIE, NVL) and size (80GB) rank it higher."""
    parts = entry.split("-")
    model, variant, size = _words(parts[0]), parts[1:-1], _words(parts[-1])
    if model not in text:
        return 0
    score = 1 + (2 if size in text else 0)
    for v in variant:
        score += 2 if _words(v) in text else -1
    return score


def find_gpu(text: str) -> GpuMemory | None:
    """The GPU `text` names: a table entry ("H100-80GB", "h100", "A100 40GB", NVML's "NVIDIA
    A100-SXM4-80GB"), or a size ("80GiB", "24GB": read as GiB). None when it names nothing
    known."""
    m = _CUSTOM.match(text.strip())
    if m:
        return GpuMemory(f"{m.group(1)} GiB", int(float(m.group(1)) * GIB), "given")
    words = _words(text)
    best = max(TABLE, key=lambda n: _score(n, words))
    if not _score(best, words):
        return None
    size, source, cc = TABLE[best]
    return GpuMemory(best, size, source, compute_capability=cc)


def known_names() -> str:
    return ", ".join(TABLE)
