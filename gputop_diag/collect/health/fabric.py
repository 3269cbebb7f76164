"""The interconnect between machines and between GPUs: InfiniBand/RoCE ports, the GPUDirect RDMA
module, and the fabric manager of NVSwitch systems.

- /sys/class/infiniband/<device>/ports/<port>/{state,phys_state,rate,link_layer}
  (https://docs.kernel.org/infiniband/sysfs.html style attributes of the RDMA core): "4: ACTIVE",
  "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand" or "Ethernet" (RoCE). No such directory: no
  RDMA device, a normal machine.
- /proc/modules: `nvidia_peermem` (or the older `nv_peer_mem`) lets the NIC read and write GPU
  memory directly (GPUDirect RDMA,
  https://docs.nvidia.com/cuda/gpudirect-rdma/index.html).
- Fabric manager: on NVSwitch systems (PCI class 0x0680 of vendor 0x10de, /dev/nvidia-nvswitch*)
  CUDA cannot start until the `nvidia-fabricmanager` service has configured the switches, and
  the service must be the driver's exact version
  (https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html).
"""

from __future__ import annotations

import re
import subprocess

from ...model.health import ABSENT, FabricManagerFacts, IbPort, InterconnectFacts, Reading
from .procs import problem_of

IB_ROOT = "/sys/class/infiniband"
PORT_FILES = ("state", "phys_state", "rate", "link_layer")
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
FM_SERVICE = "nvidia-fabricmanager"
COMMAND_TIMEOUT_S = 5.0
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")


def read_interconnect(procfs) -> InterconnectFacts:
    ports, problem = _ib_ports(procfs)
    return InterconnectFacts(ports, problem, _peermem(procfs))


def _ib_ports(procfs) -> tuple[tuple[IbPort, ...], str | None]:
    try:
        devices = sorted(procfs.listdir(IB_ROOT))
    except OSError as e:
        return (), problem_of(e)
    out = []
    for dev in devices:
        try:
            ports = sorted(procfs.listdir(f"{IB_ROOT}/{dev}/ports"), key=_num)
        except OSError as e:
            out.append(IbPort(dev, "?", None, None, None, None, problem_of(e), f"{IB_ROOT}/{dev}"))
            continue
        for port in ports:
            base = f"{IB_ROOT}/{dev}/ports/{port}"
            values, problem = [], None
            for name in PORT_FILES:
                try:
                    values.append(procfs.read_text(f"{base}/{name}").strip())
                except OSError as e:
                    values.append(None)
                    problem = problem or f"{name}: {problem_of(e)}"
            out.append(IbPort(dev, port, *values, problem=problem, source=base))
    return tuple(out), None


def _num(s: str) -> int:
    return int(s) if s.isdigit() else 0


def _peermem(procfs) -> Reading:
    path = "/proc/modules"
    try:
        text = procfs.read_text(path)
    except OSError as e:
        return Reading(None, path, problem_of(e))
    loaded = {line.split(" ", 1)[0] for line in text.splitlines()}
    return Reading(next((m for m in PEERMEM_MODULES if m in loaded), None), path)


def nvswitch_nodes(procfs) -> tuple[str, ...]:
    try:
        names = procfs.listdir("/dev")
    except OSError:
        return ()
    nodes = (n for n in names if n.startswith("nvidia-nvswitch") and n[15:].isdigit())
    return tuple(sorted(f"/dev/{n}" for n in nodes))


def _command(run_command, argv: tuple[str, ...]) -> tuple[object, str | None]:
    """(the result, a problem): a program that is not installed is said as such."""
    try:
        return run_command(argv, COMMAND_TIMEOUT_S), None
    except FileNotFoundError:
        return None, f"{argv[0]} not installed"
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{argv[0]} failed: {e}"


def read_fabric_manager(procfs, run_command, nvswitches: tuple[str, ...]) -> FabricManagerFacts:
    """The fabric manager's service state and version, asked only where there are NVSwitches
    (on the PCI bus or as device nodes)."""
    nodes = nvswitch_nodes(procfs)
    if not nvswitches and not nodes:
        return FabricManagerFacts(nodes)
    argv = ("systemctl", "is-active", FM_SERVICE)
    res, problem = _command(run_command, argv)
    if res is None:
        service = Reading(None, " ".join(argv), problem)
    else:  # "active", "inactive", "failed", "activating"; exit 0 only when active
        service = Reading(
            res.stdout.strip().splitlines()[0] if res.stdout.strip() else "unknown", " ".join(argv)
        )
    argv = ("nv-fabricmanager", "--version")
    res, problem = _command(run_command, argv)
    if res is None:
        version = Reading(None, " ".join(argv), problem)
    else:
        m = _VERSION.search(res.stdout + " " + res.stderr)
        version = Reading(m.group(0) if m else None, " ".join(argv), None if m else ABSENT)
    return FabricManagerFacts(nodes, service, version, asked=True)
