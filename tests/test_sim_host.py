"""The simulator's psutil and /proc stand-ins: psutil's semantics and exceptions, the kernel's
file formats."""

from __future__ import annotations

import re

import psutil
import pytest

from gputop_diag import sim


def build(name="compute-bound", **kw):
    return sim.build(name, **kw)


def rank_pids(src):
    return sorted(p.pid for p in src.sim.procs.values() if p.role == "rank")


def test_process_cpu_percent_is_zero_first_then_the_average_since_the_last_call():
    src = build("sync-stall", noise=0)
    pid = rank_pids(src)[0]
    p = src.psutil.Process(pid)
    assert p.cpu_percent() == 0.0
    src.clock.sleep(2)
    busy = p.cpu_percent()
    assert busy > 100  # the main thread spins at ~100 % plus the helpers
    again = src.psutil.Process(pid)
    assert again.cpu_percent() == 0.0  # a new object starts over
    assert p.cpu_percent() == 0.0  # no time passed since its last call


def test_threads_are_cumulative_and_named_in_proc():
    src = build("sync-stall", noise=0)
    pid = rank_pids(src)[0]
    p = src.psutil.Process(pid)
    t0 = {t.id: t.user_time + t.system_time for t in p.threads()}
    src.clock.sleep(10)
    t1 = {t.id: t.user_time + t.system_time for t in p.threads()}
    rates = {tid: 100 * (t1[tid] - t0[tid]) / 10 for tid in t0}
    busiest = max(rates, key=rates.get)
    assert busiest == pid and rates[busiest] > 95
    assert src.procfs.read_text(f"/proc/{pid}/task/{busiest}/comm") == "pt_main_thread\n"
    names = {src.procfs.read_text(f"/proc/{pid}/task/{t}/comm").strip() for t in t0}
    assert {"pt_main_thread", "pt_data_pin", "pt_nccl_watchdg"} <= names
    assert p.num_threads() == len(t0)
    assert sum(t1.values()) == pytest.approx(sum(p.cpu_times()[:2]))


def test_dataloader_workers_are_children_named_pt_data_worker():
    src = build("input-starved", noise=0)
    pid = rank_pids(src)[0]
    kids = src.psutil.Process(pid).children(recursive=True)
    assert kids and all(k.name() == "pt_data_worker" for k in kids)
    for k in kids:
        k.cpu_percent()
    src.clock.sleep(1)
    assert all(k.cpu_percent() > 85 for k in kids)
    assert src.procfs.read_text(f"/proc/{kids[0].pid}/comm") == "pt_data_worker\n"
    times = src.psutil.cpu_times_percent()
    assert 15 <= times.iowait <= 35


def test_another_users_process_hides_its_private_parts():
    src = build("compute-bound")
    bob = next(p.pid for p in src.sim.procs.values() if p.user == "bob")
    p = src.psutil.Process(bob)
    assert p.name() and p.username() == "bob" and p.create_time() < src.clock.now()
    assert p.memory_info().rss > 0 and p.cpu_percent() == 0.0
    for fn in (p.cmdline, p.environ, p.threads):
        with pytest.raises(psutil.AccessDenied):
            fn()
    with pytest.raises(PermissionError):
        src.procfs.read_text(f"/proc/{bob}/environ")
    assert src.procfs.exists(f"/proc/{bob}/environ")


def test_vanished_and_unknown_processes_raise_no_such_process():
    src = build("compute-bound")
    pid = rank_pids(src)[0]
    p = src.psutil.Process(pid)
    with pytest.raises(psutil.NoSuchProcess):
        src.psutil.Process(999999)
    src.sim.vanish_process(pid)
    with pytest.raises(psutil.NoSuchProcess):
        p.name()
    with pytest.raises(psutil.NoSuchProcess):
        src.psutil.Process(pid)
    assert not src.psutil.pid_exists(pid) and pid not in src.psutil.pids()
    with pytest.raises(FileNotFoundError):
        src.procfs.read_text(f"/proc/{pid}/comm")
    src.nvml.nvmlInit()
    h = src.nvml.nvmlDeviceGetHandleByIndex(src.sim.procs[pid].gpu)
    assert pid not in {q.pid for q in src.nvml.nvmlDeviceGetComputeRunningProcesses(h)}


def test_environ_shows_cuda_visible_devices():
    src = build("compute-bound")
    pid = rank_pids(src)[0]
    env = src.psutil.Process(pid).environ()
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and env["USER"] == "alice"
    raw = src.procfs.read_text(f"/proc/{pid}/environ")
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7\0" in raw
    assert src.psutil.Process(pid).cmdline()[:2] == ["python", "train.py"]


def test_host_figures_and_disk_counters():
    src = build("input-starved", noise=0)
    ps = src.psutil
    ps.cpu_percent(percpu=True)
    r0 = ps.disk_io_counters().read_bytes
    src.clock.sleep(4)
    per = ps.cpu_percent(percpu=True)
    assert len(per) == ps.cpu_count() == 32 and all(0 <= v <= 100 for v in per)
    assert (ps.disk_io_counters().read_bytes - r0) / 4 == pytest.approx(1.4e9, rel=0.01)
    vm = ps.virtual_memory()
    assert vm.total > vm.used > 0 and vm.available == vm.total - vm.used and 0 < vm.percent < 100
    assert len(ps.getloadavg()) == 3 and ps.swap_memory().total > 0
    assert ps.boot_time() < src.clock.now()


def test_pressure_files_have_the_kernel_format():
    src = build("input-starved")
    text = src.procfs.read_text("/proc/pressure/io")
    line = r"avg10=\d+\.\d\d avg60=\d+\.\d\d avg300=\d+\.\d\d total=\d+"
    assert re.fullmatch(rf"some {line}\nfull {line}\n", text), text
    some = float(re.search(r"some avg10=([\d.]+)", text).group(1))
    assert some > 10
    total0 = int(re.search(r"some .*total=(\d+)", text).group(1))
    src.clock.sleep(5)
    total1 = int(
        re.search(r"some .*total=(\d+)", src.procfs.read_text("/proc/pressure/io")).group(1)
    )
    assert total1 > total0  # a cumulative microsecond counter
    for res in ("cpu", "memory"):
        assert src.procfs.read_text(f"/proc/pressure/{res}").startswith("some avg10=")
    with pytest.raises(FileNotFoundError):
        src.procfs.read_text("/proc/pressure/gpu")


def test_driver_files_and_device_nodes():
    src = build("compute-bound")
    ver = src.procfs.read_text("/proc/driver/nvidia/version")
    assert ver.startswith("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  ")
    assert src.procfs.read_text("/sys/module/nvidia/version") == "570.124.06\n"
    g = src.sim.gpus[2]
    info = src.procfs.read_text(f"/proc/driver/nvidia/gpus/{g.proc_bus_id}/information")
    assert f"GPU UUID: \t {g.uuid}\n" in info and f"Device Minor: \t {g.minor}\n" in info
    assert f"Bus Location: \t {g.proc_bus_id}\n" in info
    assert src.procfs.exists(f"/dev/nvidia{g.minor}") and src.procfs.exists("/dev/nvidiactl")
    assert src.procfs.exists("/proc/driver/nvidia/gpus")
    assert not src.procfs.exists("/dev/nvidia99")
    none = build("no-gpu")
    assert not none.procfs.exists("/proc/driver/nvidia/version")
    assert not none.procfs.exists("/dev/nvidia0")


def test_driver_mismatch_process_maps_a_newer_cuda_runtime():
    src = build("driver-mismatch")
    p = next(p for p in src.sim.procs.values() if p.cuda_runtime)
    maps = src.procfs.read_text(f"/proc/{p.pid}/maps")
    lib = [line for line in maps.splitlines() if "libcudart" in line]
    assert lib and lib[0].endswith("/site-packages/nvidia/cuda_runtime/lib/libcudart.so.13")
    assert re.match(r"^[0-9a-f]{12}-[0-9a-f]{12} r--p [0-9a-f]{8} 103:02 \d+ +/", lib[0])
    site = lib[0].split(" ")[-1].split("/nvidia/")[0]
    assert "cuda: Optional[str] = '13.0'" in src.procfs.read_text(f"{site}/torch/version.py")
    src.nvml.nvmlInit()
    assert src.nvml.nvmlSystemGetDriverVersion() == "550.54.15"
    assert src.nvml.nvmlSystemGetCudaDriverVersion() == 12040
