"""Pane 2, Utilization: fixed-scale histories per GPU, the selected GPU in detail, the host."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical

from ...model import GpuState, Snapshot
from ...widgets import DiffLine, HistoryLine
from ..feed import HISTORY_POINTS, GpuSeries, Update
from .base import Pane, View, pane_width, pct

LOW_BANDWIDTH_REPAINT_S = 10.0  # --low-bandwidth: scrolling histories repaint this often
LABEL = 9
RESERVED = LABEL + 1 + 6 + 10  # label, value and a short note beside each history

# NVML clock-event reasons (nvmlClocksEventReasons*), in the words the panel uses.
REASON_NAMES = {
    "gpu_idle": "idle",
    "applications_clocks": "application clocks",
    "sw_power_cap": "power cap",
    "hw_slowdown": "HW slowdown",
    "sync_boost": "sync boost",
    "sw_thermal": "thermal (SW)",
    "hw_thermal": "thermal (HW)",
    "hw_power_brake": "power brake",
    "display_clocks": "display clocks",
}
BENIGN_REASONS = {"gpu_idle", "applications_clocks", "sync_boost", "display_clocks"}

DETAIL_HISTORIES = ("sm", "util", "memctl", "power_pct", "clock_pct")
DETAIL_LABELS = {
    "sm": "SM (GPM)",
    "util": "busy",
    "memctl": "mem ctl",
    "power_pct": "power",
    "clock_pct": "SM clock",
}
DETAIL_TEXTS = ("clocks", "power", "pcie", "nvlink", "gpm")


def _rate(kib_s: float | None) -> str:
    if kib_s is None:
        return "n/a"
    b = kib_s * 1024
    return f"{b / 1e9:.1f} GB/s" if b >= 1e9 else f"{b / 1e6:.0f} MB/s"


def _now(g: GpuState, key: str) -> float | None:
    return {
        "sm": g.gpm.sm_util_pct if g.gpm else None,
        "util": g.util_gpu_pct,
        "memctl": g.util_mem_pct,
        "power_pct": g.power_pct_of_limit,
        "clock_pct": g.sm_clock_pct_of_max,
    }[key]


def detail_texts(g: GpuState) -> dict[str, str]:
    """The selected GPU's figures beside its histories, one line each."""
    st = g.static
    reasons = [REASON_NAMES.get(r, r) for r in g.clock_event_reasons]
    temp = "n/a" if g.temperature_c is None else f"{g.temperature_c:.0f} C"
    out = {
        "clocks": f"{'clocks':>{LABEL}} {g.sm_clock_mhz or 'n/a'} / {st.max_sm_clock_mhz or '?'}"
        f" MHz  held by: {', '.join(reasons) or 'nothing'}",
        "power": f"{'power':>{LABEL}} "
        f"{'n/a' if g.power_w is None else f'{g.power_w:.0f}'} / "
        f"{'n/a' if st.power_limit_w is None else f'{st.power_limit_w:.0f}'} W"
        f"  temp {temp}  P{g.pstate if g.pstate is not None else '?'}",
        "pcie": f"{'PCIe':>{LABEL}} TX {_rate(g.pcie_tx_kbps)}  RX {_rate(g.pcie_rx_kbps)}"
        f"  gen{g.pcie_gen or '?'} x{g.pcie_width or '?'}"
        f" (max gen{st.pcie_max_gen or '?'} x{st.pcie_max_width or '?'})",
        "nvlink": f"{'NVLink':>{LABEL}} "
        + (
            "not available"
            if g.nvlink_tx_kib_s is None
            else f"TX {_rate(g.nvlink_tx_kib_s)}  RX {_rate(g.nvlink_rx_kib_s)}"
        ),
    }
    if g.gpm is not None:
        m = g.gpm
        out["gpm"] = (
            f"{'GPM':>{LABEL}} SM {pct(m.sm_util_pct)}  occupancy {pct(m.sm_occupancy_pct)}"
            f"  tensor {pct(m.tensor_util_pct)}  DRAM bw {pct(m.dram_bw_util_pct)}"
        )
    else:
        out["gpm"] = f"{'GPM':>{LABEL}} not on this GPU: busy time is not SM use"
    return out


class UtilizationPane(Pane):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._gpu_lines: dict[int, HistoryLine] = {}
        self._painted: tuple | None = None

    def compose(self) -> ComposeResult:
        yield DiffLine(id="util-caption", classes="caption")
        yield Vertical(id="util-gpus")
        yield DiffLine(id="util-title", classes="section-title")
        for key in DETAIL_HISTORIES:
            yield HistoryLine(DETAIL_LABELS[key], label_width=LABEL, id=f"util-{key}")
        for key in DETAIL_TEXTS:
            yield DiffLine(id=f"util-{key}")
        yield DiffLine(id="util-host-title", classes="section-title")
        yield HistoryLine("CPU", label_width=LABEL, id="util-cpu")
        yield HistoryLine("iowait", label_width=LABEL, id="util-iowait")
        yield DiffLine(id="util-pressure")

    def _ensure_gpu_lines(self, snap: Snapshot) -> dict[int, HistoryLine]:
        keys = tuple(g.index for g in snap.gpus)
        if tuple(self._gpu_lines) != keys:
            box = self.query_one("#util-gpus", Vertical)
            box.remove_children()
            self._gpu_lines = {i: HistoryLine(label_width=LABEL, id=f"util-gpu{i}") for i in keys}
            box.mount(*self._gpu_lines.values())
        return self._gpu_lines

    def show(self, u: Update, view: View) -> None:
        snap = u.snapshot
        width = pane_width(self)
        # On a slow link (--low-bandwidth) scrolling histories are the cost: repaint them at
        # most every LOW_BANDWIDTH_REPAINT_S, or when the selected GPU or the width changes.
        key = (view.selected_gpu, width, len(snap.gpus))
        if (
            view.plain
            and self._painted
            and self._painted[0] == key
            and snap.timestamp - self._painted[1] < LOW_BANDWIDTH_REPAINT_S
        ):
            return
        self._painted = (key, snap.timestamp)
        w = max(8, min(HISTORY_POINTS, width - RESERVED))
        span = f"{w * view.interval:g} s" if view.interval else f"{w} samples"
        self.query_one("#util-caption", DiffLine).set_text(
            f"GPU busy time, last {span}, fixed 0-100 % scale", ""
        )
        lines = self._ensure_gpu_lines(snap)
        for g in snap.gpus:
            mark = (">" if view.plain else "▶") if g.index == view.selected_gpu else " "
            s = u.gpus.get(g.index)
            line = lines[g.index]
            line.set_class(g.lost, "-lost")
            if g.lost or s is None:
                line.show((), "LOST", w, label=f"{mark}GPU{g.index}", plain=view.plain)
                continue
            sm = f"SM {pct(g.gpm.sm_util_pct)}" if g.gpm else ""
            line.show(
                s.util, pct(g.util_gpu_pct), w, note=sm, label=f"{mark}GPU{g.index}",
                plain=view.plain,
            )  # fmt: skip
        self._show_detail(snap.gpu(view.selected_gpu) if view.selected_gpu is not None else None,
                          u.gpus.get(view.selected_gpu), w, view)  # fmt: skip
        self._show_host(u, w, view)

    def _show_detail(self, g: GpuState | None, s: GpuSeries | None, w: int, view: View) -> None:
        title = self.query_one("#util-title", DiffLine)
        if g is None:
            title.set_text("")
        elif g.lost or s is None:
            title.set_text(f"GPU {g.index} is lost: no figures (see the banner)")
        else:
            title.set_text(f"GPU {g.index} — {g.static.name or 'unknown model'}")
        live = g is not None and not g.lost and s is not None
        for key in DETAIL_HISTORIES:
            line = self.query_one(f"#util-{key}", HistoryLine)
            line.display = live and not (key == "sm" and g.gpm is None)
            if line.display:
                line.show(getattr(s, key), pct(_now(g, key)), w, plain=view.plain)
        texts = detail_texts(g) if live else {}
        for key in DETAIL_TEXTS:
            line = self.query_one(f"#util-{key}", DiffLine)
            line.display = live
            line.set_text(texts.get(key, ""))
        held = live and bool(set(g.clock_event_reasons) - BENIGN_REASONS)
        self.query_one("#util-clocks", DiffLine).set_class(held, "-warning")

    def _show_host(self, u: Update, w: int, view: View) -> None:
        host = u.snapshot.host
        title = self.query_one("#util-host-title", DiffLine)
        if host is None:
            title.set_text("host: no figures")
        else:
            load = f", load {host.load_avg[0]:.1f}" if host.load_avg else ""
            title.set_text(f"host ({host.cpu_count} cores{load}): input stalls show up here")
        for key, values, now in (
            ("cpu", u.host_cpu, None if host is None else host.cpu_pct),
            ("iowait", u.host_iowait, None if host is None else host.iowait_pct),
        ):
            line = self.query_one(f"#util-{key}", HistoryLine)
            line.display = host is not None
            line.show(values, pct(now), w, plain=view.plain)
        io = host.pressure.get("io") if host is not None else None
        self.query_one("#util-pressure", DiffLine).set_text(
            "" if io is None else f"{'I/O stall':>{LABEL}} {io.some_avg10:.1f} % (pressure, 10 s)"
        )
