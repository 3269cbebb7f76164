"""The simulator: a GPU machine in software, behind the same interfaces as the real one.

`build(name)` returns a `Sources` bundle whose `nvml` stands in for the `pynvml` module, whose
`psutil` stands in for `psutil`, and whose /proc, commands and clock are simulated, all driven
by one scenario timeline (`scenarios.py`, evaluated by `machine.py`). The collectors cannot tell
it from a machine. `list_scenarios()` names the scenarios and the class each should show.
"""

from __future__ import annotations

from ..sources import Sources
from .clock import EPOCH0, SimClock
from .fake_commands import FakeCommands
from .fake_nvml import FakeNvml
from .fake_procfs import FakeProcFS
from .fake_psutil import FakePsutil
from .machine import ScenarioInfo, SimMachine, scenario_info
from .scenarios import SCENARIOS

HOSTNAME = "gpu-node-07"

__all__ = [
    "EPOCH0",
    "HOSTNAME",
    "ScenarioInfo",
    "SimClock",
    "SimMachine",
    "UnknownScenario",
    "build",
    "list_scenarios",
]


class UnknownScenario(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)}")


def list_scenarios() -> list[ScenarioInfo]:
    return [scenario_info(n, s) for n, s in SCENARIOS.items()]


def build(
    name: str = "tour",
    *,
    seed: int | None = None,
    realtime: bool = False,
    noise: float = 1.0,
    gpu_count: int | None = None,
    process_count: int | None = None,
) -> Sources:
    """A simulated machine running scenario `name`, as a `Sources` bundle.

    `seed` picks the noise (None: the default, reproducible); `noise` scales it (0: clean);
    `realtime` makes simulated time follow the wall clock (the live view) instead of jumping on
    `clock.sleep()` (headless commands, tests); `gpu_count`/`process_count` override the
    scenario's (benchmarks).
    """
    if name not in SCENARIOS:
        raise UnknownScenario(name)
    if gpu_count is not None and gpu_count < 0 or process_count is not None and process_count < 0:
        raise ValueError("gpu_count and process_count must be >= 0")
    clock = SimClock(realtime=realtime)
    machine = SimMachine(name, SCENARIOS[name], clock, seed, noise, gpu_count, process_count)
    environ = {
        "USER": machine.user,
        "LOGNAME": machine.user,
        "HOME": f"/home/{machine.user}",
        "SHELL": "/bin/bash",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
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
