"""Pane 2, Utilization: fixed-scale histories per GPU, the selected GPU in detail, the host.

The histories sweep (`widgets.trace`): each new sample overwrites the oldest at the cell the
ruler marks, so a tick costs the cells that changed, not every line. Figures beside them
repaint when they move materially, and at least every 15 s (`holds.py`); the traces
repaint together, at once for a material move, else every five ticks.

Each line is one widget that draws itself and repaints only the cells that changed
(`HistoryLine(split=False)`, `DiffLine`); a `CutGrid` behind them cuts every line at the trace's
chunks, its end and the value's end, so a change is written from at most CHUNK - 1 cells before
it, as when each part and each chunk was a widget of its own. 40 to 50 widgets at any width,
where those were 260 at 120 columns and 410 at 200, at some 30 KB each.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical

from gputop_diag.model import GpuState, Snapshot
from gputop_diag.monitor.series import HISTORY_POINTS, GpuSeries
from gputop_diag.monitor.view import Update
from gputop_diag.tui.holds import CELSIUS, EXACT, LOAD, MHZ, PERCENT, RATE, WATTS, Holds
from gputop_diag.tui.panes.base import Pane, View, pane_width, pct
from gputop_diag.widgets import BLOCKS, CutGrid, DiffLine, HistoryLine, ruler_cells
from gputop_diag.widgets.trace import CHUNK

LOW_BANDWIDTH_REPAINT_S = 10.0  # --low-bandwidth: scrolling histories repaint this often
# The traces repaint together: at once when a line moves by MATERIAL_LEVELS glyph levels (an
# eighth of the scale each) or appears or goes, else every TRACE_EVERY_TICKS ticks: a flat
# stretch of busy time is drawn five cells at a time, a drop the tick it happens.
TRACE_EVERY_TICKS = 5
MATERIAL_LEVELS = 2
LABEL = 9
VALUE = 5  # the value's width beside each history (HistoryLine's default)
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
    "sm": "SM active",
    "util": "busy",
    "memctl": "mem ctl",
    "power_pct": "power",
    "clock_pct": "SM clock",
}
DETAIL_TEXTS = ("clocks", "power", "pcie", "nvlink", "gpm")


def _rate(kib_s: float | None, unit: int = 1024) -> str:
    """A link's rate as the side panel writes it (GB/s, MB/s); NVLink counts KiB/s, NVML's
    PCIe throughput KB/s (`unit` 1000)."""
    if kib_s is None:
        return "n/a"
    b = kib_s * unit
    return f"{b / 1e9:.1f} GB/s" if b >= 1e9 else f"{b / 1e6:.0f} MB/s"


def _sum(tx: float | None, rx: float | None) -> float | None:
    return None if tx is None else tx + (rx or 0.0)


def _now(g: GpuState, key: str) -> float | None:
    return {
        "sm": g.gpm.sm_util_pct if g.gpm else None,
        "util": g.util_gpu_pct,
        "memctl": g.util_mem_pct,
        "power_pct": g.power_pct_of_limit,
        "clock_pct": g.sm_clock_pct_of_max,
    }[key]


def detail_figures(g: GpuState) -> dict[str, tuple[tuple, tuple]]:
    """Per detail line: its figures and how far each may drift before it is repainted."""
    m = g.gpm
    return {
        "clocks": ((g.sm_clock_mhz, tuple(g.clock_event_reasons)), (MHZ, EXACT)),
        "power": ((g.power_w, g.temperature_c, g.pstate), (WATTS, CELSIUS, EXACT)),
        "pcie": (
            (g.pcie_tx_kbps, g.pcie_rx_kbps, g.pcie_gen, g.pcie_width),
            (RATE, RATE, EXACT, EXACT),
        ),
        "nvlink": ((g.nvlink_tx_kib_s, g.nvlink_rx_kib_s), (RATE, RATE)),
        "gpm": (
            (
                None if m is None else m.sm_util_pct,
                None if m is None else m.sm_occupancy_pct,
                None if m is None else m.tensor_util_pct,
                None if m is None else m.dram_bw_util_pct,
            ),
            (PERCENT, PERCENT, PERCENT, PERCENT),
        ),
    }


def detail_parts(g: GpuState, held: dict[str, tuple] | None = None) -> dict[str, list[str]]:
    """The selected GPU's figures beside its histories, one line each, in parts (words and
    figures apart; the figures padded, so that a moving figure moves no word after it);
    `held`: the figures on screen, by line, as `detail_figures` gives them."""
    st = g.static
    f = {k: v for k, (v, _) in detail_figures(g).items()}
    f.update(held or {})
    clock, reasons = f["clocks"]
    power, temp_c, pstate = f["power"]
    tx, rx, gen, lanes = f["pcie"]
    nv_tx, nv_rx = f["nvlink"]
    names = [REASON_NAMES.get(r, r) for r in reasons]
    limit = "n/a" if st.power_limit_w is None else f"{st.power_limit_w:.0f}"
    # Figures padded to a fixed width: a figure that changes length would move the words after
    # it, and a moved word is a repaint.
    out = {
        "clocks": [
            f"{'clocks':>{LABEL}} ",
            f"{clock or 'n/a':>4}",
            f" / {st.max_sm_clock_mhz or '?'} MHz  held by: ",
            ", ".join(names) or "nothing",
        ],
        "power": [
            f"{'power':>{LABEL}} ",
            f"{'n/a' if power is None else f'{power:.0f}':>3}",
            f" / {limit} W  temp ",
            f"{'n/a' if temp_c is None else f'{temp_c:.0f} C':>4}",
            f"  P{pstate if pstate is not None else '?'}",
        ],
        # TX+RX: the sum the side panel's communication figures give per GPU
        "pcie": [
            f"{'PCIe':>{LABEL}} TX ",
            f"{_rate(tx, 1000):>9}",
            "  RX ",
            f"{_rate(rx, 1000):>9}",
            "  TX+RX ",
            f"{_rate(_sum(tx, rx), 1000):>9}",
            f"  gen{gen or '?'} x{lanes or '?'}"
            + (
                ""
                if (gen, lanes) == (st.pcie_max_gen, st.pcie_max_width)
                else f" (max gen{st.pcie_max_gen or '?'} x{st.pcie_max_width or '?'})"
            ),
        ],
        "nvlink": [f"{'NVLink':>{LABEL}} not available"]
        if nv_tx is None
        else [
            f"{'NVLink':>{LABEL}} TX ",
            f"{_rate(nv_tx):>9}",
            "  RX ",
            f"{_rate(nv_rx):>9}",
            "  TX+RX ",
            f"{_rate(_sum(nv_tx, nv_rx)):>9}",
        ],
    }
    if g.gpm is not None:
        sm, occ, tensor, dram = f["gpm"]
        out["gpm"] = [
            f"{'counters':>{LABEL}} SM ",
            f"{pct(sm):>4}",
            "  occupancy ",
            f"{pct(occ):>4}",
            "  tensor ",
            f"{pct(tensor):>4}",
            "  DRAM bw ",
            f"{pct(dram):>4}",
        ]
    else:
        out["gpm"] = [
            f"{'counters':>{LABEL}} no SM counters (GPM) on this GPU: busy time is not SM use"
        ]
    return out


def detail_texts(g: GpuState, held: dict[str, tuple] | None = None) -> dict[str, str]:
    """`detail_parts` as whole lines."""
    return {k: "".join(v) for k, v in detail_parts(g, held).items()}


def level_of(v: float | None, top: float = 100.0) -> int | None:
    """The glyph level (0-8) a value draws at, None for no figure."""
    if v is None:
        return None
    return round(max(0.0, min(1.0, v / top)) * (len(BLOCKS) - 1))


def series_to_draw(u: Update, view: View, selected: int | None) -> dict[str, tuple]:
    """Every trace of the pane, by line: its values, oldest first."""
    out: dict[str, tuple] = {}
    for g in u.snapshot.gpus:
        s = u.gpus.get(g.index)
        if view.filter.shows_gpu(g.index):
            out[f"gpu{g.index}"] = () if s is None else s.util
    s = u.gpus.get(selected) if selected is not None else None
    if s is not None:
        for key in DETAIL_HISTORIES:
            out[f"detail-{key}"] = getattr(s, key)
    out["host-cpu"] = u.host_cpu
    out["host-iowait"] = u.host_iowait
    return out


def cuts_for(width: int) -> list[int]:
    """Where the `CutGrid` cuts every line: the label's end, each CHUNK cells of the trace
    (`width` cells), its end and the value's (where the note starts: a cut in the note would
    cost its figure a second write). The text lines' figures fall between the trace's cuts."""
    start = LABEL + 1
    return [*range(start, start + width, CHUNK), start + width, start + width + 1 + VALUE]


def ruler_runs(width: int, newest: int, sweep: bool, plain: bool) -> tuple[tuple[str, str], ...]:
    """`   newest ▲`: a label under the label column, the marker under the newest cell."""
    return ((f"{'newest':>{LABEL}} ", ""), (ruler_cells(width, newest, sweep, plain), ""))


class UtilizationPane(Pane):
    DEFAULT_CSS = """
    UtilizationPane {
        layers: cuts default;
        & > .ruler { color: $text-muted; }
    }
    """

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._gpu_lines: dict[int, HistoryLine] = {}
        self._painted: tuple | None = None
        self._holds = Holds()
        self._layout: tuple | None = None
        self._traced: tuple[int, dict[str, int | None]] | None = None  # newest, levels

    def settle(self) -> None:
        self._layout = self._painted = None  # the next show is a fresh one

    def _paint_traces(self, series: dict[str, tuple], newest: int, fresh: bool) -> bool:
        """Whether the traces repaint this tick (see TRACE_EVERY_TICKS)."""
        levels = {k: level_of(v[-1]) if v else None for k, v in series.items()}
        painted = self._traced
        due = (
            fresh
            or painted is None
            or painted[1].keys() != levels.keys()
            or not 0 <= newest - painted[0] < TRACE_EVERY_TICKS
        )
        if not due:
            for k, lv in levels.items():
                was = painted[1][k]
                if (lv is None) != (was is None) or (
                    lv is not None and abs(lv - was) >= MATERIAL_LEVELS
                ):
                    due = True
                    break
        if due:
            self._traced = (newest, levels)
        return due

    def compose(self) -> ComposeResult:
        yield CutGrid(id="util-cuts")
        yield DiffLine(id="util-caption", classes="caption")
        with Vertical(id="util-gpus"):  # the rows `prepare` made before the pane was mounted
            yield from self._gpu_lines.values()
        yield DiffLine(id="util-ruler", classes="ruler")
        yield DiffLine(id="util-title", classes="section-title")
        for key in DETAIL_HISTORIES:
            yield self._history(DETAIL_LABELS[key], f"util-{key}")
        yield DiffLine(id="util-detail-ruler", classes="ruler")
        for key in DETAIL_TEXTS:
            yield DiffLine(id=f"util-{key}")
        yield DiffLine(id="util-host-title", classes="section-title")
        yield self._history("CPU", "util-cpu")
        yield self._history("iowait", "util-iowait")
        yield DiffLine(id="util-pressure")

    @staticmethod
    def _history(label: str, id: str) -> HistoryLine:
        return HistoryLine(label, label_width=LABEL, value_width=VALUE, split=False, id=id)

    def prepare(self, u: Update) -> None:
        self._ensure_gpu_lines(u.snapshot)

    def _ensure_gpu_lines(self, snap: Snapshot) -> dict[int, HistoryLine]:
        keys = tuple(g.index for g in snap.gpus)
        if tuple(self._gpu_lines) != keys:
            self._gpu_lines = {i: self._history("", f"util-gpu{i}") for i in keys}
            boxes = self.query_children("#util-gpus")
            if boxes:  # else the pane is not composed yet: its compose yields them
                box = boxes.first(Vertical)
                box.remove_children()
                for line in self._gpu_lines.values():
                    line.cuts = self.query_one(CutGrid).cuts
                box.mount(*self._gpu_lines.values())
        return self._gpu_lines

    def show(self, u: Update, view: View) -> None:
        snap = u.snapshot
        width = pane_width(self)
        # On a slow link (--low-bandwidth) the histories are the cost: repaint them at most
        # every LOW_BANDWIDTH_REPAINT_S, or when the selected GPU or the width changes.
        key = (view.selected_gpu, width, len(snap.gpus), view.filter, view.sweep)
        if (
            view.low_bandwidth
            and self._painted
            and self._painted[0] == key
            and 0 <= snap.timestamp - self._painted[1] < LOW_BANDWIDTH_REPAINT_S
        ):
            return
        self._painted = (key, snap.timestamp)
        fresh = key != self._layout
        if fresh:  # a new GPU, width or mode: every figure afresh
            self._holds.forget()
            self._layout = key
            self.check_width(width)
        w = max(8, min(HISTORY_POINTS, width - RESERVED))
        tick = max(0, u.ticks - 1)
        newest = tick if view.sweep else None
        paint = self._paint_traces(
            series_to_draw(u, view, view.selected_gpu), tick, fresh or view.low_bandwidth
        )
        drawn = self._traced[0] if self._traced else tick  # the newest sample on screen
        span = f"{w * view.interval:g} s" if view.interval else f"{w} samples"
        mode = "newest at ▲ (G: scroll)" if view.sweep else "newest at the right (G: sweep)"
        self.query_one("#util-caption", DiffLine).set_text(
            f"GPU busy time, last {span}, fixed 0-100 % scale; {mode}"
        )
        lines = self._ensure_gpu_lines(snap)
        now = snap.timestamp
        for g in snap.gpus:
            lines[g.index].display = view.filter.shows_gpu(g.index)  # hidden, not removed
            if not lines[g.index].display:
                continue
            mark = (">" if view.plain else "▶") if g.index == view.selected_gpu else " "
            s = u.gpus.get(g.index)
            line = lines[g.index]
            line.set_class(g.lost, "-lost")
            if g.lost or s is None:  # its history up to the loss stays; no figure after
                history = s.util if s is not None else ()
                line.show(
                    history if paint else None, "LOST", w, label=f"{mark}GPU{g.index}",
                    plain=view.plain, newest=newest, note="off bus" if g.lost else "",
                )  # fmt: skip
                continue
            (busy,) = self._holds.get(f"gpu{g.index}", (g.util_gpu_pct,), (PERCENT,), now)
            (sm,) = self._holds.get(
                f"gpu{g.index}-sm", (g.gpm.sm_util_pct if g.gpm else None,), (PERCENT,), now
            )
            line.show(
                s.util if paint else None, pct(busy), w, note=f"SM {pct(sm):>4}" if g.gpm else "",
                label=f"{mark}GPU{g.index}", plain=view.plain, newest=newest,
            )  # fmt: skip
        ruler = self.query_one("#util-ruler", DiffLine)
        ruler.display = view.sweep and any(view.filter.shows_gpu(i) for i in lines)
        ruler.set_runs(ruler_runs(w, drawn, view.sweep, view.plain))
        selected = snap.gpu(view.selected_gpu) if view.selected_gpu is not None else None
        s = u.gpus.get(view.selected_gpu)
        self._show_detail(selected, s, w, view, newest, now, paint, drawn)
        self._show_host(u, w, view, newest, now, paint)
        cuts = tuple(sorted(set(cuts_for(w))))
        grid = self.query_one(CutGrid)
        if grid.cuts != cuts:  # each line repaints a change either side of a cut apart
            for line in self.query("DiffLine, HistoryLine"):
                line.cuts = cuts
        grid.set_cuts(cuts, self._rows())

    def _rows(self) -> int:
        """The rows the pane's lines take (with the margins above titles): as far as the cuts
        go, since every cut on a row costs strips of each widget behind it."""
        rows = 0
        for child in self.children:
            if isinstance(child, CutGrid) or not child.display:
                continue
            lines = sum(c.display for c in child.children) if child.id == "util-gpus" else 1
            rows += lines + child.styles.margin.top
        return rows

    def _show_detail(
        self,
        g: GpuState | None,
        s: GpuSeries | None,
        w: int,
        view: View,
        newest: int | None,
        now: float,
        paint: bool,
        drawn: int,
    ) -> None:
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
                (value,) = self._holds.get(f"detail-{key}", (_now(g, key),), (PERCENT,), now)
                values = getattr(s, key) if paint else None
                line.show(values, pct(value), w, plain=view.plain, newest=newest)
        ruler = self.query_one("#util-detail-ruler", DiffLine)
        ruler.display = live and view.sweep
        ruler.set_runs(ruler_runs(w, drawn, view.sweep, view.plain))
        held = {}
        if live:
            for key, (figs, steps) in detail_figures(g).items():  # each figure on its own
                held[key] = tuple(
                    self._holds.get(f"text-{key}-{i}", (v,), (step,), now)[0]
                    for i, (v, step) in enumerate(zip(figs, steps, strict=True))
                )
        parts = detail_parts(g, held) if live else {}
        for key in DETAIL_TEXTS:
            line = self.query_one(f"#util-{key}", DiffLine)
            line.display = live
            line.set_text("".join(parts.get(key, ())))
        held_by = live and bool(set(g.clock_event_reasons) - BENIGN_REASONS)
        self.query_one("#util-clocks", DiffLine).set_class(held_by, "-warning")

    def _show_host(
        self, u: Update, w: int, view: View, newest: int | None, now: float, paint: bool
    ) -> None:
        host = u.snapshot.host
        title = self.query_one("#util-host-title", DiffLine)
        if host is None:
            title.set_text("host: no figures")
        else:
            (load,) = self._holds.get(
                "load", (host.load_avg[0] if host.load_avg else None,), (LOAD,), now
            )
            title.set_text(
                f"host ({host.cpu_count} cores{'' if load is None else f', load {load:4.1f}'}"
                "): input stalls show up here"
            )
        for key, values, value in (
            ("cpu", u.host_cpu, None if host is None else host.cpu_pct),
            ("iowait", u.host_iowait, None if host is None else host.iowait_pct),
        ):
            line = self.query_one(f"#util-{key}", HistoryLine)
            line.display = host is not None
            (shown,) = self._holds.get(f"host-{key}", (value,), (PERCENT,), now)
            line.show(values if paint else None, pct(shown), w, plain=view.plain, newest=newest)
        io = host.pressure.get("io") if host is not None else None
        (stall,) = self._holds.get(
            "io-stall", (None if io is None else io.some_avg10,), (LOAD,), now
        )
        self.query_one("#util-pressure", DiffLine).set_text(
            "" if stall is None else f"{'I/O stall':>{LABEL}} {stall:4.1f} % (pressure, 10 s)"
        )
