"""The health judgement, pure: facts in, findings out. Each check on varied inputs: the finding
appears when it should, with the class it bears on, and not when it should not."""

from __future__ import annotations

from gputop_diag.health import judge
from gputop_diag.health.pci import bdf
from gputop_diag.model.health import (
    HEALTH_CLASSES,
    NO_SYMBOL,
    SEVERITIES,
    FabricManagerFacts,
    FabricState,
    HealthFacts,
    NvmlFacts,
    NvmlGpu,
    PciFacts,
    PciGpu,
    ProcessEnv,
    ProcessFacts,
    Reading,
)


def R(value, source="nvml", problem=None):  # noqa: N802 - a short name for a Reading
    return Reading(value, source, problem)


def gpu(i, util=90.0, gen=5, gen_max=5, width=16, width_max=16, pm=True, gsp=(True, True), **kw):
    return NvmlGpu(
        i,
        f"00000000:{0x18 + i:02X}:00.0",
        "NVIDIA H100 80GB HBM3",
        util,
        R(pm),
        R(gsp),
        R(gen),
        R(gen_max),
        R(width),
        R(width_max),
        **kw,
    )


def pci_gpu(i, speed="32.0 GT/s PCIe", width="16"):
    b = f"0000:{0x18 + i:02x}:00.0"
    return PciGpu(
        b,
        "0x2330",
        "0x030200",
        R(speed, "/sys"),
        R("32.0 GT/s PCIe", "/sys"),
        R(width, "/sys"),
        R("16", "/sys"),
    )


def findings(**parts):
    return {f.id: f for f in judge(HealthFacts(0.0, "node", **parts)).findings}


def test_bus_ids_in_every_form_meet():
    assert bdf("00000000:18:00.0") == "0000:18:00.0"
    assert bdf("0000:AB:00.0") == "0000:ab:00.0"
    assert bdf("18:00.0") == "0000:18:00.0"
    assert bdf(None) is None and bdf("nonsense") is None


def test_gpu_count_pci_against_nvml():
    nvml = NvmlFacts(tuple(gpu(i) for i in range(3)))
    same = PciFacts(tuple(pci_gpu(i) for i in range(3)))
    assert findings(pci=same, nvml=nvml)["pci.gpu_count"].severity == "ok"
    more = PciFacts(tuple(pci_gpu(i) for i in range(4)))
    f = findings(pci=more, nvml=nvml)["pci.gpu_count"]
    assert f.severity == "critical" and "0000:1b:00.0" in f.evidence[-1].text
    assert f.bears_on == ("scheduler",)
    none = NvmlFacts(problem="NVML could not be opened: NVMLError_DriverNotLoaded")
    f = findings(pci=more, nvml=none)["pci.gpu_count"]
    assert f.severity == "critical" and "none usable" in f.title and "lsmod" in f.next_step
    f = findings(pci=PciFacts(problem="permission denied"), nvml=nvml)["pci.gpu_count"]
    assert f.severity == "info" and "permission denied" in f.title


def test_a_link_below_its_maximum_counts_only_under_load():
    busy = NvmlFacts((gpu(0), gpu(1, util=95.0, gen=3), gpu(2, util=88.0, width=8)))
    got = judge(HealthFacts(0, "n", nvml=busy)).findings
    down = [f for f in got if f.id == "pcie.link_downtrained"]
    assert [f.gpus for f in down] == [(1,), (2,)]
    assert down[0].bears_on == ("input_pipeline", "communication")
    idle = NvmlFacts((gpu(0, util=0.0, gen=1), gpu(1, util=None, gen=1)))
    f = findings(nvml=idle)
    assert "pcie.link_downtrained" not in f and f["pcie.link_idle"].severity == "info"
    f = findings(nvml=NvmlFacts((gpu(0), gpu(1))))
    assert f["pcie.link"].severity == "ok"


def test_sysfs_link_stands_in_where_nvml_cannot_say():
    n = gpu(0, util=70.0)
    n = NvmlGpu(**{**{k: getattr(n, k) for k in n.__slots__}, "pcie_gen": R(None, "x", NO_SYMBOL)})
    pci = PciFacts((pci_gpu(0, speed="8.0 GT/s PCIe"),))
    f = findings(nvml=NvmlFacts((n,)), pci=pci)["pcie.link_downtrained"]
    assert "gen 3 x16 of gen 5 x16" in f.title and "current_link_speed" in f.evidence[0].source


def test_persistence_off_unread_and_old_drivers():
    f = findings(nvml=NvmlFacts((gpu(0), gpu(1, pm=False))))["nvml.persistence_mode"]
    assert f.severity == "warning" and f.gpus == (1,) and "persistenced" in f.next_step
    broken = NvmlGpu(
        **{**{k: getattr(gpu(2), k) for k in NvmlGpu.__slots__}, "persistence": R(None, "x", "e")}
    )
    f = findings(nvml=NvmlFacts((gpu(0), broken)))["nvml.persistence_mode"]
    assert f.severity == "info" and f.gpus == (2,) and "other 1 GPU" in f.evidence[-1].text
    old = tuple(
        NvmlGpu(
            **{
                **{k: getattr(gpu(i), k) for k in NvmlGpu.__slots__},
                "gsp_firmware": R(None, "nvmlDeviceGetGspFirmwareMode", NO_SYMBOL),
            }
        )
        for i in range(2)
    )
    f = findings(nvml=NvmlFacts(old))["nvml.gsp_firmware"]
    assert f.severity == "info" and NO_SYMBOL in f.title
    assert f.evidence[0].text == f"GPU 0, 1: {NO_SYMBOL}"  # one line, not one per GPU
    mixed = NvmlFacts((gpu(0), gpu(1, gsp=(False, False))))
    assert findings(nvml=mixed)["nvml.gsp_firmware"].severity == "warning"


def test_fabric_manager_is_a_driver_chain_layer():
    f = findings(fabric_manager=FabricManagerFacts())["fabric.manager"]
    assert f.severity == "ok" and "no NVSwitch" in f.title
    pci = PciFacts(nvswitches=("0000:05:00.0",))
    nvml = NvmlFacts((gpu(0),), driver_version="570.124.06")
    down = FabricManagerFacts(
        ("/dev/nvidia-nvswitch0",),
        R("inactive", "systemctl is-active nvidia-fabricmanager"),
        R("570.124.06", "nv-fabricmanager --version"),
        asked=True,
    )
    f = findings(pci=pci, nvml=nvml, fabric_manager=down)
    assert f["fabric.manager_inactive"].severity == "critical"
    assert f["fabric.manager_inactive"].layer == "fabric_manager"
    assert "802" in f["fabric.manager_inactive"].title and "fabric.manager_version" not in f
    stale = FabricManagerFacts(
        (), R("active", "systemctl"), R("570.86.15", "nv-fabricmanager --version"), asked=True
    )
    f = findings(pci=pci, nvml=nvml, fabric_manager=stale)
    assert "570.86.15" in f["fabric.manager_version"].title and "fabric.manager_inactive" not in f
    fine = FabricManagerFacts((), R("active", "s"), R("570.124.06", "v"), asked=True)
    assert findings(pci=pci, nvml=nvml, fabric_manager=fine)["fabric.manager"].severity == "ok"
    pending = NvmlFacts(
        (
            gpu(0, fabric=R(FabricState("completed"))),
            gpu(1, fabric=R(FabricState("in_progress"))),
        ),
        driver_version="570.124.06",
    )
    f = findings(pci=pci, nvml=pending, fabric_manager=fine)["fabric.gpu_not_registered"]
    assert f.severity == "warning" and f.gpus == (1,)


def test_environment_values_that_do_not_count():
    envs = (
        ProcessEnv(1, None, "/proc/1/environ", (("CUDA_LAUNCH_BLOCKING", "0"),), gpus=(0,)),
        ProcessEnv(2, None, "/proc/2/environ", (("NCCL_IB_DISABLE", ""),), gpus=(1,)),
    )
    f = findings(processes=ProcessFacts(envs))
    assert "env.cuda_launch_blocking" not in f and "env.nccl_ib_disable" not in f
    assert f["env.ok"].severity == "ok"
    envs = (ProcessEnv(3, None, "/proc/3/environ", (("NCCL_IB_DISABLE", "1"),), gpus=(2, 3)),)
    f = findings(processes=ProcessFacts(envs))["env.nccl_ib_disable"]
    assert f.gpus == (2, 3) and "(GPU 2, 3)" in f.evidence[0].text


def test_most_urgent_first_and_every_check_said():
    nvml = NvmlFacts((gpu(0, pm=False), gpu(1)))
    pci = PciFacts(tuple(pci_gpu(i) for i in range(3)))
    got = judge(HealthFacts(0, "n", nvml=nvml, pci=pci)).findings
    order = [SEVERITIES.index(f.severity) for f in got]
    assert order == sorted(order) and got[0].id == "pci.gpu_count"
    checks = {f.check for f in got}
    assert checks == {
        "environment",
        "processes",
        "gpu_count",
        "pcie_link",
        "pcie_aer",
        "pcie_acs",
        "persistence",
        "gsp_firmware",
        "fabric_manager",
        "infiniband",
    }
    for f in got:
        assert set(f.bears_on) <= set(HEALTH_CLASSES)
        assert "\n" not in f.next_step


def test_nvml_gpus_without_a_pci_view_are_not_contradicted():
    """A container without the host's /sys, or NVIDIA's mock NVML: NVML lists 8 GPUs, the PCI
    bus none. Nothing may say "no NVIDIA GPU on the PCI bus" or "fewer than two GPUs"."""
    got = findings(nvml=NvmlFacts(tuple(gpu(i) for i in range(8))), pci=PciFacts())
    count = got["pci.gpu_count"]
    assert count.severity == "info" and "8 GPUs in NVML" in count.title
    assert "not available" in count.title
    for fid in ("pcie.acs", "pcie.aer"):
        assert got[fid].severity == "info" and "NVML lists 8" in got[fid].title, fid
    every = " ".join(f.title for f in got.values())
    assert "no NVIDIA GPU on the PCI bus" not in every and "fewer than two" not in every


def test_a_missing_driver_is_a_critical_finding():
    no_driver = NvmlFacts(problem="NVML could not be opened: NVMLError_LibraryNotFound")
    got = findings(nvml=no_driver)
    assert got["nvml.driver"].severity == "critical" and "no usable NVIDIA driver" in (
        got["nvml.driver"].title
    )
    assert "nvml.driver" not in findings(nvml=NvmlFacts((gpu(0),)), pci=PciFacts((pci_gpu(0),)))
