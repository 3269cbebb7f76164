"""`gputop-diag health` over the simulator: each health scenario shows its finding, a healthy
node none; JSON schema; --sanitize; old drivers without the NVML calls; an NVML call that fails
for one GPU; the stand-in's NVML health calls against the real pynvml's shapes; and the reads
staying on the GPU jobs' processes."""

from __future__ import annotations

import ctypes
import json

import pynvml
import pytest

from gputop_diag import cli, sim
from gputop_diag.collect.health import read_health
from gputop_diag.commands.common import sample_once
from gputop_diag.health import judge
from gputop_diag.model.health import HEALTH_CLASSES, NO_SYMBOL


def health(capsys, *args: str) -> tuple[int, str]:
    rc = cli.main(list(args))
    return rc, capsys.readouterr().out


def health_json(capsys, scenario: str, *extra: str) -> dict:
    rc, out = health(capsys, "--demo", scenario, "health", "--json", *extra)
    assert rc == 0
    return json.loads(out)


# scenario -> (finding id, severity, a class it bears on or None, text in its title)
SHOWN = {
    "launch-blocking": ("env.cuda_launch_blocking", "warning", "synchronization", "LAUNCH"),
    "nccl-p2p-disabled": ("env.nccl_p2p_disable", "warning", "communication", "P2P"),
    "pcie-downtrained": ("pcie.link_downtrained", "warning", "input_pipeline", "gen 4 x8"),
    "fabric-manager-down": ("fabric.manager_inactive", "critical", "communication", "802"),
    "dataloader-d-state": ("procs.d_state", "critical", "input_pipeline", "/data"),
    "gpu-missing-from-nvml": ("pci.gpu_count", "critical", "scheduler", "missing from NVML"),
    "acs-enabled": ("pcie.acs", "warning", "communication", "ACS redirects"),
    "ib-port-down": ("ib.port_down", "warning", "communication", "not active"),
}


@pytest.mark.parametrize("scenario", sorted(SHOWN))
def test_each_health_scenario_shows_its_finding(capsys, scenario):
    fid, severity, cls, words = SHOWN[scenario]
    doc = health_json(capsys, scenario)
    assert doc["schema"] == "gputop-diag.health/1"
    found = {f["id"]: f for f in doc["findings"]}
    f = found[fid]
    assert f["severity"] == severity and cls in f["bears_on"] and words in f["title"]
    assert f["evidence"] and all(e["source"] for e in f["evidence"])
    assert f["next_step"] and "\n" not in f["next_step"]
    assert doc["worst"] == severity or severity == "warning" and doc["worst"] == "critical"


def test_a_healthy_node_has_nothing_to_say(capsys):
    doc = health_json(capsys, "compute-bound")
    assert doc["counts"]["critical"] == doc["counts"]["warning"] == 0
    assert doc["examined"] == {
        "gpus_nvml": 8,
        "gpus_pci": 8,
        "nvswitches": 4,
        "processes": 13,  # 8 ranks, their 4 workers and a co-tenant
        "environments": 9,
        "ib_ports": 8,
    }
    for f in doc["findings"]:
        assert set(f["bears_on"]) <= set(HEALTH_CLASSES)
        assert f["severity"] in ("ok", "info")


def test_text_names_the_evidence_and_where_it_was_read(capsys):
    rc, out = health(capsys, "--demo", "launch-blocking", "health")
    assert rc == 0
    assert "CUDA_LAUNCH_BLOCKING=1 in pid 41200's environment (GPU 0)  (/proc/41200/environ)" in out
    assert "bears on: synchronization" in out
    assert "next: unset CUDA_LAUNCH_BLOCKING" in out


def test_sanitized_output_hides_the_node_and_its_layout(capsys):
    for scenario in ("dataloader-d-state", "pcie-downtrained", "gpu-missing-from-nvml"):
        for fmt in ((), ("--json",)):
            rc, out = health(capsys, "--demo", scenario, "--sanitize", "health", *fmt)
            assert rc == 0 and out
            for leak in ("gpu-node-07", "0000:ab:00.0", "0000:db:00.0", "fs01", "/export"):
                assert leak not in out, (scenario, leak)
    doc = health_json(capsys, "pcie-downtrained", "--sanitize")
    assert doc["sanitized"] is True
    f = next(x for x in doc["findings"] if x["id"] == "pcie.link_downtrained")
    assert f["gpus"] == [5] and "gen 4 x8" in f["title"]  # the finding survives


def test_a_watched_process_not_on_a_gpu_is_read_too(capsys):
    doc = health_json(capsys, "driver-mismatch")  # its GPUs idle: no GPU process
    assert doc["examined"]["environments"] == 0 and doc["examined"]["processes"] == 0
    doc = health_json(capsys, "driver-mismatch", "--pid", "52011")
    assert doc["examined"]["environments"] == 1 and doc["examined"]["processes"] == 1
    assert next(f for f in doc["findings"] if f["id"] == "env.ok")["severity"] == "ok"


def test_no_driver_exits_3_with_the_host_findings(capsys):
    rc, out = health(capsys, "--demo", "no-gpu", "health", "--json")
    assert rc == 3 and json.loads(out)["schema"] == "gputop-diag.health/1"


def report(scenario="compute-bound", **kw):
    src = sim.build(scenario, **kw)
    snap = sample_once(src, fast=True)
    return src, judge(read_health(src, snap))


@pytest.mark.parametrize("driver", ["R418", "R470", "R525", "R535", "R570"])
def test_old_drivers_lack_calls_and_say_so(driver):
    _, r = report(driver=driver)
    gsp = {f.id: f for f in r.findings}["nvml.gsp_firmware"]
    gpus = r.facts.nvml.gpus
    if driver in ("R418", "R470"):
        assert gsp.severity == "info" and NO_SYMBOL in gsp.title
    else:
        assert NO_SYMBOL not in gsp.title
    fabric = gpus[0].fabric
    if driver in ("R418", "R470"):
        assert fabric.problem == NO_SYMBOL
    else:  # the versioned call from R550, the older one before it
        want = "nvmlDeviceGetGpuFabricInfoV" if driver == "R570" else "nvmlDeviceGetGpuFabricInfo"
        assert fabric.ok and fabric.source == want and fabric.value.state == "completed"


def test_an_nvml_call_that_fails_for_one_gpu():
    _, r = report(
        faults="nvmlDeviceGetPersistenceMode=UNKNOWN@3,nvmlDeviceGetGspFirmwareMode=NO_PERMISSION@1"
    )
    pm = r.facts.nvml.gpus
    assert pm[3].persistence.problem.startswith("NVMLError_Unknown") and pm[2].persistence.value
    f = {x.id: x for x in r.findings}
    assert f["nvml.persistence_mode"].gpus == (3,) and f["nvml.persistence_mode"].severity == "info"
    assert pm[1].gsp_firmware.problem == "permission denied" and pm[0].gsp_firmware.ok


def test_a_lost_gpu_is_skipped_not_a_crash():
    src, r = report(faults="lose:2")
    assert r.facts.nvml.gpus[2].lost
    assert {f.id for f in r.findings} >= {"pci.gpu_count", "pcie.link"}


def test_under_load_matters_idle_links_drop_to_gen1(monkeypatch):
    spec = dict(sim.scenarios.SCENARIOS["pcie-downtrained"], timeline=[(0, "idle")], jobs=[])
    monkeypatch.setitem(sim.scenarios.SCENARIOS, "idle-links", spec)
    _, r = report("idle-links")
    ids = {f.id: f for f in r.findings}
    assert "pcie.link_downtrained" not in ids
    assert ids["pcie.link_idle"].severity == "info" and len(ids["pcie.link_idle"].evidence) == 8


def test_reads_stay_on_the_gpu_jobs():
    """Never every process: the host process of driver-mismatch (not on a GPU) and /proc itself
    are not read; the D-state walk reads the ranks' trees only."""
    src = sim.build("driver-mismatch")
    snap = sample_once(src, fast=True)
    seen: list[str] = []
    real_read, real_list = src.procfs.read_text, src.procfs.listdir
    src.procfs.read_text = lambda p: (seen.append(p), real_read(p))[1]
    src.procfs.listdir = lambda p: (seen.append("ls " + p), real_list(p))[1]
    read_health(src, snap)
    assert "ls /proc" not in seen
    assert not [p for p in seen if p.startswith("/proc/52011/")]
    src = sim.build("input-starved")
    snap = sample_once(src, fast=True)
    seen.clear()
    real_read2 = src.procfs.read_text
    src.procfs.read_text = lambda p: (seen.append(p), real_read2(p))[1]
    read_health(src, snap)
    stats = {p for p in seen if p.endswith("/stat") and p.count("/") == 3}
    workers = [p for p in src.sim.procs.values() if p.role == "worker"]
    assert len(stats) == 8 + len(workers)  # the ranks and their data-loader workers


# -- the stand-in's NVML health calls -----------------------------------------------------------
def test_stand_in_health_calls_have_pynvml_shapes():
    src = sim.build("compute-bound")
    n = src.nvml
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    assert n.nvmlDeviceGetGspFirmwareMode(h) == [1, 1]
    on, default = ctypes.c_uint(7), ctypes.c_uint(7)
    assert n.nvmlDeviceGetGspFirmwareMode(h, ctypes.byref(on), ctypes.byref(default)) == 0
    assert (on.value, default.value) == (1, 1)
    info = pynvml.c_nvmlGpuFabricInfoV_t()
    assert n.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info)) == pynvml.NVML_SUCCESS
    assert info.state == pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    bad = pynvml.c_nvmlGpuFabricInfo_v3_t()  # another version than the V form's
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        n.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(bad))
    old = sim.build("compute-bound", driver="R470").nvml
    old.nvmlInit()
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        old.nvmlDeviceGetGspFirmwareMode(old.nvmlDeviceGetHandleByIndex(0))
    single = sim.build("mig").nvml  # one A100, no NVSwitch: no fabric
    single.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        single.nvmlDeviceGetGpuFabricInfo(
            single.nvmlDeviceGetHandleByIndex(0), ctypes.byref(pynvml.c_nvmlGpuFabricInfo_t())
        )


def test_downtrained_link_agrees_between_nvml_and_sysfs():
    src = sim.build("pcie-downtrained")
    n = src.nvml
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(5)
    assert (n.nvmlDeviceGetCurrPcieLinkGeneration(h), n.nvmlDeviceGetCurrPcieLinkWidth(h)) == (4, 8)
    assert n.nvmlDeviceGetMaxPcieLinkGeneration(h) == 5
    bus = "0000:ab:00.0"
    assert src.procfs.read_text(f"/sys/bus/pci/devices/{bus}/current_link_speed") == (
        "16.0 GT/s PCIe\n"
    )
    assert src.procfs.read_text(f"/sys/bus/pci/devices/{bus}/../uevent").endswith(
        "PCI_SLOT_NAME=0000:aa:00.0\n"
    )
    assert src.procfs.read_text(f"/sys/bus/pci/devices/{bus}/numa_node") == "1\n"  # as before


def test_no_driver_the_summary_counts_what_exit_3_says(capsys):
    """The summary agrees with the exit status: the missing driver is a critical finding."""
    rc, out = health(capsys, "--demo", "no-gpu", "health")
    head = out.splitlines()[0]
    assert rc == 3 and "1 critical" in head, head
    assert "no usable NVIDIA driver" in out
    rc, out = health(capsys, "--demo", "no-gpu", "health", "--json")
    doc = json.loads(out)
    assert doc["counts"]["critical"] == 1 and doc["worst"] == "critical"
