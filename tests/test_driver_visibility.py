"""NVML answers but the kernel module's files are absent (WSL2, a container that does not mount
/proc/driver, a mock NVML library): the chain says "not visible here", never "not loaded", and
nothing critical is raised. Where NVML does not answer, a missing module is still the cause."""

from __future__ import annotations

import dataclasses

import pytest

from gputop_diag import sim
from gputop_diag.collect.cuda_libs import read_chain, unreadable_why
from gputop_diag.commands import driver as driver_command
from gputop_diag.commands.common import sample_once
from gputop_diag.diagnose.alerts import driver_chain_alerts
from gputop_diag.diagnose.classify import classify
from gputop_diag.driver.compat import (
    MODULE_NOT_VISIBLE,
    ChainFacts,
    facts_from_snapshot,
    judge_chain,
    module_state,
)

HIDDEN = ("/proc/driver/nvidia", "/sys/module/nvidia")


class HiddenModuleProcFS:
    """The simulated machine's /proc and /sys without the NVIDIA module's entries."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def _hidden(self, path: str) -> bool:
        return path.startswith(HIDDEN)

    def read_text(self, path: str) -> str:
        if self._hidden(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.inner.read_text(path)

    def exists(self, path: str) -> bool:
        return not self._hidden(path) and self.inner.exists(path)

    def listdir(self, path: str) -> list[str]:
        if self._hidden(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.inner.listdir(path)


def _hidden_module(scenario: str = "compute-bound", faults: str = ""):
    src = sim.build(scenario, faults=faults)
    src = dataclasses.replace(src, procfs=HiddenModuleProcFS(src.procfs))
    snap = sample_once(src, True)
    return src, dataclasses.replace(snap, driver_chain=read_chain(src).chain())


def _facts(**kw) -> ChainFacts:
    base = dict(
        module_loaded=False,
        module_version=None,
        library_version="570.124.06",
        library_found=True,
        nvml_error=None,
        driver_max=(12, 8),
    )
    return ChainFacts(**{**base, **kw})


def test_a_missing_module_is_the_cause_only_when_nvml_does_not_answer():
    assert [p.code for p in judge_chain(_facts(nvml_answered=False))] == ["module_not_loaded"]
    assert judge_chain(_facts(nvml_answered=True)) == ()
    assert module_state(_facts(nvml_answered=True)) == MODULE_NOT_VISIBLE
    assert module_state(_facts(nvml_answered=False)) == "not loaded"
    assert module_state(_facts(module_loaded=True, module_version="570.1")) == "570.1"
    # NVML saying the driver is not loaded outweighs anything else
    failed = _facts(nvml_answered=False, nvml_error="DRIVER_NOT_LOADED", module_loaded=None)
    assert [p.code for p in judge_chain(failed)] == ["module_not_loaded"]


def test_nvml_answering_without_module_files_raises_nothing_critical():
    src, snap = _hidden_module()
    assert snap.driver_chain.module_loaded is False  # the files really were not there
    facts = facts_from_snapshot(snap)
    assert facts.nvml_answered
    assert judge_chain(facts) == ()
    assert driver_chain_alerts(snap) == ()
    d = classify([snap])
    assert not [a for a in d.alerts if a.severity == "critical"], d.alerts
    assert "modprobe" not in " ".join(a.text for a in d.alerts)


def test_the_same_machine_with_nvml_failing_still_names_the_module():
    _, snap = _hidden_module(faults="module:none")  # NVML: Driver Not Loaded
    facts = facts_from_snapshot(snap)
    assert not facts.nvml_answered
    assert [p.code for p in judge_chain(facts)] == ["module_not_loaded"]


def test_the_driver_command_says_not_visible_here(monkeypatch):
    src, snap = _hidden_module()
    scan = read_chain(src)
    doc = driver_command.build(snap, scan, None, None, None)
    km = doc["layers"]["kernel_module"]
    assert km["loaded"] is False and km["visible"] is False
    text = driver_command.render_text(doc)
    line = next(x for x in text.splitlines() if x.startswith("1 kernel module"))
    assert MODULE_NOT_VISIBLE in line and "not loaded" not in line
    assert "modprobe" not in text


@pytest.mark.parametrize(
    ("euid", "expected", "unexpected"),
    [(0, "even as root", "run as root"), (1000, "run as root", "even as root")],
)
def test_unreadable_processes_are_explained_for_who_runs_it(euid, expected, unexpected):
    why = unreadable_why(euid)
    assert expected in why and unexpected not in why
