"""What the panes share: the view state they draw for, change-only updates, number formats."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Static

from gputop_diag.model import formats
from gputop_diag.monitor.view import Update
from gputop_diag.tui.procs import ProcessFilter, SortOrder
from gputop_diag.widgets import DiffText


@dataclass(frozen=True)
class View:
    """What, besides the data, decides how a pane draws."""

    selected_gpu: int | None = None
    plain: bool = False  # ASCII only (--low-bandwidth, or a terminal without Unicode)
    low_bandwidth: bool = False  # --low-bandwidth: fewer repaints
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

    def settle(self) -> None:
        """The next `show` draws every figure and trace as the tick has it, none held back: no
        tick follows to move a held one (the end of a replay)."""

    def prepare(self, u: Update) -> None:
        """Called each tick while the pane is hidden: mount what its rows need (cheap when
        nothing changed), so that switching to it draws at once, not after a mount."""

    def watch_has_focus(self, _has_focus: bool) -> None:
        # Textual restyles the focused widget and every widget inside it (a `:focus` rule could
        # match them): ~280 lines on the Utilization pane, a third of a pane switch. No rule
        # styles a pane's contents by the pane's focus (app.tcss), so the pane alone.
        self.app.stylesheet.update_nodes([self], animate=True)

    def on_resize(self) -> None:
        # A pane just switched to has no size until it is laid out: draw again once it has.
        if self.display:
            self.post_message(self.Resized())

    def check_width(self, width: int) -> None:
        """After the next refresh, draw again if the pane's width is no longer `width` (a
        pane drawn while the terminal was resized, at a width its layout then changed: a
        history `last 8 s` wide until the next repaint)."""

        def check() -> None:
            if self.display and self.is_mounted and pane_width(self) != width:
                self.post_message(self.Resized())

        self.call_after_refresh(check)


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

BULLETS = ("! ", "!  ", "· ", "• ", "- ", "i  ")
_COLUMN = re.compile(r"[a-z][\w'.]*(?: [\w'.]+)*  +(?=\S)")  # a label, then its value


def hanging_indent(line: str) -> int:
    """Where a wrapped line's continuation starts: under the text after its leading spaces
    and its bullet (`! `, `· `, `• `), or after `next: ` / `users see: `."""
    body = line.lstrip(" ")
    indent = len(line) - len(body)
    for bullet in sorted(BULLETS, key=len, reverse=True):
        if body.startswith(bullet):
            return indent + len(bullet)
    for label in ("next: ", "users see: ", "meaning: ", "seen: ", "then: ", "text: "):
        if body.startswith(label):
            return indent + len(label)
    column = _COLUMN.match(line)  # `kernel module       550.54.15 (open)`
    return column.end() if column else indent


def hang_text(text: Text, width: int, indent_of: Callable[[str], int] = hanging_indent) -> Text:
    """`text` with each line longer than `width` broken at spaces, its continuation lines
    indented under its text (`indent_of`), styles kept: a terminal's own wrap would start
    them at the margin. A word longer than a line is cut where it must."""
    if width <= 0:
        return text
    out = Text(end=text.end)
    lines = text.split("\n", allow_blank=True)
    for k, line in enumerate(lines):
        plain = line.plain
        indent = min(indent_of(plain), width // 2)
        start, room = 0, width
        while len(plain) - start > room:
            space = plain.rfind(" ", start + 1, start + room + 1)
            cut = space if space > start else start + room
            out.append_text(line[start:cut])
            out.append("\n" + " " * indent)
            start = cut
            while plain[start : start + 1] == " ":  # a break at "  " starts no line with a space
                start += 1
            room = width - indent
        out.append_text(line[start:])
        if k < len(lines) - 1:
            out.append("\n")
    return out


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
