"""`gputop-diag driver`: this machine without a driver, the simulator's driver faults, the
framework probe, --sanitize and --replay; the Driver pane and the side panel's alert."""

from __future__ import annotations

import json

from test_tui_support import FedApp, screen_text

from gputop_diag.cli import main


def test_this_machine_without_a_driver_shows_each_layer_and_exits_3(capsys):
    assert main(["driver"]) == 3
    out = capsys.readouterr()
    for layer in ("1 kernel module", "2 NVML library", "3 driver's max CUDA", "4 CUDA runtimes"):
        assert layer in out.out
    assert "not loaded" in out.out and "libnvidia-ml.so.* in the library directories: none" in (
        out.out
    )
    assert "Check first: make sure this machine has an NVIDIA GPU" in out.out
    assert "NO DRIVER" in out.out and "no NVIDIA driver" in out.err


def test_this_machine_without_a_driver_json(capsys):
    assert main(["driver", "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gputop-diag.driver/1" and doc["status"] == "no_driver"
    assert doc["layers"]["kernel_module"]["loaded"] is False
    assert doc["layers"]["nvml_library"]["found"] is False
    assert doc["layers"]["cuda_runtimes"]["scanned"] > 0
    assert doc["problems"][0]["code"] == "no_driver"
    assert len(doc["min_driver_table"]["rows"]) == 44


def test_driver_mismatch_demo(capsys):
    assert main(["--demo", "driver-mismatch", "driver", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "broken"
    [p] = doc["layers"]["cuda_runtimes"]["processes"]
    assert p["pid"] == 52011 and not p["on_gpu"] and p["verdict"] == "too_new"
    libs = {x["kind"]: x for x in p["libraries"]}
    assert libs["cudart"]["version"].startswith("13.0") and libs["cudart"]["origin"] == "pip"
    assert libs["cudart"]["path"].endswith("/nvidia/cuda_runtime/lib/libcudart.so.13")
    [problem] = doc["problems"]
    assert problem["code"] == "runtime_too_new" and problem["pids"] == [52011]
    assert "CUDA driver version is insufficient for CUDA runtime version" in problem["error_text"]
    assert doc["layers"]["driver_max_cuda"]["version"] == "12.4"


def test_upgrade_without_reboot_demo(capsys, monkeypatch):
    monkeypatch.setenv("GPUTOP_DIAG_SIM_FAULTS", "module:550.54.15")
    assert main(["--demo", "compute-bound", "driver"]) == 3
    out = capsys.readouterr().out
    assert "550.54.15 (open)" in out and "libnvidia-ml.so.570.124.06" in out
    assert "Failed to initialize NVML: Driver/library version mismatch" in out
    assert "the minimum-driver table" in out  # the max CUDA, without NVML


def test_module_not_loaded_demo(capsys, monkeypatch):
    monkeypatch.setenv("GPUTOP_DIAG_SIM_FAULTS", "module:none")
    assert main(["--demo", "compute-bound", "driver"]) == 3
    out = capsys.readouterr().out
    assert "1 kernel module      not loaded" in out
    assert "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver" in out


def test_probe_python_on_the_simulator(capsys):
    argv = ["--demo", "driver-mismatch", "driver", "--probe-python", "/opt/conda/envs/x/bin/python"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "torch.version.cuda 13.0: does NOT initialise CUDA" in out
    assert "too old (found version 12040)" in out


def test_sanitized(capsys):
    assert main(["--demo", "driver-mismatch", "driver", "--sanitize"]) == 0
    out = capsys.readouterr().out
    for secret in ("gpu-node-07", "alice", "/opt/conda/envs/train"):
        assert secret not in out
    assert "550.54.15" in out and "CUDA driver version is insufficient" in out


def test_replay(tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    assert main(["--demo", "driver-mismatch", "record", "-o", str(rec), "--seconds", "2"]) == 0
    capsys.readouterr()
    assert main(["--replay", str(rec), "driver", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["problems"][0]["code"] == "runtime_too_new"
    assert main(["--replay", str(rec), "driver", "--probe-python", "python3"]) == 2


def test_diagnose_names_the_broken_chain(capsys):
    main(["--demo", "driver-mismatch", "diagnose", "--seconds", "3", "--json"])
    doc = json.loads(capsys.readouterr().out)
    alerts = [a for a in doc["alerts"] if a["kind"] == "driver_chain"]
    assert len(alerts) == 1 and alerts[0]["severity"] == "critical"
    assert "pid 52011" in alerts[0]["text"]
    assert "CUDA driver version is insufficient for CUDA runtime version" in alerts[0]["text"]


async def test_side_panel_alert_and_driver_pane():
    app = FedApp("driver-mismatch")
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(3)
        await pilot.pause()
        await pilot.press("5")
        await pilot.pause()
        screen = screen_text(app)
        assert "driver chain broken at the CUDA runtime" in screen  # the side panel
        assert "CUDA driver version is insufficient" in screen
        assert "pid 52011 python (alice), on no GPU: TOO NEW" in screen  # the pane's runtime layer
        assert "cudart 13.0.96 (pip)" in screen and "verdict:  BROKEN" in screen


def test_each_nvml_version_is_said_once_and_named_by_its_call(tmp_path, capsys):
    """The library's version, the driver's (nvmlSystemGetDriverVersion) and NVML's own
    (nvmlSystemGetNVMLVersion, "12.<driver>") each once, labelled: a recording has no
    library path, where "NVML; NVML 12.570.124.06" was printed."""
    rec = tmp_path / "r.jsonl"
    assert main(["--demo", "idle", "record", "-o", str(rec), "--seconds", "2"]) == 0
    capsys.readouterr()
    for argv in (["--demo", "idle", "driver"], ["--replay", str(rec), "driver"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        layer = out[out.index("2 NVML library") : out.index("3 driver's max CUDA")]
        assert "NVML;" not in layer
        assert layer.count("12.570.124.06") == 1
        assert "driver 570.124.06 (nvmlSystemGetDriverVersion)" in layer
        assert "NVML 12.570.124.06 (nvmlSystemGetNVMLVersion)" in layer
