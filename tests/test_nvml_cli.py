"""The whole program under NVML faults and old drivers, as a user runs it: no traceback, the right
exit code, the reason on screen. Faults and driver profiles reach the simulator through its
environment variables (docs/nvml.md)."""

from __future__ import annotations

import json

import pytest

from gputop_diag import sim
from gputop_diag.collect.usable import no_usable_gpu, usable_gpus
from gputop_diag.model.exits import EXIT_NO_GPU
from gputop_diag.monitor.sampler import Sampler


def run(cli, *args, faults="", driver=""):
    env = {sim.FAULTS_ENV: faults, sim.DRIVER_ENV: driver}
    r = cli(*args, env=env)
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    assert "unexpected failure" not in r.stderr, r.stderr
    return r


@pytest.mark.parametrize(
    ("faults", "rc", "words"),
    [
        ("nvmlInit=DRIVER_NOT_LOADED", EXIT_NO_GPU, "kernel module is not loaded"),
        ("nvmlInit=LIB_RM_VERSION_MISMATCH", EXIT_NO_GPU, "version mismatch"),
        ("nvmlInit=UNKNOWN", EXIT_NO_GPU, "could not be initialised"),
        ("nvmlDeviceGetCount=GPU_IS_LOST", EXIT_NO_GPU, "could not count the GPUs"),
        ("nvmlDeviceGetCount=NO_PERMISSION", EXIT_NO_GPU, "permission denied"),
        ("nvmlSystemGetDriverVersion=GPU_IS_LOST", 0, "could not report the driver version"),
        ("nvmlEventSetCreate=UNKNOWN", 0, "Xid events from NVML are off"),
        ("nvmlDeviceGetHandleByIndex=NO_PERMISSION@0", 0, "GPU 0 (NVIDIA H100"),
        ("nvmlDeviceGetHandleByIndex=INSUFFICIENT_POWER@3", 0, "power cables"),
        ("lose:2", 0, "GPU 2 (NVIDIA H100 80GB HBM3, 00000000:"),
        ("hang:nvmlDeviceGetPowerUsage@99", 0, "host:"),  # a hang on no GPU: nothing waits
    ],
)
def test_snapshot_under_a_fault(cli, faults, rc, words):
    r = run(cli, "snapshot", "--demo", "idle", faults=faults)
    assert r.returncode == rc, r.stdout + r.stderr
    assert words in r.stdout + r.stderr


@pytest.mark.parametrize("driver", list(sim.DRIVERS))
def test_snapshot_json_on_every_driver(cli, driver):
    r = run(cli, "snapshot", "--json", "--demo", "compute-bound", driver=driver)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["system"]["driver_version"] == sim.DRIVERS[driver].version
    assert doc["gpu_processes"]  # the process list survives every driver
    assert not doc["errors"]


def test_diagnose_with_nvml_down_says_why(cli):
    r = run(
        cli,
        "diagnose",
        "--demo",
        "compute-bound",
        "--seconds",
        "5",
        faults="nvmlDeviceGetCount=GPU_IS_LOST",
    )
    assert r.returncode == EXIT_NO_GPU
    assert "could not count the GPUs" in r.stdout + r.stderr


def test_every_gpu_lost_exits_3(cli):
    r = run(cli, "snapshot", "--demo", "idle", faults="nvmlDeviceGetHandleByIndex=GPU_IS_LOST")
    assert r.returncode == EXIT_NO_GPU
    assert "no usable GPU" in r.stdout + r.stderr


def test_usable_gpus_and_the_reason_when_none():
    s = Sampler(sim.build("idle", gpu_count=3))
    s.sources.sim.inject_error("nvmlDeviceGetHandleByIndex", 4, gpu=1)  # NO_PERMISSION
    s.sources.sim.lose_gpu(2, at=0.0)
    snap = s.sample()
    assert usable_gpus(snap) == (0,) and no_usable_gpu(snap) is None

    s = Sampler(sim.build("idle", gpu_count=2))
    for i in range(2):
        s.sources.sim.lose_gpu(i, at=0.0)
    err = no_usable_gpu(s.sample())
    assert err is not None and "every GPU is lost" in err.message and "Xid 79" in err.next_step

    s = Sampler(sim.build("no-gpu"))
    err = no_usable_gpu(s.sample())
    assert err is not None and "libnvidia-ml.so.1" in err.message

    s = Sampler(sim.build("idle", gpu_count=0))
    err = no_usable_gpu(s.sample())
    assert err is not None and "no GPU" in err.message


def test_snapshot_takes_one_reading_and_rates_takes_two(cli):
    """One reading by default: what it gives, the host's rates over the window since the command
    began, and null (not psutil's first-call 0.0) for what needs a second reading; `--rates`
    gives those; `--fast`, the default's name before, is still taken."""
    import json

    for extra in ([], ["--fast"]):
        r = run(cli, "snapshot", "--demo", "compute-bound", "--json", *extra)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert all(g["gpm"] is None for g in doc["gpus"])  # GPM needs two readings
        assert all(g["nvlink_tx_kib_s"] is None for g in doc["gpus"])
        assert all(g["util_gpu_pct"] is not None for g in doc["gpus"])
        assert doc["processes"] and all(p["cpu_pct"] is None for p in doc["processes"])
        # the scenario's disks read 2 MB/s and write 1.5 MB/s: averaged from the head start
        assert doc["host"]["disk_read_bytes_s"] == pytest.approx(2.0e6, rel=1e-3)
        assert doc["host"]["disk_write_bytes_s"] == pytest.approx(1.5e6, rel=1e-3)
    r = run(cli, "snapshot", "--demo", "compute-bound", "--json", "--rates")
    doc = json.loads(r.stdout)
    assert all(g["gpm"] is not None for g in doc["gpus"])
    assert all(g["nvlink_tx_kib_s"] is not None for g in doc["gpus"])
    assert all(p["cpu_pct"] is not None for p in doc["processes"])
    r = run(cli, "snapshot", "--demo", "compute-bound", "--rates", "--fast")
    assert r.returncode == 2 and "not allowed with" in r.stderr
    # the text says why the processes' CPU % reads n/a, and how to have it
    one = run(cli, "snapshot", "--demo", "compute-bound").stdout.splitlines()
    assert one[-1] == "one reading: the processes' CPU % needs two (--rates)"
    idle = run(cli, "snapshot", "--demo", "idle").stdout  # no process listed: no note
    assert "one reading" not in idle
    two = run(cli, "snapshot", "--demo", "compute-bound", "--rates").stdout
    assert "one reading" not in two and " n/a " not in two


def test_diagnose_without_a_usable_nvml_stops_after_one_reading(cli):
    r = run(
        cli, "diagnose", "--demo", "idle", "--seconds", "30", faults="nvmlInit=DRIVER_NOT_LOADED"
    )
    assert r.returncode == EXIT_NO_GPU
    assert "(0 s window)" in r.stdout and "kernel module is not loaded" in r.stdout
