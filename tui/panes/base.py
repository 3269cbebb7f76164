"""What the panes share: change-only updates, so a tick repaints only what changed."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable, Static

from ...model import GIB


def set_text(widget: Static, content: str | Text) -> None:
    """Update a Static only when its content changed (bytes over SSH are the cost)."""
    key = content.plain if isinstance(content, Text) else content
    if getattr(widget, "_last_content", None) == key:
        return
    widget._last_content = key  # noqa: SLF001 - our own attribute
    widget.update(content if isinstance(content, Text) else Text(content))


def sync_rows(table: DataTable, rows: dict[str, tuple], columns: tuple[str, ...]) -> None:
    """Make `table` hold `rows` (row key -> cells): add, remove, and update changed cells only."""
    # Plain text only: a command line or a kernel message with `[...]` is not markup.
    rows = {
        k: tuple(c if isinstance(c, Text) else Text(str(c)) for c in v) for k, v in rows.items()
    }
    existing = {k.value for k in table.rows}
    for key in existing - rows.keys():
        table.remove_row(key)
    for key, cells in rows.items():
        if key not in existing:
            table.add_row(*cells, key=key)
            continue
        old = table.get_row(key)
        for col, new, was in zip(columns, cells, old, strict=False):
            if str(new) != str(was):
                table.update_cell(key, col, new)


def gib(b: int | None) -> str:
    return "n/a" if b is None else f"{b / GIB:.1f}"


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}%"


SIDE_PANEL_COLUMNS = 46


def pane_width(widget) -> int:
    """The pane's width, or what it will be once laid out (a pane just switched to has none)."""
    if widget.size.width:
        return widget.size.width
    app_width = widget.app.size.width
    return app_width - (SIDE_PANEL_COLUMNS if app_width >= 100 else 2)
