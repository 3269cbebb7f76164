"""What the live view's keys do (`keys.py` binds them): panes, GPU selection, pause, interval,
replay pace, filter and sort, saving, the panel, help, quit. A mixin of `GpuTopApp`: each
action changes the state the app holds (its Monitor, layout, process controls, saver) and asks
for a repaint; nothing here draws.
"""

from __future__ import annotations

from gputop_diag.tui.filter_screen import FilterScreen
from gputop_diag.tui.keys import JOB, PANES
from gputop_diag.tui.panes.memory import MemoryPane
from gputop_diag.tui.procs import ProcessFilter
from gputop_diag.tui.side_panel import SidePanel

INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0)
LOW_BANDWIDTH_MIN_INTERVAL = 2.0
LIVE_ONLY = ("refresh_now", "interval")
REPLAY_ONLY = ("replay_speed", "replay_step")


class KeyActions:
    """The `action_*` methods of `GpuTopApp` and which of them apply now (`check_action`)."""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pane" and parameters == (JOB,) and self.job is None:
            return False  # no job is watched: the Job pane and its key stay out of sight
        if action == "gpu" and not self._can_select:
            return None  # shown, greyed: nothing to select between
        if action == "clear_filter" and not self.controls.filter.active:
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
        self.main.switch(PANES[k], self.latest, self.repaint_visible)
        if self.sizing.pane_switched():
            self._apply_size()
        self._render_tabs()
        self.repaint_visible()

    def action_cycle(self, step: int) -> None:
        order = self._pane_order()
        current = self.main.current
        k = order.index(current) if current in order else 0
        self.action_pane(PANES.index(order[(k + step) % len(order)]))

    def action_gpu(self, step: int) -> None:
        gpus = self._shown_gpus()
        if gpus:
            k = gpus.index(self.selected_gpu) if self.selected_gpu in gpus else 0
            self.selected_gpu = gpus[(k + step) % len(gpus)]
            self.repaint_visible()

    def action_pause(self) -> None:
        self.monitor.paused = not self.paused
        if not self.paused:
            self._restart_sampling(sample_first=True)  # resume with a fresh sample
        self._render_header()

    def action_refresh_now(self) -> None:
        """Sample now, paused or not (paused stays paused)."""
        self._restart_sampling(sample_first=True)

    def _restart_sampling(self, sample_first: bool) -> None:
        if self.start_collectors and self.replay is None:
            self.sampling.start(sample_first)

    def action_interval(self, step: int) -> None:
        floor = LOW_BANDWIDTH_MIN_INTERVAL if self.low_bandwidth else 0.0
        options = [i for i in INTERVALS if i >= floor]
        k = min(range(len(options)), key=lambda i: abs(options[i] - self.interval))
        self.monitor.interval = options[max(0, min(len(options) - 1, k + step))]
        self._restart_sampling(sample_first=False)  # the new interval starts now
        self._render_header()
        self.repaint_visible()

    def action_replay_speed(self, step: int) -> None:
        self.player.pace.change_speed(step)
        self._render_header()

    def action_replay_step(self) -> None:
        """Pause, and show the next recorded tick."""
        self.monitor.paused = True
        self.player.pace.step()
        self._render_header()

    def set_filter(self, f: ProcessFilter | None) -> None:
        if f is not None:  # None: the prompt was cancelled
            self.controls.filter = f
            self.refresh_bindings()
            self._render_tabs()
            self.repaint_visible()

    def action_filter(self) -> None:
        self.push_screen(FilterScreen(self.controls.filter), self.set_filter)

    def action_clear_filter(self) -> None:
        self.set_filter(ProcessFilter())

    def action_only_selected_gpu(self) -> None:
        """`g`: only the selected GPU (its bars, lines and processes); again: every GPU."""
        self.set_filter(self.controls.only_gpu(self.selected_gpu))

    def action_sort(self, step: int) -> None:
        shown = self.query_one(MemoryPane).columns_shown
        self.controls.sort = self.controls.sort.next(step, shown)
        self.repaint_visible()

    def action_sort_by(self, column: str) -> None:
        if self.controls.sort_by(column):
            self.repaint_visible()

    def action_sort_reverse(self) -> None:
        self.controls.sort = self.controls.sort.flipped()
        self.repaint_visible()

    def action_toggle_sweep(self) -> None:
        self.notify(self.controls.toggle_sweep(), timeout=4)
        self.repaint_visible()

    def action_save_report(self) -> None:
        self.saver.save_report(self.latest, self.monitor)

    def action_save(self) -> None:
        self.saver.save_snapshot(self.latest)

    def action_toggle_panel(self) -> None:
        self.sizing.toggle_panel()
        self._apply_size()
        if self.sizing.pane_covered:  # the whole panel over the pane: the arrow keys,
            self.query_one(SidePanel).focus()  # PgUp/PgDn, Home/End scroll it
        elif self.sizing.narrow:
            self.main.switch(self.main.current)  # the pane and its table have the keys again

    def action_help(self) -> None:
        from gputop_diag.tui.help import HelpScreen  # loaded when first asked for

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        """Quit; while a job this view started still runs, ask first (`job_quit.py`)."""
        self.quitter.quit()

    async def action_interrupt(self) -> None:
        """Ctrl-C: while a job this view started runs, passed on to it as a shell would (SIGINT,
        then SIGTERM, then SIGKILL; `job_quit.py`), the view quitting when it has ended;
        otherwise quit."""
        self.quitter.interrupt()
