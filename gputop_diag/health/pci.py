"""The PCI checks: GPUs on the bus against NVML's, each link against its maximum under load, AER
error counters, ACS on the bridges between the GPUs."""

from __future__ import annotations

import re

from ..model.formats import count
from ..model.health import (
    Finding,
    HealthEvidence,
    NvmlFacts,
    NvmlGpu,
    PciFacts,
    PciGpu,
    Reading,
)
from .rules import ACS_P2P_FLAGS, BUSY_UTIL_PCT, PCIE_GEN_BY_GTS

_TRANSFER = ("input_pipeline", "communication")  # host<->GPU copies, PCIe peer and NIC traffic


def bdf(bus_id: str | None) -> str | None:
    """A bus id in sysfs' form (0000:18:00.0) from NVML's (00000000:18:00.0) or any other."""
    if not bus_id:
        return None
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    try:
        return f"{int(parts[0], 16):04x}:{parts[1][-2:]}:{parts[2]}"
    except (ValueError, IndexError):
        return None


def no_pci_view(pci: PciFacts, nvml: NvmlFacts) -> bool:
    """The PCI bus shows no NVIDIA GPU while NVML lists some: this is not the host's view of the
    bus (a container without the host's /sys, NVIDIA's mock NVML library), not a missing GPU."""
    return pci.problem is None and not pci.gpus and bool(nvml.gpus)


def _not_on_this_bus(nvml: NvmlFacts, check: str, fid: str, classes: tuple[str, ...]) -> Finding:
    return Finding(
        fid,
        "info",
        f"not checked: the PCI bus here shows no NVIDIA GPU while NVML lists {len(nvml.gpus)} "
        "(a container without the host's /sys, or a mock NVML library)",
        (HealthEvidence(f"{count(len(nvml.gpus), 'GPU')} in NVML", "nvmlDeviceGetCount"),),
        "",
        classes,
        check,
    )


def count_findings(pci: PciFacts, nvml: NvmlFacts) -> list[Finding]:
    if no_pci_view(pci, nvml):
        return [
            Finding(
                "pci.gpu_count",
                "info",
                f"{count(len(nvml.gpus), 'GPU')} "
                "in NVML; the PCI bus here shows none, so the count "
                "is NVML's: the PCI view is not available (a container without the host's /sys, "
                "or a mock NVML library)",
                (
                    HealthEvidence("0 NVIDIA GPUs on the PCI bus", pci.source),
                    HealthEvidence(f"{count(len(nvml.gpus), 'GPU')} in NVML", "nvmlDeviceGetCount"),
                ),
                "",
                ("scheduler",),
                "gpu_count",
            )
        ]
    if pci.problem is not None:
        return [
            Finding(
                "pci.gpu_count",
                "info",
                f"the PCI bus could not be read ({pci.problem})",
                (HealthEvidence(pci.problem, pci.source),),
                "lspci -D -d 10de:",
                (),
                "gpu_count",
            )
        ]
    on_bus = {g.bdf: g for g in pci.gpus}
    in_nvml = {bdf(g.bus_id) for g in nvml.gpus}
    missing = sorted(set(on_bus) - in_nvml)
    evidence = (
        HealthEvidence(f"{count(len(on_bus), 'NVIDIA GPU')} on the PCI bus", pci.source),
        HealthEvidence(
            f"{count(len(nvml.gpus), 'GPU')} in NVML"
            + (f" ({nvml.problem})" if nvml.problem else ""),
            "nvmlDeviceGetCount",
        ),
    )
    if not missing:
        return [
            Finding(
                "pci.gpu_count",
                "ok",
                f"every NVIDIA GPU on the PCI bus is in NVML ({len(on_bus)})"
                if on_bus
                else "no NVIDIA GPU on the PCI bus",
                evidence,
                "",
                ("scheduler",),
                "gpu_count",
            )
        ]
    if nvml.problem is not None and not nvml.gpus:
        return [
            Finding(
                "pci.gpu_count",
                "critical",
                f"{count(len(missing), 'NVIDIA GPU')} "
                "on the PCI bus, none usable: NVML could not be "
                "opened (is the driver loaded?)",
                evidence,
                "lsmod | grep -E '^nvidia' ; sudo dmesg | grep -E 'NVRM|nvidia' | tail -20",
                ("scheduler",),
                "gpu_count",
            )
        ]
    return [
        Finding(
            "pci.gpu_count",
            "critical",
            f"{count(len(missing), 'NVIDIA GPU')} "
            "on the PCI bus are missing from NVML: lost before or "
            "while the driver loaded",
            evidence
            + tuple(
                HealthEvidence(f"{b}: on the bus, not in NVML", f"{pci.source}/{b}")
                for b in missing
            ),
            "sudo dmesg | grep -E 'NVRM|nvidia' | grep -i -E 'fail|error|fallen|RmInitAdapter'",
            ("scheduler",),
            "gpu_count",
        )
    ]


def _gen(speed: Reading | None) -> int | None:
    if speed is None or not speed.ok or not speed.value:
        return None
    m = re.match(r"([\d.]+)\s*GT/s", speed.value)
    return PCIE_GEN_BY_GTS.get(float(m.group(1))) if m else None


def _int(r: Reading | None) -> int | None:
    if r is None or not r.ok:
        return None
    try:
        return int(str(r.value).strip())
    except ValueError:
        return None


def _link(
    n: NvmlGpu | None, p: PciGpu | None
) -> tuple[int | None, int | None, int | None, int | None, str]:
    """(gen, max gen, width, max width, where read): NVML's, else sysfs'."""
    if n is not None and _int(n.pcie_gen) is not None and _int(n.pcie_gen_max) is not None:
        return (
            _int(n.pcie_gen),
            _int(n.pcie_gen_max),
            _int(n.pcie_width),
            _int(n.pcie_width_max),
            "nvmlDeviceGetCurrPcieLinkGeneration/Width, nvmlDeviceGetMaxPcieLinkGeneration/Width",
        )
    if p is not None:
        return (
            _gen(p.link_speed),
            _gen(p.link_speed_max),
            _int(p.link_width),
            _int(p.link_width_max),
            f"/sys/bus/pci/devices/{p.bdf}/current_link_speed, max_link_speed, "
            "current_link_width, max_link_width",
        )
    return None, None, None, None, ""


def link_findings(pci: PciFacts, nvml: NvmlFacts) -> list[Finding]:
    by_bdf = {g.bdf: g for g in pci.gpus}
    out, fine, idle_low = [], 0, []
    for n in nvml.gpus:
        if n.lost:
            continue
        p = by_bdf.get(bdf(n.bus_id))
        gen, gen_max, width, width_max, where = _link(n, p)
        if gen is None or gen_max is None:
            continue
        low = gen < gen_max or (width is not None and width_max is not None and width < width_max)
        if not low:
            fine += 1
            continue
        busy = n.util_gpu_pct is not None and n.util_gpu_pct >= BUSY_UTIL_PCT
        text = f"GPU {n.index}: PCIe gen {gen} x{width} of gen {gen_max} x{width_max}"
        util = "n/a" if n.util_gpu_pct is None else f"{n.util_gpu_pct:.0f} %"
        if not busy:
            idle_low.append(HealthEvidence(f"{text}, utilization {util}", where))
            continue
        out.append(
            Finding(
                "pcie.link_downtrained",
                "warning",
                f"GPU {n.index}'s PCIe link trained below its maximum under load "
                f"(gen {gen} x{width} "
                f"of gen {gen_max} x{width_max})",
                (HealthEvidence(f"{text} while {util} busy", where),) + _sysfs_link(p),
                f"sudo lspci -vvv -s {p.bdf if p else bdf(n.bus_id)} | grep -E 'LnkCap:|LnkSta:'",
                _TRANSFER,
                "pcie_link",
                (n.index,),
            )
        )
    if idle_low:
        out.append(
            Finding(
                "pcie.link_idle",
                "info",
                f"{count(len(idle_low), 'idle GPU')} "
                "run their PCIe link below its maximum: normal power "
                "saving, judged again under load",
                tuple(idle_low),
                "nvidia-smi -q -d PCIE  # while a job runs",
                _TRANSFER,
                "pcie_link",
            )
        )
    if not out and not idle_low and not any(not n.lost for n in nvml.gpus):
        out.append(Finding("pcie.link", "ok", "no GPU to check", (), "", _TRANSFER, "pcie_link"))
    elif not out and not idle_low:
        out.append(
            Finding(
                "pcie.link",
                "ok" if fine else "info",
                f"every GPU's PCIe link at its maximum generation and width ({fine})"
                if fine
                else "no PCIe link figure could be read",
                (),
                "",
                _TRANSFER,
                "pcie_link",
            )
        )
    return out


def _sysfs_link(p: PciGpu | None) -> tuple[HealthEvidence, ...]:
    if p is None or p.link_speed is None or not p.link_speed.ok:
        return ()
    top = p.link_speed_max.value if p.link_speed_max is not None else "?"
    return (
        HealthEvidence(
            f"sysfs: {p.link_speed.value} x{_int(p.link_width)} of {top} x{_int(p.link_width_max)}",
            f"/sys/bus/pci/devices/{p.bdf}/current_link_speed",
        ),
    )


def aer_findings(pci: PciFacts, nvml: NvmlFacts) -> list[Finding]:
    index = {bdf(g.bus_id): g.index for g in nvml.gpus}
    worst, evidence, gpus, read, absent = "ok", [], [], 0, 0
    rank = {"fatal": ("critical", 0), "nonfatal": ("warning", 1), "correctable": ("info", 2)}
    for g in pci.gpus:
        for kind, r in g.aer:
            if not r.ok:
                absent += 1
                continue
            read += 1
            total, named = r.value
            if not total:
                continue
            sev = rank[kind][0]
            if _order(sev) < _order(worst):
                worst = sev
            detail = ", ".join(f"{k} {v}" for k, v in named)
            gi = index.get(g.bdf)
            who = f"GPU {gi}" if gi is not None else g.bdf
            evidence.append(
                HealthEvidence(
                    f"{who}: {count(total, f'{kind} AER error')} since boot"
                    + (f" ({detail})" if detail else ""),
                    r.source,
                )
            )
            if gi is not None:
                gpus.append(gi)
    if worst == "ok" and no_pci_view(pci, nvml):
        return [_not_on_this_bus(nvml, "pcie_aer", "pcie.aer", _TRANSFER)]
    if worst == "ok" and not pci.gpus:
        return [Finding("pcie.aer", "ok", "no GPU on the PCI bus", (), "", _TRANSFER, "pcie_aer")]
    if worst == "ok":
        text = (
            f"no AER error on the GPUs' links since boot ({count(read, 'counter file')} read)"
            if read
            else "no AER counters: the kernel does not publish them for these devices"
        )
        return [
            Finding(
                "pcie.aer",
                "ok" if read else "info",
                text,
                (),
                "",
                _TRANSFER,
                "pcie_aer",
            )
        ]
    first = next((g.bdf for g in pci.gpus if any(r.ok and r.value[0] for _, r in g.aer)), "")
    return [
        Finding(
            "pcie.aer",
            worst,
            "PCIe errors counted on GPU links (AER)",
            tuple(evidence),
            f"sudo dmesg | grep -i -E 'AER|{first}'",
            _TRANSFER,
            "pcie_aer",
            tuple(sorted(set(gpus))),
        )
    ]


def _order(sev: str) -> int:
    return ("critical", "warning", "info", "ok").index(sev)


def acs_findings(pci: PciFacts, nvml: NvmlFacts | None = None) -> list[Finding]:
    bridges = {b.bdf: b for g in pci.gpus for b in g.acs}
    if nvml is not None and len(nvml.gpus) >= 2 and no_pci_view(pci, nvml):
        return [_not_on_this_bus(nvml, "pcie_acs", "pcie.acs", ("communication",))]
    if len(pci.gpus) < 2 or not bridges:
        return [
            Finding(
                "pcie.acs",
                "ok",
                "no bridge between GPUs to check for ACS"
                if len(pci.gpus) >= 2
                else "fewer than two GPUs: no peer-to-peer path to check for ACS",
                (),
                "",
                ("communication",),
                "pcie_acs",
            )
        ]
    on = [b for b in bridges.values() if any(v for k, v in b.flags if k in ACS_P2P_FLAGS)]
    unread = [b for b in bridges.values() if b.problem is not None]
    if on:
        evidence = tuple(
            HealthEvidence(
                f"bridge {b.bdf}: ACSCtl "
                + " ".join(f"{k}{'+' if v else '-'}" for k, v in b.flags if k in ACS_P2P_FLAGS),
                f"{b.source} ({b.bdf})",
            )
            for b in on[:4]
        )
        if len(on) > 4:
            evidence += (
                HealthEvidence(f"and {count(len(on) - 4, 'more bridge')} alike", on[4].source),
            )
        return [
            Finding(
                "pcie.acs",
                "warning",
                f"ACS redirects peer-to-peer traffic on {count(len(on), 'bridge')} above the GPUs",
                evidence
                + (
                    HealthEvidence(
                        "GPU-to-GPU PCIe traffic goes up to the root complex: slower, or hangs "
                        "(NCCL troubleshooting, ACS)",
                        "what it does",
                    ),
                ),
                f"sudo setpci -s {on[0].bdf} ECAP_ACS+0x6.w=0000  # for each bridge, on bare "
                "metal (keep ACS where VMs need isolation)",
                ("communication",),
                "pcie_acs",
            )
        ]
    if unread:
        b = unread[0]
        return [
            Finding(
                "pcie.acs",
                "info",
                f"ACS on the bridges above the GPUs: {b.problem}",
                (HealthEvidence(f"{count(len(unread), 'bridge')}: {b.problem}", b.source),),
                "sudo lspci -vvv | grep ACSCtl",
                ("communication",),
                "pcie_acs",
            )
        ]
    return [
        Finding(
            "pcie.acs",
            "ok",
            f"ACS does not redirect peer-to-peer traffic on the {count(len(bridges), 'bridge')} "
            "above "
            "the GPUs",
            (),
            "",
            ("communication",),
            "pcie_acs",
        )
    ]
