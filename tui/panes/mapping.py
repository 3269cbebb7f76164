"""Pane 3, Mapping: NVML index, CUDA ordinal, minor number, device node, bus id, UUID."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from ...model import GpuState
from ..feed import Update
from .base import set_text, sync_rows

COLUMNS = ("nvml", "cuda", "minor", "node", "bus", "uuid", "procs")


def cuda_ordinals(gpus: tuple[GpuState, ...], cvd: str | None, order: str | None) -> dict:
    """NVML index -> CUDA ordinal under CUDA_VISIBLE_DEVICES (parsing stops at a bad entry)."""
    names = {g.static.name for g in gpus}
    if order != "PCI_BUS_ID" and len(names) > 1:
        return {}  # FASTEST_FIRST on mixed models: CUDA's order is not NVML's
    if cvd is None:
        return {g.index: g.index for g in gpus}
    visible: list[int] = []
    for entry in (e.strip() for e in cvd.split(",")):
        hit = None
        if entry.isdigit():
            hit = next((g.index for g in gpus if g.index == int(entry)), None)
        elif entry.startswith("GPU-"):
            found = [g.index for g in gpus if (g.static.uuid or "").startswith(entry)]
            hit = found[0] if len(found) == 1 else None
        if hit is None or hit in visible:
            break
        visible.append(hit)
    return {idx: k for k, idx in enumerate(visible)}


class MappingPane(VerticalScroll):
    def __init__(self, environ: dict[str, str], sanitize: bool = False, **kw) -> None:
        super().__init__(**kw)
        self.environ = environ
        self.sanitize = sanitize  # pseudonyms for bus ids and UUIDs

    def compose(self) -> ComposeResult:
        yield Static(id="map-note", markup=False)
        table = DataTable(id="map-table", cursor_type="row")
        for label, key, width in (
            ("NVML", "nvml", 5),
            ("CUDA", "cuda", 5),
            ("MINOR", "minor", 5),
            ("DEVICE", "node", 12),
            ("PCI BUS ID", "bus", 16),
            ("UUID", "uuid", 40),
            ("PROCESSES", "procs", 20),
        ):
            table.add_column(label, key=key, width=width)
        yield table

    def show(self, u: Update, selected: int, plain: bool) -> None:
        snap = u.snapshot
        cvd = self.environ.get("CUDA_VISIBLE_DEVICES")
        order = self.environ.get("CUDA_DEVICE_ORDER")
        ords = cuda_ordinals(snap.gpus, cvd, order)
        note = Text()
        note.append(
            f"CUDA_VISIBLE_DEVICES={cvd if cvd is not None else '(unset: all)'}  "
            f"CUDA_DEVICE_ORDER={order or '(unset: FASTEST_FIRST)'}\n"
        )
        note.append(
            "NVML and nvidia-smi number GPUs by PCI bus id; /dev/nvidiaN uses the minor "
            "number, which need not match. Publish the mapping logic, not this table.",
            style="dim",
        )
        set_text(self.query_one("#map-note", Static), note)
        procs: dict[int, list[str]] = {}
        for p in snap.gpu_processes:
            procs.setdefault(p.gpu_index, []).append(str(p.pid))
        rows = {}
        for g in snap.gpus:
            s = g.static
            bus, uuid = s.pci_bus_id or "?", s.uuid or "?"
            if self.sanitize:
                bus, uuid = f"bus-{g.index}", f"GPU-{g.index}"
            rows[f"gpu{g.index}"] = (
                str(g.index),
                str(ords.get(g.index, "-")),
                "?" if s.minor_number is None else str(s.minor_number),
                s.device_node or "?",
                bus,
                uuid + (" (lost)" if g.lost else ""),
                ",".join(procs.get(g.index, [])) or "-",
            )
            for m in g.mig_instances:
                rows[f"gpu{g.index}mig{m.mig_index}"] = (
                    f"{g.index}:{m.mig_index}",
                    "-",
                    "",
                    f"GI {m.gpu_instance_id} CI {m.compute_instance_id}",
                    "",
                    f"MIG-{g.index}-{m.mig_index}" if self.sanitize else (m.uuid or "?"),
                    m.name or "",
                )
        sync_rows(self.query_one("#map-table", DataTable), rows, COLUMNS)
