"""Pane 3, Mapping: NVML index, CUDA ordinal, minor number, device node, bus id, UUID.

NVML numbers GPUs by PCI bus id; CUDA numbers the devices CUDA_VISIBLE_DEVICES leaves visible,
in CUDA_DEVICE_ORDER; /dev/nvidiaN carries the minor number. The three need not agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable

from ...model import GpuState
from ...widgets import CellTable, DiffText
from ..feed import Update
from .base import Pane, View, sync_rows

COLUMNS = ("nvml", "cuda", "minor", "node", "bus", "uuid", "procs")


def row_key(gpu: int, mig: int | None = None) -> str:
    return f"gpu{gpu}" if mig is None else f"gpu{gpu}-mig{mig}"


def cuda_ordinals(
    gpus: Sequence[GpuState], cvd: str | None, order: str | None
) -> dict[str, int] | None:
    """Row key -> CUDA ordinal in this environment; None where CUDA's order can't be known.

    CUDA_VISIBLE_DEVICES holds indices (in CUDA's order), GPU UUIDs or unique prefixes of them,
    or MIG UUIDs; parsing stops at the first entry that names no device (`0,2,-1,1` leaves 0
    and 2); empty means none, unset means all. Under the default FASTEST_FIRST order a machine
    with mixed models numbers its GPUs differently from NVML.
    """
    if order != "PCI_BUS_ID" and len({g.static.name for g in gpus}) > 1:
        return None
    whole = [g for g in gpus if not g.mig_instances]  # a MIG GPU is reached by its instances
    if cvd is None:
        return {row_key(g.index): k for k, g in enumerate(whole)}
    visible: list[str] = []
    for entry in (e.strip() for e in cvd.split(",")):
        hit = None
        if entry.isdigit():
            k = int(entry)
            hit = row_key(whole[k].index) if k < len(whole) else None
        elif entry.startswith("GPU-"):
            found = [g for g in gpus if (g.static.uuid or "").startswith(entry)]
            hit = row_key(found[0].index) if len(found) == 1 else None
        elif entry.startswith("MIG-"):
            found = [
                (g, m)
                for g in gpus
                for m in g.mig_instances
                if m.uuid and (m.uuid.startswith(entry) or f"MIG-{m.uuid}".startswith(entry))
            ]
            hit = row_key(found[0][0].index, found[0][1].mig_index) if len(found) == 1 else None
        if hit is None or hit in visible:
            break
        visible.append(hit)
    return {key: k for k, key in enumerate(visible)}


class MappingPane(Pane):
    def compose(self) -> ComposeResult:
        yield DiffText(id="map-note")
        table = CellTable(id="map-table", cursor_type="row")
        for label, key, width in (
            ("NVML", "nvml", 6),
            ("CUDA", "cuda", 5),
            ("MINOR", "minor", 5),
            ("DEVICE", "node", 13),
            ("PCI BUS ID", "bus", 16),
            ("UUID", "uuid", 40),
            ("PROCESSES", "procs", None),
        ):
            table.add_column(label, key=key, width=width)
        yield table

    def show(self, u: Update, view: View) -> None:
        snap = u.snapshot
        cvd = view.environ.get("CUDA_VISIBLE_DEVICES")
        order = view.environ.get("CUDA_DEVICE_ORDER")
        ords = cuda_ordinals(snap.gpus, cvd, order)
        note = Text()
        note.append(
            f"CUDA_VISIBLE_DEVICES={'(unset: all)' if cvd is None else cvd or '(empty: none)'}"
            f"  CUDA_DEVICE_ORDER={order or '(unset: FASTEST_FIRST)'}\n"
        )
        if ords is None:
            note.append(
                "Mixed GPU models under FASTEST_FIRST: CUDA's numbering is not NVML's; set "
                "CUDA_DEVICE_ORDER=PCI_BUS_ID.\n",
                style="bold",
            )
        note.append(
            "NVML and nvidia-smi number GPUs by PCI bus id; CUDA numbers only the visible "
            "devices (- = not visible, ? = unknown); /dev/nvidiaN is the minor number.",
            style="dim",
        )
        self.query_one("#map-note", DiffText).update(note)
        procs: dict[int, list[str]] = {}
        on_mig: dict[tuple, list[str]] = {}
        for p in snap.gpu_processes:
            procs.setdefault(p.gpu_index, []).append(str(p.pid))
            if p.gpu_instance_id is not None:
                where = (p.gpu_index, p.gpu_instance_id, p.compute_instance_id)
                on_mig.setdefault(where, []).append(str(p.pid))

        names_mig = cvd is not None and "MIG-" in cvd

        def ordinal(key: str, mig: bool = False) -> str:
            if ords is None or (mig and not names_mig):
                return "?"  # CUDA's numbering of MIG devices depends on the CUDA version
            return str(ords[key]) if key in ords else "-"

        rows = {}
        for g in snap.gpus:
            s = g.static
            bus, uuid = s.pci_bus_id or "?", s.uuid or "?"
            if view.sanitize:
                bus, uuid = f"bus-{g.index}", f"GPU-{g.index}"
            rows[row_key(g.index)] = (
                f"{g.index} LOST" if g.lost else str(g.index),
                ordinal(row_key(g.index)),
                "?" if s.minor_number is None else str(s.minor_number),
                s.device_node or "?",
                bus,
                uuid,
                ",".join(sorted(procs.get(g.index, []), key=int)) or "-",
            )
            for m in g.mig_instances:
                key = row_key(g.index, m.mig_index)
                rows[key] = (
                    f"{g.index}:{m.mig_index}",
                    ordinal(key, mig=True),
                    "",
                    f"GI {m.gpu_instance_id} CI {m.compute_instance_id}",
                    "",
                    f"MIG-{g.index}-{m.mig_index}" if view.sanitize else (m.uuid or "?"),
                    " ".join(
                        [
                            (m.name or "").split()[-1] if m.name else "",
                            ",".join(
                                on_mig.get((g.index, m.gpu_instance_id, m.compute_instance_id), [])
                            ),
                        ]
                    ).strip(),
                )
        sync_rows(self.query_one("#map-table", DataTable), rows, COLUMNS)
