"""The GPU process table: a row cursor that stays on its process, a COMMAND column that scrolls
sideways, and the keys that act on the selected process.

As in htop and nvitop: Up/Down, PgUp/PgDn, Home/End move the cursor over every row (the table
scrolls to keep it in sight), Left/Right scroll the command lines, a cut command ends in `…`;
Enter opens the process's details, `T`/`K`/`I` ask to send SIGTERM/SIGKILL/SIGINT (to every
tagged process where some are: `m` tags and moves on, `U` untags all), `t` shows the processes
as a tree. The table only says what was asked (`ProcessTable.Wanted`); the pane
and the app decide what happens.
"""

from __future__ import annotations

from textual.message import Message
from textual.widgets.data_table import RowKey

from gputop_diag.tui.keys import PROCESS_BINDINGS
from gputop_diag.widgets import CellTable

SCROLL_STEP = 8  # columns a Left/Right press moves the command lines


def clip(text: str, offset: int, width: int, plain: bool = False) -> str:
    """`text` from column `offset`, at most `width` cells: `…` (`~` in ASCII, `plain`) where
    it is cut on either side, so a cut command never reads as a whole one."""
    if width <= 0:
        return ""
    mark = "~" if plain else "…"
    shown = text[offset:] if offset > 0 else text
    if offset > 0 and shown:
        shown = mark + shown[1:]
    if len(shown) > width:
        shown = shown[: width - 1] + mark
    return shown


class ProcessTable(CellTable):
    """A `CellTable` of GPU processes with htop's and nvitop's keys."""

    BINDINGS = PROCESS_BINDINGS

    DEFAULT_CSS = """
    ProcessTable {
        scrollbar-size-vertical: 1;
        scrollbar-gutter: stable;
        & > .datatable--cursor {
            text-style: reverse bold;
        }
        &:focus > .datatable--cursor {
            text-style: reverse bold;
        }
    }
    """

    class Wanted(Message):
        """A key asked for something about the selected process: `what` is "detail",
        "signal" (with `signal`: "SIGTERM", "SIGKILL", "SIGINT"), "tag", "untag", "tree" or
        "scroll". `tagged`: the tagged processes' pids, set by the pane (a signal goes to
        them, not to the selected one, where there are some)."""

        def __init__(self, what: str, key: str | None, signal: str | None = None) -> None:
            super().__init__()
            self.what = what
            self.key = key  # the selected row's key ("gpu:pid"), None without rows
            self.signal = signal
            self.tagged: tuple[int, ...] = ()

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.command_offset = 0  # columns of the command lines scrolled off to the left
        self.command_room = 0  # the longest command's columns beyond the column's width

    @property
    def selected_key(self) -> str | None:
        """The key of the row under the cursor."""
        if not self.row_count:
            return None
        row = min(max(0, self.cursor_row), self.row_count - 1)
        key: RowKey = self.coordinate_to_cell_key((row, 0)).row_key
        return key.value

    def select_key(self, key: str | None, fallback_row: int) -> None:
        """Put the cursor on the row `key`; without it (the process ended), on the row now at
        `fallback_row`, the ended one's neighbour."""
        if not self.row_count:
            return
        try:
            row = self.get_row_index(key) if key is not None else fallback_row
        except Exception:  # noqa: BLE001 - the row is gone: its neighbour
            row = fallback_row
        row = min(max(0, row), self.row_count - 1)
        if row != self.cursor_row:
            self.move_cursor(row=row, animate=False)

    def reveal(self) -> None:
        """Where the pane is too short for the table (a banner above it), scroll the pane
        until the table, and so its cursor row, is in sight: the table scrolls itself. Only
        after a key of the user's: a focus or a re-sort keeps the GPU rows above in sight
        (a 40x12 terminal shows them, not the table)."""
        self.scroll_visible(animate=False)

    def _moved(self) -> None:
        self.call_after_refresh(self.reveal)

    def action_cursor_up(self) -> None:
        super().action_cursor_up()
        self._moved()

    def action_cursor_down(self) -> None:
        super().action_cursor_down()
        self._moved()

    def action_page_up(self) -> None:
        super().action_page_up()
        self._moved()

    def action_page_down(self) -> None:
        super().action_page_down()
        self._moved()

    def action_scroll_top(self) -> None:
        super().action_scroll_top()
        self._moved()

    def action_scroll_bottom(self) -> None:
        super().action_scroll_bottom()
        self._moved()

    def _want(self, what: str, signal: str | None = None) -> None:
        self.post_message(self.Wanted(what, self.selected_key, signal))

    # -- keys ---------------------------------------------------------------------------------
    def action_cursor_left(self) -> None:
        self.scroll_command(-SCROLL_STEP)

    def action_cursor_right(self) -> None:
        self.scroll_command(SCROLL_STEP)

    def scroll_command(self, step: int) -> None:
        offset = max(0, min(self.command_room, self.command_offset + step))
        if offset != self.command_offset:
            self.command_offset = offset
            self._want("scroll")

    def action_select_cursor(self) -> None:
        if self.row_count:
            self._want("detail")

    def action_signal(self, name: str) -> None:
        if self.row_count:
            self._want("signal", name)

    def action_toggle_tree(self) -> None:
        self._want("tree")

    def action_tag(self) -> None:
        if self.row_count:
            self._want("tag")
            super().action_cursor_down()  # as htop's Space: tag, then the next row
            self._moved()

    def action_untag_all(self) -> None:
        self._want("untag")
