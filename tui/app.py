"""The live view: header, banner, a ContentSwitcher of panes, the bottleneck panel, footer.

A thread worker ticks the Monitor (sample, slow sources, classify) and posts `SnapshotReady`
messages; the app draws only the visible pane, the side panel and the header, inside
`batch_update()`. With `--replay FILE` a thread worker plays the recording instead, at the
recorded pace times the replay speed, through a replaying Monitor.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from datetime import datetime
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import ContentSwitcher, DataTable, Footer
from textual.worker import get_current_worker

from ..export import redact_snapshot_json, snapshot_to_json
from ..monitor import Monitor
from ..recording import Recording, RecordingError
from ..sampler import Sampler
from ..sources import Sources
from .banner import Banner
from .feed import Feeder, ReplayPace, Update
from .header import HeaderBar, HeaderFacts, ReplayFacts
from .help import HelpScreen
from .keys import BINDINGS, JOB, PANES
from .messages import CollectorFailed, SnapshotReady
from .panes.base import Pane, View
from .panes.driver import DriverPane
from .panes.job import JobPane
from .panes.mapping import MappingPane
from .panes.memory import MemoryPane
from .panes.utilization import UtilizationPane
from .panes.xid import XidPane
from .side_panel import SidePanel

INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0)
LOW_BANDWIDTH_MIN_INTERVAL = 2.0
NARROW_BELOW = 100  # columns: the side panel becomes a strip below the pane
LIVE_ONLY = ("refresh_now", "interval")
REPLAY_ONLY = ("replay_speed", "replay_step")


class ReplayEnded(Message):
    """The replay worker reached the end of the recording (the view keeps the last frame)."""

    def __init__(self, warnings: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.warnings = warnings


class ReplayExtent(Message):
    """How long the recording is (read in a thread: a long recording takes a moment)."""

    def __init__(self, count: int, first: float | None, last: float | None) -> None:
        super().__init__()
        self.count = count
        self.first = first
        self.last = last


class GpuTopApp(App):
    CSS_PATH = Path(__file__).with_name("app.tcss")
    TITLE = "gputop-diag"
    BINDINGS = BINDINGS

    def __init__(
        self,
        sources: Sources | None,
        *,
        interval: float = 1.0,
        sanitize: bool = False,
        low_bandwidth: bool = False,
        start_collectors: bool = True,
        save_dir: str = ".",
        replay: Recording | None = None,
    ) -> None:
        super().__init__()
        self.sources = sources  # None while replaying
        self.replay = replay
        self.pace = ReplayPace()
        self.replay_ended = False
        self.replay_total_s: float | None = None
        if replay is not None:
            replay.on_warning = lambda text: None  # kept in replay.warnings, shown at the end
        self.low_bandwidth = low_bandwidth
        self.interval = max(interval, LOW_BANDWIDTH_MIN_INTERVAL) if low_bandwidth else interval
        self.sanitize = sanitize
        self.start_collectors = start_collectors
        self.save_dir = save_dir
        self.paused = False
        self.selected_gpu: int | None = None
        self.job: str | None = None  # set when watching a job (the Job pane appears)
        self.latest: Update | None = None
        self.last_saved: str | None = None
        self.panel_hidden = False  # wide layout: `p` hides the panel
        self.panel_full = False  # narrow layout: `p` shows all of it over the pane
        self.sampler: Sampler | None = None
        self.feeder: Feeder | None = None  # the collector (or replay) thread's
        self._local: Feeder | None = None  # for snapshots posted without an update
        self._failure: CollectorFailed | None = None
        self._can_select = False
        if low_bandwidth or os.environ.get("SSH_CONNECTION"):
            self.animation_level = "none"  # no animations over SSH

    # -- layout ------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield Banner(id="banner")
        with Horizontal(id="body"):
            with ContentSwitcher(initial="memory", id="panes"):
                yield MemoryPane(id="memory")
                yield UtilizationPane(id="utilization")
                yield MappingPane(id="mapping")
                yield XidPane(id="xid")
                yield DriverPane(id="driver")
                yield JobPane(id="job")
            yield SidePanel(id="side")
        yield Footer(show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#banner").display = False
        self._apply_width(self.size.width)
        self._render_header()
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._on_hangup)
        except (NotImplementedError, RuntimeError, ValueError, AttributeError):
            pass  # not the main thread (tests), or no SIGHUP on this platform
        if not self.start_collectors:
            return
        if self.replay is not None:
            self.feeder = Feeder(Monitor(None))
            self.play()
            self.measure_replay()
        else:
            monitor = Monitor(self.sources, interval=self.interval)
            self.sampler = monitor.sampler
            self.feeder = Feeder(monitor)
            self.collect()

    def _on_hangup(self) -> None:
        """The SSH session dropped: stop sampling and leave cleanly."""
        self.workers.cancel_group(self, "collect")
        self.exit(return_code=0)

    def on_unmount(self) -> None:
        self.workers.cancel_group(self, "collect")
        self.workers.cancel_group(self, "replay-extent")
        try:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        except (NotImplementedError, RuntimeError, ValueError, AttributeError):
            pass
        if self.feeder is not None:
            self.feeder.monitor.close()  # waits for a tick in flight (the Sampler's lock)

    def on_resize(self, event) -> None:
        self._apply_width(event.size.width)

    def _apply_width(self, width: int) -> None:
        narrow = width < NARROW_BELOW
        self.screen.set_class(narrow, "-narrow")
        self.screen.set_class(narrow and self.panel_full, "-panel-full")
        self.query_one(SidePanel).display = narrow or not self.panel_hidden
        if self.latest is not None:
            self._render(self.latest)

    # -- collection (a thread worker) ----------------------------------------------------------
    @work(thread=True, exit_on_error=False, exclusive=True, group="collect", name="collector")
    def collect(self, sample_first: bool = True) -> None:
        """Sample every `interval` until cancelled; post each tick. Restarted by r, +/- and
        resume (exclusive: the old loop ends on its cancel event)."""
        cancel = get_current_worker().cancelled_event
        take = sample_first
        while not cancel.is_set():
            if take or not self.paused:
                try:
                    update = self.feeder.tick()
                except Exception as e:  # noqa: BLE001 - shown as a banner; the loop goes on
                    self.post_message(
                        CollectorFailed(
                            "sampler",
                            f"sampling failed: {type(e).__name__}: {e}",
                            "the view keeps the last figures; r tries again",
                        )
                    )
                else:
                    if not cancel.is_set():
                        self.post_message(SnapshotReady(update.snapshot, update))
            take = False
            if self.sources.clock.sleep(self.interval, cancel):
                break

    def _restart_collector(self, sample_first: bool) -> None:
        if self.feeder is not None and self.replay is None:
            self.collect(sample_first)

    # -- replay (a thread worker) --------------------------------------------------------------
    @work(thread=True, exit_on_error=False, exclusive=True, group="collect", name="replay")
    def play(self) -> None:
        """Feed the recording through the replaying Monitor at the recorded pace (times the
        speed), honouring pause and single steps; the last frame stays at the end."""
        cancel = get_current_worker().cancelled_event
        previous: float | None = None
        try:
            for snap in self.replay.snapshots():
                if previous is not None and self.pace.wait(snap.timestamp - previous, cancel):
                    return
                if cancel.is_set():
                    return
                previous = snap.timestamp
                update = self.feeder.add(snap)
                self.post_message(SnapshotReady(snap, update))
        except RecordingError as e:
            self.post_message(
                CollectorFailed("replay", str(e), "the view keeps the last frame; q quits")
            )
        except Exception as e:  # noqa: BLE001 - shown as a banner, never a traceback
            self.post_message(
                CollectorFailed(
                    "replay",
                    f"the replay failed: {type(e).__name__}: {e}",
                    "the view keeps the last frame; q quits",
                )
            )
        if not cancel.is_set():
            self.post_message(ReplayEnded(tuple(self.replay.warnings)))

    @property
    def replay_speed(self) -> float:
        return self.pace.speed

    @replay_speed.setter
    def replay_speed(self, speed: float) -> None:
        self.pace.speed = speed

    @work(thread=True, exit_on_error=False, group="replay-extent", name="replay-extent")
    def measure_replay(self) -> None:
        count, first, last = self.replay.extent(get_current_worker().cancelled_event)
        self.post_message(ReplayExtent(count, first, last))

    @on(ReplayExtent)
    def _replay_extent(self, message: ReplayExtent) -> None:
        start = self.replay.header.started if self.replay.header.started else message.first
        if start is not None and message.last is not None:
            self.replay_total_s = message.last - start
            self._render_header()

    @on(ReplayEnded)
    def _replay_ended(self, message: ReplayEnded) -> None:
        self.replay_ended = True
        self._render_header()
        for text in message.warnings:
            self.notify(text, severity="warning", timeout=15)
        if self.latest is None:
            self.notify(f"{self.replay.path} holds no snapshots", severity="error", timeout=15)
        else:
            self.notify("end of the recording: the last frame stays; q quits", timeout=10)

    @on(SnapshotReady)
    def _snapshot_ready(self, message: SnapshotReady) -> None:
        update = message.update
        if update is None:  # posted by a test or a screenshot: derive it here
            if self._local is None:
                self._local = Feeder(Monitor(self.sources))
            update = self._local.add(message.snapshot)
        self.latest = update
        self._failure = None
        try:
            self._render(update)
        except NoMatches:  # a tick that arrived while the app closes: nothing left to draw
            pass

    @on(CollectorFailed)
    def _collector_failed(self, message: CollectorFailed) -> None:
        self._failure = message
        self._render_banner()

    # -- rendering ---------------------------------------------------------------------------
    def view(self) -> View:
        return View(
            selected_gpu=self.selected_gpu,
            plain=self.low_bandwidth,
            sanitize=self.sanitize,
            environ=self.sources.environ if self.sources is not None else {},
            interval=self.interval,
        )

    def _render_header(self) -> None:
        snap = self.latest.snapshot if self.latest is not None else None
        if self.sanitize:
            host = "host0"
        elif snap is not None:
            host = snap.system.hostname
        elif self.sources is not None:
            host = self.sources.hostname()
        else:
            host = self.replay.header.hostname or "host0"
        replay = None
        if self.replay is not None:
            start = self.replay.header.started
            replay = ReplayFacts(
                name=self.replay.name,
                position_s=None if snap is None or start is None else snap.timestamp - start,
                total_s=self.replay_total_s,
                speed=self.replay_speed,
                ended=self.replay_ended,
            )
        facts = HeaderFacts(
            host=host,
            driver=snap.system.driver_version if snap else None,
            cuda=snap.system.driver_max_cuda if snap else None,
            gpu_count=len(snap.gpus) if snap else None,
            selected_gpu=self.selected_gpu,
            interval=self.interval,
            paused=self.paused,
            scenario=self.sources.scenario if self.sources is not None else None,
            saved=self.last_saved,
            replay=replay,
        )
        self.query_one(HeaderBar).show(facts)

    def _render_banner(self) -> None:
        errors = self.latest.snapshot.errors if self.latest is not None else ()
        failure = self._failure
        self.query_one(Banner).show(
            errors, None if failure is None else (failure.message, failure.next_step)
        )

    def _render(self, u: Update) -> None:
        gpus = [g.index for g in u.snapshot.gpus]
        if self.selected_gpu not in gpus:
            self.selected_gpu = gpus[0] if gpus else None
        if (len(gpus) > 1) != self._can_select:  # [ and ] grey out with fewer than two GPUs
            self._can_select = len(gpus) > 1
            self.refresh_bindings()
        narrow = self.size.width < NARROW_BELOW
        with self.batch_update():
            self._render_header()
            self._render_banner()
            current = self.query_one("#panes", ContentSwitcher).current
            if not (narrow and self.panel_full):
                self.query_one(f"#{current}", Pane).show(u, self.view())
            self.query_one(SidePanel).show(u.diagnosis, strip=narrow and not self.panel_full)

    def repaint_visible(self) -> None:
        if self.latest is not None:
            self._render(self.latest)

    # -- actions -----------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pane" and parameters == (JOB,) and self.job is None:
            return False  # no job is watched: the Job pane and its key stay out of sight
        if action == "gpu" and not self._can_select:
            return None  # shown, greyed: nothing to select between
        if action in REPLAY_ONLY and self.replay is None:
            return False
        if action in LIVE_ONLY and self.replay is not None:
            return False  # a recording has no machine to sample
        return True

    def _pane_order(self) -> list[str]:
        return [p for p in PANES if p != "job" or self.job is not None]

    def action_pane(self, k: int) -> None:
        if PANES[k] == "job" and self.job is None:
            return
        self.query_one("#panes", ContentSwitcher).current = PANES[k]
        if self.panel_full:
            self.panel_full = False
            self._apply_width(self.size.width)
        table = self.query_one(f"#{PANES[k]}").query(DataTable)
        (table.first() if table else self.query_one(f"#{PANES[k]}")).focus()
        self.repaint_visible()

    def action_cycle(self, step: int) -> None:
        order = self._pane_order()
        current = self.query_one("#panes", ContentSwitcher).current
        k = order.index(current) if current in order else 0
        self.action_pane(PANES.index(order[(k + step) % len(order)]))

    def action_gpu(self, step: int) -> None:
        if self.latest is None or not self.latest.snapshot.gpus:
            return
        gpus = [g.index for g in self.latest.snapshot.gpus]
        k = gpus.index(self.selected_gpu) if self.selected_gpu in gpus else 0
        self.selected_gpu = gpus[(k + step) % len(gpus)]
        self.repaint_visible()

    def action_pause(self) -> None:
        self.paused = self.pace.paused = not self.paused
        if not self.paused:
            self._restart_collector(sample_first=True)  # resume with a fresh sample
        self._render_header()

    def action_replay_speed(self, step: int) -> None:
        self.pace.change_speed(step)
        self._render_header()

    def action_replay_step(self) -> None:
        """Pause, and show the next recorded tick."""
        self.pace.step()
        if not self.paused:
            self.paused = True
            self._render_header()

    def action_refresh_now(self) -> None:
        """Sample now, paused or not (paused stays paused)."""
        self._restart_collector(sample_first=True)

    def action_interval(self, step: int) -> None:
        floor = LOW_BANDWIDTH_MIN_INTERVAL if self.low_bandwidth else 0.0
        options = [i for i in INTERVALS if i >= floor]
        k = min(range(len(options)), key=lambda i: abs(options[i] - self.interval))
        self.interval = options[max(0, min(len(options) - 1, k + step))]
        if self.feeder is not None:
            self.feeder.monitor.interval = self.interval  # and its Sampler's
        self._restart_collector(sample_first=False)  # the new interval starts now
        self._render_header()
        if self.latest is not None:
            self.repaint_visible()

    def action_save(self) -> None:
        if self.latest is None:
            self.notify("nothing sampled yet", severity="warning")
            return
        snap = self.latest.snapshot
        stamp = datetime.fromtimestamp(snap.timestamp).strftime("%Y%m%d-%H%M%S")
        path = os.path.join(self.save_dir, f"gputop-diag-snapshot-{stamp}.json")
        n = 1
        while os.path.exists(path):  # two saves in one second: keep both
            n += 1
            path = os.path.join(self.save_dir, f"gputop-diag-snapshot-{stamp}-{n}.json")
        try:
            doc = snapshot_to_json(snap)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(redact_snapshot_json(doc) if self.sanitize else doc, f, indent=2)
        except OSError as e:
            self.notify(f"could not write {path}: {e.strerror}", severity="error", timeout=10)
            return
        self.last_saved = path
        self.notify(f"snapshot written to {os.path.abspath(path)}", timeout=10)
        self._render_header()

    def action_toggle_panel(self) -> None:
        if self.size.width < NARROW_BELOW:
            self.panel_full = not self.panel_full
        else:
            self.panel_hidden = not self.panel_hidden
        self._apply_width(self.size.width)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())


def run_app(
    sources: Sources | None,
    *,
    interval: float = 1.0,
    sanitize: bool = False,
    low_bandwidth: bool = False,
    replay: Recording | None = None,
) -> int:
    """Run the live view (or play `replay`) until the user quits or the terminal hangs up;
    the exit code."""
    app = GpuTopApp(
        sources, interval=interval, sanitize=sanitize, low_bandwidth=low_bandwidth, replay=replay
    )
    app.run()
    return app.return_code or 0
