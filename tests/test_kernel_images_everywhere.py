"""The chain's last layer, kernel images, in every view: the Monitor reads each mapped
libtorch_cuda.so's architectures with the slow sources (once per file version), the snapshot
carries them, and the live view's Driver pane, `diagnose`'s alert, the report's Driver chain
section and a recording replayed say what `gputop-diag driver` says; a recording from before
says the layer was not read. And a CPU-only framework named by `--probe-python`."""

from __future__ import annotations

import json
from dataclasses import replace

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.collect import cuda_libs
from gputop_diag.collect.cuda_libs import ChainMemo, read_chain
from gputop_diag.diagnose.alerts import driver_chain_alerts
from gputop_diag.driver.compat import facts_from_snapshot, judge_chain
from gputop_diag.model import Snapshot
from gputop_diag.model.codec import from_jsonable, jsonable
from gputop_diag.monitor.core import Monitor
from gputop_diag.monitor.view import Feeder
from gputop_diag.report.sections import driver_chain
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.tui.panes.base import View
from gputop_diag.tui.panes.driver import render

NO_SM90 = "torch-arch:7.0;7.5;8.0;8.6"
BUILT = ("sm_70", "sm_75", "sm_80", "sm_86")


def _update(faults: str | None = NO_SM90):
    return Feeder(Monitor(sim.build("compute-bound", faults=faults or ""), interval=1.0)).tick()


def _without_archs(snap: Snapshot) -> Snapshot:
    """The snapshot as a recording made before the architectures were read holds it."""
    chain = snap.driver_chain
    procs = tuple(
        replace(p, libraries=tuple(replace(x, arch_list=None) for x in p.libraries))
        for p in chain.processes
    )
    return replace(snap, driver_chain=replace(chain, processes=procs))


def test_the_snapshot_carries_each_mapped_builds_architectures():
    snap = _update().snapshot
    libs = [p.library("torch_cuda") for p in snap.driver_chain.processes]
    assert libs and all(x is not None and x.arch_list == BUILT for x in libs)


def test_the_live_view_diagnose_and_the_report_say_no_kernel_image():
    u = _update()
    pane = render(u, View(), 0).plain
    assert "verdict:  BROKEN" in pane or "verdict: BROKEN" in pane
    assert "kernel images       sm_70 sm_75 sm_80 sm_86" in pane
    assert "GPUs 0-7 NVIDIA H100 80GB HBM3 (9.0): NO KERNEL IMAGE" in pane
    [alert] = [a for a in driver_chain_alerts(u.snapshot) if "kernel image" in a.text]
    assert alert.severity == "critical" and "sm_90" in alert.text
    section = driver_chain(u.snapshot, None, Sanitizer())
    assert section["status"] == "broken" and section["verdict"].startswith("broken: ")
    assert [p["code"] for p in section["problems"]] == ["no_kernel_image"]
    assert {"layer": "kernel images", "version": " ".join(BUILT)}.items() <= {
        k: v for k, v in section["layers"][-1].items() if k != "read_from"
    }.items()


def test_a_build_that_runs_says_nothing_in_any_view():
    u = _update(None)
    pane = render(u, View(), 0).plain
    assert "(9.0): ok (sm_90)" in pane and "NO KERNEL IMAGE" not in pane
    assert not driver_chain_alerts(u.snapshot)
    assert driver_chain(u.snapshot, None, Sanitizer())["status"] == "ok"


def test_a_recording_replayed_judges_the_layer_again():
    snap = _update().snapshot
    back = from_jsonable(Snapshot, json.loads(json.dumps(jsonable(snap))))
    facts = facts_from_snapshot(back)
    assert [p.code for p in judge_chain(facts)] == ["no_kernel_image"]


def test_a_recording_from_before_says_the_layer_was_not_read(capsys, tmp_path):
    u = _update()
    old = _without_archs(u.snapshot)
    facts = facts_from_snapshot(old)
    assert facts.kernels_read is False and not judge_chain(facts)
    pane = render(replace(u, snapshot=old), View(), 0).plain
    assert "kernel images       not read" in pane and "NO KERNEL IMAGE" not in pane
    section = driver_chain(old, None, Sanitizer())
    assert section["layers"][-1]["version"] == "not read"


def test_the_monitor_reads_a_library_once_per_file_version(monkeypatch):
    sources = sim.build("compute-bound", faults=NO_SM90)
    reads = []
    real = cuda_libs.read_archs

    def counted(f):
        reads.append(1)
        return real(f)

    monkeypatch.setattr(cuda_libs, "read_archs", counted)
    memo = ChainMemo(rescan_s=0.0)  # every process's maps read again on each scan
    for _ in range(3):
        scan = read_chain(sources, memo=memo, archs=True)
        assert {p.arch_list for p in scan.processes} == {BUILT}
    assert len(reads) == 1  # twelve processes, three scans: one file, read once
    assert read_chain(sources, memo=memo).processes[0].arch_list == ()  # not asked: not read


def test_a_cpu_only_framework_is_the_first_problem_on_a_gpu_machine(capsys, monkeypatch):
    monkeypatch.setenv("GPUTOP_DIAG_SIM_FAULTS", "probe-torch:cpu")
    assert main(["--demo", "compute-bound", "driver", "--json", "--probe-python", "/x/python"]) == 0
    doc = json.loads(capsys.readouterr().out)
    first = doc["problems"][0]
    assert first["code"] == "framework_cpu_only" and first["severity"] == "critical"
    assert "CPU-only build (torch 2.9.0+cpu)" in first["text"] and "cu128" in first["text"]
    assert "--index-url https://download.pytorch.org/whl/cu128" in first["next_step"]
    assert "Torch not compiled with CUDA enabled" in first["error_text"]
    assert doc["status"] == "broken" and doc["check_first"] == first["next_step"]


def test_a_cpu_only_framework_comes_after_a_missing_driver(capsys, monkeypatch):
    monkeypatch.setenv("GPUTOP_DIAG_SIM_FAULTS", "probe-torch:cpu")
    assert main(["--demo", "no-gpu", "driver", "--probe-python", "/x/python"]) == 3
    out = capsys.readouterr().out
    assert "7 kernel images      (--probe-python's torch 2.9.0+cpu is a CPU-only build" in out
    problems = [line for line in out.splitlines() if line.startswith("  [critical]")]
    assert "no NVIDIA driver" in problems[0] and "CPU-only build" in problems[1]
