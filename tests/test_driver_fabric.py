"""The fabric manager as a layer of the driver chain: on NVSwitch systems only, fed by the health
checks' fabric findings, broken with CUDA error 802 between the kernel module and NVML; never a
layer (nor "missing") on a machine without NVSwitches."""

from __future__ import annotations

import contextlib
import io
import json
from types import SimpleNamespace

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.collect.health import read_health
from gputop_diag.commands.common import sample_once
from gputop_diag.driver.compat import (
    ERR_SYSTEM_NOT_READY,
    ChainFacts,
    FabricFacts,
    fabric_facts,
    fabric_from_snapshot,
    judge_chain,
    status_of,
)
from gputop_diag.health import judge
from gputop_diag.health.node import fabric_findings
from gputop_diag.model.health import (
    FabricManagerFacts,
    FabricState,
    NvmlFacts,
    NvmlGpu,
    PciFacts,
    Reading,
    recorded,
)

SWITCHES = PciFacts(nvswitches=("0000:05:00.0", "0000:06:00.0"))


def facts(**kw) -> ChainFacts:
    base = dict(
        module_loaded=True,
        module_version="570.124.06",
        library_version="570.124.06",
        library_found=True,
        nvml_error=None,
        driver_max=(12, 8),
    )
    return ChainFacts(**{**base, **kw})


def fm(service="active", version="570.124.06") -> FabricManagerFacts:
    return FabricManagerFacts(
        ("/dev/nvidia-nvswitch0",),
        Reading(service, "systemctl is-active nvidia-fabricmanager"),
        Reading(version, "nv-fabricmanager --version"),
        asked=True,
    )


def nvml(state="completed") -> NvmlFacts:
    gpus = tuple(
        NvmlGpu(i, f"00000000:1{i}:00.0", fabric=Reading(FabricState(state), "nvml"))
        for i in range(2)
    )
    return NvmlFacts(gpus, driver_version="570.124.06")


def layer(pci=SWITCHES, manager=None, state="completed") -> FabricFacts | None:
    return fabric_facts(fabric_findings(pci, nvml(state), manager or fm()))


def test_no_nvswitch_no_layer():
    assert layer(PciFacts(), FabricManagerFacts()) is None
    assert judge_chain(facts(), None) == judge_chain(facts()) == ()


def test_an_active_manager_at_the_drivers_version_is_an_ok_layer_with_no_problem():
    f = layer()
    assert f is not None and f.state == "ok" and "active" in f.text
    assert judge_chain(facts(), f) == ()


def test_an_inactive_manager_breaks_the_chain_with_error_802():
    f = layer(manager=fm(service="failed"))
    assert f.state == "broken" and "fabric.manager_inactive" in f.ids
    [p] = judge_chain(facts(), f)
    assert p.layer == "fabric manager" and p.severity == "critical" and p.code == "fabric_manager"
    assert p.error_text == ERR_SYSTEM_NOT_READY
    assert p.first_error == "CUDA error 802: system not yet initialized"
    assert p.next_step.startswith("sudo systemctl restart nvidia-fabricmanager")
    assert status_of((p,)) == "broken"


def test_a_version_other_than_the_drivers_breaks_it():
    f = layer(manager=fm(version="570.86.15"))
    assert f.state == "broken" and f.ids == ("fabric.manager_version",)
    [p] = judge_chain(facts(), f)
    assert "570.86.15" in p.text and "nvidia-fabricmanager-570" in p.next_step


def test_gpus_not_registered_with_the_fabric():
    f = layer(state="not_started")
    assert f.state == "broken" and f.gpus == (0, 1)
    assert judge_chain(facts(), f)[0].code == "fabric_manager"
    pending = layer(state="in_progress")
    assert pending.state == "warning"
    assert judge_chain(facts(), pending)[0].severity == "warning"


def test_the_layer_sits_between_the_kernel_module_and_the_layers_above():
    broken = layer(manager=fm(service="inactive"))
    mismatch = judge_chain(facts(library_version="570.172.08"), broken)
    assert [p.layer for p in mismatch] == ["kernel module", "fabric manager"]
    missing = judge_chain(facts(library_found=False), broken)
    assert [p.code for p in missing] == ["fabric_manager", "nvml_missing"]  # below NVML
    both = judge_chain(facts(library_found=False, library_version="570.172.08"), broken)
    assert [p.code for p in both] == ["mismatch", "fabric_manager", "nvml_missing"]
    # no module, no driver: nothing above the host is judged
    assert [p.code for p in judge_chain(facts(module_loaded=False), broken)] == [
        "module_not_loaded"
    ]


def run_cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(argv)
    return rc, out.getvalue()


def test_the_driver_command_shows_the_layer_on_an_nvswitch_system():
    rc, text = run_cli(["--demo", "fabric-manager-down", "driver"])
    assert rc == 0
    lines = text.splitlines()
    module = next(i for i, ln in enumerate(lines) if ln.startswith("1 kernel module"))
    assert lines[module + 1].startswith("  fabric manager     BROKEN (error 802)")
    assert "kernel module -> fabric manager -> user-space library" in text
    assert "users see: CUDA error 802: system not yet initialized" in text
    assert "Check first: sudo systemctl restart nvidia-fabricmanager" in text
    rc, out = run_cli(["--demo", "fabric-manager-down", "driver", "--json"])
    doc = json.loads(out)
    fabric = doc["layers"]["fabric_manager"]
    assert doc["status"] == "broken" and fabric["state"] == "broken"
    assert {"fabric.manager_inactive", "fabric.manager_version"} <= set(fabric["findings"])
    assert doc["problems"][0]["layer"] == "fabric manager"
    assert list(doc["layers"])[:3] == ["kernel_module", "fabric_manager", "nvml_library"]


def test_no_layer_and_no_word_of_it_on_a_machine_without_nvswitches():
    rc, text = run_cli(["--demo", "mig", "driver"])  # one A100 on PCIe
    assert rc == 0 and "fabric" not in text.lower()
    rc, out = run_cli(["--demo", "mig", "driver", "--json"])
    doc = json.loads(out)
    assert doc["layers"]["fabric_manager"] is None and doc["status"] == "ok"


def test_a_healthy_nvswitch_system_shows_the_layer_ok():
    rc, text = run_cli(["--demo", "compute-bound", "driver"])
    assert rc == 0
    assert any(ln.startswith("  fabric manager     ok") for ln in text.splitlines())
    assert "verdict: OK" in text


def test_the_layer_from_the_health_report_a_snapshot_carries():
    src = sim.build("fabric-manager-down")
    snap = sample_once(src, fast=True)
    assert fabric_from_snapshot(snap) is None  # no health read with it
    carried = SimpleNamespace(health=recorded(judge(read_health(src, snap))))
    assert fabric_from_snapshot(carried).state == "broken"
    pcie = sim.build("mig")
    plain = SimpleNamespace(health=recorded(judge(read_health(pcie, sample_once(pcie, fast=True)))))
    assert fabric_from_snapshot(plain) is None
