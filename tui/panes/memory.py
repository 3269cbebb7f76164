"""Pane 1, Memory: per-GPU used / reserved / free, headroom, trend; the GPU process table."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from ...model import MIB
from ...widgets import stacked_bar
from ..feed import GROWING_MIB_PER_MIN, Update
from .base import gib, pane_width, set_text, sync_rows

PROC_COLUMNS = ("pid", "user", "gpu", "command", "gpu_mem", "share")


class MemoryPane(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Static(id="mem-bars", markup=False)
        yield Static("GPU processes", classes="pane-title", markup=False)
        table = DataTable(id="mem-procs", cursor_type="row", zebra_stripes=False)
        for label, key, width in (
            ("PID", "pid", 8),
            ("USER", "user", 8),
            ("GPU", "gpu", 3),
            ("COMMAND", "command", 26),
            ("GPU MEM", "gpu_mem", 10),
            ("SHARE", "share", 5),
        ):
            table.add_column(label, key=key, width=width)
        yield table

    def show(self, u: Update, selected: int, plain: bool) -> None:
        snap = u.snapshot
        width = max(8, min(40, pane_width(self) - 50))
        lines = Text()
        for g in snap.gpus:
            mark = "▶" if g.index == selected else " "
            if g.lost:
                lines.append(f"{mark}GPU{g.index:<2} LOST — no memory figures\n", style="bold")
                continue
            total = g.mem_total_bytes or 0
            reserved = g.mem_reserved_bytes or 0
            used = (g.mem_used_bytes or 0) - reserved
            glyphs = ("#", "+", ".") if plain else ("█", "▒", "░")
            bar = stacked_bar(
                [(used, glyphs[0]), (reserved, glyphs[1]), (g.mem_free_bytes or 0, glyphs[2])],
                total,
                width,
            )
            trend = u.gpus.get(g.index).mem_trend_mib_per_min if g.index in u.gpus else None
            t = "" if trend is None else f"{trend:+.0f} MiB/min"
            grow = trend is not None and trend >= GROWING_MIB_PER_MIN
            lines.append(f"{mark}GPU{g.index:<2} {bar} ")
            lines.append(f"{gib(g.mem_used_bytes)}/{gib(total)} GiB ")
            lines.append(
                f"{g.mem_used_pct or 0:>3.0f}% ",
                style="bold" if (g.mem_used_pct or 0) >= 95 else "",
            )
            lines.append(f"free {gib(g.mem_free_bytes)} {t}")
            if grow:
                lines.append("  ▲ GROWING" if not plain else "  ^ GROWING", style="bold")
            lines.append("\n")
            for m in g.mig_instances:
                mt, mu = m.memory_total_bytes or 0, m.memory_used_bytes or 0
                mbar = stacked_bar([(mu, glyphs[0]), (mt - mu, glyphs[2])], mt, width - 4)
                lines.append(
                    f"   MIG {m.mig_index} {mbar} {gib(mu)}/{gib(mt)} GiB "
                    f"{(m.name or '').split()[-1]}\n"
                )
        if snap.gpus:
            lines.append("  bar: used by processes | reserved by the driver | free", style="dim")
        set_text(self.query_one("#mem-bars", Static), lines)
        totals = {g.index: g.mem_total_bytes or 0 for g in snap.gpus}
        rows = {}
        sanitize = getattr(self.app, "sanitize", False)
        users: dict[str, str] = {}
        for p in sorted(snap.gpu_processes, key=lambda p: (-(p.used_memory_bytes or 0), p.pid)):
            info = snap.process(p.pid)
            cmd = (
                " ".join(info.cmdline)
                if info and info.cmdline
                else ((info.name if info else None) or "(not readable)")
            )
            user = info.user if info and info.user else "?"
            if sanitize:  # pseudonyms: no user names or paths on a shared screen
                user = users.setdefault(user, f"user{len(users)}")
                cmd = cmd.split()[0].rsplit("/", 1)[-1] if cmd.split() else cmd
            used = p.used_memory_bytes
            share = (
                f"{100 * used / totals[p.gpu_index]:.0f}%"
                if used and totals.get(p.gpu_index)
                else "n/a"
            )
            rows[f"{p.gpu_index}:{p.pid}"] = (
                str(p.pid),
                user[:8],
                str(p.gpu_index),
                cmd[:60],
                "n/a" if used is None else f"{used / MIB:,.0f} MiB",
                share,
            )
        sync_rows(self.query_one("#mem-procs", DataTable), rows, PROC_COLUMNS)


__all__ = ["MemoryPane"]
