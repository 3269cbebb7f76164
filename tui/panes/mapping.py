"""Pane 3, Mapping: NVML index, CUDA ordinal, minor number, device node, bus id, UUID, processes.

NVML numbers GPUs by PCI bus id; CUDA numbers the devices CUDA_VISIBLE_DEVICES leaves visible,
in CUDA_DEVICE_ORDER; /dev/nvidiaN carries the minor number. The three need not agree. The
computation is the core's (`mapping.ordinals`, `collect.mapping`), the same `gputop-diag
mapping` prints; it arrives worked out in the tick's view model (`Update.mapping`,
`monitor/view.py`). Above the table, whose GPU is this: each owner (Slurm job, pod, container;
else user) with its GPUs and the GPU memory its processes hold. Under --sanitize the pane shows
the mapping logic and the conclusions only: no minor numbers, device nodes, bus ids or UUIDs
(the view model carries none), its text (owners included) already the session's pseudonyms.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable

from gputop_diag.mapping.ordinals import row_key
from gputop_diag.monitor.view import MappingView, Update
from gputop_diag.tui.panes.base import Pane, View, pane_width, sync_rows
from gputop_diag.widgets import CellTable, DiffText

__all__ = ["COLUMNS", "MappingPane", "abbreviate_uuid", "row_key"]

COLUMNS = ("nvml", "cuda", "minor", "node", "bus", "uuid", "procs")
LABELS = ("NVML", "CUDA", "MINOR", "DEVICE", "PCI BUS ID", "UUID", "PROCESSES")
# Column widths before the UUID's: the NVML form of a bus id (00000000:3B:00.0) where the pane
# is wide, the short one (3b:00.0, domain 0) where it is narrow.
WIDE = (6, 5, 5, 13, 16)
NARROW = (6, 4, 5, 13, 12)
WIDE_FROM = 100  # pane width
UUID_FULL = 40  # GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
UUID_MIN = 14
PROCS_MIN = 6


def abbreviate_uuid(uuid: str, width: int, all_uuids: Sequence[str], mark: str = "…") -> str:
    """`uuid` in `width` cells; when it does not fit, its head, an ellipsis and a tail long
    enough to tell it from every other UUID (real GPUs of one board share long prefixes:
    GPU-01000100-0000-0...)."""
    if len(uuid) <= width:
        return uuid
    others = [u.lower() for u in all_uuids if u and u != uuid]
    low = uuid.lower()
    k = 1
    while k < len(uuid) and any(o.endswith(low[-k:]) for o in others):
        k += 1
    if k + 1 < width:
        tail = max(k, width - 5)  # keep "GPU-" and the ellipsis when there is room
        if tail + 1 >= width:
            return mark + uuid[-(width - 1) :]
        return uuid[: width - 1 - tail] + mark + uuid[-tail:]
    return uuid[: width - 1] + mark  # they differ near the start: the head tells them apart


def layout(pane: int) -> tuple[int, ...]:
    """Column widths (the processes' column: as wide as its text) in a pane `pane` cells wide;
    every column has one cell of padding on each side."""
    widths = WIDE if pane >= WIDE_FROM else NARROW
    fixed = sum(widths) + 2 * len(COLUMNS) + PROCS_MIN
    return (*widths, max(UUID_MIN, min(UUID_FULL, pane - fixed)))


def short_bus(bus) -> str:
    return bus.procfs[5:] if bus.domain == 0 else bus.procfs


class MappingPane(Pane):
    _widths: tuple[int, ...] = (*WIDE, UUID_FULL)

    def compose(self) -> ComposeResult:
        yield DiffText(id="map-note")
        table = CellTable(id="map-table", cursor_type="row")
        self._add_columns(table)
        yield table

    def _add_columns(self, table: DataTable) -> None:
        for label, key, width in zip(LABELS, COLUMNS, (*self._widths, None), strict=True):
            table.add_column(label, key=key, width=width)

    def _fit(self, table: DataTable) -> None:
        """Size the columns to the pane (rebuilt only when that changes: a resize)."""
        want = layout(pane_width(self))
        if want != self._widths:
            self._widths = want
            table.clear(columns=True)
            self._add_columns(table)

    def show(self, u: Update, view: View) -> None:
        m = u.mapping
        if m is None:  # a view model made without one
            return
        self.query_one("#map-note", DiffText).update(self._note(m, view))
        table = self.query_one("#map-table", DataTable)
        self._fit(table)
        uuids = [r.uuid for r in m.rows if r.uuid]
        uuid_w, wide = self._widths[-1], self._widths[-2] == WIDE[-1]
        mark = "~" if view.plain else "…"  # --low-bandwidth: ASCII only
        rows = {}
        for r in m.rows:
            cuda = m.cuda.get(r.key, "?")
            pids = ",".join(map(str, r.pids))
            if r.mig_index is None:
                bus = (r.bus.nvml if wide else short_bus(r.bus)) if r.bus else "?"
                uuid = abbreviate_uuid(r.uuid or "?", uuid_w, uuids, mark)
                minor = "?" if r.minor is None else str(r.minor)
                node = r.device_node or "?"
                if view.sanitize:
                    hidden = "." if view.plain else "·"
                    bus, uuid = f"bus-{r.nvml_index}", f"GPU-{r.nvml_index}"
                    minor = node = hidden
                rows[r.key] = (
                    f"{r.nvml_index} LOST" if r.lost else str(r.nvml_index),
                    cuda,
                    minor,
                    node,
                    bus,
                    uuid,
                    pids or "-",
                )
            else:
                uuid = abbreviate_uuid(r.uuid or "?", uuid_w, uuids, mark)
                if view.sanitize:
                    uuid = f"MIG-{r.nvml_index}-{r.mig_index}"
                profile = (r.name or "").split()[-1] if r.name else ""
                rows[r.key] = (
                    f"{r.nvml_index}:{r.mig_index}",
                    cuda,
                    "",
                    f"GI {r.gpu_instance_id} CI {r.compute_instance_id}",
                    "",
                    uuid,
                    " ".join(x for x in (profile, pids) if x),
                )
        sync_rows(table, rows, COLUMNS)

    @staticmethod
    def _owners(t: Text, m: MappingView, view: View) -> None:
        """Whose GPU is this: one line, each owner with its GPUs and the memory it holds."""
        if not m.owners:
            return
        shown = 2 if view.short else 4
        parts = [f"{name}: {gpus}, {memory}" for name, gpus, memory in m.owners[:shown]]
        more = f"; +{len(m.owners) - shown} more" if len(m.owners) > shown else ""
        t.append("owners: ", style="bold")
        t.append("; ".join(parts) + more + "\n")

    def _note(self, m: MappingView, view: View) -> Text:
        t = Text()
        if m.failure is not None:
            t.append(f"the mapping could not be worked out: {m.failure}\n", style="bold")
        t.append(f"this shell: CUDA_VISIBLE_DEVICES={m.cvd}  CUDA_DEVICE_ORDER={m.order}\n")
        shown = 1 if view.short else 3
        findings = [(sev, text) for sev, text in m.findings if sev != "info" or not view.short]
        for severity, text in findings[:shown]:
            style = "bold" if severity in ("warning", "critical") else ""
            t.append(f"! {text}\n", style=style)
        if len(findings) > shown:
            t.append(f"(+{len(findings) - shown} more: gputop-diag mapping)\n", style="dim")
        if view.sanitize:
            for c in m.conclusions[: 1 if view.short else 3]:
                t.append(f"- {c}\n")
        self._owners(t, m, view)
        if not view.short:
            t.append(
                "NVML and nvidia-smi number GPUs by PCI bus id; CUDA numbers only the visible "
                "devices (- = not visible, ? = unknown); /dev/nvidiaN is the minor number."
                + (" Sanitized: the layout is hidden." if view.sanitize else ""),
                style="dim",
            )
        else:
            t.rstrip()
        return t
