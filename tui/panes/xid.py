"""Pane 4, Xid: NVML Xid events newest first; the selected one's meaning and next step.

The meanings come from the catalog of common codes (`diagnose.xid_catalog`). Kernel-log text
is shown as plain text, never parsed as markup.
"""

from __future__ import annotations

from datetime import datetime, timezone

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.coordinate import Coordinate
from textual.widgets import DataTable

from ...diagnose.xid_catalog import describe
from ...model import XidEvent
from ...widgets import DiffText
from ..feed import Update
from .base import Pane, View, set_text, sync_rows

COLUMNS = ("seq", "time", "gpu", "xid", "name", "source")


class XidPane(Pane):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._events: dict[str, XidEvent] = {}
        self._sanitize = False

    def compose(self) -> ComposeResult:
        table = DataTable(id="xid-table", cursor_type="row")
        for label, key, width in (
            ("#", "seq", 4),
            ("TIME (UTC)", "time", 14),
            ("GPU", "gpu", 3),
            ("XID", "xid", 4),
            ("NAME", "name", 22),
            ("SOURCE", "source", 10),
        ):
            table.add_column(label, key=key, width=width)
        yield table
        yield DiffText(id="xid-detail")

    def show(self, u: Update, view: View) -> None:
        self._sanitize = view.sanitize
        rows = {}
        events: dict[str, XidEvent] = {}
        n = len(u.xid_events)
        for k, x in enumerate(u.xid_events):  # newest first; numbered oldest = 1
            seq = n - k
            key = f"xid{seq}"  # stable: an event keeps its number
            events[key] = x
            when = datetime.fromtimestamp(x.timestamp, tz=timezone.utc)
            rows[key] = (
                str(seq),
                when.strftime("%m-%d %H:%M:%S"),
                "?" if x.gpu_index is None else str(x.gpu_index),
                str(x.xid),
                describe(x.xid)[0],
                x.source,
            )
        self._events = events
        table = self.query_one("#xid-table", DataTable)
        sync_rows(table, rows, COLUMNS, lambda cells: int(cells[0]), reverse=True)
        self.show_detail()

    @on(DataTable.RowHighlighted, "#xid-table")
    def _highlighted(self) -> None:
        self.show_detail()

    def show_detail(self) -> None:
        detail = self.query_one("#xid-detail", DiffText)
        table = self.query_one("#xid-table", DataTable)
        if not self._events or not table.row_count:
            set_text(
                detail,
                "No Xid event since the start. Earlier ones are in the kernel log: "
                "journalctl -k | grep -i xid",
            )
            return
        row = min(max(table.cursor_row, 0), table.row_count - 1)
        key = table.coordinate_to_cell_key(Coordinate(row, 0)).row_key.value
        x = self._events.get(key)
        if x is None:
            return
        name, meaning, step, severity = describe(x.xid)
        where = "an unknown GPU" if x.gpu_index is None else f"GPU {x.gpu_index}"
        t = Text()
        t.append(f"Xid {x.xid} {name} on {where} ({severity})\n", style="bold")
        t.append(f"meaning: {meaning}\nnext: {step}\n")
        if x.pid is not None or x.process_name:
            who = x.process_name if not self._sanitize else "(hidden)"
            t.append(f"process: {x.pid if x.pid is not None else '?'} {who or ''}\n")
        if x.message:
            # Kernel text is plain text: `[...]` in it is not markup.
            msg = "(hidden under --sanitize)" if self._sanitize else x.message
            t.append(f"text: {msg}\n")
        t.append(
            "An Xid is a classification step, not a root cause: same GPU, same job, same "
            "time window?",
            style="dim",
        )
        set_text(detail, t)
