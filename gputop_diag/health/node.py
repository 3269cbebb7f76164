"""The node checks: persistence mode, GSP firmware, the fabric manager of NVSwitch systems,
InfiniBand/RoCE ports and GPUDirect RDMA."""

from __future__ import annotations

import re
from dataclasses import replace

from ..model.formats import count
from ..model.health import (
    FabricManagerFacts,
    Finding,
    HealthEvidence,
    InterconnectFacts,
    NvmlFacts,
    PciFacts,
)
from .rules import IB_ACTIVE, IB_LINKUP


def driver_findings(nvml: NvmlFacts) -> list[Finding]:
    """NVML could not be opened: no GPU can be used (the command's exit status 3 says the same),
    and the checks that ask NVML had nothing to ask."""
    if nvml.problem is None:
        return []
    return [
        Finding(
            "nvml.driver",
            "critical",
            f"no usable NVIDIA driver: {nvml.problem}; the checks that ask NVML had no GPU to ask",
            (HealthEvidence(nvml.problem, "nvmlInit"),),
            "nvidia-smi; lsmod | grep -E '^nvidia'  # is the driver installed and loaded?",
            (),
            "driver",
            layer="driver",
        )
    ]


def persistence_findings(nvml: NvmlFacts) -> list[Finding]:
    off, unread, on = [], [], 0
    for g in nvml.gpus:
        r = g.persistence
        if r is None:
            continue
        if not r.ok:
            unread.append((g.index, r))
        elif r.value:
            on += 1
        else:
            off.append(g.index)
    if off:
        return [
            Finding(
                "nvml.persistence_mode",
                "warning",
                f"persistence mode off on {count(len(off), 'GPU')}: the driver tears the GPUs down "
                "between jobs and each job's start pays their initialisation",
                (
                    HealthEvidence(
                        "off on GPU " + ", ".join(map(str, off)), "nvmlDeviceGetPersistenceMode"
                    ),
                ),
                "sudo systemctl enable --now nvidia-persistenced",
                (),
                "persistence",
                tuple(off),
                layer="driver",
            )
        ]
    if unread:
        f = _unread("nvml.persistence_mode", "persistence mode", unread, "persistence")
        if on:  # the others answered
            ok = HealthEvidence(
                f"on for the other {count(on, 'GPU')}", "nvmlDeviceGetPersistenceMode"
            )
            f = replace(f, evidence=(*f.evidence, ok))
        return [f]
    return [
        Finding(
            "nvml.persistence_mode",
            "ok",
            f"persistence mode on for every GPU ({on})" if on else "no GPU to ask",
            (),
            "",
            (),
            "persistence",
            layer="driver",
        )
    ]


def _unread(fid: str, what: str, unread: list, check: str) -> Finding:
    problem = unread[0][1].problem
    return Finding(
        fid,
        "info",
        f"{what}: {problem}",
        tuple(
            HealthEvidence(
                "GPU " + ", ".join(str(i) for i, r in unread if r.problem == p) + f": {p}", src
            )
            for p, src in dict.fromkeys((r.problem, r.source) for _, r in unread)
        ),
        "nvidia-smi -q | grep -i -E 'Persistence|GSP'",
        (),
        check,
        tuple(i for i, _ in unread),
        layer="driver",
    )


def gsp_findings(nvml: NvmlFacts) -> list[Finding]:
    enabled, disabled, unread = [], [], []
    for g in nvml.gpus:
        r = g.gsp_firmware
        if r is None:
            continue
        if not r.ok:
            unread.append((g.index, r))
        elif r.value[0]:
            enabled.append(g.index)
        else:
            disabled.append(g.index)
    if unread and not enabled and not disabled:
        return [_unread("nvml.gsp_firmware", "GSP firmware mode", unread, "gsp_firmware")]
    if not enabled and not disabled:
        return [
            Finding(
                "nvml.gsp_firmware",
                "ok",
                "no GPU to ask",
                (),
                "",
                (),
                "gsp_firmware",
                layer="driver",
            )
        ]
    evidence = []
    if enabled:
        evidence.append(
            HealthEvidence(
                "enabled on GPU " + ", ".join(map(str, enabled)), "nvmlDeviceGetGspFirmwareMode"
            )
        )
    if disabled:
        evidence.append(
            HealthEvidence(
                "disabled on GPU " + ", ".join(map(str, disabled)), "nvmlDeviceGetGspFirmwareMode"
            )
        )
    mixed = bool(enabled) and bool(disabled)
    return [
        Finding(
            "nvml.gsp_firmware",
            "warning" if mixed else "info",
            "GSP firmware enabled on some GPUs and not others"
            if mixed
            else f"GSP firmware {'enabled' if enabled else 'disabled'}"
            + (" (Xid 119/120 are GSP timeouts and errors)" if enabled else ""),
            tuple(evidence),
            "nvidia-smi -q | grep -i -A1 'GSP Firmware'" if evidence else "",
            (),
            "gsp_firmware",
            tuple(disabled) if mixed else (),
            layer="driver",
        )
    ]


def fabric_findings(pci: PciFacts, nvml: NvmlFacts, fm: FabricManagerFacts) -> list[Finding]:
    switches = len(pci.nvswitches) or len(fm.dev_nodes)
    if not fm.asked:
        return [
            Finding(
                "fabric.manager",
                "ok",
                "no NVSwitch: no fabric manager needed",
                (
                    HealthEvidence(
                        "no PCI device of class 0x0680 from NVIDIA, no /dev/nvidia-nvswitch*",
                        pci.source,
                    ),
                ),
                "",
                ("communication",),
                "fabric_manager",
                layer=None,  # no NVSwitch: the driver chain has no fabric-manager layer
            )
        ]
    out = []
    evidence = [
        HealthEvidence(
            f"{count(len(pci.nvswitches), 'NVSwitch', 'NVSwitches')} on the PCI bus, "
            f"{count(len(fm.dev_nodes), '/dev/nvidia-nvswitch* node')}",
            pci.source,
        )
    ]
    svc = fm.service
    if svc is not None:
        evidence.append(
            HealthEvidence(f"service: {svc.value if svc.ok else svc.problem}", svc.source)
        )
    if svc is not None and svc.ok and svc.value != "active":
        out.append(
            Finding(
                "fabric.manager_inactive",
                "critical",
                f"the fabric manager is {svc.value} on an NVSwitch system ({switches} switch(es)): "
                'CUDA fails with error 802 "system not yet initialized"',
                tuple(evidence),
                "sudo systemctl restart nvidia-fabricmanager && "
                "journalctl -u nvidia-fabricmanager -n 50",
                ("communication",),
                "fabric_manager",
                layer="fabric_manager",
            )
        )
    ver = fm.version
    driver = nvml.driver_version
    if ver is not None and ver.ok and driver and ver.value != driver:
        out.append(
            Finding(
                "fabric.manager_version",
                "critical",
                f"fabric manager {ver.value} is not the driver's version {driver}: it refuses to "
                "start, and CUDA fails with error 802",
                (
                    HealthEvidence(f"fabric manager {ver.value}", ver.source),
                    HealthEvidence(f"driver {driver}", "nvmlSystemGetDriverVersion"),
                ),
                f"apt-cache policy nvidia-fabricmanager-{driver.split('.')[0]}  # install "
                f"exactly {driver}",
                ("communication",),
                "fabric_manager",
                layer="fabric_manager",
            )
        )
    elif ver is not None and not ver.ok:
        evidence.append(HealthEvidence(f"version: {ver.problem}", ver.source))
    out += _fabric_state(nvml)
    if not out:
        out.append(
            Finding(
                "fabric.manager",
                "ok" if svc is not None and svc.ok else "info",
                "the fabric manager is active at the driver's version"
                if svc is not None and svc.ok and ver is not None and ver.ok
                else "the fabric manager could not be fully checked",
                tuple(evidence),
                "" if svc is not None and svc.ok else "systemctl status nvidia-fabricmanager",
                ("communication",),
                "fabric_manager",
                layer="fabric_manager",
            )
        )
    return out


def _fabric_state(nvml: NvmlFacts) -> list[Finding]:
    pending = []
    for g in nvml.gpus:
        r = g.fabric
        if r is None or not r.ok:
            continue
        if r.value.state in ("not_started", "in_progress"):
            pending.append((g.index, r))
    if not pending:
        return []
    state = {i: r.value.state for i, r in pending}
    return [
        Finding(
            "fabric.gpu_not_registered",
            "critical" if "not_started" in state.values() else "warning",
            f"{count(len(pending), 'GPU')} not yet registered with the NVLink fabric",
            tuple(
                HealthEvidence(f"GPU {i}: fabric state {r.value.state.replace('_', ' ')}", r.source)
                for i, r in pending
            ),
            "nvidia-smi -q | grep -A4 -i fabric",
            ("communication",),
            "fabric_manager",
            tuple(state),
            layer="fabric_manager",
        )
    ]


def _state_word(s: str | None) -> str:
    """ "4: ACTIVE" -> "ACTIVE"."""
    return (s or "").split(":", 1)[-1].strip()


def _gbps(rate: str | None) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate or "")
    return float(m.group(1)) if m else None


def ib_findings(inter: InterconnectFacts, gpu_count: int) -> list[Finding]:
    ports = inter.ib_ports
    if not ports:
        absent = inter.ib_problem in (None, "absent")
        return [
            Finding(
                "ib.ports",
                "ok" if absent else "info",
                "no InfiniBand/RoCE device: nothing to check"
                if absent
                else f"InfiniBand devices could not be listed ({inter.ib_problem})",
                (HealthEvidence(inter.ib_problem or "no device", inter.source),),
                "",
                ("communication",),
                "infiniband",
            )
        ]
    out = []
    down = [
        p
        for p in ports
        if p.problem is None
        and (_state_word(p.state) != IB_ACTIVE or _state_word(p.phys_state) != IB_LINKUP)
    ]
    if down:
        out.append(
            Finding(
                "ib.port_down",
                "warning",
                f"{count(len(down), 'InfiniBand/RoCE port')} not active",
                tuple(
                    HealthEvidence(
                        f"{p.device} port {p.port}: {_state_word(p.state)}, "
                        f"{_state_word(p.phys_state)} ({p.link_layer})",
                        p.source,
                    )
                    for p in down
                ),
                f"ibstat {down[0].device} {down[0].port}",
                ("communication",),
                "infiniband",
            )
        )
    active = [p for p in ports if p not in down and p.problem is None]
    slow = []
    for layer in {p.link_layer for p in active}:
        same = [p for p in active if p.link_layer == layer and _gbps(p.rate) is not None]
        top = max((_gbps(p.rate) for p in same), default=None)
        slow += [p for p in same if top and _gbps(p.rate) < top]
    if slow:
        out.append(
            Finding(
                "ib.port_rate",
                "warning",
                f"{count(len(slow), 'active port')} at a lower rate than the node's other ports",
                tuple(
                    HealthEvidence(f"{p.device} port {p.port}: {p.rate}", p.source) for p in slow
                ),
                f"ibstat {slow[0].device} {slow[0].port}  # check the cable and the switch port",
                ("communication",),
                "infiniband",
            )
        )
    if not out:
        out.append(
            Finding(
                "ib.ports",
                "ok",
                f"{count(len(active), 'InfiniBand/RoCE port')} active at the same rate",
                tuple(
                    HealthEvidence(f"{p.device} port {p.port}: {p.rate} ({p.link_layer})", p.source)
                    for p in active[:8]
                ),
                "",
                ("communication",),
                "infiniband",
            )
        )
    out += _peermem(inter, active, gpu_count)
    return out


def _peermem(inter: InterconnectFacts, active: list, gpu_count: int) -> list[Finding]:
    r = inter.peermem
    if r is None or not active or not gpu_count:
        return []
    if not r.ok:
        return [
            Finding(
                "ib.peermem",
                "info",
                f"whether nvidia_peermem is loaded could not be read ({r.problem})",
                (HealthEvidence(r.problem or "", r.source),),
                "lsmod | grep -E 'nvidia_peermem|nv_peer_mem'",
                ("communication",),
                "infiniband",
            )
        ]
    if r.value:
        return [
            Finding(
                "ib.peermem",
                "ok",
                f"{r.value} loaded: GPUDirect RDMA is available to the NICs",
                (HealthEvidence(f"{r.value} in the module list", r.source),),
                "",
                ("communication",),
                "infiniband",
            )
        ]
    return [
        Finding(
            "ib.peermem",
            "warning",
            "nvidia_peermem not loaded beside active InfiniBand/RoCE ports: without it (or "
            "DMA-BUF support), NCCL stages GPU traffic through host memory",
            (HealthEvidence("no nvidia_peermem or nv_peer_mem in the module list", r.source),),
            "sudo modprobe nvidia-peermem",
            ("communication",),
            "infiniband",
        )
    ]
