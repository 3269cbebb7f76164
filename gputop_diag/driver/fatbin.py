"""The GPU architectures a CUDA library was built for, read from its file without loading it:
the framework build's side of "no kernel image is available for this device" when no
interpreter can be asked (`torch.cuda.get_arch_list()`).

A CUDA library keeps its device code in the ELF section `.nv_fatbin`: a run of fat binaries, one
per compiled source file, each a header and entries, one entry per architecture (a cubin for
sm_XY, PTX for compute_XY). The ELF layout is the System V ABI's (ELF header and section header
table: https://refspecs.linuxfoundation.org/elf/gabi4+/ch4.eheader.html and
https://refspecs.linuxfoundation.org/elf/gabi4+/ch4.sheader.html). The fat binary layout is not
documented by NVIDIA; it is the one public re-implementations read (ZLUDA,
https://github.com/vosen/ZLUDA, `FatbinHeader`/`FatbinFileHeader`; cuobjdump's `--list-elf`
lists the same entries):

- fat binary header, 16 bytes: magic 0xBA55ED50 (u32), version 1 (u16), header size (u16, the
  offset of the first entry), size of the entries that follow (u64);
- entry header: kind (u16: 1 PTX, 2 ELF cubin), version 0x0101 (u16), header size (u32),
  padded payload size (u64, the offset of the next entry after this header), payload size
  (u32), ..., the architecture (u32 at offset 28: 90 for sm_90).

Only headers are read (a few bytes per entry, never a payload), so the cost follows the
number of entries, not the file's size (libtorch_cuda.so: about a gigabyte, some thousands of
fat binaries). What it cannot tell: an architecture-specific cubin (sm_90a) reads as sm_90.
Each source file may be built for its own architectures (an sm_90a-only kernel); the build's
list is the architectures that most of its fat binaries carry, which is what
TORCH_CUDA_ARCH_LIST gave every file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

FATBIN_MAGIC = 0xBA55ED50
ELF_MAGIC = b"\x7fELF"
SECTION = b".nv_fatbin"
KIND_PTX, KIND_ELF, KIND_ELF_ALT = 1, 2, 0x10
MAX_ENTRIES = 200_000  # headers read at most (libtorch_cuda.so has some tens of thousands)
_CHUNK = 4096  # one page: an entry header costs a page read, never its payload
_SKIP = 64 * 1024  # padding between two fat binaries searched for the next magic, at most


class _Reader:
    """Reads at offsets through one cached window: most entries are smaller than the window,
    so a walk reads each part of the file once."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.start, self.buf = f, -1, b""

    def at(self, offset: int, size: int) -> bytes:
        lo = offset - self.start
        if self.start < 0 or lo < 0 or lo + size > len(self.buf):
            self.f.seek(offset)
            self.start, self.buf = offset, self.f.read(max(size, _CHUNK))
            lo = 0
        return self.buf[lo : lo + size]


@dataclass(frozen=True, slots=True)
class FatbinArchs:
    """What the walk found: the build's architectures ("sm_80", "compute_90"), how many fat
    binaries and entries were read, and whether the walk reached the section's end."""

    arch_list: tuple[str, ...]
    fatbins: int
    entries: int
    complete: bool
    note: str | None = None  # why the walk stopped early, or why there is no list


def _section(r: _Reader) -> tuple[int, int] | str:
    """(offset, size) of `.nv_fatbin`, or why it cannot be found."""
    ident = r.at(0, 64)
    if len(ident) < 64 or ident[:4] != ELF_MAGIC:
        return "not an ELF file"
    if ident[4] != 2 or ident[5] != 1:
        return "not a 64-bit little-endian ELF file"
    shoff = struct.unpack_from("<Q", ident, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if shoff == 0 or shentsize < 64:
        return "no section header table"
    first = r.at(shoff, 64)
    if len(first) < 64:
        return "section header table past the end of the file"
    if shnum == 0:  # more than 0xff00 sections: the count is section 0's sh_size
        shnum = struct.unpack_from("<Q", first, 32)[0]
    if shstrndx == 0xFFFF:  # SHN_XINDEX: the index is section 0's sh_link
        shstrndx = struct.unpack_from("<I", first, 40)[0]
    if not 0 < shnum < 1_000_000 or shstrndx >= shnum:
        return "a damaged section header table"
    table = r.at(shoff, shnum * shentsize)
    if len(table) < shnum * shentsize:
        return "section header table past the end of the file"

    def header(i: int) -> tuple[int, int, int]:
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", table, i * shentsize)
        return name, offset, size

    _, str_off, str_size = header(shstrndx)
    names = r.at(str_off, min(str_size, 1 << 20))
    for i in range(shnum):
        name, offset, size = header(i)
        end = names.find(b"\0", name)
        if names[name : end if end >= 0 else None] == SECTION:
            return offset, size
    return "no .nv_fatbin section (no device code: a CPU build, or kernels in another library)"


def _next_magic(r: _Reader, pos: int, end: int) -> int | None:
    """The next fat binary at or after `pos` (8-byte aligned, past zero padding); None when
    none starts within `_SKIP` bytes."""
    pos += -pos % 8
    window = r.at(pos, min(_SKIP, end - pos))
    magic = struct.pack("<I", FATBIN_MAGIC)
    for k in range(0, len(window) - 3, 8):
        if window[k : k + 4] == magic:
            return pos + k
        if window[k : k + 8].strip(b"\0"):
            return None  # not padding: the section holds something this walk does not know
    return None


def _entries(r: _Reader, pos: int, end: int, budget: int) -> tuple[set[str], int, str | None]:
    """The architectures of one fat binary's entries in [pos, end)."""
    archs: set[str] = set()
    n = 0
    while pos + 64 <= end:
        if n >= budget:
            return archs, n, "stopped after reading the most entries allowed"
        head = r.at(pos, 64)
        kind, _, header_size, padded = struct.unpack_from("<HHIQ", head, 0)
        sm = struct.unpack_from("<I", head, 28)[0]
        if header_size < 64 or header_size > 4096 or not 10 <= sm < 1000:
            return archs, n, f"an entry header not understood at offset {pos}"
        n += 1
        if kind == KIND_PTX:
            archs.add(f"compute_{sm}")
        elif kind in (KIND_ELF, KIND_ELF_ALT):
            archs.add(f"sm_{sm}")
        pos += header_size + padded
    return archs, n, None


def _arch_key(arch: str) -> tuple[int, int]:
    kind, _, number = arch.partition("_")
    return (kind != "sm", int(number))


def read_archs(f: BinaryIO, max_entries: int = MAX_ENTRIES) -> FatbinArchs:
    """The architectures the CUDA library open in `f` (binary, seekable) was built for."""
    r = _Reader(f)
    found = _section(r)
    if isinstance(found, str):
        return FatbinArchs((), 0, 0, False, found)
    pos, size = found
    end = pos + size
    sets: list[set[str]] = []
    entries, note = 0, None
    while pos + 16 <= end:
        magic, version, header_size, fat_size = struct.unpack("<IHHQ", r.at(pos, 16))
        if magic != FATBIN_MAGIC:
            nxt = _next_magic(r, pos, end)
            if nxt is None:
                note = None if not r.at(pos, 16).strip(b"\0") else f"unknown data at {pos}"
                break
            pos = nxt
            continue
        if version != 1 or header_size < 16 or pos + header_size + fat_size > end:
            note = f"a fat binary header not understood at offset {pos}"
            break
        archs, n, note = _entries(r, pos + header_size, pos + header_size + fat_size, max_entries)
        entries += n
        max_entries -= n
        if archs:
            sets.append(archs)
        if note is not None:
            break
        pos += header_size + fat_size
    counts: dict[str, int] = {}
    for s in sets:
        for a in s:
            counts[a] = counts.get(a, 0) + 1
    # the build's list: what at least half of the fat binaries carry
    common = [a for a, c in counts.items() if 2 * c >= len(sets)]
    return FatbinArchs(
        tuple(sorted(common, key=_arch_key)),
        len(sets),
        entries,
        note is None,
        note if note is not None else (None if sets else "an empty .nv_fatbin section"),
    )
