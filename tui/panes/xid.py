"""Pane 4, Xid: events newest first; the selected one's meaning and next step."""

from __future__ import annotations

from datetime import datetime, timezone

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from ...diagnose.xid_catalog import describe
from ..feed import Update
from .base import set_text, sync_rows

COLUMNS = ("time", "gpu", "xid", "name", "source")


class XidPane(Vertical):
    def compose(self) -> ComposeResult:
        table = DataTable(id="xid-table", cursor_type="row")
        for label, key, width in (
            ("TIME (UTC)", "time", 19),
            ("GPU", "gpu", 3),
            ("XID", "xid", 4),
            ("NAME", "name", 20),
            ("SOURCE", "source", 10),
        ):
            table.add_column(label, key=key, width=width)
        yield table
        yield Static(id="xid-detail", markup=False)

    def show(self, u: Update, selected: int, plain: bool) -> None:
        table = self.query_one("#xid-table", DataTable)
        rows = {}
        for k, x in enumerate(u.xid_events):
            key = f"{x.timestamp:.3f}-{x.gpu_index}-{x.xid}-{len(u.xid_events) - k}"
            when = datetime.fromtimestamp(x.timestamp, tz=timezone.utc)
            rows[key] = (
                when.strftime("%Y-%m-%d %H:%M:%S"),
                "?" if x.gpu_index is None else str(x.gpu_index),
                str(x.xid),
                describe(x.xid)[0],
                x.source,
            )
        if [k.value for k in table.rows] != list(rows):
            # New events go on top: rebuild in order (events are rare, a full list is short).
            table.clear()
        sync_rows(table, rows, COLUMNS)
        self.show_detail(u)

    def show_detail(self, u: Update) -> None:
        detail = self.query_one("#xid-detail", Static)
        if not u.xid_events:
            set_text(
                detail,
                "No Xid events since the start. Events from before the start are "
                "in the kernel log: journalctl -k | grep -i xid",
            )
            return
        row = self.query_one("#xid-table", DataTable).cursor_row
        x = u.xid_events[min(max(row, 0), len(u.xid_events) - 1)]
        name, meaning, step, sev = describe(x.xid)
        t = Text()
        t.append(f"Xid {x.xid} {name} on GPU {x.gpu_index} [{sev}]\n", style="bold")
        t.append(f"meaning: {meaning}\nnext: {step}\n")
        if x.message:
            t.append(f"text: {x.message}\n")  # kernel text is plain text, never markup
        t.append(
            "An Xid is a classification step, not a root cause: same GPU, same job, same "
            "time window?",
            style="dim",
        )
        set_text(detail, t)
