"""The GPU process table: its columns at each width, a row cursor that stays on its process, a
COMMAND column that scrolls sideways, and the keys that act on the selected process.

As in htop and nvitop: Up/Down, PgUp/PgDn, Home/End move the cursor over every row (the table
scrolls to keep it in sight), Left/Right scroll the command lines, a cut command ends in `…`;
Enter opens the process's details, `T`/`K`/`I` ask to send SIGTERM/SIGKILL/SIGINT (to every
tagged process where some are: `m` tags and moves on, `U` untags all), `t` shows the processes
as a tree. The table only says what was asked (`ProcessTable.Wanted`); the pane
and the app decide what happens.

Where a process runs for a Slurm job, a Kubernetes pod or a container, the OWNER column names
it (`job 424242`, `pod ml-research/llama-ddp-0`, `ctr 8e1f0d2c`). At 80 columns the COMMAND
column has 36 cells and every other column earns its place, so below OWNER_COLUMN_FROM the
owner takes the USER column's place (the user where a process has no owner: a launcher, a
desktop session), 12 cells wide, which costs the command 3 cells; from there (a 200-column
terminal with the panel hidden, or a wider one) OWNER is a column of its own beside USER, and
a process in another PID namespace shows the pid it has there beside the host's (`41216 (7)`).
A machine where no process has an owner keeps the table it always had.
"""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets.data_table import RowKey

from gputop_diag.model import formats
from gputop_diag.tui.keys import PROCESS_BINDINGS
from gputop_diag.tui.process_owner import owner_short
from gputop_diag.tui.procs import ProcRow, elapsed_text, size_text
from gputop_diag.widgets import CellTable

SCROLL_STEP = 8  # columns a Left/Right press moves the command lines

MIN_COMMAND = 12  # the COMMAND column's least width
OWNER_COLUMN_FROM = 160  # pane columns from which OWNER is a column of its own beside USER
NARROW_OWNER = 12  # OWNER in USER's place: `job 424242`, `ctr 8e1f0d2c`, a pod's `NAME`
WIDEST_OWNER = 16  # ... widened for a pseudonym shown whole (`container-aixa`, `uuid-6a22`)
NS_PID_WIDTH = 13  # `  41216 (7)`: the host's pid, then the pid in its own namespace

# (key, label, width, shown from this pane width up); COMMAND takes what is left.
COLUMNS: tuple[tuple[str, str, int | None, int], ...] = (
    ("gpu", "GPU", 3, 0),
    ("pid", "PID", 7, 0),
    ("user", "USER", 9, 0),  # a pseudonym (user-b7xa) whole
    ("owner", "OWNER", 28, OWNER_COLUMN_FROM),  # `pod NS/NAME`; only where one is: columns_for
    ("gpu_mem", "GPU MEM", 7, 0),
    ("share", "SHARE", 5, 120),
    ("sm", "SM%", 4, 96),
    ("cpu", "CPU%", 5, 0),
    ("mem_pct", "%MEM", 5, 110),  # htop's: RSS of the host's memory
    ("rss", "RSS", 6, 96),
    ("time", "TIME", 8, 100),  # since the process started, in htop's TIME+ layout
    ("command", "COMMAND", None, 0),
)


def columns_for(width: int, owned: bool = False) -> tuple[str, ...]:
    """The columns drawn in a pane `width` wide. `owned`: some GPU process runs for a job, pod
    or container: OWNER beside USER from OWNER_COLUMN_FROM, in USER's place below it."""
    keys = [key for key, _, _, min_width in COLUMNS if width >= min_width and key != "owner"]
    if owned:
        at = keys.index("user")
        if width >= OWNER_COLUMN_FROM:
            keys.insert(at + 1, "owner")
        else:
            keys[at] = "owner"
    return tuple(keys)


def column_widths(
    columns: tuple[str, ...], ns_pids: bool = False, owner_width: int = NARROW_OWNER
) -> dict[str, int]:
    """Each drawn column's width but COMMAND's. `ns_pids`: some process has a pid of its own
    in another PID namespace, shown beside the host's where OWNER has a column of its own.
    `owner_width`: OWNER in USER's place, as wide as its longest pseudonym (`owner_short`
    never cuts one: under --sanitize `container-aixa` is 14 cells), at most `WIDEST_OWNER`."""
    widths = {key: w for key, _, w, _ in COLUMNS if key in columns and w is not None}
    if "owner" in widths and "user" not in widths:
        widths["owner"] = min(max(NARROW_OWNER, owner_width), WIDEST_OWNER)
    if ns_pids and "owner" in widths and "user" in widths:
        widths["pid"] = NS_PID_WIDTH
    return widths


def command_width(
    width: int, columns: tuple[str, ...], ns_pids: bool = False, owner_width: int = NARROW_OWNER
) -> int:
    """The COMMAND column's width in a pane `width` wide: what the other columns leave (each
    with a cell of padding either side) beside the table's one-column scrollbar gutter."""
    others = sum(w + 2 for w in column_widths(columns, ns_pids, owner_width).values())
    return max(MIN_COMMAND, width - 1 - others - 2)


TAG_MARK = "*"  # after the GPU cell of a tagged process (`m`), as htop marks tagged rows
TAGGED_STYLE = "bold underline"  # and its row: readable without colour
RIGHT = {"pid", "gpu_mem", "share", "sm", "cpu", "rss", "mem_pct", "time"}


def _cut(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "+"  # htop marks a cut name


def _pid_cell(r: ProcRow, width: int) -> str:
    """The pid; in a NS_PID_WIDTH column the pid in the process's own namespace beside it."""
    if width < NS_PID_WIDTH:
        return str(r.pid)
    ns = r.owner.ns_pid if r.owner is not None else None
    text = f"{r.pid:>7}" + (f" ({ns})" if ns is not None and ns != r.pid else "")
    return text if len(text) <= width else f"{r.pid:>7}"


def row_cells(
    r: ProcRow,
    columns: tuple[str, ...],
    command_width: int = 80,
    offset: int = 0,
    plain: bool = False,
    tagged: bool = False,
    widths: dict[str, int] | None = None,
) -> tuple[Text, ...]:
    """A row's cells, each within its column (`widths`, as `column_widths` gives them)."""
    widths = column_widths(columns) if widths is None else widths
    mark = TAG_MARK if tagged else ""
    own = widths.get("owner", 0)
    # OWNER in USER's place says the user where there is no owner; beside USER, `-`
    no_owner = _cut(r.user, own) if "user" not in columns else "-"
    wide_pid = widths.get("pid", 0) >= NS_PID_WIDTH
    if r.is_parent:  # the tree view's launcher row: its pid and name, no figures of its own
        cells = dict.fromkeys(columns, "")
        cells["gpu"] = mark
        cells["pid"] = f"{r.pid:>7}" if wide_pid else str(r.pid)
        cells["user"] = _cut(r.user, 9)
        cells["owner"] = owner_short(r.owner, own) or ("" if "user" in columns else no_owner)
        cells["command"] = clip(r.command, offset, command_width, plain)
        style = TAGGED_STYLE if tagged else "dim"
        return tuple(
            Text(cells[c], justify=_justify(c, wide_pid), no_wrap=True, style=style)
            for c in columns
        )
    cells = {
        "gpu": (r.gpu_label + mark)[:3] if mark and len(r.gpu_label) < 3 else r.gpu_label,
        "pid": _pid_cell(r, widths.get("pid", 0)),
        "user": _cut(r.user, 9),
        "owner": owner_short(r.owner, own) or no_owner,
        "gpu_mem": size_text(r.gpu_mem_bytes),
        "share": "n/a" if r.share_pct is None else f"{r.share_pct:.0f}%",
        "sm": formats.pct(r.sm_pct, unit=False),
        "cpu": "n/a" if r.cpu_pct is None else f"{r.cpu_pct:.0f}",
        "rss": size_text(r.rss_bytes),
        "mem_pct": "n/a" if r.mem_pct is None else f"{r.mem_pct:.1f}",
        "time": elapsed_text(r.elapsed_s),
        "command": clip(r.tree_prefix + r.command, offset, command_width, plain),
    }
    style = TAGGED_STYLE if tagged else ""
    return tuple(
        Text(cells[c], justify=_justify(c, wide_pid), no_wrap=True, style=style) for c in columns
    )


def _justify(column: str, wide_pid: bool) -> str:
    """Figures to the right; a wide pid cell is right-aligned within itself (`_pid_cell`), so
    the host's pids line up with or without a namespace's pid beside them."""
    if column == "pid" and wide_pid:
        return "left"
    return "right" if column in RIGHT else "left"


def pid_in_cell(cell: object) -> str:
    """The host's pid in a PID cell (`41216`, `  41216 (7)`)."""
    return str(cell).split()[0] if str(cell).split() else ""


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

    def select_key(self, key: str | None, fallback_row: int, reordered: bool = False) -> None:
        """Put the cursor on the row `key`; without it (the process ended), on the row now at
        `fallback_row`, the ended one's neighbour. After the rows were `reordered`, the first
        row stays in sight wherever the cursor's row lets it: a sort never hides the top of the
        new order behind a scroll the cursor no longer needs."""
        if not self.row_count:
            return
        try:
            row = self.get_row_index(key) if key is not None else fallback_row
        except Exception:  # noqa: BLE001 - the row is gone: its neighbour
            row = fallback_row
        row = min(max(0, row), self.row_count - 1)
        if row != self.cursor_row:
            # no scroll for the cursor's old row (`move_cursor` scrolls to it before it moves):
            # the new row is scrolled into view as the cursor lands on it
            self.move_cursor(row=row, animate=False, scroll=False)
        if reordered and self.scroll_y and row < self.rows_in_view:
            self.scroll_to(y=0, animate=False, immediate=True)

    @property
    def rows_in_view(self) -> int:
        """How many rows the table shows at once, below its header."""
        header = self.header_height if self.show_header else 0
        return max(1, self.scrollable_content_region.height - header)

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
