"""The live view: header, pane tabs, banner, a ContentSwitcher of panes, the bottleneck panel,
footer.

A daemon thread (`collector.py`) ticks the Monitor (sample, slow sources, classify) and posts
`SnapshotReady` messages; the app draws only the visible pane, the side panel and the header,
inside `batch_update()`. Quitting waits at most a second for a tick in flight; a hung-up
terminal ends the app (`hangup.py`). With `--replay FILE` a thread worker plays the recording
instead, at the recorded pace times the replay speed, through a replaying Monitor
(`replaying.py`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.scrollbar import ScrollBar, ScrollBarRender
from textual.widgets import ContentSwitcher, DataTable, Footer

from ..collect.job import JobWatch
from ..monitor.core import Monitor
from ..monitor.sampler import Sampler
from ..recording.store import Recording
from ..report.build import ReportSource
from ..sanitize.sanitizer import Sanitizer
from ..sources import Sources
from .banner import Banner
from .collector import Collector
from .feed import Feeder, ReplayPace, TickStuck, Update, sanitized_update
from .filter_screen import FilterScreen
from .hangup import TerminalGuard
from .header import HeaderBar, HeaderFacts, ReplayFacts
from .help import HelpScreen
from .job_quit import DETACH, STOP, QuitJobScreen, StoppingJobScreen
from .keys import BINDINGS, JOB, PANES, SHORT_TITLES, TITLES
from .messages import CollectorFailed, ReportWritten, SnapshotReady
from .panes.base import Pane, View
from .panes.driver import DriverPane
from .panes.job import JobPane
from .panes.mapping import MappingPane
from .panes.memory import MemoryPane
from .panes.utilization import UtilizationPane
from .panes.xid import XidPane
from .procs import SORTS, ProcessFilter, SortOrder
from .replaying import ReplayMixin
from .reports import NotSafe, build_report, snapshot_document, write_report
from .saving import Saved, save_dirs, write_json
from .side_panel import SidePanel
from .tabs import TabStrip

INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0)
LOW_BANDWIDTH_MIN_INTERVAL = 2.0
NARROW_BELOW = 100  # columns: the side panel becomes a strip below the pane
SHORT_BELOW = 30  # rows: legends give way to table rows, the strip loses a line
TINY_BELOW = 16  # rows: the strip keeps three lines (verdict, evidence, next)
LIVE_ONLY = ("refresh_now", "interval")
STUCK_AFTER_S = 5.0  # a tick this long is waiting for the driver: the banner says so
REPLAY_ONLY = ("replay_speed", "replay_step")


class AsciiScrollBarRender(ScrollBarRender):
    """Scrollbars without block glyphs (--low-bandwidth: ASCII only): the thumb is drawn in
    reverse video with spaces."""

    VERTICAL_BARS = [" "] * 8
    HORIZONTAL_BARS = [" "] * 8


class GpuTopApp(ReplayMixin, App):
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
        save_dir: str | None = None,
        replay: Recording | None = None,
        process_filter: ProcessFilter | None = None,
        job_watch: JobWatch | None = None,
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
        # --sanitize: one key for the session, so an identifier keeps its pseudonym on screen,
        # in every report and snapshot written (never written anywhere itself)
        self._key = secrets.token_bytes(32) if sanitize else None
        self.sanitizer = Sanitizer(self._key) if sanitize else None
        self._host_alias = self._alias_of_host()
        self.start_collectors = start_collectors
        self.save_dir = save_dir  # None: the current directory, then the fallbacks
        self.paused = False
        self.selected_gpu: int | None = None
        self.job: str | None = None  # set when watching a job (the Job pane appears)
        # `gputop-diag watch`: the job the Monitor reads each tick; the view opens on its pane
        self.job_watch = job_watch
        if job_watch is not None:
            self.job = job_watch.label
        self.latest: Update | None = None
        self.last_saved: str | None = None
        self.panel_hidden = False  # wide layout: `p` hides the panel
        self.panel_full = False  # narrow layout: `p` shows all of it over the pane
        self.process_filter = process_filter or ProcessFilter()
        self.sort_order = SortOrder()
        self.sweep = True  # histories sweep (cheap over SSH); `G` makes them scroll
        self.sampler: Sampler | None = None
        self.feeder: Feeder | None = None  # the collector (or replay) thread's
        self.collector: Collector | None = None  # the sampling loop now running
        self.guard = TerminalGuard(self, self._on_hangup)
        self._local: Feeder | None = None  # for snapshots posted without an update
        self._failure: CollectorFailed | None = None
        self._can_select = False
        self._scrollbar_render: type[ScrollBarRender] | None = None
        if low_bandwidth or os.environ.get("SSH_CONNECTION"):
            self.animation_level = "none"  # no animations over SSH

    def _alias_of_host(self) -> str | None:
        """Under --sanitize, the host name's pseudonym (the header's, before the first tick)."""
        if self.sanitizer is None:
            return None
        try:
            name = self.sources.hostname() if self.sources is not None else None
        except Exception:  # noqa: BLE001 - a name we cannot read is shown as no name
            name = None
        if name is None and self.replay is not None:
            name = self.replay.header.hostname
        return self.sanitizer.hostname(name) if name else "host"

    # -- layout ------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield TabStrip(id="tabs")
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
        if self.low_bandwidth:  # ASCII only: no block glyphs in the scrollbars either
            self._scrollbar_render = ScrollBar.renderer
            ScrollBar.renderer = AsciiScrollBarRender
            self.add_class("-ascii")
        self.app_resume_signal.subscribe(self, self._resumed)
        self._apply_size()
        self._render_header()
        self._render_tabs()
        self.guard.install()  # SIGHUP, and SIGCONT only after our own Ctrl-Z
        if self.job is not None:
            self.action_pane(JOB)
        if not self.start_collectors:
            return
        if self.replay is not None:
            self.feeder = Feeder(Monitor(None), self.sanitizer)
            self.play()
            self.measure_replay()
        else:
            monitor = Monitor(self.sources, interval=self.interval, job=self.job_watch)
            self.sampler = monitor.sampler
            self.feeder = Feeder(monitor, self.sanitizer)
            self.collect()
            self.set_interval(1.0, self._check_stuck, name="stuck-tick")

    def _on_hangup(self) -> None:
        """The SSH session dropped (SIGHUP): stop sampling and leave."""
        self._stop_collector()
        self.workers.cancel_group(self, "collect")
        self.exit(return_code=0)

    async def action_quit(self) -> None:
        """Quit; while a job this view started still runs, ask first (`tui/job_quit.py`)."""
        w = self.job_watch
        if w is None or not w.started or w.detached or not w.running:
            if w is not None and w.started:
                w._reap()
                self.exit(return_code=w.exit_code or 0)
                return
            self.exit()
            return
        if isinstance(self.screen, StoppingJobScreen):  # being stopped: quits when done
            return
        if isinstance(self.screen, QuitJobScreen):  # asked already: a second quit leaves it
            self._quit_answer(DETACH)
            return
        log = w.tail.path if w.tail is not None and not self.sanitize else None
        label = "the job" if self.sanitize else w.label
        self.push_screen(QuitJobScreen(label, log), self._quit_answer)

    def _quit_answer(self, what: str | None) -> None:
        w = self.job_watch
        if what == STOP:
            # a job that ignores SIGTERM holds stop() for the grace period: not on this thread
            self.push_screen(StoppingJobScreen(w.stop_grace_s))
            self.run_worker(self._stop_job, thread=True, group="stop-job", exit_on_error=False)
        elif what == DETACH:
            w.detach()
            self.exit(return_code=0)

    def _stop_job(self) -> None:
        code = self.job_watch.stop()
        self.call_from_thread(self.exit, return_code=code or 0)

    def exit(self, result=None, return_code: int = 0, message=None) -> None:
        self.guard.leave()  # from now on a SIGCONT never starts application mode again
        super().exit(result, return_code, message)

    def _resumed(self, _app=None) -> None:
        """Back from Ctrl-Z: the shell drew over the screen; paint all of it again."""
        self.screen.refresh(layout=True)
        for widget in self.screen.walk_children():
            widget.refresh()

    def on_unmount(self) -> None:
        self.guard.leave()
        self._stop_collector()
        self.workers.cancel_group(self, "collect")
        self.workers.cancel_group(self, "replay-extent")
        if self._scrollbar_render is not None:
            ScrollBar.renderer = self._scrollbar_render
        self.guard.uninstall()
        if self.feeder is not None:
            # Waits at most a second for a tick in flight (the Sampler's lock); a call that
            # hangs in the driver is left behind in the daemon thread, without nvmlShutdown.
            self.feeder.monitor.close()

    def on_resize(self, event) -> None:
        self._terminal_size = event.size
        try:
            self._apply_size()
        except NoMatches:  # a resize while the app closes
            pass

    @property
    def ascii_only(self) -> bool:
        """--low-bandwidth: ASCII only (the DiffLine/DiffText widgets read this)."""
        return self.low_bandwidth

    @property
    def _terminal(self):
        return getattr(self, "_terminal_size", None) or self.size

    @property
    def narrow(self) -> bool:
        return self._terminal.width < NARROW_BELOW

    @property
    def short(self) -> bool:
        return self._terminal.height < SHORT_BELOW

    def _apply_size(self) -> None:
        narrow = self.narrow
        self.screen.set_class(narrow, "-narrow")
        self.screen.set_class(self.short, "-short")
        self.screen.set_class(self._terminal.height < TINY_BELOW, "-tiny")
        self.screen.set_class(narrow and self.panel_full, "-panel-full")
        self.query_one(SidePanel).display = narrow or not self.panel_hidden
        self._render_tabs()
        if self.latest is not None:
            self._render(self.latest)

    # -- collection (a daemon thread) -----------------------------------------------------------
    def collect(self, sample_first: bool = True) -> Collector:
        """Sample every `interval` until stopped; post each tick. Restarted by r, +/- and
        resume: the old loop ends on its cancel event (a tick in flight finishes first, and
        the Feeder's lock keeps the two from overlapping)."""
        self._stop_collector()
        self.collector = Collector(
            self.feeder,
            post=self.post_message,
            interval=lambda: self.interval,
            paused=lambda: self.paused,
            sleep=self.sources.clock.sleep,
            sample_first=sample_first,
        ).start()
        return self.collector

    def _check_stuck(self) -> None:
        """A tick that has waited `STUCK_AFTER_S` for NVML: say so (the figures on screen are
        that old) until it ends."""
        c = self.collector
        waited = c.stuck_for() if c is not None else 0.0
        if waited < STUCK_AFTER_S or (self._failure and self._failure.source != "stuck"):
            return
        self._failure = CollectorFailed(
            "stuck",
            f"the driver has not answered for {waited:.0f} s: a sample is waiting in an NVML "
            "call (a GPU that stopped answering?); the figures shown are that old",
            "nvidia-smi and the kernel log (journalctl -k | grep -i xid) say which GPU; "
            "q quits without waiting",
        )
        try:
            self._render_banner()
        except NoMatches:
            pass

    def _stop_collector(self) -> None:
        if self.collector is not None:
            self.collector.stop()

    def _restart_collector(self, sample_first: bool) -> None:
        if self.feeder is not None and self.replay is None:
            self.collect(sample_first)

    @on(SnapshotReady)
    def _snapshot_ready(self, message: SnapshotReady) -> None:
        update = message.update
        if update is None:  # posted by a test or a screenshot: derive it here
            if self._local is None:
                self._local = Feeder(Monitor(self.sources), self.sanitizer)
            update = self._local.add(message.snapshot)
        elif self.sanitizer is not None and update.sampled is None:
            update = sanitized_update(update, self.sanitizer)  # a feed of another kind
        self.latest = update
        self._failure = None
        if self.job is not None:  # the Job pane's histories take every tick, shown or not
            self.query_one(JobPane).record(update.snapshot)
        try:
            self._render(update)
        except NoMatches:  # a tick that arrived while the app closes: nothing left to draw
            pass

    @on(CollectorFailed)
    def _collector_failed(self, message: CollectorFailed) -> None:
        self._failure = message
        try:
            self._render_banner()
        except NoMatches:  # arrived while the app closes
            pass

    # -- rendering ---------------------------------------------------------------------------
    def view(self) -> View:
        return View(
            selected_gpu=self.selected_gpu,
            plain=self.low_bandwidth,
            sanitize=self.sanitize,
            environ=self.sources.environ if self.sources is not None else {},
            interval=self.interval,
            filter=self.process_filter,
            sort=self.sort_order,
            short=self.short,
            sweep=self.sweep,
        )

    def _render_header(self) -> None:
        snap = self.latest.snapshot if self.latest is not None else None
        if snap is not None:  # under --sanitize, its pseudonym
            host = snap.system.hostname
        elif self._host_alias is not None:
            host = self._host_alias
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
            plain=self.low_bandwidth,
        )
        self.query_one(HeaderBar).show(facts)

    def _render_tabs(self) -> None:
        order = self._pane_order()
        titles = [(PANES.index(p) + 1, TITLES[PANES.index(p)], SHORT_TITLES[PANES.index(p)])
                  for p in order]  # fmt: skip
        current = self.query_one("#panes", ContentSwitcher).current or "memory"
        self.query_one(TabStrip).show(
            titles, PANES.index(current) + 1, self.process_filter.describe()
        )

    def _render_banner(self) -> None:
        errors = self.latest.snapshot.errors if self.latest is not None else ()
        failure = self._failure
        self.query_one(Banner).show(
            errors, None if failure is None else (failure.message, failure.next_step)
        )

    def _shown_gpus(self, u: Update | None) -> list[int]:
        """The GPUs on screen: all of them, or those the filter keeps (`--only`)."""
        if u is None:
            return []
        every = [g.index for g in u.snapshot.gpus]
        shown = [i for i in every if self.process_filter.shows_gpu(i)]
        return shown

    def _render(self, u: Update) -> None:
        gpus = self._shown_gpus(u)
        if self.selected_gpu not in gpus:
            self.selected_gpu = gpus[0] if gpus else None
        if (len(gpus) > 1) != self._can_select:  # [ and ] grey out with fewer than two GPUs
            self._can_select = len(gpus) > 1
            self.refresh_bindings()
        narrow = self.narrow
        with self.batch_update():
            self._render_header()
            self._render_banner()
            current = self.query_one("#panes", ContentSwitcher).current
            if not (narrow and self.panel_full):
                self.query_one(f"#{current}", Pane).show(u, self.view())
            self.query_one(SidePanel).show(
                u.diagnosis,
                strip=narrow and not self.panel_full,
                now=u.snapshot.timestamp,
                interval=self.interval,
                lines=3 if self._terminal.height < TINY_BELOW else 5 if self.short else 6,
                plain=self.low_bandwidth,
            )

    def repaint_visible(self) -> None:
        if self.latest is not None:
            self._render(self.latest)

    # -- actions -----------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pane" and parameters == (JOB,) and self.job is None:
            return False  # no job is watched: the Job pane and its key stay out of sight
        if action == "gpu" and not self._can_select:
            return None  # shown, greyed: nothing to select between
        if action == "clear_filter" and not self.process_filter.active:
            return False  # Esc does nothing here without a filter
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
            self._apply_size()
        table = self.query_one(f"#{PANES[k]}").query(DataTable)
        (table.first() if table else self.query_one(f"#{PANES[k]}")).focus()
        self._render_tabs()
        self.repaint_visible()

    def action_cycle(self, step: int) -> None:
        order = self._pane_order()
        current = self.query_one("#panes", ContentSwitcher).current
        k = order.index(current) if current in order else 0
        self.action_pane(PANES.index(order[(k + step) % len(order)]))

    def action_gpu(self, step: int) -> None:
        gpus = self._shown_gpus(self.latest)
        if not gpus:
            return
        k = gpus.index(self.selected_gpu) if self.selected_gpu in gpus else 0
        self.selected_gpu = gpus[(k + step) % len(gpus)]
        self.repaint_visible()

    def action_pause(self) -> None:
        self.paused = self.pace.paused = not self.paused
        if not self.paused:
            self._restart_collector(sample_first=True)  # resume with a fresh sample
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

    # -- filters and sorting ---------------------------------------------------------------
    def set_filter(self, f: ProcessFilter | None) -> None:
        if f is None:  # the prompt was cancelled
            return
        self.process_filter = f
        self.refresh_bindings()
        self._render_tabs()
        self.repaint_visible()

    def action_filter(self) -> None:
        self.push_screen(FilterScreen(self.process_filter), self.set_filter)

    def action_clear_filter(self) -> None:
        self.set_filter(ProcessFilter())

    def action_only_selected_gpu(self) -> None:
        """`g`: only the selected GPU (its bars, lines and processes); again: every GPU."""
        f = self.process_filter
        if f.gpus:
            self.set_filter(ProcessFilter(frozenset(), f.users, f.pids, f.text))
        elif self.selected_gpu is not None:
            self.set_filter(ProcessFilter(frozenset({self.selected_gpu}), f.users, f.pids, f.text))

    def sort_by(self, column: str) -> None:
        """Sort the processes by `column`; the same column again reverses the order."""
        if column not in SORTS:
            return
        if self.sort_order.column == column:
            self.sort_order = self.sort_order.flipped()
        else:
            self.sort_order = SortOrder(column)
        self.repaint_visible()

    def action_sort(self, step: int) -> None:
        self.sort_order = self.sort_order.next(step)
        self.repaint_visible()

    def action_sort_by(self, column: str) -> None:
        self.sort_by(column)

    def action_sort_reverse(self) -> None:
        self.sort_order = self.sort_order.flipped()
        self.repaint_visible()

    def action_toggle_sweep(self) -> None:
        self.sweep = not self.sweep
        self.notify(
            "histories sweep: the newest sample overwrites the oldest at the marker"
            if self.sweep
            else "histories scroll: newest at the right (more bytes over SSH)",
            timeout=4,
        )
        self.repaint_visible()

    # -- saving ------------------------------------------------------------------------------
    def _history_feeder(self) -> Feeder | None:
        """The Feeder whose history the screen shows (the collector's, or the one fed by hand)."""
        return self.feeder if self.feeder is not None else self._local

    def _report_source(self) -> ReportSource:
        if self.replay is not None:
            return ReportSource("recording", interval_s=self.replay.header.interval_s)
        if self.sources.simulated:
            return ReportSource("simulator", self.sources.scenario, self.interval)
        return ReportSource("live", interval_s=self.interval)

    def action_save_report(self) -> None:
        """`s`: the sanitized report of what the view holds, written in a worker thread."""
        feeder = self._history_feeder()
        if self.latest is None or feeder is None:
            self.notify("nothing sampled yet", severity="warning")
            return
        self.notify("writing the sanitized report…", timeout=3)
        self._write_report(feeder)

    @work(thread=True, exit_on_error=False, group="report", name="report")
    def _write_report(self, feeder: Feeder) -> None:
        try:
            snaps, diagnosis = feeder.window()
            report = build_report(
                snaps,
                diagnosis,
                source=self._report_source(),
                environ=self.sources.environ if self.sources is not None else None,
                sources=self.sources,
                key=self._key,
            )
            saved = write_report(report, save_dirs(self.save_dir))
        except TickStuck as e:
            self.post_message(ReportWritten(None, str(e)))
            return
        except Exception as e:  # noqa: BLE001 - said in a toast, never a traceback
            self.post_message(ReportWritten(None, f"{type(e).__name__}: {e}"))
            return
        self.post_message(ReportWritten(saved, None, report.left_out))

    @on(ReportWritten)
    def _report_written(self, message: ReportWritten) -> None:
        saved = message.saved
        if saved is None:
            self.notify(f"could not build the report: {message.error}", severity="error")
            return
        left = ", ".join(x["section"] for x in message.left_out)
        note = f"; left out as not safe to share: {left}" if left else ""
        self._said_saved("sanitized report", saved, f"{note}; read it once before you share it")

    def action_save(self) -> None:
        """`S`: the last snapshot as JSON, with the Xid history the Xid pane shows."""
        if self.latest is None:
            self.notify("nothing sampled yet", severity="warning")
            return
        feeder = self._history_feeder()
        triage = feeder.monitor.xid_triage if feeder is not None else None
        try:
            doc = snapshot_document(
                self.latest, triage.events if triage is not None else (), self._key, self.sources
            )
        except NotSafe as e:
            self.notify(
                f"snapshot not written: it could not be sanitized with confidence ({e} left)",
                severity="error",
                timeout=15,
            )
            return
        self._said_saved("snapshot", write_json(doc, save_dirs(self.save_dir)))

    def _said_saved(self, what: str, saved: Saved, note: str = "") -> None:
        """A toast saying where `what` went (and where it could not go), or why nowhere."""
        try:
            if saved.path is None:
                self.notify(
                    f"could not write the {what} anywhere: " + "; ".join(saved.problems),
                    severity="error",
                    timeout=15,
                )
                return
            self.last_saved = saved.path
            where = os.path.abspath(saved.path)
            also = "".join(f" and {os.path.basename(p)}" for p in saved.also)
            if saved.problems:
                self.notify(
                    f"{what} written to {where}{also} (not to {'; '.join(saved.problems)}){note}",
                    severity="warning",
                    timeout=15,
                )
            else:
                self.notify(f"{what} written to {where}{also}{note}", timeout=10)
            self._render_header()
        except NoMatches:  # written while the app closes
            pass

    def action_toggle_panel(self) -> None:
        if self.narrow:
            self.panel_full = not self.panel_full
        else:
            self.panel_hidden = not self.panel_hidden
        self._apply_size()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())


def run_app(
    sources: Sources | None,
    *,
    interval: float = 1.0,
    sanitize: bool = False,
    low_bandwidth: bool = False,
    replay: Recording | None = None,
    save_dir: str | None = None,
    only_gpus: Iterable[int] = (),
    users: Iterable[str] = (),
    pids: Iterable[int] = (),
    job: JobWatch | None = None,
) -> int:
    """Run the live view (or play `replay`) until the user quits or the terminal hangs up;
    the exit code (where stdout is no terminal the caller prints one snapshot instead). `job`:
    watch it (`gputop-diag watch`), the view opened on the Job pane."""
    app = GpuTopApp(
        sources,
        interval=interval,
        sanitize=sanitize,
        low_bandwidth=low_bandwidth,
        replay=replay,
        save_dir=save_dir,
        process_filter=ProcessFilter(frozenset(only_gpus), frozenset(users), frozenset(pids)),
        job_watch=job,
    )
    app.guard.armed = True  # a hung-up terminal: the process ends even if the exit hangs
    try:
        app.run()
    finally:
        app.guard.finished()
    return app.return_code or 0
