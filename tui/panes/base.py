"""What the panes share: the view state they draw for, change-only updates, number formats."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Static

from ...model import formats
from ...widgets import DiffText
from ..feed import Update
from ..procs import ProcessFilter, SortOrder


@dataclass(frozen=True)
class View:
    """What, besides the data, decides how a pane draws."""

    selected_gpu: int | None = None
    plain: bool = False  # --low-bandwidth: ASCII glyphs, fewer repaints
    sanitize: bool = False  # pseudonyms for hosts, users, bus ids and UUIDs
    environ: Mapping[str, str] = field(default_factory=dict)  # the sources' environment
    interval: float = 1.0  # seconds between samples, for "last N s" captions
    filter: ProcessFilter = field(default_factory=ProcessFilter)  # GPUs and processes shown
    sort: SortOrder = field(default_factory=SortOrder)  # the process table's order
    short: bool = False  # a short terminal (under 30 rows): legends give way to rows
    sweep: bool = True  # histories sweep (the newest sample overwrites the oldest) or scroll
    job: str | None = None  # the job watched (`gputop-diag watch`), before its first sample
    # --sanitize: the session's sanitizer, for text a pane builds from the sampled snapshot
    sanitizer: Any = None


class Pane(VerticalScroll):
    """A pane of the main screen. `show` is called for the visible pane only, once per tick."""

    class Resized(Message):
        """A pane was laid out at a new size: the app draws the visible pane again."""

    def show(self, u: Update, view: View) -> None:
        raise NotImplementedError

    def on_resize(self) -> None:
        # A pane just switched to has no size until it is laid out: draw again once it has.
        if self.display:
            self.post_message(self.Resized())


def set_text(widget: Static | DiffText, content: str | Text) -> None:
    """Update a Static only when its text changed (bytes over SSH are the cost). A DiffText
    compares for itself, and knows when it was never drawn (a hidden pane)."""
    text = content if isinstance(content, Text) else Text(content)
    if isinstance(widget, DiffText):
        widget.update(text)
        return
    key = (text.plain, tuple((s.start, s.end, str(s.style)) for s in text.spans))
    if getattr(widget, "_gputop_shown", None) == key:
        return
    widget._gputop_shown = key  # our own attribute, not Textual's
    widget.update(text)


def sync_rows(
    table: DataTable,
    rows: Mapping[str, tuple],
    columns: tuple[str, ...],
    sort_key: Callable[[tuple], Any] | None = None,
    reverse: bool = False,
) -> None:
    """Make `table` hold `rows` (row key -> cells): add and remove rows, and update only the
    cells that changed; re-sort with `sort_key` (on a row's cell texts) only when rows came or
    went, so rows never jump while their figures move. Cells are plain text, never markup: a
    command line or a kernel message with `[...]` in it stays as it is."""
    cells_of = {
        k: tuple(c if isinstance(c, Text) else Text(str(c)) for c in v) for k, v in rows.items()
    }
    existing = {k.value for k in table.rows}
    gone = existing - cells_of.keys()
    for key in gone:
        table.remove_row(key)
    added = False
    for key, cells in cells_of.items():
        if key not in existing:
            table.add_row(*cells, key=key)
            added = True
            continue
        for col, new, was in zip(columns, cells, table.get_row(key), strict=False):
            if str(new) != str(was):
                table.update_cell(key, col, new)
    if sort_key is not None and (added or gone):
        table.sort(key=lambda values: sort_key(tuple(str(v) for v in values)), reverse=reverse)


gib = formats.gib


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}%"


def side_panel_width(app_width: int) -> int:
    """The side panel's width in the wide layout (border and padding included): a third of
    the terminal, 44 columns at least, 72 at most (app.tcss says the same)."""
    return max(44, min(72, app_width * 36 // 100))


def pane_width(widget) -> int:
    """The pane's content width (its scrollbar gutter left out), or what it will be once
    laid out."""
    if widget.size.width:
        return widget.scrollable_content_region.width
    app_width = widget.app.size.width
    # padding 0 1 and a one-column scrollbar gutter (app.tcss)
    return app_width - (side_panel_width(app_width) + 3 if app_width >= 100 else 3)
