"""Pane 1, Memory: per GPU used / reserved / free, headroom and trend; the GPU process table."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from ...model import MIB, GpuState, Snapshot
from ...widgets import DiffLine, MemoryBar
from ..feed import GpuSeries, Update
from .base import Pane, View, gib, pane_width, set_text, sync_rows

PROC_COLUMNS = ("pid", "user", "gpu", "gpu_mem", "share", "command")
LABEL_WIDTH = 7  # "▶GPU12 "
COMMAND_MAX = 120


def _bar_keys(snap: Snapshot) -> tuple[str, ...]:
    keys: list[str] = []
    for g in snap.gpus:
        keys.append(f"mem-gpu{g.index}")
        keys.extend(f"mem-gpu{g.index}-mig{m.mig_index}" for m in g.mig_instances)
    return tuple(keys)


def _figures(g: GpuState, s: GpuSeries | None) -> tuple[str, str]:
    used, total = g.mem_used_bytes, g.mem_total_bytes
    pct = g.mem_used_pct
    trend = None if s is None else s.mem_trend_mib_per_min
    text = (  # "58.9/79.6 GiB  74%  headroom 20.7 GiB  +12 MiB/min"
        f"{gib(used):>5}/{gib(total)} GiB {'n/a' if pct is None else f'{pct:.0f}%':>4}"
        f"  headroom {gib(g.mem_free_bytes)} GiB"
        f"  {'' if trend is None else f'{trend:+.0f} MiB/min'}"
    )
    flag = "GROWING" if s is not None and s.mem_growing else ""
    if pct is not None and pct >= 95:
        flag = "FULL" if not flag else f"{flag}, FULL"
    return text, flag


class MemoryPane(Pane):
    def compose(self) -> ComposeResult:
        yield Vertical(id="mem-bars")
        yield DiffLine(id="mem-legend")
        yield Static("GPU processes", id="mem-procs-title", classes="pane-title", markup=False)
        table = DataTable(id="mem-procs", cursor_type="row")
        for label, key, width in (
            ("PID", "pid", 8),
            ("USER", "user", 10),
            ("GPU", "gpu", 4),
            ("GPU MEM", "gpu_mem", 10),
            ("SHARE", "share", 5),
            ("COMMAND", "command", None),
        ):
            table.add_column(label, key=key, width=width)
        yield table

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._bars: dict[str, MemoryBar] = {}

    def _ensure_bars(self, snap: Snapshot) -> dict[str, MemoryBar]:
        keys = _bar_keys(snap)
        if tuple(self._bars) != keys:
            box = self.query_one("#mem-bars", Vertical)
            box.remove_children()
            self._bars = {k: MemoryBar(id=k) for k in keys}
            box.mount(*self._bars.values())
        return self._bars

    def show(self, u: Update, view: View) -> None:
        snap = u.snapshot
        bars = self._ensure_bars(snap)
        figures = {
            g.index: _figures(g, u.gpus.get(g.index))
            for g in snap.gpus
            if not g.lost and g.mem_total_bytes is not None
        }
        # One bar width for every GPU (so the bars compare), leaving room for the flags.
        room = max((len(t) + (len(f) + 4 if f else 0) for t, f in figures.values()), default=0)
        width = max(6, min(40, pane_width(self) - LABEL_WIDTH - room - 1))
        for g in snap.gpus:
            mark = (">" if view.plain else "▶") if g.index == view.selected_gpu else " "
            label = f"{mark}GPU{g.index:<2} "
            bar = bars[f"mem-gpu{g.index}"]
            bar.set_class(g.lost, "-lost")
            if g.lost:
                bar.show_message(label, "LOST — no memory figures", alarm=True)
            elif g.index not in figures:
                bar.show_message(label, "memory: n/a")
            else:
                reserved = g.mem_reserved_bytes or 0
                used = max(0, (g.mem_used_bytes or 0) - reserved)
                text, flag = figures[g.index]
                bar.show(
                    label, used, reserved, g.mem_total_bytes, width, text, flag=flag,
                    plain=view.plain,
                )  # fmt: skip
            for m in g.mig_instances:
                mt, mu = m.memory_total_bytes or 0, m.memory_used_bytes or 0
                profile = (m.name or "").split()[-1] if m.name else ""
                bars[f"mem-gpu{g.index}-mig{m.mig_index}"].show(
                    f" MIG{m.mig_index:<2} ", mu, 0, mt, width,
                    f"{gib(mu):>5}/{gib(mt)} GiB  {profile}", plain=view.plain,
                )  # fmt: skip
        legend = self.query_one("#mem-legend", DiffLine)
        if snap.gpus:
            g = "#+." if view.plain else "█▒░"
            legend.set_text(
                f"  {g[0]} used by processes  {g[1]} reserved by the driver  {g[2]} free;"
                " trend over 2 min",
                "",
            )
        else:
            legend.set_text("  no GPU to show")
        self._show_processes(snap, view)

    def _show_processes(self, snap: Snapshot, view: View) -> None:
        totals = {g.index: g.mem_total_bytes or 0 for g in snap.gpus}
        migs = {
            (g.index, m.gpu_instance_id, m.compute_instance_id): m
            for g in snap.gpus
            for m in g.mig_instances
        }
        users: dict[str, str] = {}
        rows = {}
        for p in snap.gpu_processes:
            mig = migs.get((p.gpu_index, p.gpu_instance_id, p.compute_instance_id))
            info = snap.process(p.pid)
            if info is not None and info.cmdline:
                cmd = " ".join(info.cmdline)
            else:
                cmd = (info.name if info else None) or "(not readable)"
            user = (info.user if info else None) or "?"
            if view.sanitize:  # pseudonyms: no user names or paths on a shared screen
                user = users.setdefault(user, f"user{len(users)}")
                cmd = cmd.split()[0].rsplit("/", 1)[-1] if cmd.split() else cmd
            used = p.used_memory_bytes
            # A process in a MIG instance: its share is of the instance's memory.
            total = mig.memory_total_bytes if mig is not None else totals.get(p.gpu_index)
            rows[f"{p.gpu_index}:{p.pid}"] = (
                str(p.pid),
                user[:10],
                str(p.gpu_index) if mig is None else f"{p.gpu_index}:{mig.mig_index}",
                "n/a" if used is None else f"{used / MIB:,.0f} MiB",
                f"{100 * used / total:.0f}%" if used and total else "n/a",
                cmd[:COMMAND_MAX],
            )
        sync_rows(self.query_one("#mem-procs", DataTable), rows, PROC_COLUMNS, _by_memory)
        n = len(rows)
        set_text(
            self.query_one("#mem-procs-title", Static),
            f"GPU processes ({n})" if n else "GPU processes: none is using a GPU",
        )


def _by_memory(cells: tuple[str, ...]) -> tuple:
    """Biggest GPU memory first, then by pid (cells as PROC_COLUMNS)."""
    mem = cells[3].replace(",", "").split()[0]
    return (-(float(mem) if mem.replace(".", "").isdigit() else -1.0), int(cells[0]))
