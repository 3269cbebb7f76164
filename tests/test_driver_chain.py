"""The driver -> CUDA runtime -> framework chain: maps files of real shapes, the kernel module's
version file, nvcc, the compatibility table's verdicts, the judged chain, the simulator's
driver scenarios and faults, and `--probe-python` in a real subprocess."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from gputop_diag import sim
from gputop_diag.collect.cuda_libs import (
    LIB_DIRS,
    ChainScan,
    origin_of,
    parse_maps,
    parse_module_version,
    parse_nvcc,
    probe_python,
    read_chain,
    read_library,
    scan_processes,
)
from gputop_diag.commands.common import sample_once
from gputop_diag.diagnose.alerts import driver_chain_alerts
from gputop_diag.driver.compat import (
    ERR_INSUFFICIENT,
    ERR_MISMATCH,
    TOOLKIT_MIN_DRIVER,
    ChainFacts,
    LoadedRuntime,
    cuda_tuple,
    facts_from_snapshot,
    judge_chain,
    max_cuda_for_driver,
    min_driver_for,
    runtime_verdict,
    status_of,
)
from gputop_diag.sources import RealProcFS, Sources

DATA = Path(__file__).parent / "data" / "driver"


def libs(name: str) -> dict[str, tuple]:
    return {
        kind: (path, ver, deleted)
        for kind, path, ver, deleted in parse_maps((DATA / name).read_text())
    }


# -- maps files ---------------------------------------------------------------------------------
def test_maps_of_pip_installed_pytorch():
    found = libs("maps_pip_torch.txt")
    assert set(found) == {"torch_cuda", "cudart", "cudnn", "nccl", "cuda"}
    assert found["cudart"][1] == "12" and found["cudnn"][1] == "9" and found["nccl"][1] == "2"
    assert found["cuda"][1] == "570.124.06"
    assert origin_of(found["cudart"][0]) == "pip"
    assert origin_of(found["torch_cuda"][0]) == "torch-bundled"
    assert origin_of(found["cuda"][0]) == "system"


def test_maps_of_conda():
    found = libs("maps_conda.txt")
    assert found["cudart"][1] == "12.4.127" and found["cudnn"][1] == "8.9.7"
    assert found["nccl"][1] == "2.21.5" and found["cuda"][1] == "550.54.15"
    assert origin_of(found["cudart"][0]) == "conda"


def test_maps_of_system_cuda_with_a_libcuda_replaced_on_disk():
    found = libs("maps_system_cuda.txt")
    assert found["cudart"][1] == "12.4.127" and origin_of(found["cudart"][0]) == "system"
    path, ver, deleted = found["cuda"]
    assert ver == "535.104.05" and deleted and not path.endswith("(deleted)")


def test_maps_of_an_old_wheel_with_a_bundled_runtime_and_of_the_compat_package():
    found = libs("maps_torch_cu118_bundled.txt")
    assert found["cudart"][1] == "11.0" and origin_of(found["cudart"][0]) == "torch-bundled"
    compat = libs("maps_compat.txt")
    assert compat["cuda"][1] == "570.124.06" and origin_of(compat["cuda"][0]) == "compat"
    assert libs("maps_no_cuda.txt") == {}  # libcudadebugger is not libcuda


def test_kernel_module_version_file():
    assert parse_module_version((DATA / "version_open.txt").read_text()) == ("570.124.06", "open")
    assert parse_module_version((DATA / "version_proprietary.txt").read_text()) == (
        "535.104.05",
        "proprietary",
    )
    assert parse_module_version((DATA / "version_aarch64_open.txt").read_text()) == (
        "580.65.06",
        "open",
    )
    assert parse_module_version("garbage") == (None, None)


def test_nvcc():
    assert parse_nvcc((DATA / "nvcc_version.txt").read_text()) == "12.4.131"
    assert parse_nvcc("no toolkit here") is None


class _OneProcess(RealProcFS):
    """The real files, plus one process whose maps name a real site-packages tree."""

    def __init__(self, pid: int, maps: str) -> None:
        self.pid, self.maps = pid, maps

    def listdir(self, path: str) -> list[str]:
        return [str(self.pid)] if path == "/proc" else super().listdir(path)

    def read_text(self, path: str) -> str:
        if path == f"/proc/{self.pid}/maps":
            return self.maps
        return super().read_text(path)


def test_versions_from_pip_dist_info_and_torch_version_file(tmp_path):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "nvidia_cuda_runtime_cu12-12.8.90.dist-info").mkdir(parents=True)
    (site / "nvidia_nccl_cu12-2.26.2.dist-info").mkdir()
    (site / "torch").mkdir()
    (site / "torch" / "version.py").write_text(
        "__version__ = '2.8.0+cu128'\ncuda: Optional[str] = '12.8'\nhip = None\n"
    )
    text = (
        (DATA / "maps_pip_torch.txt")
        .read_text()
        .replace("/home/alice/.venv/lib/python3.11/site-packages", str(site))
    )
    src = dataclasses.replace(Sources.real(), procfs=_OneProcess(999999, text))
    scan = ChainScan()
    scan_processes(src, scan)
    [p] = scan.processes
    got = {lib.kind: lib.version for lib in p.libs}
    assert got["cudart"] == "12.8.90" and got["nccl"] == "2.26.2" and got["cudnn"] == "9"
    assert p.framework == "torch 2.8.0+cu128" and p.framework_cuda == "12.8"
    assert p.framework_file == str(site / "torch" / "version.py")


def test_scan_of_this_machine_reads_every_process_it_may():
    scan = read_chain(Sources.real())
    assert scan.scanned > 0  # at least this test's own processes
    assert scan.module_loaded is False and scan.library_version is None  # no driver here


# -- the compatibility table --------------------------------------------------------------------
def _ga_rows():
    return [(r.split()[0], d) for r, d in TOOLKIT_MIN_DRIVER if "GA" in r]


# NVIDIA's Table 3 (CUDA Toolkit Release Notes), GA rows, written out by hand: the test does not
# read the table it checks.
GA_MIN_DRIVER = [
    ("11.0", "450.51.05"),
    ("11.1", "455.23"),
    ("11.2", "460.27.03"),
    ("11.3", "465.19.01"),
    ("11.4", "470.42.01"),
    ("11.5", "495.29.05"),
    ("11.6", "510.39.01"),
    ("11.7", "515.43.04"),
    ("11.8", "520.61.05"),
    ("12.0", "525.60.13"),
    ("12.1", "530.30.02"),
    ("12.2", "535.54.03"),
    ("12.3", "545.23.06"),
    ("12.4", "550.54.14"),
    ("12.5", "555.42.02"),
    ("12.6", "560.28.03"),
    ("12.8", "570.26"),
    ("12.9", "575.51.03"),
    ("13.0", "580.65.06"),
    ("13.1", "590.44.01"),
    ("13.2", "595.45.04"),
]


@pytest.mark.parametrize(("cuda", "driver"), GA_MIN_DRIVER)
def test_table_rows(cuda, driver):
    c = cuda_tuple(cuda)
    assert min_driver_for(c) == driver
    assert max_cuda_for_driver(driver) == c  # the driver bundled with X.Y supports X.Y
    assert runtime_verdict(cuda, c, driver).status == "ok"


@pytest.mark.parametrize(
    ("runtime", "driver", "status"),
    [
        # (runtime, installed driver) -> what CUDA does; the driver's maximum CUDA comes from
        # the driver as NVIDIA's table pairs them (no pair a real machine cannot have)
        ("12.4", "550.54.14", "ok"),
        ("12.4", "535.104.05", "mvc"),  # a 12.2 driver, above the 12.x floor 525.60.13
        ("12.8", "550.54.15", "mvc"),
        ("12.2", "525.60.13", "mvc"),  # exactly the floor
        ("12.0", "520.61.05", "too_new"),  # an 11.8 driver: another major
        ("12.1", "520.61.05", "too_new"),
        ("13.0", "570.124.06", "too_new"),
        ("13.0", "580.65.06", "ok"),
        ("13.2", "580.65.06", "mvc"),  # a 13.0 driver, at the 13.x floor (580)
        ("11.8", "470.82.01", "mvc"),  # an 11.4 driver, above the 11.x floor 450.80.02
        ("11.2", "450.51.05", "too_new"),  # an 11.0 driver below the 11.x floor
        ("11.0", "450.51.05", "ok"),
        ("11.8", "575.51.03", "ok"),  # an older major on a newer driver
    ],
)
def test_runtime_on_driver_verdicts(runtime, driver, status):
    assert runtime_verdict(runtime, max_cuda_for_driver(driver), driver).status == status
    if status == "too_new":
        assert runtime_verdict(runtime, max_cuda_for_driver(driver), driver, True).status == (
            "compat"
        )


def test_table_covers_11_0_to_13_and_no_12_7():
    cudas = {cuda_tuple(r.split()[0]) for r, _ in TOOLKIT_MIN_DRIVER}
    assert (11, 0) in cudas and (13, 2) in cudas and (12, 7) not in cudas
    assert len(_ga_rows()) == 21


@pytest.mark.parametrize(
    ("runtime", "driver_max", "driver", "status"),
    [
        ("12.8", (12, 8), "570.124.06", "ok"),
        ("12.8", (12, 4), "550.54.15", "mvc"),
        ("13.0", (12, 4), "550.54.15", "too_new"),
        ("13", (12, 8), "570.124.06", "too_new"),  # major only: still certain
        ("12", (12, 4), "550.54.15", "ok"),
        ("11.8", (12, 8), "570.124.06", "ok"),
        ("12.1", (12, 0), "525.60.13", "mvc"),  # at the 12.x floor
        ("12.1", (11, 8), "520.61.05", "too_new"),
        (None, (12, 8), "570.124.06", None),
    ],
)
def test_runtime_verdicts(runtime, driver_max, driver, status):
    v = runtime_verdict(runtime, driver_max, driver)
    assert (v.status if v else None) == status


def _facts(**kw) -> ChainFacts:
    base = dict(
        module_loaded=True,
        module_version="550.54.15",
        library_version="550.54.15",
        library_found=True,
        nvml_error=None,
        driver_max=(12, 4),
    )
    return ChainFacts(**{**base, **kw})


def _codes(f: ChainFacts) -> list[str]:
    return [p.code for p in judge_chain(f)]


def test_chain_verdicts():
    assert _codes(_facts()) == [] and status_of(judge_chain(_facts())) == "ok"
    assert _codes(_facts(module_loaded=False, library_found=False, library_version=None)) == [
        "no_driver"
    ]
    assert _codes(_facts(module_loaded=False, module_version=None)) == ["module_not_loaded"]
    assert _codes(_facts(library_found=False, library_version=None)) == ["nvml_missing"]
    mismatch = judge_chain(_facts(library_version="570.124.06"))
    assert [p.code for p in mismatch] == ["mismatch"]
    assert ERR_MISMATCH in mismatch[0].error_text and "570.124.06" in mismatch[0].error_text
    new = LoadedRuntime(52011, "python", "13", "13.0")
    [p] = judge_chain(_facts(processes=(new,)))
    assert p.code == "runtime_too_new" and p.pids == (52011,) and ERR_INSUFFICIENT in p.error_text
    assert "580.65.06" in p.next_step and "found version 12040" in p.error_text
    mvc = LoadedRuntime(1, "python", "12.8.90")
    assert [(p.code, p.severity) for p in judge_chain(_facts(processes=(mvc,)))] == [
        ("mvc", "info")
    ]
    compat = LoadedRuntime(2, "python", "13.0", None, "580.65.06", True)
    assert _codes(_facts(processes=(compat,), datacenter_gpu=True)) == []
    assert _codes(_facts(processes=(compat,), datacenter_gpu=False)) == ["compat_hw"]
    stale = LoadedRuntime(3, "python", "12.4.127", None, "535.104.05", False, True)
    [p] = judge_chain(_facts(processes=(stale,)))
    assert p.code == "libcuda_mismatch" and p.severity == "warning"
    assert _codes(_facts(toolkit="13.0.48")) == ["toolkit_too_new"]


# -- the simulator ------------------------------------------------------------------------------
def _snap(scenario: str, faults: str = ""):
    src = sim.build(scenario, faults=faults)
    snap = sample_once(src, True)
    return src, dataclasses.replace(snap, driver_chain=read_chain(src).chain())


def test_driver_mismatch_scenario():
    src, snap = _snap("driver-mismatch")
    chain = snap.driver_chain
    assert chain.module_version == "550.54.15" and chain.module_flavour == "open"
    assert not snap.gpu_processes  # the process never reached a GPU...
    [p] = chain.processes  # ...but its maps show what it loaded
    assert p.pid == 52011 and p.framework_cuda == "13.0"
    assert p.library("cudart").version.startswith("13.")
    [a] = driver_chain_alerts(snap)
    assert a.severity == "critical" and "pid 52011" in a.text
    assert "CUDA driver version is insufficient for CUDA runtime version" in a.text


def test_mig_scenario_chain_is_fine():
    src, snap = _snap("mig")
    on_gpu = {p.pid for p in snap.gpu_processes}
    assert len(on_gpu) == 3 and on_gpu <= {p.pid for p in snap.driver_chain.processes}
    assert driver_chain_alerts(snap) == ()
    facts = facts_from_snapshot(snap)
    assert facts.datacenter_gpu is True and facts.driver_max == (12, 8)


def test_upgraded_without_reboot():
    src, snap = _snap("compute-bound", "module:550.54.15")
    assert not snap.nvml_available
    facts = facts_from_snapshot(snap)
    assert facts.nvml_error == "LIB_RM_VERSION_MISMATCH"
    assert facts.module_version == "550.54.15" and facts.library_version == "570.124.06"
    kinds = [p.code for p in judge_chain(facts)]
    assert kinds[0] == "mismatch"
    # the running processes still map the old libcuda, gone on disk: not the 803 failure
    assert all(lib.deleted for p in snap.driver_chain.processes if (lib := p.library("cuda")))
    assert "libcuda_mismatch" not in kinds


def test_module_not_loaded_and_no_driver():
    _, snap = _snap("compute-bound", "module:none")
    assert [p.code for p in judge_chain(facts_from_snapshot(snap))] == ["module_not_loaded"]
    _, snap = _snap("no-gpu")
    assert [p.code for p in judge_chain(facts_from_snapshot(snap))] == ["no_driver"]
    assert driver_chain_alerts(snap) == ()  # the no-driver banner says it already


# -- --probe-python -----------------------------------------------------------------------------
def test_probe_python_real_subprocess_without_torch(tmp_path):
    # this interpreter without its site-packages (where the test extra installed torch)
    bare = tmp_path / "python"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    p = probe_python(Sources.real(), str(bare), timeout=60)
    assert p.result["python"] == sys.version.split()[0]
    assert not p.ok and "import torch" in p.error


def test_probe_python_real_subprocess_with_torch():
    pytest.importorskip("torch")  # the test extra installs the CPU build
    import torch

    p = probe_python(Sources.real(), sys.executable, timeout=60)
    assert p.ok, p.error
    assert p.result["torch"] == torch.__version__
    assert p.result["cuda_available"] is False and p.result["device_count"] == 0


def test_probe_python_with_a_torch_that_cannot_initialise(tmp_path, monkeypatch):
    pkg = tmp_path / "torch"
    (pkg / "version.py").parent.mkdir()
    (pkg / "__init__.py").write_text(
        "import warnings\n"
        "from . import version\n"
        "__version__ = version.__version__\n"
        "class _Cuda:\n"
        "    @staticmethod\n"
        "    def is_available():\n"
        "        warnings.warn('The NVIDIA driver on your system is too old (found version "
        "12040).')\n"
        "        return False\n"
        "cuda = _Cuda()\n"
        "class backends:\n"
        "    class cudnn:\n"
        "        @staticmethod\n"
        "        def version():\n"
        "            return 91002\n"
    )
    (pkg / "version.py").write_text("__version__ = '2.9.0+cu130'\ncuda = '13.0'\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    p = probe_python(Sources.real(), sys.executable, timeout=60)
    assert p.ok and p.result["torch_cuda"] == "13.0" and p.result["cuda_available"] is False
    assert "too old (found version 12040)" in p.result["warnings"][0]


def test_probe_python_missing_interpreter_and_timeout(tmp_path):
    p = probe_python(Sources.real(), str(tmp_path / "no-python"))
    assert not p.ok and "no such program" in p.error
    slow = tmp_path / "python-slow"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    p = probe_python(Sources.real(), str(slow), timeout=0.3)
    assert not p.ok and "did not answer in 0.3 s" in p.error


def test_the_monitors_memo_reads_a_process_again_only_after_a_while():
    from gputop_diag.collect.cuda_libs import ChainMemo

    src = sim.build("compute-bound")
    reads = []
    procfs = src.procfs
    original = procfs.read_text

    def counting(path: str) -> str:
        if path.endswith("/maps"):
            reads.append(path)
        return original(path)

    procfs.read_text = counting
    memo = ChainMemo(rescan_s=60.0)
    first = read_chain(src, memo=memo)
    n = len(reads)
    assert n == first.scanned + first.unreadable
    again = read_chain(src, memo=memo)
    assert len(reads) == n  # nothing read again within 60 s...
    assert [p.pid for p in again.processes] == [p.pid for p in first.processes]
    assert (again.scanned, again.unreadable) == (first.scanned, first.unreadable)
    src.clock.sleep(61.0)
    read_chain(src, memo=memo)
    assert len(reads) == 2 * n  # ...and everything after it


def test_a_chain_read_before_the_driver_changed_is_not_judged():
    from gputop_diag.driver.compat import current_chain

    _, snap = _snap("compute-bound")
    assert current_chain(snap) is snap.driver_chain
    other = dataclasses.replace(
        snap, system=dataclasses.replace(snap.system, driver_version="550.54.15")
    )
    assert current_chain(other) is None and facts_from_snapshot(other) is None
    assert driver_chain_alerts(other) == ()


def test_the_chain_judged_once_is_judged_again_when_what_it_reads_changes():
    """A live view's ticks carry one chain for seconds: its alerts are remembered between them,
    and judged again when anything the judgement reads differs (another chain, another
    driver answering, another GPU)."""
    _, broken = _snap("driver-mismatch")
    [a] = driver_chain_alerts(broken)
    later = dataclasses.replace(broken, timestamp=broken.timestamp + 1.0)
    assert driver_chain_alerts(later) == (a,)  # the same chain a tick later
    moved = dataclasses.replace(
        broken, system=dataclasses.replace(broken.system, driver_version="999.1.2")
    )
    assert driver_chain_alerts(moved) == ()  # a chain read before the driver changed
    _, fine = _snap("compute-bound")
    assert driver_chain_alerts(fine) == ()
    fine_gpus = tuple(
        dataclasses.replace(g, static=dataclasses.replace(g.static, compute_capability=(7, 0)))
        for g in fine.gpus
    )
    assert driver_chain_alerts(dataclasses.replace(broken, gpus=fine_gpus)) != ()
    assert driver_chain_alerts(broken) == (a,)


def _nvml_dir(root: Path, name: str, version: str | None, loader_name: bool = True) -> Path:
    """A library directory holding `libnvidia-ml.so.<version>` (and the loader's
    `libnvidia-ml.so.1` link to it), as a container image or a mock library lays it out."""
    d = root / name
    d.mkdir()
    (d / "libc.so.6").write_bytes(b"")
    if version is not None:
        (d / f"libnvidia-ml.so.{version}").write_bytes(b"\x7fELF")
        if loader_name:
            (d / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{version}")
    return d


def test_nvml_is_read_where_ld_library_path_makes_the_loader_find_it(tmp_path):
    empty = _nvml_dir(tmp_path, "empty", None)
    unlinked = _nvml_dir(tmp_path, "unlinked", "560.35.03", loader_name=False)
    loaded = _nvml_dir(tmp_path, "lib64", "550.163.01")
    later = _nvml_dir(tmp_path, "later", "570.124.06")
    path = f"relative/lib:{empty};{unlinked}/:{loaded}:{later}"  # ld.so takes ';' too
    src = dataclasses.replace(Sources.real(), environ={"LD_LIBRARY_PATH": path})
    scan = ChainScan()
    read_library(src, scan)
    # the first directory the loader would take libnvidia-ml.so.1 from, not the newest version
    assert (scan.library_version, scan.library_path) == (
        "550.163.01",
        f"{loaded}/libnvidia-ml.so.550.163.01",
    )


def test_without_ld_library_path_nvml_is_read_from_the_system_directories(tmp_path):
    unlinked = _nvml_dir(tmp_path, "unlinked", "560.35.03", loader_name=False)
    for environ in ({}, {"LD_LIBRARY_PATH": f"{unlinked}"}, {"LD_LIBRARY_PATH": ":."}):
        scan = ChainScan()
        read_library(dataclasses.replace(Sources.real(), environ=environ), scan)
        # whatever this machine's system directories hold, never the directory the loader skips
        assert scan.library_path is None or scan.library_path.startswith(LIB_DIRS), scan
