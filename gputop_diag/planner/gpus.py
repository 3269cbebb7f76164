"""GPU memory by model name, for `--gpu MODEL` when the GPU is not the machine's own.

Where the figure is what NVML reports as memory.total on that model (nvidia-smi's
"memory.total"), the entry says "nvml"; elsewhere it is the data sheet's capacity in decimal
gigabytes ("data sheet", 10^9 bytes: on the safe side of what NVML reports, never above it).
The "nvml" figures are nvidia-smi's memory.total as those boards print it. The machine's own
GPUs are always read from NVML instead.
Data sheets: https://www.nvidia.com/en-us/data-center/ (H100, H200, A100, L40S, L4, A10, V100,
T4, B200) and https://www.nvidia.com/en-us/geforce/graphics-cards/ (RTX 4090, RTX 3090).
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
    source: str  # "nvml", "data sheet", "NVML on this machine"
    count: int = 1  # GPUs of this model on the machine (NVML)


# name -> (bytes, source); the names users type (`--gpu H100-80GB`)
GB = 10**9  # a data sheet's gigabyte


TABLE: dict[str, tuple[int, str]] = {
    "H100-80GB": (81559 * MIB, "nvml"),
    "H100-PCIE-80GB": (81559 * MIB, "nvml"),
    "H100-NVL-94GB": (94 * GB, "data sheet"),
    "H200-141GB": (143771 * MIB, "nvml"),
    "GH200-96GB": (96 * GB, "data sheet"),
    "B200-180GB": (180 * GB, "data sheet"),
    "A100-80GB": (81920 * MIB, "nvml"),
    "A100-40GB": (40960 * MIB, "nvml"),
    "L40S-48GB": (46068 * MIB, "nvml"),
    "L40-48GB": (46068 * MIB, "nvml"),
    "A6000-48GB": (49140 * MIB, "nvml"),
    "A10-24GB": (23028 * MIB, "nvml"),
    "L4-24GB": (23034 * MIB, "nvml"),
    "RTX4090-24GB": (24564 * MIB, "nvml"),
    "RTX3090-24GB": (24576 * MIB, "nvml"),
    "V100-32GB": (32 * GB, "data sheet"),
    "V100-16GB": (16 * GB, "data sheet"),
    "T4-16GB": (15360 * MIB, "nvml"),
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
    return GpuMemory(best, *TABLE[best]) if _score(best, words) else None


def known_names() -> str:
    return ", ".join(TABLE)
