"""The Fleet pane's table: one row per node (class, confidence, alerts, busy time, the first
evidence), sorted by alert severity, by class or by name.

Pure rows (`fleet_rows`) and a DataTable that shows them; the order is kept across refreshes
and the cursor stays on its node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual.widgets import DataTable

from gputop_diag.diagnose.types import ALL_PRIMARY
from gputop_diag.fleet.judge import (
    FleetVerdict,
    class_and_confidence,
    natural_key,
    severity_rank,
    stale_text,
)
from gputop_diag.fleet.sanitize import FleetNames

SORTS = ("alerts", "class", "node")
COLUMNS = ("NODE", "CLASS", "CONF", "ALERTS", "BUSY", "GPUS", "EVIDENCE")


@dataclass(frozen=True)
class FleetRow:
    key: str  # the node's key (Hostname or instance): what Enter opens
    hostname: str | None
    node: str  # what the table shows (a pseudonym under --sanitize)
    primary: str
    label: str
    confidence: str
    alerts: str
    severity: int  # -1 stale, 0 a fault, 1 a critical alert, 2 an alert, 3 none
    busy: str
    gpus: str
    evidence: str
    host_label: str = "hostname"  # the spelling of the host name's label its series carry


def fleet_rows(fv: FleetVerdict, *, names: FleetNames | None = None) -> list[FleetRow]:
    """The table's rows; under --sanitize (`names`) each node shows its session pseudonym,
    the same however many nodes join or leave."""
    if names is not None:
        names.learn([v.node for v in fv.nodes])
    rows = []
    for v in fv.nodes:
        d = v.diagnosis
        ev = d.evidence[0].text if d.evidence else ""
        label, confidence = class_and_confidence(v)
        if v.stale_s is not None:
            ev = stale_text(v.stale_s) + (f"; before it: {d.label}" if d.has_confidence else "")
        if v.missing_series:
            ev += f" (missing: {len(v.missing_series)} kinds of series)"
        rows.append(
            FleetRow(
                key=v.node.key,
                hostname=v.node.hostname,
                host_label=v.node.host_label,
                node=v.node.key if names is None else names.node(v.node),
                primary=d.primary,
                label=label,
                confidence=confidence,
                alerts=",".join(sorted({a.kind for a in d.alerts})) or "-",
                severity=severity_rank(v),
                busy="-" if v.busy_pct is None else f"{v.busy_pct:.0f} %",
                gpus=str(v.gpus),
                evidence=ev if names is None else names.text(ev),
            )
        )
    return rows


def sort_rows(rows: Sequence[FleetRow], by: str) -> list[FleetRow]:
    order = {c: i for i, c in enumerate(ALL_PRIMARY)}
    if by == "class":  # a stale node first: its class is of old figures
        return sorted(
            rows,
            key=lambda r: (
                r.severity >= 0,
                order.get(r.primary, 99),
                r.severity,
                natural_key(r.node),
            ),
        )
    if by == "node":
        return sorted(rows, key=lambda r: natural_key(r.node))
    return sorted(rows, key=lambda r: (r.severity, order.get(r.primary, 99), natural_key(r.node)))


class FleetTable(DataTable):
    """Nodes as rows; Enter (RowSelected) opens one."""

    DEFAULT_CSS = """
    FleetTable { height: 1fr; }
    """

    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kw)
        self.rows_shown: list[FleetRow] = []

    def on_mount(self) -> None:
        for c in COLUMNS:
            self.add_column(c, key=c)

    def show(self, rows: Sequence[FleetRow], by: str) -> None:
        keep = self.current_key()
        self.rows_shown = sort_rows(rows, by)
        self.clear()
        for r in self.rows_shown:
            self.add_row(
                r.node, r.label, r.confidence, r.alerts, r.busy, r.gpus, r.evidence, key=r.key
            )
        keys = [r.key for r in self.rows_shown]
        if keep in keys:
            self.move_cursor(row=keys.index(keep))

    def current_key(self) -> str | None:
        if not self.rows_shown or self.cursor_row is None:
            return None
        if 0 <= self.cursor_row < len(self.rows_shown):
            return self.rows_shown[self.cursor_row].key
        return None

    def current(self) -> FleetRow | None:
        key = self.current_key()
        return next((r for r in self.rows_shown if r.key == key), None)
