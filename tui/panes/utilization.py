"""Pane 2, Utilization: fixed-scale histories per GPU, the selected GPU in detail, the host."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...widgets import history
from ..feed import Update
from .base import pane_width, pct, set_text

LOW_BANDWIDTH_REPAINT_S = 10.0

REASON_NAMES = {
    "gpu_idle": "idle",
    "applications_clocks": "app clocks",
    "sw_power_cap": "power cap",
    "hw_slowdown": "HW slowdown",
    "sync_boost": "sync boost",
    "sw_thermal": "thermal (SW)",
    "hw_thermal": "thermal (HW)",
    "hw_power_brake": "power brake",
    "display_clocks": "display clocks",
}


def _kib(v: float | None) -> str:
    if v is None:
        return "n/a"
    b = v * 1024
    return f"{b / 1e9:.1f} GB/s" if b >= 1e9 else f"{b / 1e6:.0f} MB/s"


class UtilizationPane(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Static(id="util-all", markup=False)
        yield Static(id="util-detail", markup=False)
        yield Static(id="util-host", markup=False)

    def show(self, u: Update, selected: int, plain: bool) -> None:
        snap = u.snapshot
        # On a slow link (--low-bandwidth) scrolling histories are the cost: repaint them at
        # most every LOW_BANDWIDTH_REPAINT_S, or when the selected GPU changes.
        key = (selected, self.size.width)
        last = getattr(self, "_painted", None)
        if plain and last and last[0] == key and snap.timestamp - last[1] < LOW_BANDWIDTH_REPAINT_S:
            return
        self._painted = (key, snap.timestamp)
        w = max(10, min(90, pane_width(self) - 24))
        t = Text()
        t.append(f"{'':6}GPU busy time, last {w} s (0-100 % scale)\n", style="dim")
        for g in snap.gpus:
            s = u.gpus.get(g.index)
            mark = "▶" if g.index == selected else " "
            if g.lost or s is None:
                t.append(f"{mark}GPU{g.index:<2} LOST\n", style="bold")
                continue
            sm = f" SM {pct(g.gpm.sm_util_pct)}" if g.gpm else ""
            t.append(
                f"{mark}GPU{g.index:<2} {history(s.util, w, plain)} {pct(g.util_gpu_pct):>4}{sm}\n"
            )
        set_text(self.query_one("#util-all", Static), t)

        d = Text()
        g = snap.gpu(selected)
        s = u.gpus.get(selected)
        if g is not None and not g.lost and s is not None:
            d.append(f"\nGPU {selected} — {g.static.name or '?'}\n", style="bold")
            for label, vals, now in (
                ("SM (GPM)", s.sm, g.gpm.sm_util_pct if g.gpm else None),
                ("busy", s.util, g.util_gpu_pct),
                ("mem ctl", s.memctl, g.util_mem_pct),
                ("power", s.power_pct, g.power_pct_of_limit),
                ("SM clock", s.clock_pct, g.sm_clock_pct_of_max),
            ):
                if label == "SM (GPM)" and g.gpm is None:
                    continue
                d.append(f"{label:>9} {history(vals, w, plain)} {pct(now):>4}\n")
            reasons = [REASON_NAMES.get(r, r) for r in g.clock_event_reasons]
            d.append(
                f"{'clocks':>9} {g.sm_clock_mhz or 'n/a'} / {g.static.max_sm_clock_mhz or '?'}"
                f" MHz  held by: {', '.join(reasons) or 'nothing'}\n",
                style="bold" if set(g.clock_event_reasons) - {"gpu_idle"} else "",
            )
            d.append(
                f"{'power':>9} {g.power_w or 0:.0f} / {g.static.power_limit_w or 0:.0f} W"
                f"  temp {g.temperature_c if g.temperature_c is not None else 'n/a'} C"
                f"  P{g.pstate if g.pstate is not None else '?'}\n"
            )
            d.append(
                f"{'PCIe':>9} TX {_kib(g.pcie_tx_kbps)} RX {_kib(g.pcie_rx_kbps)}"
                f"  gen{g.pcie_gen or '?'} x{g.pcie_width or '?'}"
                f" (max gen{g.static.pcie_max_gen or '?'} x{g.static.pcie_max_width or '?'})"
                f"\n"
            )
            nv = (
                "not available"
                if g.nvlink_tx_kib_s is None
                else (f"TX {_kib(g.nvlink_tx_kib_s)} RX {_kib(g.nvlink_rx_kib_s)}")
            )
            d.append(f"{'NVLink':>9} {nv}\n")
            if g.gpm is not None:
                m = g.gpm
                d.append(
                    f"{'GPM':>9} SM {pct(m.sm_util_pct)} occupancy "
                    f"{pct(m.sm_occupancy_pct)} tensor {pct(m.tensor_util_pct)} DRAM bw "
                    f"{pct(m.dram_bw_util_pct)}\n"
                )
            else:
                d.append(
                    f"{'GPM':>9} not supported on this GPU (busy time is not SM use)\n", style="dim"
                )
        set_text(self.query_one("#util-detail", Static), d)

        host = snap.host
        cores = f" ({host.cpu_count} cores)" if host is not None else ""
        h = Text(f"\nhost{cores}\n", style="bold")
        if host is not None:
            h.append(f"{'CPU':>9} {history(u.host_cpu, w, plain)} {pct(host.cpu_pct):>4}\n")
            h.append(
                f"{'iowait':>9} {history(u.host_iowait, w, plain)} {pct(host.iowait_pct):>4}\n"
            )
            io = host.pressure.get("io")
            if io is not None:
                h.append(f"{'I/O stall':>9} {io.some_avg10:.1f}% (pressure, 10 s)\n")
        set_text(self.query_one("#util-host", Static), h)
