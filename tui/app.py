"""The live view: header, pane tabs, banner, a ContentSwitcher of panes, the bottleneck panel,
footer.

The Monitor owns the run's state (history, interval, pause, the run's Xid events); a daemon
thread (`collector.py`) ticks it through a Feeder and posts `SnapshotReady` messages with the
frozen view model (`monitor/view.py`: sanitized under --sanitize, with the configs found, the
mapping worked out); the app draws only the visible pane, the side panel and the header, inside
`batch_update()`. Panes get what they show from above (the update and a `View`) and post
messages up. The view reads no machine: signals, a process's environment and quitting a started
job go through the `ProcessControl` it is handed (`monitor/control.py`), and `s`/`S` write
through `report/live.py`. With `--replay FILE` a `Player` (`replaying.py`) plays the recording
through a replaying Monitor instead. Saving (`saver.py`), the process filter and sort
(`procs.py`), the layout (`layout.py`), quitting while a job runs (`job_quit.py`) and a hung-up
terminal (`hangup.py`) are small objects the app holds.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import App, ComposeResult
from textual.css.query import NoMatches
from textual.scrollbar import ScrollBar, ScrollBarRender

from gputop_diag.model.exits import EXIT_USAGE
from gputop_diag.monitor.control import ProcessControl
from gputop_diag.monitor.core import Monitor
from gputop_diag.monitor.run import session_key
from gputop_diag.monitor.view import (
    Feeder,
    ModelConfig,
    ModelConfigError,
    Sources,
    Update,
    first_host,
    read_model_config,
)
from gputop_diag.tui.actions import LOW_BANDWIDTH_MIN_INTERVAL, KeyActions
from gputop_diag.tui.collector import Sampling
from gputop_diag.tui.filter_screen import sanitized_filter
from gputop_diag.tui.hangup import TerminalGuard
from gputop_diag.tui.header import HeaderFacts, ReplayFacts
from gputop_diag.tui.job_quit import JobQuit
from gputop_diag.tui.keys import BINDINGS, JOB
from gputop_diag.tui.layout import Layout
from gputop_diag.tui.messages import CollectorFailed, ReportWritten, SnapshotReady, XidHistoryRead
from gputop_diag.tui.panes.base import Pane, View
from gputop_diag.tui.panes.memory import MemoryPane
from gputop_diag.tui.process_actions import ProcessActions
from gputop_diag.tui.process_table import ProcessTable
from gputop_diag.tui.procs import ProcessControls, ProcessFilter
from gputop_diag.tui.replaying import Player, ReplayEnded, ReplayExtent
from gputop_diag.tui.saver import Saver
from gputop_diag.tui.screen import MainScreen
from gputop_diag.tui.terminal import ascii_terminal, no_colour
from gputop_diag.widgets import ASCII_CLASS, to_ascii

if TYPE_CHECKING:  # recordings load with a replay or a recording, a job's watch with a job
    from gputop_diag.monitor.view import JobWatch
    from gputop_diag.recording.store import Recording


class AsciiScrollBarRender(ScrollBarRender):
    """Scrollbars without block glyphs (ASCII only: --low-bandwidth, or a terminal that shows
    no Unicode): the thumb is drawn in reverse video with spaces."""

    VERTICAL_BARS = [" "] * 8
    HORIZONTAL_BARS = [" "] * 8


class GpuTopApp(KeyActions, App):
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
        ascii_only: bool = False,
        start_collectors: bool = True,
        save_dir: str | None = None,
        replay: Recording | None = None,
        process_filter: ProcessFilter | None = None,
        job_watch: JobWatch | None = None,
        model_config: ModelConfig | None = None,
        control: ProcessControl | None = None,
    ) -> None:
        # NO_COLOR: Textual's filter that drops colours (its other one turns them grey)
        super().__init__(ansi_color=True if no_colour(os.environ) else None)
        self.sources = sources  # None while replaying
        # the memory planner's model: given (--model-config), else the one the job's command
        # line names (found by the Feeder once per process, on this machine only)
        self.model_config = model_config
        # signals, a process's environment, quitting a started job: the one seam that acts
        self.control = control or ProcessControl(sources, job_watch)
        self.replay = replay
        self.low_bandwidth = low_bandwidth
        # ASCII only, the one switch for every glyph, border and scrollbar: --low-bandwidth, or
        # a terminal that shows no Unicode (`terminal.py`, read by `run_app`)
        self.plain = low_bandwidth or ascii_only
        self.sanitize = sanitize
        # --sanitize: the run's one key (`monitor.run.session_key`), so an identifier keeps its
        # pseudonym on screen, in every report and snapshot written, and on stderr (`watch`)
        given = getattr(job_watch, "sanitize_key", None)
        key = (given or session_key()) if sanitize else None
        self.sanitizer = None
        if key:  # the sanitizer's rules load under --sanitize (or with the first `s`)
            from gputop_diag.sanitize.sanitizer import Sanitizer

            self.sanitizer = Sanitizer(key)
        self.start_collectors = start_collectors  # False: the caller posts the ticks
        interval = max(interval, LOW_BANDWIDTH_MIN_INTERVAL) if low_bandwidth else interval
        self.feeder = Feeder(
            Monitor(
                sources,
                interval=interval,
                job=job_watch,
                live=True,
                plan=model_config.read if model_config is not None else None,
            ),
            self.sanitizer,
            find_configs=model_config is None,
        )
        self.sampling = Sampling(self.feeder, self.post_message)
        self.player = Player(self, replay)
        self.saver = Saver(self, sources, replay, key, save_dir, self._render_header)
        self.quitter = JobQuit(self, self.control.job, sanitize)
        self.guard = TerminalGuard(self, self._on_hangup, on_room=self._resumed)
        # `--user NAME` under --sanitize: held as the rows are written (its pseudonym)
        self.controls = ProcessControls(
            sanitized_filter(process_filter or ProcessFilter(), self.sanitizer)
        )
        self.process_actions = ProcessActions(self)  # Enter, T/K/I on the process table
        self.sizing = Layout()
        self.main = MainScreen(id="_default")
        # `gputop-diag watch`: the job the Monitor reads each tick; the view opens on its pane
        self.job = job_watch.label if job_watch is not None else None
        self.selected_gpu: int | None = None
        self.latest: Update | None = None
        self._failure: CollectorFailed | None = None
        self._render_due = False  # a draw of `latest` is queued (`_snapshot_ready`)
        self._can_select = False
        self._scrollbar_render: type[ScrollBarRender] | None = None
        self.host = first_host(sources, replay, self.sanitizer)  # before the first tick
        if self.plain:  # ASCII only: the DiffLine and DiffText widgets below follow it
            self.add_class(ASCII_CLASS)
        if low_bandwidth or os.environ.get("SSH_CONNECTION"):
            self.animation_level = "none"  # no animations over SSH

    @property
    def monitor(self) -> Monitor:
        return self.feeder.monitor

    @property
    def interval(self) -> float:
        return self.monitor.interval

    @property
    def paused(self) -> bool:
        return self.monitor.paused

    # -- lifetime ----------------------------------------------------------------------------
    def get_default_screen(self) -> MainScreen:
        return self.main

    def compose(self) -> ComposeResult:
        yield from self.main.parts()

    def get_driver_class(self):
        """Textual's driver for this terminal, its input thread asleep while nobody types
        (`tui/driver.py`)."""
        from gputop_diag.tui.driver import quiet

        return quiet(super().get_driver_class())

    def on_mount(self) -> None:
        self.query_one("#banner").display = False
        if self.plain:  # ASCII only: no block glyphs in the scrollbars either
            self._scrollbar_render = ScrollBar.renderer
            ScrollBar.renderer = AsciiScrollBarRender
        self.app_resume_signal.subscribe(self, self._resumed)
        self.sizing.size = self.size
        self._apply_size()
        self._render_header()
        self.guard.install()  # SIGHUP, and SIGCONT only after our own Ctrl-Z
        if self.job is not None:
            self.action_pane(JOB)
        if not self.start_collectors:
            return
        if self.replay is not None:
            self.player.start(self.feeder)
        else:
            self.sampling.start()
            self.set_interval(1.0, self._check_stuck, name="stuck-tick")

    def _on_hangup(self) -> None:
        """The SSH session dropped (SIGHUP): stop sampling and leave."""
        self.sampling.stop()
        self.workers.cancel_group(self, "collect")
        self.exit(return_code=0)

    def exit(self, result=None, return_code: int = 0, message=None) -> None:
        self.guard.leave()  # from now on a SIGCONT never starts application mode again
        super().exit(result, return_code, message)

    def notify(self, message: str, *, title: str = "", **kw) -> None:
        """A toast; in ASCII only, spelled in ASCII (a path, a command line, an ellipsis)."""
        if self.plain:
            message, title = to_ascii(message), to_ascii(title)
        super().notify(message, title=title, **kw)

    def _resumed(self, _app=None) -> None:
        """Back from Ctrl-Z: the shell drew over the screen; paint all of it again."""
        self.screen.refresh(layout=True)
        for widget in self.screen.walk_children():
            widget.refresh()

    def on_unmount(self) -> None:
        self.guard.leave()
        self.sampling.stop()
        self.workers.cancel_group(self, "collect")
        self.workers.cancel_group(self, "replay-extent")
        if self._scrollbar_render is not None:
            ScrollBar.renderer = self._scrollbar_render
        self.guard.uninstall()
        # Waits at most a second for a tick in flight (the Sampler's lock); a call that hangs
        # in the driver is left behind in the daemon thread, without nvmlShutdown.
        self.monitor.close()

    def on_resize(self, event) -> None:
        self.sizing.size = event.size
        self._safely(self._apply_size)

    def _apply_size(self) -> None:
        self.main.apply(self.sizing)
        self._render_tabs()
        self.repaint_visible()

    def _safely(self, draw, *args) -> None:
        """Draw, unless the app is closing (its widgets are gone)."""
        try:
            draw(*args)
        except NoMatches:
            pass

    # -- messages ----------------------------------------------------------------------------
    @on(SnapshotReady)
    def _snapshot_ready(self, message: SnapshotReady) -> None:
        """The newest tick, drawn after the messages queued before it: ticks queued behind a
        slow frame (a stalled terminal, a resumed Ctrl-Z) are drawn once, as the newest."""
        self.latest = message.update
        self._failure = None
        if not self._render_due:
            self._render_due = True
            self.call_later(self._render_latest)

    def _render_latest(self) -> None:
        self._render_due = False
        if self.latest is not None:
            self._safely(self._render, self.latest)

    @on(CollectorFailed)
    def _collector_failed(self, message: CollectorFailed) -> None:
        self._failure = message
        self._safely(self._render_banner)

    def _check_stuck(self) -> None:
        if self._failure is None or self._failure.source == "stuck":
            stuck = self.sampling.stuck()
            if stuck is not None:
                self._collector_failed(stuck)

    # `XidPane.HistoryWanted`, by its handler's name: the pane's module loads with the pane
    def on_xid_pane_history_wanted(self) -> None:
        self.monitor.xid_history(on_read=lambda: self.post_message(XidHistoryRead()))

    @on(XidHistoryRead)
    def _xid_history_read(self) -> None:
        if self.latest is not None:
            self.latest = self.feeder.with_xid_history(self.latest)
            self._safely(self.repaint_visible)

    @on(Pane.Resized)
    def _pane_resized(self) -> None:
        self._safely(self.repaint_visible)

    @on(MemoryPane.SortBy)
    def _sort_by(self, message: MemoryPane.SortBy) -> None:
        if self.controls.sort_by(message.column):
            self.repaint_visible()

    @on(ProcessTable.Wanted)
    def _process_wanted(self, message: ProcessTable.Wanted) -> None:
        self.process_actions.handle(message.what, message.key, message.signal, message.tagged)

    @on(ReplayExtent)
    def _replay_extent(self, message: ReplayExtent) -> None:
        if self.player.extent(message):
            self._safely(self._render_header)  # measured while the app closes: nothing

    @on(ReplayEnded)
    def _replay_ended(self, message: ReplayEnded) -> None:
        try:
            self.player.finish()
            self.repaint_visible()
            self._render_header()
        except NoMatches:  # the end arrived while the app closes
            return
        self.player.end(message, self.latest is not None)

    @on(ReportWritten)
    def _report_written(self, message: ReportWritten) -> None:
        self.saver.report_written(message)

    # -- rendering ---------------------------------------------------------------------------
    def view(self) -> View:
        return View(
            selected_gpu=self.selected_gpu,
            plain=self.plain,
            low_bandwidth=self.low_bandwidth,
            sanitize=self.sanitize,
            interval=self.interval,
            filter=self.controls.filter,
            sort=self.controls.sort,
            short=self.sizing.short,
            sweep=self.controls.sweep,
            job=self.job,
            sanitizer=self.sanitizer,
        )

    def _render_header(self) -> None:
        snap = self.latest.snapshot if self.latest is not None else None
        replay = None
        if self.replay is not None:
            start, p = self.replay.header.started, self.player
            at = None if snap is None or start is None else snap.timestamp - start
            replay = ReplayFacts(self.replay.name, at, p.total_s, p.pace.speed, p.ended)
        facts = HeaderFacts(
            host=snap.system.hostname if snap is not None else self.host,  # pseudonyms
            driver=snap.system.driver_version if snap else None,
            cuda=snap.system.driver_max_cuda if snap else None,
            gpu_count=len(snap.gpus) if snap else None,
            selected_gpu=self.selected_gpu,
            interval=self.interval,
            paused=self.paused,
            scenario=self.sources.scenario if self.sources is not None else None,
            saved=self.saver.last_saved,
            replay=replay,
            plain=self.plain,
        )
        self.main.show_header(facts)

    def _render_tabs(self) -> None:
        described = self.controls.filter.describe()  # what was typed: a user, a command
        if self.sanitizer is not None and described:
            described = self.sanitizer.text(described) or ""
        self.main.show_tabs(self._pane_order(), described)

    def _render_banner(self) -> None:
        errors = self.latest.snapshot.errors if self.latest is not None else ()
        self.main.show_banner(errors, self._failure)

    def _shown_gpus(self) -> list[int]:
        """The GPUs on screen: all of them, or those the filter keeps (`--only`)."""
        u = self.latest
        every = [g.index for g in u.snapshot.gpus] if u is not None else []
        return [i for i in every if self.controls.filter.shows_gpu(i)]

    def _render(self, u: Update) -> None:
        gpus = self._shown_gpus()
        if self.selected_gpu not in gpus:
            self.selected_gpu = gpus[0] if gpus else None
        if (len(gpus) > 1) != self._can_select:  # [ and ] grey out with fewer than two GPUs
            self._can_select = len(gpus) > 1
            self.refresh_bindings()
        self._find_model_config(u)
        with self.batch_update():
            self._render_header()
            self._render_banner()
            self.main.show(u, self.view(), self.sizing, self.interval)

    def _find_model_config(self, u: Update) -> None:
        """The Memory pane's model: the one given, else the config.json the command line of the
        job on the selected GPU names (found by the Feeder, in the tick's view model)."""
        config = self.model_config or u.model_configs.get(self.selected_gpu)
        self.query_one(MemoryPane).model_config = config

    def repaint_visible(self) -> None:
        if self.latest is not None:
            self._render(self.latest)


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
    model_config: str | None = None,
) -> int:
    """Run the live view (or play `replay`) until the user quits or the terminal hangs up;
    the exit code (where stdout is no terminal the caller prints one snapshot instead). `job`:
    watch it (`gputop-diag watch`), the view opened on the Job pane. `model_config`: a model's
    config.json for the memory planner (exit 2 when it cannot be read)."""
    config = None
    if model_config is not None:
        try:
            config = read_model_config(model_config)
        except ModelConfigError as e:
            print(f"gputop-diag: --model-config {e}", file=sys.stderr)
            return EXIT_USAGE
    app = GpuTopApp(
        sources,
        interval=interval,
        sanitize=sanitize,
        low_bandwidth=low_bandwidth,
        ascii_only=ascii_terminal(os.environ),
        replay=replay,
        save_dir=save_dir,
        process_filter=ProcessFilter(frozenset(only_gpus), frozenset(users), frozenset(pids)),
        job_watch=job,
        model_config=config,
    )
    app.guard.armed = True  # a hung-up terminal: the process ends even if the exit hangs
    try:
        app.run()
    finally:
        app.guard.finished()
    return app.return_code or 0
