"""Faults a test or a scenario puts into the simulated machine: NVML calls that raise an error
or block, and GPUs that fall off the bus.

`SimFaults` is a part of `SimMachine` (`machine.py`); the fake pynvml asks it, call by call,
whether to raise (`take_error`) or block (`take_hang`), and whether a GPU is lost (`is_lost`).
"""

from __future__ import annotations

import re
import struct
import threading

from ..driver.fatbin import FATBIN_MAGIC, KIND_ELF, KIND_PTX
from ..driver.kernels import TORCH_WHEELS

HANG_CAP_S = 120.0  # the longest a `hang()` blocks a call when nobody releases it


def parse_arch_list(spec: str) -> tuple[str, ...]:
    """TORCH_CUDA_ARCH_LIST's form ("7.0;8.0 8.6+PTX", https://pytorch.org/docs/stable/
    cpp_extension.html) or get_arch_list()'s ("sm_80,compute_90") as get_arch_list() says
    it: ("sm_70", "sm_80", "sm_86", "compute_86")."""
    out: list[str] = []
    for item in filter(None, re.split(r"[;\s,]+", spec.strip())):
        if item.startswith(("sm_", "compute_")):
            out.append(item)
            continue
        m = re.fullmatch(r"(\d+)\.(\d)([af]?)(\+PTX)?", item)
        if m is None:
            raise ValueError(f"not an architecture: {item!r} (e.g. 8.0, 9.0+PTX, sm_90)")
        number = f"{m.group(1)}{m.group(2)}"
        out.append(f"sm_{number}{m.group(3)}")
        if m.group(4):
            out.append(f"compute_{number}")
    return tuple(sorted(set(out), key=lambda a: (a.startswith("compute"), len(a), a)))


def fatbin_library(arch_list: tuple[str, ...], fatbins: int = 3) -> bytes:
    """A small ELF shared object whose `.nv_fatbin` holds `fatbins` fat binaries, each with one
    entry per architecture (a cubin per sm_XY, PTX per compute_XY), in the layout
    `driver/fatbin.py` reads: what the simulated libtorch_cuda.so holds."""
    blob = b""
    for _ in range(fatbins):
        entries = b""
        for arch in arch_list:
            kind, _, number = arch.partition("_")
            payload = b"\x28\xb5\x2f\xfd" + bytes(20 + len(arch))  # a compressed payload's start
            padded = len(payload) + (-len(payload) % 8)
            head = struct.pack(
                "<HHIQIIII",
                KIND_ELF if kind == "sm" else KIND_PTX,
                0x0101,
                64,
                padded,
                len(payload),
                0,
                0,
                int(number.rstrip("af")),
            )
            entries += head + bytes(64 - len(head)) + payload.ljust(padded, b"\0")
        blob += struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(entries)) + entries
        blob += bytes(-len(blob) % 16)  # each file's section is aligned
    names = b"\0.shstrtab\0.nv_fatbin\0"
    fat_at = 64 + len(names) + (-(64 + len(names)) % 8)
    shoff = fat_at + len(blob) + (-(fat_at + len(blob)) % 8)

    def section(name: int, type_: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, type_, 0, 0, offset, size, 0, 0, 8, 0)

    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 1)
    body = header + names
    body += bytes(fat_at - len(body)) + blob
    body += bytes(shoff - len(body))
    return (
        body
        + bytes(64)  # section 0: SHT_NULL
        + section(1, 3, 64, len(names))  # .shstrtab, SHT_STRTAB
        + section(11, 1, fat_at, len(blob))  # .nv_fatbin, SHT_PROGBITS
    )


class SimFaults:
    """Injected NVML errors and hangs, lost GPUs, a torch build without some GPU
    architectures."""

    # `torch-arch:LIST`: the architectures the jobs' torch is built for; None: those of
    # PyTorch's wheels for its CUDA (`driver.kernels.TORCH_WHEELS`)
    torch_archs: tuple[str, ...] | None = None
    # `env-libcuda:VERSION`: the user's LD_LIBRARY_PATH picks a libcuda of VERSION (another
    # driver's: error 803 in the user's environment only, as `driver --clean-env` shows)
    env_libcuda: str | None = None

    def set_torch_archs(self, spec: str) -> None:
        """The fault `torch-arch:7.0;8.0;8.6+PTX`: the jobs' torch carries only these (its
        probe's arch list and its libtorch_cuda.so's .nv_fatbin say so)."""
        self.torch_archs = parse_arch_list(spec)
        self.__dict__.pop("_torch_images", None)

    def torch_arch_list(self, torch_cuda: str) -> tuple[str, ...]:
        """The simulated torch build's `torch.cuda.get_arch_list()`."""
        if self.torch_archs is not None:
            return self.torch_archs
        major, _, minor = torch_cuda.partition(".")
        cuda = (int(major), int(minor or 0)) if major.isdigit() and minor.isdigit() else (12, 8)
        index = "cu129" if cuda >= (12, 9) else "cu128" if cuda >= (12, 8) else "cu126"
        return dict(TORCH_WHEELS)[index]

    def torch_cuda_image(self, torch_cuda: str) -> bytes:
        """The bytes of the simulated libtorch_cuda.so (its .nv_fatbin), built once."""
        images = self.__dict__.setdefault("_torch_images", {})
        if torch_cuda not in images:
            images[torch_cuda] = fatbin_library(self.torch_arch_list(torch_cuda))
        return images[torch_cuda]

    def inject_error(
        self, function_name: str, code: int, gpu: int | None = None, times: int | None = None
    ) -> None:
        """Make fake pynvml `function_name` raise NVMLError(code), for one GPU or all."""
        self.errors.setdefault(function_name, []).append([gpu, code, times])

    def clear_errors(self) -> None:
        self.errors.clear()

    def hang(self, function_name: str, gpu: int | None = None) -> threading.Event:
        """Make fake pynvml `function_name` block (for one GPU or all) until the returned event
        is set, as a call into a failing GPU can block for minutes. A safety cap of
        `HANG_CAP_S` keeps a forgotten hang from stalling a test run forever."""
        release = threading.Event()
        self.hangs.setdefault(function_name, []).append((gpu, release))
        return release

    def take_hang(self, fn: str, gpu: int | None) -> threading.Event | None:
        for g, release in self.hangs.get(fn, ()):
            if (g is None or g == gpu) and not release.is_set():
                return release
        return None

    def lose_gpu(self, index: int, at: float | None = None) -> None:
        """GPU `index` falls off the bus now, or at `at` (epoch, or seconds from the start)."""
        when = self.clock.now() if at is None else at
        if when < self.clock.start / 2:  # a scenario-relative time
            when += self.clock.start
        self.lost_at[index] = when
        self.xids = sorted(
            [*self.xids, (when, index, 79, None, None, "GPU has fallen off the bus.")],
            key=lambda x: x[0],
        )
        self.kernel_lines = self._kernel_lines()

    def take_error(self, fn: str, gpu: int | None) -> int | None:
        rules = self.errors.get(fn)
        if not rules:
            return None
        for r in rules:
            g, code, times = r
            if g is None or g == gpu:
                if times is not None:
                    if times <= 0:
                        continue
                    r[2] = times - 1
                self.raised[fn] += 1
                return code
        return None

    def is_lost(self, gi: int) -> bool:
        t = self.lost_at.get(gi)
        return t is not None and self.clock.now() >= t
