"""The chain's last layer: a torch build's GPU architectures against each GPU's compute
capability. The .nv_fatbin reader against bytes written here from the documented layouts (ELF:
the System V ABI; fat binary: the header and entry layout public re-implementations read), the
verdict and its next step, the probe's arch list, and the simulator's `torch-arch:` fault
through `gputop-diag driver`."""

from __future__ import annotations

import io
import json
import struct
import sys

from gputop_diag.cli import main
from gputop_diag.collect.cuda_libs import _SiteCache, probe_python
from gputop_diag.driver.fatbin import read_archs
from gputop_diag.driver.kernels import (
    BuildArchs,
    GpuCapability,
    judge_builds,
    kernel_problems,
    wheel_for,
)
from gputop_diag.sources import Sources

H100 = "NVIDIA H100 80GB HBM3"


# -- bytes written from the layouts, independently of the simulator's writer ------------------
def _entry(kind: int, sm: int, payload: bytes) -> bytes:
    padded = len(payload) + (-len(payload) % 8)
    head = struct.pack("<HHIQI", kind, 0x0101, 64, padded, len(payload))
    head = head.ljust(28, b"\0") + struct.pack("<I", sm)
    return head.ljust(64, b"\0") + payload.ljust(padded, b"\0")


def _fatbin(entries: list[tuple[int, int]], payload: int = 100) -> bytes:
    body = b"".join(_entry(kind, sm, b"\x01" * payload) for kind, sm in entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def _elf(sections: dict[bytes, bytes]) -> bytes:
    """An ELF64 little-endian file with these sections (and .shstrtab, the last)."""
    names = b"\0" + b"".join(n + b"\0" for n in sections) + b".shstrtab\0"
    data, headers, offset = b"", [bytes(64)], 64
    name_at = 1
    for name, content in sections.items():
        headers.append(
            struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, offset, len(content), 0, 0, 8, 0)
        )
        data += content
        offset += len(content)
        name_at += len(name) + 1
    headers.append(struct.pack("<IIQQQQIIQQ", name_at, 3, 0, 0, offset, len(names), 0, 0, 1, 0))
    data += names
    shoff = 64 + len(data)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    n = len(headers)
    head = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, n, n - 1)
    return head + data + b"".join(headers)


def test_the_build_list_is_what_most_fat_binaries_carry():
    cubins = [(2, 70), (2, 80), (2, 86), (2, 90)]
    files = [_fatbin(cubins) for _ in range(5)]
    files.append(_fatbin([(2, 90)]))  # one file built for Hopper only (an sm_90a kernel)
    files.append(_fatbin([(2, 80), (2, 120), (1, 120)]))  # one with a newer architecture
    section = b""
    for f in files:
        section += f + bytes(-len(f) % 16)  # each object's section aligned, zero padding
    elf = _elf({b".text": b"\x90" * 40, b".nv_fatbin": section, b".rodata": b"x" * 9})
    found = read_archs(io.BytesIO(elf))
    assert found.arch_list == ("sm_70", "sm_80", "sm_86", "sm_90")
    assert found.fatbins == 7 and found.entries == 5 * 4 + 1 + 3 and found.complete


def test_ptx_reads_as_compute_and_sorts_after_the_cubins():
    section = _fatbin([(1, 90), (2, 100), (2, 80)])
    found = read_archs(io.BytesIO(_elf({b".nv_fatbin": section})))
    assert found.arch_list == ("sm_80", "sm_100", "compute_90")


def test_files_without_device_code_or_not_elf_say_so():
    assert "no .nv_fatbin" in read_archs(io.BytesIO(_elf({b".text": b"x" * 64}))).note
    assert read_archs(io.BytesIO(b"#!/bin/sh\n" + bytes(100))).note == "not an ELF file"
    elf32 = bytearray(_elf({b".nv_fatbin": _fatbin([(2, 80)])}))
    elf32[4] = 1
    assert "64-bit" in read_archs(io.BytesIO(bytes(elf32))).note
    assert read_archs(io.BytesIO(b"")).arch_list == ()


def test_a_damaged_entry_stops_the_walk_and_keeps_what_was_read():
    good = _fatbin([(2, 80), (2, 90)])
    bad = bytearray(_fatbin([(2, 80), (2, 90)]))
    struct.pack_into("<I", bad, 16 + 4, 3)  # an entry header size no file has
    found = read_archs(io.BytesIO(_elf({b".nv_fatbin": good + bytes(bad)})))
    assert not found.complete and "entry header not understood" in found.note
    assert found.arch_list == ("sm_80", "sm_90")  # the first fat binary was whole
    cut = _elf({b".nv_fatbin": good + b"\x13" * 40})  # data that is neither a header nor padding
    found = read_archs(io.BytesIO(cut))
    assert not found.complete and found.arch_list == ("sm_80", "sm_90")


def test_a_real_file_is_read_through_the_sources(tmp_path):
    lib = tmp_path / "torch" / "lib" / "libtorch_cuda.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(_elf({b".nv_fatbin": _fatbin([(2, 80), (2, 86)])}))
    cache = _SiteCache(Sources.real(), archs=True)
    assert cache.torch_archs(str(lib)).arch_list == ("sm_80", "sm_86")
    missing = cache.torch_archs(str(tmp_path / "gone.so"))
    assert missing.arch_list == () and "not readable" in missing.note
    assert _SiteCache(Sources.real()).torch_archs(str(lib)) is None  # the Monitor never reads it


# -- the verdict ----------------------------------------------------------------------------------
def _gpus(cc, n=8, name=H100):
    return [GpuCapability(i, name, cc) for i in range(n)]


def test_no_kernel_image_names_the_gpus_the_capability_and_the_build_that_covers_it():
    build = BuildArchs(
        "pid 7 (python)", ("sm_70", "sm_75", "sm_80", "sm_86"), "probe", (7,), "12.8"
    )
    [p] = kernel_problems(judge_builds([build], _gpus((9, 0))))
    assert p.severity == "critical" and p.code == "no_kernel_image" and p.pids == (7,)
    assert "GPUs 0-7 (compute capability 9.0, sm_90)" in p.text
    assert "sm_70 sm_75 sm_80 sm_86" in p.text
    assert p.error_text.startswith("CUDA error: no kernel image is available for execution")
    assert f"{H100} with CUDA capability sm_90 is not compatible" in p.error_text
    assert "https://download.pytorch.org/whl/cu128" in p.next_step  # the build's own CUDA
    assert 'TORCH_CUDA_ARCH_LIST="9.0"' in p.next_step


def test_a_build_that_runs_says_nothing_and_ptx_only_warns():
    ok = BuildArchs("b", ("sm_80", "sm_90"), "probe")
    assert kernel_problems(judge_builds([ok], _gpus((9, 0)))) == ()
    assert kernel_problems(judge_builds([ok], _gpus((8, 6)))) == ()  # sm_80 runs on 8.6
    ptx = BuildArchs("b", ("sm_80", "compute_80"), "probe")
    [p] = kernel_problems(judge_builds([ptx], _gpus((9, 0))))
    assert p.severity == "warning" and p.code == "ptx_only" and "compute_80" in p.text


def test_mixed_gpus_name_only_those_without_an_image():
    gpus = [GpuCapability(0, "A100", (8, 0)), GpuCapability(1, H100, (9, 0))]
    gpus.append(GpuCapability(3, H100, (9, 0)))
    [p] = kernel_problems(judge_builds([BuildArchs("b", ("sm_80",), "x")], gpus))
    assert "GPUs 1, 3 (compute capability 9.0" in p.text and "GPU 0" not in p.text


def test_the_wheel_index_that_covers_each_capability():
    assert wheel_for((9, 0))[0] == "cu126"  # the lowest CUDA that carries it
    assert wheel_for((9, 0), "12.8")[0] == "cu128"  # the build's own, where it carries it
    assert wheel_for((10, 0), "12.6")[0] == "cu128"  # 12.6's wheels do not
    assert wheel_for((12, 1))[0] == "cu128"  # sm_120's cubin runs on 12.1
    assert wheel_for((11, 0)) is None and wheel_for((3, 7)) is None
    [p] = kernel_problems(judge_builds([BuildArchs("b", ("sm_90",), "x")], _gpus((11, 0), 1)))
    assert "no PyTorch wheel index carries sm_110" in p.next_step


# -- the probe and the simulator --------------------------------------------------------------
def test_the_probe_reads_the_arch_flags_without_initialising_cuda(tmp_path, monkeypatch):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "__version__ = '2.9.0+cu128'\n"
        "class version:\n    cuda = '12.8'\n"
        "class _C:\n    @staticmethod\n    def _cuda_getArchFlags():\n"
        "        return 'sm_80 sm_86 compute_86'\n"
        "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
        "    @staticmethod\n    def get_arch_list():\n        return []\n"
        "class backends:\n    class cudnn:\n        @staticmethod\n"
        "        def version():\n            return None\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    p = probe_python(Sources.real(), sys.executable, timeout=60)
    assert p.ok and p.result["arch_list"] == ["sm_80", "sm_86", "compute_86"]
    assert p.result["cuda_available"] is False and p.result["capabilities"] == []


def test_the_fault_without_sm90_breaks_the_kernel_layer_on_h100s(capsys, monkeypatch):
    monkeypatch.setenv("GPUTOP_DIAG_SIM_FAULTS", "torch-arch:7.0;7.5;8.0;8.6")
    assert main(["--demo", "compute-bound", "driver", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "broken"
    [layer] = doc["layers"]["kernel_images"]  # the ranks and their workers: one build
    assert layer["arch_list"] == ["sm_70", "sm_75", "sm_80", "sm_86"]
    assert ".nv_fatbin" in layer["source"] and len(layer["pids"]) == 12
    assert {g["compute_capability"] for g in layer["gpus"]} == {"9.0"}
    assert not any(g["runs"] for g in layer["gpus"])
    [problem] = doc["problems"]
    assert problem["code"] == "no_kernel_image" and problem["layer"] == "application kernel"
    assert doc["check_first"] == problem["next_step"]
    # the probed interpreter says the same from its flags, with PyTorch's own warning
    assert main(["--demo", "compute-bound", "driver", "--probe-python", "/opt/x/python"]) == 0
    out = capsys.readouterr().out
    assert "/opt/x/python (probed): sm_70 sm_75 sm_80 sm_86" in out
    assert "GPUs 0-7 NVIDIA H100 80GB HBM3 (9.0): NO KERNEL IMAGE" in out
    assert "warning: NVIDIA H100 80GB HBM3 with CUDA capability sm_90 is not compatible" in out


def test_the_default_simulated_build_runs_on_its_gpus(capsys):
    assert main(["--demo", "compute-bound", "driver"]) == 0
    out = capsys.readouterr().out
    assert "sm_70 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 (libtorch_cuda.so .nv_fatbin" in out
    assert "GPUs 0-7 NVIDIA H100 80GB HBM3 (9.0): ok (sm_90)" in out
    assert "Problems: none" in out
