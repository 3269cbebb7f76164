"""The simulator: a GPU machine in software, behind the same interfaces as the real one.

`build(name)` returns a `Sources` bundle whose `nvml` stands in for the `pynvml` module, whose
`psutil` stands in for `psutil`, and whose /proc, commands and clock are simulated, all driven
by one scenario timeline (`scenarios.py`, evaluated by `machine.py`). The collectors cannot tell
it from a machine. `list_scenarios()` names the scenarios and the class each should show.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pynvml as _pynvml

from ..sources import Sources
from . import plant
from .clock import EPOCH0, SimClock
from .drivers import DRIVERS, DriverProfile, driver_profile
from .fake_commands import FakeCommands
from .fake_procfs import FakeProcFS
from .fake_psutil import FakePsutil
from .health import HealthNvml, SimHealth
from .machine import ScenarioInfo, SimMachine, scenario_info
from .scenarios import SCENARIOS

HOSTNAME = "gpu-node-07"
# Environment variables that set up a simulated machine when the program starts with --demo
# (whole-process tests, and trying the tool against an older driver): see docs/nvml.md.
DRIVER_ENV = "GPUTOP_DIAG_SIM_DRIVER"  # a driver profile: R418, R470, ..., R580
FAULTS_ENV = "GPUTOP_DIAG_SIM_FAULTS"  # comma-separated faults, see `apply_faults`
# Variables of the real environment the simulated shell takes over, so that the forms of
# CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and Slurm's variables can be tried on the simulator.
PASSED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GPU_DEVICE_ORDINAL")
PASSED_ENV_PREFIX = "SLURM_"

__all__ = [
    "DRIVERS",
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
        super().__init__(
            f"unknown scenario {name!r}; choose one of: {', '.join(SCENARIOS)} "
            "(`gputop-diag demo --list` says what each shows)"
        )


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
    driver: str | DriverProfile | None = None,
    faults: str | None = None,
    host_env: Mapping[str, str] | None = None,
) -> Sources:
    """A simulated machine running scenario `name`, as a `Sources` bundle.

    `seed` picks the noise (None: the default, reproducible); `noise` scales it (0: clean);
    `realtime` makes simulated time follow the wall clock (the live view) instead of jumping on
    `clock.sleep()` (headless commands, tests); `gpu_count`/`process_count` override the
    scenario's (benchmarks); `driver` names a driver profile (`drivers.DRIVERS`; default: the
    scenario's driver, or $GPUTOP_DIAG_SIM_DRIVER); `faults` (default $GPUTOP_DIAG_SIM_FAULTS)
    injects faults as `apply_faults` reads them; `host_env` (the CLI's `--demo` passes its
    environment; default: none) gives the device-choosing variables of the simulated shell
    (`PASSED_ENV` and `SLURM_*`); the rest of that shell is simulated.
    """
    if name not in SCENARIOS:
        raise UnknownScenario(name)
    if gpu_count is not None and gpu_count < 0 or process_count is not None and process_count < 0:
        raise ValueError("gpu_count and process_count must be >= 0")
    if driver is None:
        driver = os.environ.get(DRIVER_ENV) or None
    profile = driver_profile(driver) if isinstance(driver, str) else driver
    clock = SimClock(realtime=realtime)
    machine = SimMachine(
        name, SCENARIOS[name], clock, seed, noise, gpu_count, process_count, profile
    )
    apply_faults(machine, os.environ.get(FAULTS_ENV, "") if faults is None else faults)
    machine.health = SimHealth(machine)  # the PCI tree, InfiniBand, D states (sim/health.py)
    environ = {
        "USER": machine.user,
        "LOGNAME": machine.user,
        "HOME": f"/home/{machine.user}",
        "SHELL": "/bin/bash",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "XDG_RUNTIME_DIR": machine.runtime_dir,  # where the simulated jobs' probe files are
    }
    real = host_env or {}
    environ.update(
        {k: v for k, v in real.items() if k in PASSED_ENV or k.startswith(PASSED_ENV_PREFIX)}
    )
    sources = Sources(
        nvml=HealthNvml(machine),
        psutil=FakePsutil(machine),
        procfs=FakeProcFS(machine),
        clock=clock,
        run_command=FakeCommands(machine, HOSTNAME),
        hostname=lambda: HOSTNAME,
        environ=environ,
        scenario=name,
        sim=machine,
    )
    if os.environ.get(plant.PLANT_ENV):  # identifiers planted by a test (sim/plant.py)
        sources = plant.apply(sources, plant.load(os.environ[plant.PLANT_ENV]))
    return sources


def _error_code(text: str) -> int:
    t = text.strip().upper()
    if t.lstrip("-").isdigit():
        return int(t)
    code = getattr(_pynvml, "NVML_ERROR_" + t.removeprefix("NVML_ERROR_"), None)
    if not isinstance(code, int):
        raise ValueError(f"unknown NVML error {text!r} (e.g. GPU_IS_LOST, NO_PERMISSION, 999)")
    return code


def apply_faults(machine: SimMachine, spec: str) -> None:
    """Inject faults named in `spec`, comma-separated:

    - `FUNCTION=ERROR[@GPU]`: pynvml `FUNCTION` raises NVMLError(ERROR) (a name such as
      GPU_IS_LOST or a number), for GPU index GPU or every call;
    - `hang:FUNCTION[@GPU]`: the call blocks (a GPU that stopped answering);
    - `lose:GPU[@SECONDS]`: the GPU falls off the bus now or SECONDS into the scenario;
    - `foreign-event-handles`: Xid events carry device handles never looked up;
    - `module:VERSION`: the loaded kernel module is VERSION while the user-space library stays
      the scenario's (NVML: "Driver/library version mismatch"); `module:none`: not loaded;
    - `torch-arch:LIST`: the jobs' torch is built for LIST only (TORCH_CUDA_ARCH_LIST's form,
      `7.0;8.0;8.6+PTX`, spaces or semicolons): its probe's arch list and its libtorch_cuda.so;
    - `probe-torch:cpu`: the interpreter `driver --probe-python` runs has a CPU-only torch
      (`2.9.0+cpu`, torch.version.cuda None), as PyTorch's CPU wheels are;
    - `env-libcuda:VERSION`: the user's LD_LIBRARY_PATH picks a libcuda of VERSION (CUDA fails
      with 803 in the user's environment, not in a clean one: `driver --clean-env`);
    - `vgpu:licensed` / `vgpu:unlicensed`: the machine is a virtual machine whose GPUs are vGPUs,
      holding their license or not.
    """
    for item in filter(None, (x.strip() for x in spec.split(","))):
        if item == "foreign-event-handles":
            machine.foreign_event_handles = True
            continue
        kind, sep, rest = item.partition(":")
        if sep and kind == "module":
            machine.module_version = None if rest.strip().lower() == "none" else rest.strip()
        elif sep and kind == "torch-arch":
            machine.set_torch_archs(rest)
        elif sep and kind == "probe-torch" and rest.strip() == "cpu":
            machine.probe_torch_cpu = True
        elif sep and kind == "env-libcuda":
            machine.env_libcuda = rest.strip()
        elif sep and kind == "vgpu" and rest.strip() in ("licensed", "unlicensed"):
            machine.vgpu = rest.strip()
        elif sep and kind == "hang":
            fn, _, gpu = rest.partition("@")
            machine.hang(fn, int(gpu) if gpu else None)
        elif sep and kind == "lose":
            gpu, _, at = rest.partition("@")
            machine.lose_gpu(int(gpu), float(at) if at else None)
        elif "=" in item:
            fn, _, code = item.partition("=")
            code, _, gpu = code.partition("@")
            machine.inject_error(fn.strip(), _error_code(code), int(gpu) if gpu else None)
        else:
            raise ValueError(f"unknown simulator fault {item!r}")
