"""The GPUs and NVSwitches as the PCI bus shows them, independent of the driver.

/sys/bus/pci/devices/<BDF>/ (https://docs.kernel.org/PCI/sysfs-pci.html and
Documentation/ABI/testing/sysfs-bus-pci):
- `vendor` 0x10de is NVIDIA; `class` 0x0300xx (VGA) and 0x0302xx (3D controller) are GPUs,
  0x0680xx ("other bridge") are NVSwitches;
- `current_link_speed`, `max_link_speed` ("32.0 GT/s PCIe"), `current_link_width`,
  `max_link_width`: the trained link against what the device can do;
- `aer_dev_correctable`, `aer_dev_fatal`, `aer_dev_nonfatal`: the AER error counters since boot,
  one "NAME count" line each and a TOTAL_ERR_* line
  (https://docs.kernel.org/PCI/pcieaer-howto.html);
- `../uevent` of the device's own directory is its parent's: `PCI_SLOT_NAME` names the bridge
  above it, so the bridges up to the root port are walked without resolving the symlink.

ACS (Access Control Services) lives in extended configuration space, which only root may read:
one `lspci -D -vvv` lists every device's capabilities, and the `ACSCtl:` line of each bridge
above a GPU says whether peer-to-peer requests are redirected up to the root complex.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace

from ...model.health import ABSENT, AcsBridge, PciFacts, PciGpu, Reading
from .procs import problem_of

DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA compatible, 3D controller
NVSWITCH_CLASS = "0x0680"  # bridge, other: NVSwitch
LINK_FILES = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")
AER_FILES = (
    ("correctable", "aer_dev_correctable"),
    ("fatal", "aer_dev_fatal"),
    ("nonfatal", "aer_dev_nonfatal"),
)
MAX_BRIDGES = 8  # levels walked up from a GPU
LSPCI_TIMEOUT_S = 10.0
NO_ROOT = "not readable without root"


def _read(procfs, path: str) -> Reading:
    try:
        return Reading(procfs.read_text(path).strip(), path)
    except OSError as e:
        return Reading(None, path, problem_of(e))


def parse_aer(text: str) -> tuple[int | None, tuple[tuple[str, int], ...]]:
    """(TOTAL_ERR_* count, the non-zero named counters) of an aer_dev_* file."""
    total, named = None, []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            continue
        if parts[0].startswith("TOTAL_ERR"):
            total = int(parts[1])
        elif int(parts[1]):
            named.append((parts[0], int(parts[1])))
    if total is None and named:
        total = sum(n for _, n in named)
    return total, tuple(named)


def read_pci(procfs, run_command, with_acs: bool = True) -> PciFacts:
    try:
        names = sorted(procfs.listdir(DEVICES))
    except OSError as e:
        return PciFacts(problem=problem_of(e))
    gpus, switches = [], []
    for bdf in names:
        try:
            if procfs.read_text(f"{DEVICES}/{bdf}/vendor").strip().lower() != NVIDIA_VENDOR:
                continue
            cls = procfs.read_text(f"{DEVICES}/{bdf}/class").strip().lower()
        except OSError:
            continue
        if cls.startswith(NVSWITCH_CLASS):
            switches.append(bdf)
        elif cls.startswith(GPU_CLASSES):
            gpus.append(_gpu(procfs, bdf, cls))
    if with_acs and gpus:
        gpus = _with_acs(run_command, gpus)
    return PciFacts(tuple(gpus), tuple(switches))


def _gpu(procfs, bdf: str, cls: str) -> PciGpu:
    dev = _read(procfs, f"{DEVICES}/{bdf}/device")
    link, aer = _link_and_aer(procfs, bdf)
    return PciGpu(bdf, dev.value, cls, *link, aer=aer, bridges=bridges_above(procfs, bdf))


def _link_and_aer(procfs, bdf: str) -> tuple[list[Reading], tuple[tuple[str, Reading], ...]]:
    base = f"{DEVICES}/{bdf}"
    link = [_read(procfs, f"{base}/{name}") for name in LINK_FILES]
    aer = []
    for key, name in AER_FILES:
        r = _read(procfs, f"{base}/{name}")
        aer.append((key, r if not r.ok else Reading(parse_aer(r.value), r.source)))
    return link, tuple(aer)


def reread_links(procfs, pci: PciFacts) -> PciFacts:
    """`pci` (a scan of the bus made earlier) with each GPU's link and AER files read again:
    what changes under load, without listing the bus or running lspci."""
    gpus = []
    for g in pci.gpus:
        link, aer = _link_and_aer(procfs, g.bdf)
        gpus.append(
            replace(
                g,
                link_speed=link[0],
                link_speed_max=link[1],
                link_width=link[2],
                link_width_max=link[3],
                aer=aer,
            )
        )
    return replace(pci, gpus=tuple(gpus))


def bridges_above(procfs, bdf: str) -> tuple[str, ...]:
    """The bridges between the device and its root complex, nearest first."""
    out: list[str] = []
    up = f"{DEVICES}/{bdf}"
    for _ in range(MAX_BRIDGES):
        up += "/.."
        try:
            text = procfs.read_text(f"{up}/uevent")
        except OSError:
            break
        slot = next((ln[14:] for ln in text.splitlines() if ln.startswith("PCI_SLOT_NAME=")), "")
        if not slot:  # the host bridge's directory (pci0000:00): the top
            break
        out.append(slot.strip())
    return tuple(out)


_HEAD = re.compile(r"^([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) ", re.M)


def parse_lspci(text: str) -> dict[str, str]:
    """BDF -> its block of `lspci -D -vvv` output."""
    heads = list(_HEAD.finditer(text))
    return {
        m.group(1).lower(): text[m.start() : heads[k + 1].start() if k + 1 < len(heads) else None]
        for k, m in enumerate(heads)
    }


def parse_acs(block: str) -> tuple[bool | None, tuple[tuple[str, bool], ...]]:
    """(has ACS, the ACSCtl flags) of one device's block: None when the capabilities could not be
    read (lspci run without root prints "Capabilities: <access denied>")."""
    m = re.search(r"ACSCtl:\s*(.*)", block)
    if m:
        flags = re.findall(r"(\w+)([+-])", m.group(1))
        return True, tuple((name, sign == "+") for name, sign in flags)
    if "<access denied>" in block or "Capabilities:" not in block:
        return None, ()
    return False, ()


def _with_acs(run_command, gpus: list[PciGpu]) -> list[PciGpu]:
    bridges = sorted({b for g in gpus for b in g.bridges})
    if not bridges:
        return gpus
    argv = ("lspci", "-D", "-vvv")
    source = " ".join(argv)
    blocks: dict[str, str] = {}
    problem = None
    try:
        res = run_command(argv, LSPCI_TIMEOUT_S)
        if res.returncode != 0 and not res.stdout:
            problem = f"lspci exited with {res.returncode}: {res.stderr.strip()[:120]}"
        blocks = parse_lspci(res.stdout)
    except FileNotFoundError:
        problem = "lspci not installed (pciutils)"
    except (OSError, subprocess.TimeoutExpired) as e:
        problem = f"lspci failed: {e}"
    acs = {}
    for b in bridges:
        if problem is not None:
            acs[b] = AcsBridge(b, problem=problem, source=source)
            continue
        block = blocks.get(b)
        if block is None:
            acs[b] = AcsBridge(b, problem=ABSENT, source=source)
            continue
        has, flags = parse_acs(block)
        acs[b] = AcsBridge(b, flags, has, None if has is not None else NO_ROOT, source)
    return [replace(g, acs=tuple(acs[b] for b in g.bridges)) for g in gpus]
