"""The simulated machine's health surface: the PCI tree under /sys, InfiniBand ports, kernel
modules, NVSwitch device nodes, processes in D state with their mounts and open files, and the
answers of `lspci`, `systemctl` and `nv-fabricmanager`, in the kernel's and the programs' own
formats.

A scenario's `health` dict sets what is wrong (all optional):
- `env`: {NAME: value} added to the environment of the job's ranks and workers;
- `d_state`: dict(workers=N, wchan=..., mount=(point, fs type, source)): the first N
  data-loader workers sleep in D state with files open on that mount;
- `pcie`: {gpu: (gen, width)} links trained below their maximum; `idle_gen1`: idle GPUs
  drop their link to gen 1 as real ones do to save power;
- `aer`: {gpu: {"correctable": {"BadTLP": 12, ...}, "nonfatal": ..., "fatal": ...}};
- `pci_only_gpus`: GPUs on the PCI bus the driver never took (not in NVML);
- `fabric_manager`: "active", "failed", ...; `fm_version`: its version (default the driver's);
  `fabric_state`: NVML's fabric state of every GPU ("completed", "not_started", ...);
- `ib`: [(state, phys_state, rate)] per port, overriding the default 8 x NDR 400 ports of an
  8-GPU HGX node; `peermem`: whether nvidia_peermem is loaded (default True);
- `acs`: bridges above the GPUs have ACS redirect on; `root`: the tool runs as root, so
  `lspci -vvv` shows the extended capabilities.

Formats: https://docs.kernel.org/PCI/sysfs-pci.html, Documentation/ABI/testing/
sysfs-bus-pci-devices-aer_stats, proc(5) (stat, wchan, mountinfo, fdinfo), lspci(8).
"""

from __future__ import annotations

import errno
import posixpath

from ..sources import CommandResult
from .fake_nvml import FakeNvml
from .fake_nvml_base import nvml_api
from .health_procs import SimJobHealth, sim_error
from .population import _HGX_BUSES, SimProc

NVIDIA = "0x10de"
MELLANOX = "0x15b3"
_GTS = {
    1: "2.5 GT/s PCIe",
    2: "5.0 GT/s PCIe",
    3: "8.0 GT/s PCIe",
    4: "16.0 GT/s PCIe",
    5: "32.0 GT/s PCIe",
    6: "64.0 GT/s PCIe",
}
_AER = {
    "correctable": (
        (
            "RxErr",
            "BadTLP",
            "BadDLLP",
            "Rollover",
            "Timeout",
            "NonFatalErr",
            "CorrIntErr",
            "HeaderOF",
        ),
        "TOTAL_ERR_COR",
    ),
    "fatal": (
        (
            "Undefined",
            "DLP",
            "SDES",
            "TLP",
            "FCP",
            "CmpltTO",
            "CmpltAbrt",
            "UnxCmplt",
            "RxOF",
            "MalfTLP",
            "ECRC",
            "UnsupReq",
            "ACSViol",
            "UncorrIntErr",
            "BlockedTLP",
            "AtomicOpBlocked",
            "TLPBlockedErr",
            "PoisonTLPBlocked",
        ),
        "TOTAL_ERR_FATAL",
    ),
    "nonfatal": (
        (
            "Undefined",
            "DLP",
            "SDES",
            "TLP",
            "FCP",
            "CmpltTO",
            "CmpltAbrt",
            "UnxCmplt",
            "RxOF",
            "MalfTLP",
            "ECRC",
            "UnsupReq",
            "ACSViol",
            "UncorrIntErr",
            "BlockedTLP",
            "AtomicOpBlocked",
            "TLPBlockedErr",
            "PoisonTLPBlocked",
        ),
        "TOTAL_ERR_NONFATAL",
    ),
}


class SimHealth:
    """What the health readers read on the simulated machine; `read`/`listdir` answer None for
    a path that is not theirs."""

    def __init__(self, machine) -> None:
        self._m = machine
        spec = machine.spec
        self.cfg: dict = dict(spec.get("health", {}))
        gpus = machine.gpus
        n = len(gpus)
        extra = int(self.cfg.get("pci_only_gpus", 0))
        nvlinks = machine.model.get("nvlinks", 0)
        hgx = n + extra == 8 and nvlinks > 0 and not machine.no_driver
        self.nvswitches = 4 if hgx else 0  # an HGX board of 8 GPUs has 4 NVSwitches
        self.root = bool(self.cfg.get("root"))
        self.devices: dict[str, dict] = {}  # bdf -> vendor, class, device, phys path, kind
        self.gpu_bdf: dict[str, int | None] = {}  # GPU bdf -> NVML index (None: PCI only)
        for g in gpus:
            self._add_gpu(g.bus, g.index)
        for k in range(extra):
            self._add_gpu(self._free_bus(n + k), None)
        if self.nvswitches:
            self._add("0000:04:00.0", "0x1000", "0x060400", "0xc030", None, "pcieport")
        for k in range(self.nvswitches):
            self._add(f"0000:{5 + k:02x}:00.0", NVIDIA, "0x068000", "0x22a3", "0000:04:00.0")
        self._add("0000:00:00.0", "0x8086", "0x060000", "0x09a2", None, None)
        self.ib_ports = self._ib(hgx)
        self.jobs = SimJobHealth(machine, self.cfg)

    # -- the PCI tree --------------------------------------------------------------------------
    def _free_bus(self, k: int) -> tuple[int, int, int]:
        return (0, _HGX_BUSES[k] if k < len(_HGX_BUSES) else 0x10 + (k % 64) * 3 + 1, 0)

    def _add(self, bdf, vendor, cls, device, parent, driver="") -> None:
        if parent is None:
            phys = f"/sys/devices/pci{bdf[:7]}/{bdf}"
        else:
            phys = f"{self.devices[parent]['phys']}/{bdf}"
        self.devices[bdf] = dict(vendor=vendor, cls=cls, device=device, phys=phys, driver=driver)

    def _add_gpu(self, bus: tuple[int, int, int], index: int | None) -> None:
        d, b, dev = bus
        root_bus = (b - 2) & 0xFF
        root, switch = f"{d:04x}:{root_bus:02x}:01.0", f"{d:04x}:{(b - 1) & 0xFF:02x}:00.0"
        self._add(root, "0x8086", "0x060400", "0x352a", None, "pcieport")
        self._add(switch, "0x1000", "0x060400", "0xc030", root, "pcieport")
        bdf = f"{d:04x}:{b:02x}:{dev:02x}.0"
        device = self._m.model.get("pci_device_id", 0x233010DE) >> 16
        self._add(bdf, NVIDIA, "0x030200", f"0x{device:04x}", switch, "nvidia")
        self.gpu_bdf[bdf] = index

    def _resolve(self, path: str) -> str:
        """A path through the /sys/bus/pci/devices/<bdf> symlink, resolved as the kernel does:
        `..` after the link climbs the physical tree."""
        prefix = "/sys/bus/pci/devices/"
        if path.startswith(prefix):
            bdf, _, rest = path[len(prefix) :].partition("/")
            if bdf in self.devices:
                path = self.devices[bdf]["phys"] + ("/" + rest if rest else "")
        return posixpath.normpath(path)

    def _device_at(self, phys_dir: str) -> str | None:
        return next((b for b, d in self.devices.items() if d["phys"] == phys_dir), None)

    def _pci_file(self, bdf: str, name: str, path: str) -> str:
        d = self.devices[bdf]
        if name == "vendor":
            return d["vendor"] + "\n"
        if name == "class":
            return d["cls"] + "\n"
        if name == "device":
            return d["device"] + "\n"
        if name == "uevent":
            cls = d["cls"][2:].lstrip("0").upper() or "0"
            pci_id = f"{d['vendor'][2:].upper()}:{d['device'][2:].upper()}"
            head = f"DRIVER={d['driver']}\n" if d["driver"] else ""
            return f"{head}PCI_CLASS={cls}\nPCI_ID={pci_id}\nPCI_SLOT_NAME={bdf}\n"
        if bdf in self.gpu_bdf:
            return self._gpu_file(bdf, name, path)
        raise sim_error(errno.ENOENT, path)

    def _gpu_file(self, bdf: str, name: str, path: str) -> str:
        index = self.gpu_bdf[bdf]
        gen_max, width_max = self._m.model["pcie"]
        gen, width = self.link(index) if index is not None else (gen_max, width_max)
        if name == "current_link_speed":
            return _GTS[gen] + "\n"
        if name == "max_link_speed":
            return _GTS[gen_max] + "\n"
        if name == "current_link_width":
            return f"{width}\n"
        if name == "max_link_width":
            return f"{width_max}\n"
        if name.startswith("aer_dev_") and name[8:] in _AER:
            kind = name[8:]
            names, total = _AER[kind]
            counts = self.cfg.get("aer", {}).get(index, {}).get(kind, {})
            lines = [f"{k} {counts.get(k, 0)}" for k in names]
            return "\n".join([*lines, f"{total} {sum(counts.values())}"]) + "\n"
        raise sim_error(errno.ENOENT, path)

    def link(self, index: int) -> tuple[int, int]:
        """(gen, width) the GPU's link runs at now: a downtrained link stays so; with
        `idle_gen1`, an idle GPU's link drops to gen 1."""
        gen_max, width_max = self._m.model["pcie"]
        gen, width = self.cfg.get("pcie", {}).get(index, (gen_max, width_max))
        if self.cfg.get("idle_gen1"):
            gs = self._m.state()["gpus"]
            if index < len(gs) and (gs[index].get("util") or 0) < 5:
                gen = 1
        return gen, width

    # -- lspci ---------------------------------------------------------------------------------
    def lspci(self, argv: list[str]) -> str:
        """`lspci -D -vvv` (or `-s BDF`): each device's block; extended capabilities (ACS) only
        for root, "<access denied>" otherwise, as lspci prints them."""
        want = argv[argv.index("-s") + 1] if "-s" in argv[:-1] else None
        blocks = []
        for bdf in sorted(self.devices):
            if want is not None and not bdf.endswith(want):
                continue
            d = self.devices[bdf]
            kind = {"0x0604": "PCI bridge", "0x0302": "3D controller", "0x0680": "Bridge"}.get(
                d["cls"][:6], "Host bridge"
            )
            lines = [f"{bdf} {kind}: Device {d['vendor'][2:]}:{d['device'][2:]} (rev a1)"]
            if not self.root:
                lines.append("\tCapabilities: <access denied>")
            elif d["cls"].startswith("0x0604"):
                on = "+" if self.cfg.get("acs") else "-"
                lines += [
                    "\tCapabilities: [40] Express (v2) Downstream Port (Slot+), MSI 00",
                    "\tCapabilities: [220 v1] Access Control Services",
                    "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ "
                    "EgressCtrl- DirectTrans+",
                    f"\t\tACSCtl:\tSrcValid{on} TransBlk- ReqRedir{on} CmpltRedir{on} "
                    f"UpstreamFwd{on} EgressCtrl- DirectTrans-",
                ]
            else:
                lines.append("\tCapabilities: [60] Power Management version 3")
            if d["driver"]:
                lines.append(f"\tKernel driver in use: {d['driver']}")
            blocks.append("\n".join(lines) + "\n")
        return "\n".join(blocks)

    def command(self, prog: str, argv: list[str]) -> CommandResult | None:
        """`lspci`, `systemctl is-active nvidia-fabricmanager`, `nv-fabricmanager --version`;
        None where the program is not there (no fabric manager without NVSwitches)."""
        if prog == "lspci":
            return CommandResult(0, self.lspci(argv))
        fm = self.nvswitches > 0 and not self._m.no_driver
        if prog == "systemctl" and argv[1:3] == ["is-active", "nvidia-fabricmanager"]:
            state = self.cfg.get("fabric_manager", "active") if fm else "inactive"
            return CommandResult(0 if state == "active" else 3, state + "\n")
        if prog == "nv-fabricmanager" and fm and "--version" in argv:
            version = self.cfg.get("fm_version", self._m.driver_version)
            return CommandResult(0, f"Fabric Manager version is : {version}\n")
        return None

    def fabric_state(self, index: int) -> str:
        """NVML's fabric state of a GPU: "completed" once the fabric manager has registered it
        on an NVSwitch system, "not_supported" without NVSwitches."""
        if not self.nvswitches:
            return "not_supported"
        default = (
            "completed" if self.cfg.get("fabric_manager", "active") == "active" else "not_started"
        )
        return self.cfg.get("fabric_state", default)

    # -- InfiniBand, modules, device nodes -----------------------------------------------------
    def _ib(self, hgx: bool) -> list[tuple[str, str, str, str, str]]:
        """(device, state, phys_state, rate, link_layer) of each port 1."""
        spec = self.cfg.get("ib")
        if spec is None:
            spec = [("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")] * 8 if hgx else []
        return [(f"mlx5_{k}", s, ps, rate, "InfiniBand") for k, (s, ps, rate) in enumerate(spec)]

    def modules(self) -> str:
        m = self._m
        lines = [
            "ib_core 479232 8 rdma_ucm,ib_uverbs,mlx5_ib, Live 0x0000000000000000",
            "mlx5_core 2490368 1 mlx5_ib, Live 0x0000000000000000",
        ]
        if not m.no_driver and m.module_version is not None:
            if self.cfg.get("peermem", True) and self.ib_ports:
                lines.insert(0, "nvidia_peermem 16384 0 - Live 0x0000000000000000")
            lines += [
                "nvidia_uvm 4956160 8 - Live 0x0000000000000000",
                "nvidia_drm 122880 0 - Live 0x0000000000000000",
                "nvidia_modeset 1355776 1 nvidia_drm, Live 0x0000000000000000",
                "nvidia 11538432 98 nvidia_peermem,nvidia_uvm,nvidia_modeset, Live "
                "0x0000000000000000",
            ]
        return "\n".join(lines) + "\n"

    def dev_nodes(self) -> list[str]:
        m = self._m
        names = [] if m.no_driver else ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
        names += [f"nvidia{g.minor}" for g in m.gpus]
        if self.nvswitches and not m.no_driver:
            names += ["nvidia-nvswitchctl"] + [
                f"nvidia-nvswitch{k}" for k in range(self.nvswitches)
            ]
        return names + ["null", "zero", "pts", "shm"]

    # -- processes (sim/health_procs.py) -------------------------------------------------------
    def state(self, pid: int) -> str:
        return self.jobs.state(pid)

    def pid_file(self, p: SimProc, rest: list[str], path: str) -> str | None:
        return self.jobs.pid_file(p, rest, path)

    def pid_listdir(self, p: SimProc, rest: list[str], path: str) -> list[str] | None:
        return self.jobs.pid_listdir(p, rest, path)

    # -- the doors -----------------------------------------------------------------------------
    def read(self, path: str) -> str | None:
        if path == "/proc/self/mountinfo":
            return self.jobs.mountinfo()
        if path == "/proc/modules":
            return self.modules()
        if path.startswith("/sys/bus/pci/devices/") or path.startswith("/sys/devices/pci"):
            return self._sys_pci(path)
        if path.startswith("/sys/class/infiniband"):
            return self._ib_file(path)
        return None

    def _sys_pci(self, path: str) -> str | None:
        phys = self._resolve(path)
        directory, name = posixpath.split(phys)
        bdf = self._device_at(directory)
        if bdf is not None:
            if name in ("numa_node", "local_cpulist") and bdf in self.gpu_bdf:
                return None  # fake_procfs answers these
            return self._pci_file(bdf, name, path)
        if self._device_at(phys) is not None or phys.count("/") == 3:
            raise sim_error(errno.EISDIR, path)
        if (
            name == "uevent"
            and directory.count("/") == 3
            and directory.startswith("/sys/devices/pci")
        ):
            return ""  # the host bridge's directory: an empty uevent
        raise sim_error(errno.ENOENT, path)

    def _ib_file(self, path: str) -> str:
        parts = [x for x in path.split("/") if x][3:]  # after sys/class/infiniband
        ports = {dev: (s, ps, rate, ll) for dev, s, ps, rate, ll in self.ib_ports}
        if not ports:
            raise sim_error(errno.ENOENT, path)
        if len(parts) == 4 and parts[0] in ports and parts[1:3] == ["ports", "1"]:
            names = ("state", "phys_state", "rate", "link_layer")
            if parts[3] in names:
                return ports[parts[0]][names.index(parts[3])] + "\n"
        raise sim_error(errno.EISDIR if len(parts) < 4 else errno.ENOENT, path)

    def listdir(self, path: str) -> list[str] | None:
        path = path.rstrip("/") or "/"
        if path == "/sys/bus/pci/devices":
            return list(self.devices)
        if path == "/dev":
            return self.dev_nodes()
        if path == "/sys/class/infiniband":
            if not self.ib_ports:
                raise sim_error(errno.ENOENT, path)
            return [dev for dev, *_ in self.ib_ports]
        if path.startswith("/sys/class/infiniband/") and path.endswith("/ports"):
            dev = path.split("/")[4]
            if any(d == dev for d, *_ in self.ib_ports):
                return ["1"]
            raise sim_error(errno.ENOENT, path)
        return None


class HealthNvml(FakeNvml):
    """The pynvml stand-in with the health surface's PCIe links: a link trained below its
    maximum, and with `idle_gen1` an idle GPU's link at gen 1, as NVML reports them."""

    @nvml_api
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        health = getattr(self._m, "health", None)
        if health is None:
            return self._sim(handle).model["pcie"][0]
        return health.link(self._index(handle))[0]

    @nvml_api
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        health = getattr(self._m, "health", None)
        if health is None:
            return self._sim(handle).model["pcie"][1]
        return health.link(self._index(handle))[1]
