"""Follow-up chains between driver events: one event leading to another on the same GPU, as the
Xid catalog describes them — 48/94/95 then 63 (remap pending) or 64 (remap failed), 62 then a
storm of 45, 154 after its trigger, 79 then NVML's lost GPU (or a GPU gone from NVML), PCIe AER
just before a 79, 43/45 after the Xid they clean up. Pure; called by `triage.triage`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .catalog import SYMPATHETIC_XIDS
from .events import KernelEvent
from .types import (
    REMAP_WINDOW_S,
    Chain,
    TriageContext,
    gpu_name,
    near,
    same_gpu,
    sev_rank,
    title_of,
)


def chains(
    device: Sequence[KernelEvent], follows: dict[int, str], ctx: TriageContext
) -> list[Chain]:
    out: list[Chain] = []
    seen: set[tuple[str, str, str]] = set()

    def add(first: str, then: str, gpu: str, meaning: str, action: str, sev: str) -> None:
        if (first, then, gpu) not in seen:
            seen.add((first, then, gpu))
            out.append(Chain(first, then, gpu, meaning, action, sev))

    for k, cause in follows.items():
        e = device[k]
        if e.kind == "fallen_off_bus":
            continue
        add(
            cause,
            title_of(e),
            gpu_name(e),
            f"{title_of(e)} is the channel cleanup that follows {cause}",
            f"triage {cause}, not {title_of(e)}",
            "info",
        )
    xids = [e for e in device if e.kind == "xid"]
    for e in xids:
        later = [
            o
            for o in xids
            if same_gpu(o, e)
            and o.timestamp is not None
            and e.timestamp is not None
            and 0 <= o.timestamp - e.timestamp <= REMAP_WINDOW_S
        ]
        if e.code in (48, 94, 95):
            if any(o.code == 64 for o in later):
                add(
                    title_of(e),
                    "Xid 64 ROW_REMAP_FAILURE",
                    gpu_name(e),
                    "the memory error's row could not be remapped: an RMA criterion",
                    "drain the GPU and contact support (RMA)",
                    "critical",
                )
            elif any(o.code == 63 for o in later):
                add(
                    title_of(e),
                    "Xid 63 ROW_REMAP_EVENT",
                    gpu_name(e),
                    "the memory error's row was remapped; the remap takes effect at the next reset",
                    "reset the GPU when it is idle (nvidia-smi -r), then check "
                    "nvidia-smi -q -d ROW_REMAPPER shows no pending remap",
                    "warning",
                )
            elif e.code == 48:
                add(
                    title_of(e),
                    "no Xid 63/64 yet",
                    gpu_name(e),
                    "no retirement or remap was logged after the double-bit error",
                    "check nvidia-smi -q -d ROW_REMAPPER (pending, failure) before reusing the GPU",
                    "critical",
                )
        if (
            e.code == 62
            and sum(o.code == 45 for o in later if o.timestamp - e.timestamp <= 60) >= 3
        ):
            add(
                title_of(e),
                "a storm of Xid 45",
                gpu_name(e),
                "the micro-controller halted and every channel was torn down",
                "reset the GPU (nvidia-smi -r)",
                "critical",
            )
        if e.code == 154 and e.recovery_action:
            before = [
                o
                for o in xids
                if same_gpu(o, e)
                and o.code != 154
                and o.code not in SYMPATHETIC_XIDS
                and near(o, e, 120.0)
                and (o.timestamp or 0) <= (e.timestamp or 0)
            ]
            first = title_of(before[-1]) if before else "an earlier Xid"
            add(
                first,
                f"Xid 154: {e.recovery_action}",
                gpu_name(e),
                f"the driver now asks for: {e.recovery_action}",
                "follow it (GPU Reset → nvidia-smi -r; Node Reboot → reboot; Drain and Reset → "
                "drain, then reset)",
                "critical",
            )
    lost_pcis = {g.pci for g in ctx.gpus if g.lost and g.pci}
    known_pcis = {g.pci for g in ctx.gpus if g.pci}
    for e in device:
        if not (e.kind == "fallen_off_bus" or (e.kind == "xid" and e.code == 79)):
            continue
        if e.pci in lost_pcis:
            add(
                title_of(e),
                "NVML: GPU lost",
                gpu_name(e),
                "NVML confirms the GPU is lost; it stays lost until the node reboots",
                "drain the node and reboot",
                "critical",
            )
        elif known_pcis and e.pci and e.pci not in known_pcis:
            add(
                title_of(e),
                "missing from NVML now",
                gpu_name(e),
                "NVML does not list this GPU any more",
                "check `lspci -d 10de:`; reboot, reseat it if it stays missing",
                "critical",
            )
        aer = [
            o
            for o in device
            if o.kind == "pcie_aer"
            and o.timestamp is not None
            and e.timestamp is not None
            and 0 <= e.timestamp - o.timestamp <= 60
        ]
        if aer:
            add(
                "PCIe AER error",
                title_of(e),
                gpu_name(e),
                "the PCIe link reported errors just before the GPU fell off",
                "check the slot, riser and PCIe switch; reseat the GPU",
                "critical",
            )
    out.sort(key=lambda c: -sev_rank(c.severity))
    return out
