"""The simulator: a GPU machine in software, behind the same interfaces as the real one.

`build(name)` returns a `Sources` bundle whose `nvml` stands in for the `pynvml` module, whose
`psutil` stands in for `psutil`, and whose `/proc`, commands and clock are simulated, all driven
by one scenario timeline. The collectors cannot tell it from a machine.
"""

from __future__ import annotations

from ..sources import Sources
from .clock import SimClock
from .fake_commands import FakeCommands
from .fake_host import FakeProcFS, FakePsutil
from .fake_nvml import FakeNvml
from .machine import ScenarioInfo, SimMachine
from .scenarios import SCENARIOS

HOSTNAME = "gpu-node-07"

__all__ = ["ScenarioInfo", "SimClock", "UnknownScenario", "build", "list_scenarios"]


class UnknownScenario(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}")


def list_scenarios() -> list[ScenarioInfo]:
    return [
        ScenarioInfo(n, s["description"], s["expected"], s["gpus"], s["model"], s["duration"])
        for n, s in SCENARIOS.items()
    ]


def build(
    name: str = "tour",
    *,
    seed: int | None = None,
    realtime: bool = False,
    noise: float = 1.0,
    gpu_count: int | None = None,
    process_count: int | None = None,
) -> Sources:
    if name not in SCENARIOS:
        raise UnknownScenario(name)
    clock = SimClock(realtime=realtime)
    machine = SimMachine(name, SCENARIOS[name], clock, seed, noise, gpu_count, process_count)
    environ = {"USER": "alice", "HOME": "/home/alice", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    return Sources(
        nvml=FakeNvml(machine),
        psutil=FakePsutil(machine),
        procfs=FakeProcFS(machine),
        clock=clock,
        run_command=FakeCommands(machine, HOSTNAME),
        hostname=lambda: HOSTNAME,
        environ=environ,
        scenario=name,
        sim=machine,
    )
