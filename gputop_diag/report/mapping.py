"""The device mapping as a document: the `gputop-diag.mapping/1` finding form, and the public
form (the logic and the conclusions only) that `mapping --sanitize` and the report publish."""

from __future__ import annotations

from typing import Any

from ..collect.mapping import PUBLIC_PATTERN, QUERY_COMMAND, DeviceMapping
from ..mapping.checks import GLOBAL_CAVEAT, Finding
from ..mapping.owners import OwnerUse, shown_name
from ..mapping.render import owner_doc, owner_lines
from ..model.formats import count

SCHEMA = "gputop-diag.mapping/1"


def finding_doc(f: Finding, public: bool = False) -> dict[str, Any]:
    return {
        "kind": f.kind,
        "severity": f.severity,
        "text": f.public_text if public and f.public_text else f.text,
        "next_step": f.next_step,
        "gpus": list(f.gpus),
        "pids": list(f.pids),
    }


LOGIC = (
    "NVML and nvidia-smi number GPUs by PCI bus id and ignore CUDA_VISIBLE_DEVICES",
    "CUDA numbers only the devices CUDA_VISIBLE_DEVICES leaves visible, from 0, in "
    "CUDA_DEVICE_ORDER (FASTEST_FIRST by default: fastest model first, ties usually but not "
    "by promise in PCI bus id order; PCI_BUS_ID agrees with nvidia-smi)",
    "/dev/nvidiaN carries the minor number, which need not be the NVML index",
    "each CUDA device was matched to its NVML device by UUID, and NVML's process list placed "
    "each process on its GPU",
)


def public_doc(m: DeviceMapping, sanitizer) -> dict[str, Any]:
    """The logic and the conclusions only: what may be published."""
    clean = sanitizer.text
    logic = list(LOGIC)
    if m.shell_slurm.in_job or any(p.slurm and p.slurm.in_job for p in m.processes):
        logic.append(GLOBAL_CAVEAT)
    return {
        "schema": SCHEMA,
        "sanitized": True,
        "gpus": len([r for r in m.rows if r.mig_index is None]),
        "mig_instances": len([r for r in m.rows if r.mig_index is not None]),
        "cuda_device_order": m.shell.order,
        "logic": logic,
        "conclusions": [clean(c) for c in m.conclusions],
        "owners": [owner_doc(u, shown_owner(u, sanitizer), public=True) for u in m.owners],
        "findings": [
            {**finding_doc(f, public=True), "text": clean(f.public_text or f.text)}
            for f in m.findings
        ],
        "confirm": {"query": QUERY_COMMAND, "publish": PUBLIC_PATTERN},
    }


def shown_owner(u: OwnerUse, sanitizer) -> str:
    """An owner's name on a sanitized surface: through the sanitizer's free-text rules, as the
    conclusions and findings that name it (job ids, users, container ids, pod names: the
    sanitizer is seeded with them from the snapshot's processes); withheld where an
    identifier is left (`mapping.owners.shown_name`)."""
    return shown_name(u, sanitizer.text)


def render_public(doc: dict[str, Any]) -> str:
    lines = [
        "Device mapping (sanitized: the logic and the conclusions only): "
        f"{count(doc['gpus'], 'GPU')}, {count(doc['mig_instances'], 'MIG instance')}, "
        f"CUDA_DEVICE_ORDER {doc['cuda_device_order']}",
        "",
        "How it was mapped:",
        *(f"  - {x}" for x in doc["logic"]),
        "",
        "Conclusions:",
        *(f"  - {c}" for c in doc["conclusions"] or ["nothing runs on a GPU"]),
    ]
    lines += owner_lines([_public_owner_row(o) for o in doc.get("owners", ())])
    if doc["findings"]:
        lines += ["", "Findings:"]
        for f in doc["findings"]:
            lines += [f"  [{f['severity']}] {f['text']}", f"    next: {f['next_step']}"]
    lines += [
        "",
        f"Confirm: {doc['confirm']['query']}",
        f"Publish: {doc['confirm']['publish']}",
    ]
    return "\n".join(lines)


def _public_owner_row(o: dict[str, Any]) -> tuple[str, str, str, int]:
    from ..mapping.owners import HeldGpu, gpus_text
    from ..model.formats import size

    gpus = [
        HeldGpu(g["device"], g["nvml_index"], g["mig_index"], tuple(g["cuda_ordinals"]))
        for g in o["gpus"]
    ]
    differs = any(g.cuda and (g.mig_index is not None or g.cuda != (g.nvml_index,)) for g in gpus)
    return (o["name"], gpus_text(gpus, differs), size(o["memory_bytes"]), o["processes"])
