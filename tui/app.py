"""The live view: header, banner, panes, the bottleneck side panel, footer."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from datetime import datetime
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import ContentSwitcher, DataTable, Footer, Static
from textual.worker import get_current_worker

from ..export import redact_snapshot_json, snapshot_to_json
from ..sampler import Sampler
from ..sources import Sources
from .feed import Feeder, Update
from .help import HelpScreen
from .panes.base import set_text
from .panes.driver import DriverPane, JobPane
from .panes.mapping import MappingPane
from .panes.memory import MemoryPane
from .panes.utilization import UtilizationPane
from .panes.xid import XidPane
from .side_panel import SidePanel

PANES = ("memory", "utilization", "mapping", "xid", "driver", "job")
TITLES = ("Memory", "Utilization", "Mapping", "Xid", "Driver", "Job")
INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0)
NARROW_BELOW = 100  # columns
SHUTDOWN_WAIT_S = 3.0  # longest wait for the collector thread at exit


class SnapshotReady(Message):
    def __init__(self, update: Update) -> None:
        super().__init__()
        self.update = update


class CollectorFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class GpuTopApp(App):
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "gputop-diag"
    BINDINGS = [
        *(Binding(str(k + 1), f"pane({k})", TITLES[k], show=k < 5) for k in range(6)),
        Binding("tab", "cycle(1)", "next pane", show=False, priority=True),
        Binding("shift+tab", "cycle(-1)", "previous pane", show=False, priority=True),
        Binding("left_square_bracket", "gpu(-1)", "GPU-", key_display="["),
        Binding("right_square_bracket", "gpu(1)", "GPU+", key_display="]"),
        Binding("space", "pause", "pause"),
        Binding("r", "refresh_now", "refresh", show=False),
        Binding("plus,equals_sign", "interval(1)", "slower", show=False, key_display="+"),
        Binding("minus", "interval(-1)", "faster", show=False, key_display="-"),
        Binding("s", "save", "snapshot"),
        Binding("p", "toggle_panel", "panel", show=False),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(
        self,
        sources: Sources,
        *,
        interval: float = 1.0,
        sanitize: bool = False,
        low_bandwidth: bool = False,
        start_collectors: bool = True,
        save_dir: str = ".",
    ) -> None:
        super().__init__()
        self.sources = sources
        self.interval = interval
        self.sanitize = sanitize
        self.low_bandwidth = low_bandwidth
        self.start_collectors = start_collectors
        self.save_dir = save_dir
        self.paused = False
        self.selected_gpu = 0
        self.latest: Update | None = None
        self.last_saved: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._loop_done = threading.Event()
        self._panel_hidden = False
        self.sampler: Sampler | None = None
        self.feeder: Feeder | None = None
        if low_bandwidth or os.environ.get("SSH_CONNECTION"):
            self.animation_level = "none"

    # -- layout ------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="header", markup=False)
        yield Static(id="banner", markup=False)
        with Horizontal(id="body"):
            with ContentSwitcher(initial="memory", id="panes"):
                yield MemoryPane(id="memory")
                yield UtilizationPane(id="utilization")
                yield MappingPane(self.sources.environ, sanitize=self.sanitize, id="mapping")
                yield XidPane(id="xid")
                yield DriverPane(id="driver")
                yield JobPane(id="job")
            yield SidePanel(id="side")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#banner").display = False
        self._render_header()
        self._apply_width(self.size.width)
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._on_hangup)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not on the main thread (tests) or no SIGHUP on this platform
        if self.start_collectors:
            self.sampler = Sampler(self.sources, interval=self.interval)
            self.feeder = Feeder(self.sampler)
            self.collect()

    def _on_hangup(self) -> None:
        """The SSH session dropped: stop the collectors and leave."""
        self._stop.set()
        self._wake.set()
        self.exit(return_code=0)

    def on_unmount(self) -> None:
        self._stop.set()
        self._wake.set()
        # Let a tick in progress finish before NVML shuts down under it.
        if self.sampler is not None:
            self._loop_done.wait(SHUTDOWN_WAIT_S)
            self.sampler.close()

    def on_resize(self, event) -> None:
        self._apply_width(event.size.width)

    def _apply_width(self, width: int) -> None:
        self.screen.set_class(width < NARROW_BELOW, "-narrow")
        if self.latest is not None:
            self._render(self.latest)

    # -- collection (thread worker) ----------------------------------------------------------
    @work(thread=True, exit_on_error=False, group="collect", exclusive=True)
    def collect(self) -> None:
        worker = get_current_worker()
        try:
            self._collect_loop(worker)
        finally:
            self._loop_done.set()

    def _collect_loop(self, worker) -> None:
        while not self._stop.is_set() and not worker.is_cancelled:
            if not self.paused:
                try:
                    self.post_message(SnapshotReady(self.feeder.tick()))
                except Exception as e:  # noqa: BLE001 - shown as a banner; the loop goes on
                    self.post_message(CollectorFailed(f"{type(e).__name__}: {e}"))
            self._wake.wait(self.interval)
            self._wake.clear()

    @on(SnapshotReady)
    def _snapshot_ready(self, message: SnapshotReady) -> None:
        self.latest = message.update
        self._render(message.update)

    @on(CollectorFailed)
    def _collector_failed(self, message: CollectorFailed) -> None:
        banner = self.query_one("#banner", Static)
        banner.display = True
        set_text(
            banner,
            f"collection failed: {message.error} — the view keeps the last "
            "figures; press r to retry",
        )

    # -- rendering ---------------------------------------------------------------------------
    def _host_label(self) -> str:
        if self.sanitize:
            return "host0"
        if self.latest is not None:
            return self.latest.snapshot.system.hostname
        return self.sources.hostname()

    def _render_header(self) -> None:
        t = Text()
        t.append(" gputop-diag ", style="bold reverse")
        t.append(f" {self._host_label()}")
        if self.sources.simulated:
            t.append(f"  [demo: {self.sources.scenario}]", style="bold")
        if self.latest is not None:
            s = self.latest.snapshot.system
            n = len(self.latest.snapshot.gpus)
            t.append(
                f"  driver {s.driver_version or 'n/a'}  CUDA ≤ {s.driver_max_cuda or 'n/a'}"
                f"  {n} GPU{'s' if n != 1 else ''}"
            )
            if n:
                t.append(f"  GPU {self.selected_gpu}")
        t.append(f"  every {self.interval:g} s")
        if self.paused:
            t.append("  PAUSED", style="bold reverse")
        if self.last_saved:
            t.append(f"  saved {self.last_saved}", style="dim")
        set_text(self.query_one("#header", Static), t)

    def _render_banner(self, u: Update) -> None:
        banner = self.query_one("#banner", Static)
        errs = u.snapshot.errors
        if not errs:
            banner.display = False
            return
        t = Text()
        for e in errs[:3]:
            where = ""
            if e.gpu_index is not None and f"GPU {e.gpu_index}" not in e.message:
                where = f"GPU {e.gpu_index}: "
            t.append(f"! {where}{e.message}\n", style="bold")
            t.append(f"  next: {e.next_step}\n")
        if len(errs) > 3:
            t.append(f"  (+{len(errs) - 3} more)\n")
        t.rstrip()
        banner.display = True
        set_text(banner, t)

    def _render(self, u: Update) -> None:
        gpus = [g.index for g in u.snapshot.gpus]
        if gpus and self.selected_gpu not in gpus:
            self.selected_gpu = gpus[0]
        narrow = self.size.width < NARROW_BELOW
        with self.batch_update():
            self._render_header()
            self._render_banner(u)
            current = self.query_one("#panes", ContentSwitcher).current
            pane = self.query_one(f"#{current}")
            pane.show(u, self.selected_gpu, self.low_bandwidth)
            self.query_one(SidePanel).show(u.diagnosis, narrow)

    # -- actions -----------------------------------------------------------------------------
    def action_pane(self, k: int) -> None:
        switcher = self.query_one("#panes", ContentSwitcher)
        switcher.current = PANES[k]
        if self.latest is not None:
            self._render(self.latest)

    def action_cycle(self, step: int) -> None:
        current = self.query_one("#panes", ContentSwitcher).current
        visible = list(PANES[:5])
        k = visible.index(current) if current in visible else 0
        self.action_pane(PANES.index(visible[(k + step) % len(visible)]))

    def action_gpu(self, step: int) -> None:
        if self.latest is None or not self.latest.snapshot.gpus:
            return
        gpus = [g.index for g in self.latest.snapshot.gpus]
        k = gpus.index(self.selected_gpu) if self.selected_gpu in gpus else 0
        self.selected_gpu = gpus[(k + step) % len(gpus)]
        self._render(self.latest)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self._render_header()

    def action_refresh_now(self) -> None:
        if self.paused:
            self.paused = False
        self._wake.set()
        self._render_header()

    def action_interval(self, step: int) -> None:
        options = [i for i in INTERVALS if not self.low_bandwidth or i >= 2.0]
        k = min(range(len(options)), key=lambda i: abs(options[i] - self.interval))
        self.interval = options[max(0, min(len(options) - 1, k + step))]
        if self.sampler is not None:
            self.sampler.interval = self.interval
        self._render_header()

    def action_save(self) -> None:
        if self.latest is None:
            self.notify("nothing sampled yet", severity="warning")
            return
        stamp = datetime.fromtimestamp(self.latest.snapshot.timestamp).strftime("%Y%m%d-%H%M%S")
        path = os.path.join(self.save_dir, f"gputop-diag-snapshot-{stamp}.json")
        try:
            with open(path, "w", encoding="utf-8") as f:
                doc = snapshot_to_json(self.latest.snapshot)
                json.dump(redact_snapshot_json(doc) if self.sanitize else doc, f, indent=2)
        except OSError as e:
            self.notify(f"could not write {path}: {e.strerror}", severity="error")
            return
        self.last_saved = path
        self.notify(f"snapshot written to {path}")
        self._render_header()

    def action_toggle_panel(self) -> None:
        self._panel_hidden = not self._panel_hidden
        self.query_one(SidePanel).display = not self._panel_hidden

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    @on(DataTable.RowHighlighted, "#xid-table")
    def _xid_selected(self) -> None:
        if self.latest is not None:
            self.query_one(XidPane).show_detail(self.latest)


def run_app(
    sources: Sources, *, interval: float = 1.0, sanitize: bool = False, low_bandwidth: bool = False
) -> int:
    app = GpuTopApp(sources, interval=interval, sanitize=sanitize, low_bandwidth=low_bandwidth)
    app.run()
    return app.return_code or 0
