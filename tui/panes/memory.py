"""Pane 1, Memory: per GPU used / driver-reserved / free, headroom and growth; the host's CPU,
memory and swap (nvitop's and htop's bars); the memory planner's prediction beside what the job
holds (with a model's config); the GPU process table."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable

from gputop_diag.model import GpuState, HostState, Snapshot
from gputop_diag.monitor.series import GpuSeries
from gputop_diag.monitor.view import ModelConfig, Update
from gputop_diag.tui.filter_screen import shown_filter_text
from gputop_diag.tui.holds import CELSIUS, LOAD, PERCENT, WATTS, Holds, Step
from gputop_diag.tui.panes.base import Pane, View, gib, pane_width, sync_rows
from gputop_diag.tui.process_actions import pid_of
from gputop_diag.tui.process_owner import owner_short
from gputop_diag.tui.process_table import (
    COLUMNS,
    NARROW_OWNER,
    TAG_MARK,
    ProcessTable,
    clip,
    column_widths,
    columns_for,
    command_width,
    pid_in_cell,
    row_cells,
)
from gputop_diag.tui.procs import (
    SORTS,
    ProcRow,
    matches,
    nearly_sorted,
    ordered,
    owner_text,
    process_rows,
    size_text,
    tree_rows,
)
from gputop_diag.widgets import DiffLine, DiffText, MemoryBar

if TYPE_CHECKING:
    from gputop_diag.planner.live import JobPlan

LABEL_WIDTH = 7  # "▶GPU12 "
# The bar's middle part is what NVML's memory info (v2) reports as reserved: the driver's and
# the firmware's own share. PyTorch users read "reserved" as the caching allocator's pool,
# which NVML counts in the process's used memory, hence its own name here.
DRIVER_RESERVE_TIP = (
    "drv-rsv: memory the driver keeps for itself (NVML's 'reserved': firmware, ECC, the "
    "driver's own use). Not PyTorch's torch.cuda.memory_reserved(), the caching allocator's "
    "pool, which NVML counts as used by the process."
)
MIN_BAR = 4
LONG_BAR = 16  # below this the figures take their short form and the bar gets the room


# How far a process's figures may drift before its row is repainted (holds.py): a CPU figure
# wobbles by ten points a second in a busy process, and each repaint is a row over SSH.
ROW_STEPS = (
    Step(share=0.01),  # GPU memory: 1 % (a leak's row moves with its GPU's bar above)
    Step(points=2.0),  # its share of the GPU, points
    Step(points=10.0),  # SM %
    Step(points=10.0),  # CPU, % of a core
    Step(share=0.10),  # RSS
)


def held_row(holds: Holds, r: ProcRow, now: float) -> ProcRow:
    """`r` with the figures on screen (see ROW_STEPS)."""
    mem, share, sm, cpu, rss = holds.get(
        r.key, (r.gpu_mem_bytes, r.share_pct, r.sm_pct, r.cpu_pct, r.rss_bytes), ROW_STEPS, now
    )
    return replace(r, gpu_mem_bytes=mem, share_pct=share, sm_pct=sm, cpu_pct=cpu, rss_bytes=rss)


def _bar_keys(snap: Snapshot) -> tuple[str, ...]:
    keys: list[str] = []
    for g in snap.gpus:
        keys.append(f"mem-gpu{g.index}")
        keys.extend(f"mem-gpu{g.index}-mig{m.mig_index}" for m in g.mig_instances)
    return tuple(keys)


def figures(g: GpuState, s: GpuSeries | None, short: bool | str = False) -> tuple[str, str]:
    """The text beside a GPU's bar and its flag; `short` for narrow panes, "tiny" for the
    narrowest.

    long:  `58.9/79.6 GiB  74%  headroom 20.7 GiB  +2039 MiB/min`
    short: `58.9/79.6G 74% free 20.7G +2.0G/min`
    tiny:  `58.9/79.6G 74%`
    """
    used, total = g.mem_used_bytes, g.mem_total_bytes
    pct = g.mem_used_pct
    trend = None if s is None else s.mem_growth_mib_per_min
    share = "n/a" if pct is None else f"{pct:.0f}%"
    if short == "tiny":
        text = f"{gib(used)}/{gib(total)}G {share}"
    elif short:
        growth = "" if trend is None else f" {trend / 1024:+.1f}G/min"
        text = f"{gib(used):>4}/{gib(total)}G {share:>4} free {gib(g.mem_free_bytes)}G{growth}"
    else:
        growth = "" if trend is None else f"  {trend:+.0f} MiB/min"
        text = (
            f"{gib(used):>5}/{gib(total)} GiB {share:>4}"
            f"  headroom {gib(g.mem_free_bytes)} GiB{growth}"
        )
    flag = "GROWING" if s is not None and s.mem_growing else ""
    if pct is not None and pct >= 95:
        flag = "FULL" if not flag else f"{flag}, FULL"
    return text, flag


# The host line's figures: repainted when one moves by its step (holds.py), as the rows are
HOST_STEPS = (PERCENT, PERCENT, Step(share=0.02), Step(share=0.02), LOAD)
HOST_BAR = 10  # cells of each of the host line's bars, where they fit


def host_text(h: HostState | None, width: int, plain: bool = False) -> str:
    """The host's line, as nvitop's CPU / MEM / SWP bars and htop's header give it: CPU busy
    (of all cores) with iowait, memory used of total, swap used of total, the 1-minute load;
    with bars where they fit, the figures alone where not."""
    if h is None:
        return "  HOST  not read"
    full, empty = ("#", ".") if plain else ("█", "░")

    def bar(part: float | None, whole: float | None) -> str:
        if part is None or not whole:
            return ""
        n = round(HOST_BAR * min(1.0, max(0.0, part / whole)))
        return full * n + empty * (HOST_BAR - n) + " "

    def size(b: int | None) -> str:  # `336G` from 100 GiB up: a host's memory is large
        return f"{b / 2**30:.0f}G" if b is not None and b >= 100 * 2**30 else size_text(b)

    def of(used: int | None, total: int | None) -> str:
        if total is None:
            return "n/a"
        if not total:
            return "none"
        return f"{size(used)}/{size(total)}"

    cpu = f"{h.cpu_pct:.0f}%"
    io = "" if h.iowait_pct is None else f" iowait {h.iowait_pct:.0f}%"
    load = "" if not h.load_avg else f"  load {h.load_avg[0]:.1f}/{h.cpu_count}"
    mem, swap = of(h.mem_used_bytes, h.mem_total_bytes), of(h.swap_used_bytes, h.swap_total_bytes)
    bars = (
        bar(h.cpu_pct, 100),
        bar(h.mem_used_bytes, h.mem_total_bytes),
        bar(h.swap_used_bytes, h.swap_total_bytes),
    )
    forms = (
        f"  HOST  CPU {bars[0]}{cpu}{io}  MEM {bars[1]}{mem}  SWP {bars[2]}{swap}{load}",
        f"  HOST  CPU {cpu}{io}  MEM {mem}  SWP {swap}{load}",
        f"  HOST  CPU {cpu}{io}  MEM {mem}  SWP {swap}",
        f"  HOST  CPU {cpu}  MEM {mem}",
    )
    return next((f for f in forms if len(f) <= width), clip(forms[-1], 0, width, plain))


def held_host(holds: Holds, h: HostState | None, now: float) -> HostState | None:
    """`h` with the figures on screen (HOST_STEPS)."""
    if h is None:
        return None
    load = h.load_avg[0] if h.load_avg else None
    cpu, io, mem, swap, load = holds.get(
        "host", (h.cpu_pct, h.iowait_pct, h.mem_used_bytes, h.swap_used_bytes, load),
        HOST_STEPS, now,
    )  # fmt: skip
    avg = None if h.load_avg is None or load is None else (load, *h.load_avg[1:])
    return replace(
        h, cpu_pct=cpu, iowait_pct=io, mem_used_bytes=mem, swap_used_bytes=swap, load_avg=avg
    )


# Terminal columns from which each GPU's line shows temperature, power and fan, where they fit:
# beside the long figures in a pane of about 120 columns, beside the short ones (`free 20.7G`)
# in the narrower pane beside the panel
THERMAL_FROM = 120


THERMAL_STEPS = (CELSIUS, WATTS, PERCENT)  # held as the rows are: a watt a second is no news


def held_thermal(holds: Holds, g: GpuState, now: float) -> GpuState:
    """`g` with the temperature, power and fan on screen (THERMAL_STEPS)."""
    temp, power, fan = holds.get(
        f"thermal-{g.index}", (g.temperature_c, g.power_w, g.fan_speed_pct), THERMAL_STEPS, now
    )
    return replace(g, temperature_c=temp, power_w=power, fan_speed_pct=fan)


def thermal_text(g: GpuState, plain: bool = False) -> str:
    """nvitop's Temp / Pwr:Usage/Cap / Fan for a GPU's line: `71°C 612/700W fan 45%`; `-` for
    a GPU without fans (NVML: not supported), `n/a` for a figure not read."""
    temp = "n/a" if g.temperature_c is None else f"{g.temperature_c:.0f}{'C' if plain else '°C'}"
    power = "n/a" if g.power_w is None else f"{g.power_w:.0f}"
    limit = g.static.power_limit_w
    watts = f"{power}/{limit:.0f}W" if limit else f"{power}W"
    fan = "-" if g.fan_speed_pct is None else f"{g.fan_speed_pct}%"
    return f"{temp} {watts} fan {fan}"


class MemoryPane(Pane):
    class SortBy(Message):
        """A click on a column's header: sort the processes by `column` (again: reverse)."""

        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.columns_shown: tuple[str, ...] | None = None  # as last drawn; None: not yet
        self._bars: dict[str, MemoryBar] = {}
        self._columns: tuple[str, ...] = ()
        self._widths: dict[str, int] = {}
        self._command_width = 0
        self._last: tuple[Update, View] | None = None  # to draw again on a key of the table
        self.tree_view = False  # `t`: the processes under their parents
        self.tagged: set[int] = set()  # `m`: pids a signal key then goes to
        self._order: tuple[str, ...] = ()
        self._holds = Holds(max_hold_s=30.0)
        self._sorted_by: tuple | None = None
        # The model's config for the memory planner, set by the app: `--model-config`, or the
        # one the job's command line names; None: no plan is shown.
        self.model_config: ModelConfig | None = None
        self._plan: JobPlan | None = None
        self._plan_key: tuple | None = None
        self._drawn: dict[str, tuple] = {}  # what each bar was last given: not given again

    def settle(self) -> None:
        self._holds.forget()

    def compose(self) -> ComposeResult:
        yield Vertical(id="mem-bars")
        legend = DiffLine(id="mem-legend")
        legend.tooltip = DRIVER_RESERVE_TIP
        yield legend
        yield DiffLine(id="mem-host")
        yield DiffText(id="mem-plan", wrap=False)
        yield DiffLine(id="mem-procs-title", classes="pane-title")
        yield ProcessTable(id="mem-procs", cursor_type="row")

    def on_focus(self) -> None:
        """The pane's keys are the process table's (arrows, Enter, T/K/I, t)."""
        self.query_one(ProcessTable).focus(scroll_visible=False)

    def _ensure_bars(self, snap: Snapshot) -> dict[str, MemoryBar]:
        keys = _bar_keys(snap)
        if tuple(self._bars) != keys:
            box = self.query_one("#mem-bars", Vertical)
            box.remove_children()
            self._bars = {k: MemoryBar(id=k) for k in keys}
            self._drawn = {}
            box.mount(*self._bars.values())
        return self._bars

    def show(self, u: Update, view: View) -> None:
        self._last = (u, view)
        snap = u.snapshot
        bars = self._ensure_bars(snap)
        width = pane_width(self)
        gpus = [g for g in snap.gpus if view.filter.shows_gpu(g.index)]
        live = [g for g in gpus if not g.lost and g.mem_total_bytes is not None]

        thermal = self.app.size.width >= THERMAL_FROM
        shown_thermal = (
            {g.index: thermal_text(held_thermal(self._holds, g, snap.timestamp), view.plain)
             for g in live}
            if thermal else {}
        )  # fmt: skip

        def fit(short: bool | str) -> tuple[int, dict[int, tuple[str, str]]]:
            figs = {g.index: figures(g, u.gpus.get(g.index), short) for g in live}
            if thermal:
                figs = {
                    g.index: (f"{figs[g.index][0]}  {shown_thermal[g.index]}", figs[g.index][1])
                    for g in live
                }
            # " text" beside the bar, then "  " and " FLAG " (MemoryBar)
            room = max((1 + len(t) + (len(f) + 4 if f else 0) for t, f in figs.values()), default=0)
            return min(40, width - LABEL_WIDTH - room), figs

        bar_width, figs = fit(short=False)
        if thermal and bar_width < LONG_BAR:  # beside the short figures (a pane beside the panel)
            bar_width, figs = fit(short=True)
            if bar_width < LONG_BAR:  # no room beside those either: left out
                thermal = False
                bar_width, figs = fit(short=False)
        if bar_width < LONG_BAR:
            bar_width, figs = fit(short=True)
        if bar_width < MIN_BAR:
            bar_width, figs = fit(short="tiny")
        bar_width = max(MIN_BAR, bar_width)
        for g in snap.gpus:  # a GPU the filter leaves out is hidden, not removed
            shown = view.filter.shows_gpu(g.index)
            bars[f"mem-gpu{g.index}"].display = shown
            for m in g.mig_instances:
                bars[f"mem-gpu{g.index}-mig{m.mig_index}"].display = shown
        for g in gpus:
            mark = (">" if view.plain else "▶") if g.index == view.selected_gpu else " "
            label = f"{mark}GPU{g.index:<2} "
            bar = bars[f"mem-gpu{g.index}"]
            bar.set_class(g.lost, "-lost")
            key = f"mem-gpu{g.index}"
            if g.lost:
                self._draw(key, label, "LOST: no memory figures", alarm=True)
            elif g.index not in figs:
                self._draw(key, label, "memory: n/a")
            else:
                # `used` leaves the driver's reserve out (NVML v2); under v1 it holds it
                reserved = g.mem_reserved_bytes or 0
                used = g.mem_used_bytes or 0
                text, flag = figs[g.index]
                self._draw(
                    key, label, used, reserved, g.mem_total_bytes, bar_width, text, flag=flag,
                    plain=view.plain,
                )  # fmt: skip
            for m in g.mig_instances:
                mt, mu = m.memory_total_bytes or 0, m.memory_used_bytes or 0
                profile = (m.name or "").split()[-1] if m.name else ""
                self._draw(
                    f"mem-gpu{g.index}-mig{m.mig_index}", f" MIG{m.mig_index:<2} ", mu, 0, mt,
                    bar_width, f"{gib(mu):>5}/{gib(mt)} GiB  {profile}", plain=view.plain,
                )  # fmt: skip
        legend = self.query_one("#mem-legend", DiffLine)
        legend.display = not view.short
        if snap.gpus:
            g = "#+." if view.plain else "█▒░"
            forms = (
                f"  {g[0]} used by processes  {g[1]} drv-rsv: driver's own, not PyTorch's "
                f"reserved  {g[2]} free; GROWING: a steady rise over the last minute",
                f"  {g[0]} used by processes  {g[1]} drv-rsv: driver's own, not PyTorch's "
                f"reserved  {g[2]} free",
                f"  {g[0]} used by processes  {g[1]} drv-rsv (the driver's)  {g[2]} free",
                f"  {g[0]} used  {g[1]} drv-rsv  {g[2]} free",
            )
            legend.set_text(next((f for f in forms if len(f) <= width), forms[-1]))
        else:
            legend.set_text("  no GPU to show")
        if snap.gpus and not gpus:
            legend.display = True
            legend.set_text(f"  no GPU matches the filter ({shown_filter_text(view)}); esc clears")
        host = self.query_one("#mem-host", DiffLine)
        host.display = not view.short  # as the legend: rows first on a short terminal
        if host.display:
            shown = held_host(self._holds, snap.host, snap.timestamp)
            host.set_text(host_text(shown, width, view.plain))
        self._show_plan(u.sampled or snap, view, width)
        self._show_processes(snap, view, width)

    def _draw(self, key: str, label: str, *args, **kw) -> None:
        """Bar `key` with a message (`label`, a message) or its figures (`label`, used,
        reserved, total, width, text): given again only when they changed (a bar's runs are
        worked out from them, most ticks the same)."""
        given = (label, args, tuple(sorted(kw.items())))
        if self._drawn.get(key) == given:
            return
        self._drawn[key] = given
        bar = self._bars[key]
        if len(args) == 1:
            bar.show_message(label, *args, **kw)
        else:
            bar.show(label, *args, **kw)

    def _show_plan(self, snap: Snapshot, view: View, width: int) -> None:
        """The planner's prediction for the job on the selected GPU beside what it holds."""
        box = self.query_one("#mem-plan", DiffText)
        config = self.model_config
        proc = snap.job_process(view.selected_gpu) if config is not None else None
        if config is None or proc is None:
            box.display = False
            self._plan = self._plan_key = None
            return
        # the planner loads with the first model config found, not with the live view
        from gputop_diag.planner.live import compare, job_plan, measured_of, plan_lines

        info = snap.process(proc.pid)
        key = (proc.pid, info.cmdline if info else None, proc.gpu_index, config.path)
        try:
            if key != self._plan_key or self._plan is None:
                self._plan = job_plan(snap, config.read, gpu_index=proc.gpu_index, pids=(proc.pid,))
                self._plan_key = key
            else:  # the same job: only the measured figures move
                measured = measured_of(snap, proc)
                self._plan = replace(
                    self._plan, measured=measured, rows=compare(self._plan.doc, measured)
                )
        except Exception as e:  # noqa: BLE001 - the plan is an extra: never the pane's end
            self._plan = self._plan_key = None
            box.display = True
            box.update(f"  plan: not made ({type(e).__name__}: {e}); gputop-diag memory says why")
            return
        if self._plan is None:
            box.display = False
            return
        box.display = True
        lines = plan_lines(self._plan, max(20, width - 2), not view.short)
        box.update("\n".join("  " + line for line in lines))

    def _show_processes(self, snap: Snapshot, view: View, width: int) -> None:
        table = self.query_one(ProcessTable)
        every = [held_row(self._holds, r, snap.timestamp) for r in process_rows(snap)]
        # the columns follow the width and whether any process runs for a job, pod or
        # container (read once per process: the layout changes when such a process comes)
        owned = any(owner_text(r.owner) for r in every)
        ns_pids = any(r.owner is not None and r.owner.ns_pid is not None for r in every)
        columns = columns_for(width, owned)
        self.columns_shown = columns  # `o` cycles through these only
        shorts = (owner_short(r.owner, NARROW_OWNER) for r in every)
        owner_width = max((len(t) for t in shorts if t), default=NARROW_OWNER)
        widths = column_widths(columns, ns_pids, owner_width)
        cmd_width = command_width(width, columns, ns_pids, owner_width)
        selected, selected_row = table.selected_key, table.cursor_row
        if (columns, widths, cmd_width) != (self._columns, self._widths, self._command_width):
            # A new width: new columns, every cell drawn again at the new width (never per
            # tick). Fixed widths: no cell is ever wider than its column, so none wraps.
            if self._columns:
                table.clear(columns=True)
            for key, label, _, _ in COLUMNS:
                if key in columns:  # a Text: a str label is read as markup, which loads rich's
                    # emoji table (0.6 MiB) for the whole run
                    table.add_column(Text(label), key=key, width=widths.get(key, cmd_width))
            self._columns, self._widths, self._command_width = columns, widths, cmd_width
            self._order = ()
        shown = ordered([r for r in every if matches(r, view.filter)], view.sort, view.selected_gpu)
        if self.tree_view:
            shown = tree_rows(shown, view.plain)
        longest = max((len(r.tree_prefix) + len(r.command) for r in shown), default=0)
        table.command_room = max(0, longest - cmd_width + 1)
        table.command_offset = min(table.command_offset, table.command_room)
        offset = table.command_offset
        # a tagged process that ended is untagged (a pid given to another process never is)
        self.tagged &= {r.pid for r in every} | {r.ppid for r in every if r.ppid}
        tagged = self.tagged
        rows = {
            r.key: row_cells(r, columns, cmd_width, offset, view.plain, r.pid in tagged, widths)
            for r in shown
        }
        order = tuple(rows)
        sync_rows(table, rows, columns)
        by_key = {r.key: r for r in shown}
        on_screen = [by_key[k] for k in self._order if k in by_key]
        if (
            not self.tree_view
            and len(on_screen) == len(shown)
            and set(self._order) == set(order)
            and (view.sort, view.selected_gpu, self.tree_view) == self._sorted_by
            and nearly_sorted(on_screen, view.sort, view.selected_gpu)
        ):
            order = self._order  # as good as sorted: no re-sort, no whole-table repaint
        self._sorted_by = (view.sort, view.selected_gpu, self.tree_view)
        reordered = order != self._order and bool(order)
        if reordered:  # sort only when the order itself changed
            rank = {k: i for i, k in enumerate(order)}
            k_gpu, k_pid = columns.index("gpu"), columns.index("pid")
            table.sort(
                key=lambda cells: rank.get(
                    f"{str(cells[k_gpu]).rstrip(TAG_MARK).split(':')[0]}:"
                    f"{pid_in_cell(cells[k_pid])}",
                    0,
                )
            )
        self._order = order
        # The cursor stays on its process however the rows moved; a process that ended
        # leaves it on its neighbour. On the first row it stays there, on the first process
        # of the new order (htop's and top's view of the top, until a process is chosen).
        table.select_key(selected if selected_row else None, selected_row, reordered)
        title = self.query_one("#mem-procs-title", DiffLine)
        n, total = len([r for r in shown if not r.is_parent]), len(every)
        count = f"{n}" if n == total else f"{n} of {total}"
        head = f"GPU processes ({count})" if total else "GPU processes: none is using a GPU"
        if view.filter.active:
            head += f"  filter: {shown_filter_text(view)}"
        if total:
            head += f"  sorted by {view.sort.label(view.plain)}"
            if view.sort.column not in columns:
                head += " (column not shown at this width)"
            if view.selected_gpu is not None and len({r.gpu_index for r in shown}) > 1:
                head += f", GPU {view.selected_gpu} first"  # `ordered` puts them first
            head += "  tree" if self.tree_view else ""
            head += f"  {len(tagged)} tagged (U untags)" if tagged else ""
        hints = "  (o sort, f filter, esc clears)" if view.filter.active else "  (o sort, f filter)"
        title.set_text(head + (hints if total and len(head) + len(hints) <= width else ""))
        table.set_class(view.sort.column in SORTS, "-sorted")

    @on(ProcessTable.Wanted)
    def _process_wanted(self, event: ProcessTable.Wanted) -> None:
        """A key of the process table: draw again (its command lines scrolled), or ask the
        app (details, a signal)."""
        if event.what == "signal":  # to the tagged processes where there are some
            event.tagged = tuple(sorted(self.tagged))
        if event.what in ("scroll", "tree", "tag", "untag") and self._last is not None:
            event.stop()
            if event.what == "tree":
                self.tree_view = not self.tree_view
            elif event.what == "tag" and event.key is not None:
                self.tagged ^= {pid_of(event.key)}
            elif event.what == "untag":
                self.tagged.clear()
            u, view = self._last
            self._show_processes(u.snapshot, view, pane_width(self))

    @on(DataTable.HeaderSelected, "#mem-procs")
    def _header_clicked(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column's header sorts by it; a second click reverses."""
        key = event.column_key.value
        if key == "share":
            key = "gpu_mem"
        if key in SORTS:
            self.post_message(self.SortBy(key))
