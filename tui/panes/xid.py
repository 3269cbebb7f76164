"""Pane 4, Xid: every Xid, SXid and driver error — this run's (NVML and the kernel log) and the
kernel log's before it — newest first; the selected one's meaning, next question and action;
below, the triage: the route, the patterns and the follow-up chains.

The triage is the Monitor's (`xid.triage`, the same result the `xid` command prints),
handed down in each update; the first time the pane is shown it asks (`HistoryWanted`) for the
kernel log before the run, which the Monitor reads once in the background.
Kernel-log text is shown as plain text, never parsed as markup; under `--sanitize` it is not
shown at all, nor process names.
"""

from __future__ import annotations

import zlib
from datetime import datetime, timezone

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable

from gputop_diag.model.formats import count
from gputop_diag.monitor.view import Update, XidScan
from gputop_diag.monitor.xid_live import HISTORY_SINCE_S
from gputop_diag.tui.panes.base import Pane, View, hang_text, pane_width, set_text, sync_rows
from gputop_diag.widgets import DiffText
from gputop_diag.xid.catalog import DRIVER_MESSAGES, entry, sxid_entry
from gputop_diag.xid.events import KernelEvent
from gputop_diag.xid.types import XidTriage

COLUMNS = ("seq", "time", "gpu", "xid", "name", "source")
ROUTE_LINES = 4  # groups shown in the triage summary


def _when(ts: float | None) -> str:
    if ts is None:
        return "?"
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%m-%d %H:%M:%S")


def _code(e: KernelEvent) -> str:
    if e.kind in ("xid", "sxid"):
        return str(e.code)
    return "-"


def _name(e: KernelEvent) -> str:
    if e.kind == "xid":
        return entry(e.code).name
    if e.kind == "sxid":
        return f"SXID_{sxid_entry(e.code).unit.upper()}"
    info = DRIVER_MESSAGES.get(e.kind)
    return info.title if info else e.kind


def _gpu(e: KernelEvent) -> str:
    if e.kind == "sxid":
        return f"S{e.switch}"
    return "?" if e.gpu_index is None else str(e.gpu_index)


def _key(e: KernelEvent) -> str:
    """A row key that stays with its event while others arrive (or older ones are read)."""
    stamp = "?" if e.timestamp is None else f"{e.timestamp:.3f}"
    text = zlib.crc32(e.detail.encode()) & 0xFFFF
    return f"{e.kind}:{e.code}:{e.pci or e.gpu_index}:{stamp}:{text:x}"


class XidPane(Pane):
    class HistoryWanted(Message):
        """The pane is shown live: read the kernel log before the run (once, in the
        background)."""

    DEFAULT_CSS = """
    XidPane #xid-triage {
        height: auto;
        border-top: solid $primary;
    }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._events: dict[str, KernelEvent] = {}
        self._triage: XidTriage | None = None
        self._sanitize = False
        self._asked = False
        self._shown_step: str | None = None  # the step the detail gives
        self._triage_args: tuple | None = None

    def compose(self) -> ComposeResult:
        table = DataTable(id="xid-table", cursor_type="row")
        for label, key, width in (
            ("#", "seq", 4),
            ("TIME (UTC)", "time", 14),
            ("GPU", "gpu", 3),
            ("XID", "xid", 5),
            ("NAME", "name", 22),
            ("SOURCE", "source", 14),
        ):
            table.add_column(label, key=key, width=width)
        yield table
        yield DiffText(id="xid-detail")
        yield DiffText(id="xid-triage")

    def show(self, u: Update, view: View) -> None:
        self._sanitize = view.sanitize
        if not u.replaying and u.xid_scan is None and not self._asked:
            self._asked = True
            self.post_message(self.HistoryWanted())
        result = u.xid_triage
        if result is None:  # before the Monitor's first tick
            return
        self._triage = result
        ordered = sorted(result.events, key=lambda e: (e.timestamp is None, e.timestamp or 0.0))
        rows, events = {}, {}
        for seq, e in enumerate(ordered, start=1):  # numbered oldest = 1
            key = _key(e)
            events[key] = e
            rows[key] = (
                str(seq),
                _when(e.timestamp),
                _gpu(e),
                _code(e),
                _name(e),
                ",".join(e.sources),
            )
        self._events = events
        table = self.query_one("#xid-table", DataTable)
        sync_rows(table, rows, COLUMNS, lambda cells: int(cells[0]), reverse=True)
        self.show_detail()
        self._show_triage(result, u.replaying, u.xid_scan, self._shown_step)

    @on(DataTable.RowHighlighted, "#xid-table")
    def _highlighted(self) -> None:
        self.show_detail()

    def show_detail(self) -> None:
        self._shown_step = None
        detail = self.query_one("#xid-detail", DiffText)
        table = self.query_one("#xid-table", DataTable)
        if not self._events or not table.row_count:
            set_text(
                detail,
                "No Xid or driver error in this run or in the kernel log read so far "
                "(`gputop-diag xid` reads every source and says which ones it could read).",
            )
            return
        row = min(max(table.cursor_row, 0), table.row_count - 1)
        key = table.coordinate_to_cell_key(Coordinate(row, 0)).row_key.value
        e = self._events.get(key)
        if e is not None:
            set_text(detail, hang_text(self._describe(e), pane_width(self)))
            if self._triage_args is not None:  # the route below says this step once, not again
                self._show_triage(*self._triage_args, self._shown_step)

    def _describe(self, e: KernelEvent) -> Text:
        where = "an unknown GPU" if e.gpu_index is None else f"GPU {e.gpu_index}"
        if e.kind == "sxid":
            where = f"NVSwitch {e.switch}"
        elif e.gpu_index is None and e.pci and not self._sanitize:
            where = f"the GPU at {e.pci}"
        t = Text()
        if e.kind == "xid":
            x = entry(e.code)
            head, meaning, question, step, sev = x.name, x.meaning, x.question, x.step, x.severity
            causes = x.cause_words
            t.append(f"Xid {e.code} {head} on {where} ({sev})\n", style="bold")
        elif e.kind == "sxid":
            s = sxid_entry(e.code)
            meaning, question, step, causes = s.meaning, s.question, s.step, "NVLink/fabric"
            sev = "critical" if e.fatal else "warning"
            t.append(f"SXid {e.code} on {where} ({sev})\n", style="bold")
        else:
            d = DRIVER_MESSAGES[e.kind]
            meaning, question, step, sev = d.meaning, d.question, d.step, d.severity
            causes = ", ".join(d.causes)
            t.append(f"{d.title} on {where} ({sev})\n", style="bold")
        t.append(f"meaning: {meaning}" + (f" — likely {causes}" if causes else "") + "\n")
        t.append(f"next: {question} Then: {step}\n")
        self._shown_step = step
        if self._sanitize and (e.pid is not None or e.process_name):
            t.append("process: (hidden under --sanitize)\n")
        elif e.pid is not None or e.process_name:
            t.append(f"process: {e.pid if e.pid is not None else '?'} {e.process_name or ''}\n")
        if e.detail:
            # Kernel text is plain text: `[...]` in it is not markup.
            t.append("text: " + ("(hidden under --sanitize)" if self._sanitize else e.detail))
            t.append("\n")
        t.append(f"seen in: {', '.join(e.sources)}\n", style="dim")
        t.append(
            "An Xid is a classification step, not a root cause: same GPU, same job, same "
            "time window?",
            style="dim",
        )
        return t

    def _show_triage(
        self,
        result: XidTriage,
        replaying: bool,
        scan_state: XidScan | None,
        said: str | None = None,
    ) -> None:
        """`said`: the step the detail above gives; the route and the chains do not give it
        again (one fall-off's action was on screen six times)."""
        self._triage_args = (result, replaying, scan_state)
        t = Text()
        if replaying:
            t.append(
                "The kernel log before this run is not read here (a recording holds the Xid "
                "events it recorded): `gputop-diag xid` reads it.\n",
                style="dim",
            )
        elif scan_state is None:
            days = HISTORY_SINCE_S / 86400
            t.append(f"Reading the kernel log of the last {days:.0f} days…\n", style="dim")
        else:
            self._sources_line(t, scan_state)
        route = [g for g in result.groups if not g.follows]
        if route:
            t.append("Route, most urgent first\n", style="bold")
            for g in route[:ROUTE_LINES]:
                times = f" ×{g.count}" if g.count > 1 else ""
                gpu = self._public(g.gpu)
                t.append(f"• {g.title}{times} on {gpu} ({g.severity}): ")
                if g.step == said:
                    t.append("its question and step as above\n")
                else:
                    t.append(f"ask: {g.question} Then: {g.step}\n")
            if len(route) > ROUTE_LINES:
                t.append(f"  (+{len(route) - ROUTE_LINES} more: gputop-diag xid)\n", style="dim")
        for f in result.findings[:3]:
            t.append(f"{f.evidence}: ", style="bold")
            t.append(f"{f.question}\n")
            if not self._sanitize:
                t.append(f"  seen: {f.detail}\n")
            t.append(f"  then: {f.action}\n")
        for c in [c for c in result.chains if c.severity != "info"][:3]:  # not cleanups
            action = "" if said and c.action.split(";")[0] in said else f"; {c.action}"
            t.append(f"{c.first} → {c.then} on {self._public(c.gpu)}: {c.meaning}{action}\n")
        for n in result.notes:
            t.append(f"{n}\n", style="dim")
        set_text(self.query_one("#xid-triage", DiffText), hang_text(t, pane_width(self)))

    def _public(self, device: str) -> str:
        """A device name fit for the screen: under --sanitize no bus id."""
        if self._sanitize and device.startswith("GPU at "):
            return "a GPU NVML does not list"
        return device

    def _sources_line(self, t: Text, found) -> None:
        if found.failure:
            t.append(f"The kernel log could not be read: {found.failure}\n", style="bold")
            return
        read = [r.name for r in found.sources if r.usable]
        denied = [r for r in found.sources if r.status == "denied"]
        partial = [r for r in found.sources if r.status == "partial"]
        events = sum(e.kind not in ("gpu_announce", "driver_loaded") for e in found.events)
        t.append(
            f"Kernel log read ({', '.join(read) if read else 'no source could be read'}), "
            f"{count(events, 'driver event')} in the last "
            f"{(found.read_at - found.since) / 86400 if found.since else 0:.0f} days.\n",
            style="dim",
        )
        for r in denied[:2]:
            t.append(f"! {r.name}: {r.message}; next: {r.next_step}\n")
        for r in partial[:1]:
            t.append(f"{r.name}: {r.message}\n", style="dim")
