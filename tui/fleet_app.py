"""The live view over Prometheus: `gputop-diag --prometheus URL`.

The Fleet pane (`FleetApp`) lists the nodes Prometheus holds, judged as `gputop-diag fleet`
judges them and read again periodically, sortable by alert severity, class or name, with each
multi-node job's findings (a straggler, correlated dips) under the table. Enter opens the
node's own panes (`NodeApp`): the live view's app, fed the node's snapshots from Prometheus
(its window, then each new scrape) where it would play a recording; q there comes back to the
fleet.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Static
from textual.worker import get_current_worker

from gputop_diag.fleet.judge import FleetVerdict, render_fleet_text
from gputop_diag.fleet.live import FleetQuery, FleetWatch, NodeFeed
from gputop_diag.fleet.read import NoFleetData
from gputop_diag.fleet.sanitize import FleetNames
from gputop_diag.model.exits import EXIT_NO_GPU, EXIT_PROMETHEUS
from gputop_diag.monitor.core import Monitor
from gputop_diag.monitor.run import Run, WallClock, session_key
from gputop_diag.monitor.view import Feeder, Update, first_host
from gputop_diag.prometheus.client import PrometheusError
from gputop_diag.tui.actions import REPLAY_ONLY
from gputop_diag.tui.app import GpuTopApp
from gputop_diag.tui.fleet_table import SORTS, FleetTable, fleet_rows
from gputop_diag.tui.keybar import KeyBar
from gputop_diag.tui.keys import PANES
from gputop_diag.tui.messages import CollectorFailed, SnapshotReady
from gputop_diag.tui.replaying import ReplayExtent

# The panes that read the machine the view runs on, not the node: left out of a node's view.
NOT_FROM_PROMETHEUS = ("mapping", "driver")


class FleetRead(Message):
    """A reading of the fleet: whole, or (`done` < `total`) the nodes judged so far."""

    def __init__(self, verdict: FleetVerdict, done: int = 0, total: int = 0) -> None:
        super().__init__()
        self.verdict = verdict
        self.done = done
        self.total = total

    @property
    def partial(self) -> bool:
        return self.done < self.total


class FleetReadFailed(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


@dataclass
class FleetViewState:
    """What the Fleet pane keeps while a node's panes are open."""

    sort: str = "alerts"
    verdict: FleetVerdict | None = None
    cursor_key: str | None = None
    problem: str | None = None
    opened: list[str] = field(default_factory=list)


class FleetApp(App):
    TITLE = "gputop-diag fleet"
    CSS = """
    #fleet-head { height: auto; background: $primary-background; }
    #fleet-problem { height: auto; color: $error; }
    #fleet-head { max-height: 3; }
    #fleet-jobs { height: auto; max-height: 25%; overflow-y: auto; }
    FleetTable { min-height: 4; }
    """
    BINDINGS = [
        Binding("enter", "open_node", "Open node"),
        Binding("a", "sort('alerts')", "Sort: alerts"),
        Binding("c", "sort('class')", "Sort: class"),
        Binding("n", "sort('node')", "Sort: node"),
        Binding("r", "refresh", "Refresh"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        watch: FleetWatch,
        state: FleetViewState | None = None,
        *,
        sanitize: bool = False,
        names: FleetNames | None = None,
    ) -> None:
        super().__init__()
        self.watch = watch
        self.state = state or FleetViewState()
        self.sanitize = sanitize or names is not None
        # --sanitize: one set of pseudonyms for the session (the node's panes share it)
        self.names = (names or FleetNames(session_key())) if self.sanitize else None
        self.open_node: tuple[str, str | None, str] | None = None  # key, hostname, shown as
        self.open_label = "hostname"  # the spelling of its host name's label

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-head")
        yield Static(id="fleet-problem")
        yield FleetTable(id="fleet-table")
        yield Static(id="fleet-jobs")
        yield KeyBar(id="footer")

    def get_driver_class(self):
        """Textual's driver for this terminal, its input thread asleep while nobody types
        (`tui/driver.py`)."""
        from gputop_diag.tui.driver import quiet

        return quiet(super().get_driver_class())

    def on_mount(self) -> None:
        self.query_one("#fleet-problem").display = False
        if self.state.verdict is not None:
            self._show(self.state.verdict)
        else:
            self._head("reading the fleet from Prometheus…")
        self.query_one(FleetTable).focus()
        self.refresh_loop()

    # -- reading ---------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="fleet", name="fleet")
    def refresh_loop(self) -> None:
        """Read the fleet now (a pane coming back shows what it had meanwhile) and every
        `refresh_s`, through the one paced loop; `r` starts it again (an exclusive worker: the
        old loop is cancelled), so the read comes at once."""
        cancel = get_current_worker().cancelled_event
        Run(self._read, clock=WallClock(), interval=self.watch.refresh_s, cancel=cancel).run()

    def _read(self) -> None:
        try:
            self.watch.on_batch = self._batch_read
            self.post_message(FleetRead(self.watch.judge()))
        except PrometheusError as e:
            self.post_message(FleetReadFailed(f"{e.message}; next: {e.next_step}"))
        except NoFleetData as e:
            self.post_message(
                FleetReadFailed(
                    f"{e}; next: check that Prometheus scrapes dcgm-exporter or "
                    "`gputop-diag exporter`"
                )
            )

    def _batch_read(self, partial: FleetVerdict, done: int, total: int) -> None:
        """A batch of nodes judged: shown at once on the first reading (a large fleet's table
        fills as it is read); later readings keep the last whole one until theirs is done."""
        if self.state.verdict is None:
            self.post_message(FleetRead(partial, done, total))

    def on_fleet_read(self, message: FleetRead) -> None:
        if message.partial:
            if self.state.verdict is None:
                self._show(message.verdict, reading=(message.done, message.total))
            return
        self.state.verdict = message.verdict
        self.state.problem = None
        self._show(message.verdict)

    def on_fleet_read_failed(self, message: FleetReadFailed) -> None:
        text = message.text
        if self.names is not None:
            text = self.names.text(text.replace(self.watch.query.prom.url, "Prometheus"))
        self.state.problem = text
        box = self.query_one("#fleet-problem", Static)
        kept = " (the table keeps the last reading)" if self.state.verdict is not None else ""
        box.update(text + kept)
        box.display = True
        if self.state.verdict is None:
            where = "" if self.sanitize else f" {self.watch.query.prom.url}"
            self._head(f"Prometheus{where}: no reading yet")

    # -- showing ---------------------------------------------------------------------------------
    def _head(self, text: str) -> None:
        self.query_one("#fleet-head", Static).update(text)

    def _show(self, fv: FleetVerdict, reading: tuple[int, int] | None = None) -> None:
        from gputop_diag.model.codec import iso_time

        data = fv.data
        self.query_one("#fleet-problem").display = self.state.problem is not None
        table = self.query_one(FleetTable)
        table.show(fleet_rows(fv, names=self.names), self.state.sort)
        if self.state.cursor_key is not None and table.current_key() != self.state.cursor_key:
            keys = [r.key for r in table.rows_shown]
            if self.state.cursor_key in keys:
                table.move_cursor(row=keys.index(self.state.cursor_key))
        where = "Prometheus" if self.sanitize else f"Prometheus {self.watch.query.prom.url}"
        count = f"{reading[0]} of {reading[1]} nodes read" if reading else f"{len(fv.nodes)} nodes"
        self._head(
            f"Fleet: {count} · {where} · window "
            f"{self.watch.query.window_s:.0f} s, "
            f"a sample every {data.step_s:g} s · at {iso_time(data.end)[11:19]} · sort: "
            f"{self.state.sort} (a/c/n) · Enter opens a node"
        )
        lines = []
        for j in fv.jobs:
            if not j.findings:
                continue
            name = j.job if self.names is None else self.names.group(j.job)
            lines.append(f"job {name} ({len(j.nodes)} nodes):")
            for f in j.findings:
                text = f.text if self.names is None else self.names.text(f.text)
                lines.append(f"  - {text}")
        jobs = self.query_one("#fleet-jobs", Static)
        jobs.update("\n".join(lines))
        jobs.display = bool(lines)

    # -- keys ------------------------------------------------------------------------------------
    def action_sort(self, by: str) -> None:
        if by in SORTS:
            self.state.sort = by
            if self.state.verdict is not None:
                self._show(self.state.verdict)

    def action_refresh(self) -> None:
        self.refresh_loop()

    def action_open_node(self) -> None:
        row = self.query_one(FleetTable).current()
        if row is None:
            return
        self.state.cursor_key = row.key
        self.open_node = (row.key, row.hostname, row.node)
        self.open_label = row.host_label
        self.workers.cancel_group(self, "fleet")
        self.exit(return_code=0)

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        self.action_open_node()

    def on_unmount(self) -> None:
        self.workers.cancel_group(self, "fleet")


class NodeApp(GpuTopApp):
    """The live view's panes for one node, fed from Prometheus where a recording would play."""

    def __init__(
        self,
        feed: NodeFeed,
        *,
        sanitize: bool = False,
        low_bandwidth: bool = False,
        names: FleetNames | None = None,
    ):
        sanitize = sanitize or names is not None
        self.names = (names or FleetNames(session_key())) if sanitize else None
        if self.names is not None:
            feed.name = f"{self.names.node_of(feed.key, feed.hostname)} (Prometheus)"
        super().__init__(
            None,
            replay=feed,  # type: ignore[arg-type] - a recording's reading side
            start_collectors=False,
            interval=feed.step_s or 1.0,
            sanitize=sanitize,
            low_bandwidth=low_bandwidth,
        )
        if self.names is not None:
            # the session's sanitizer: the node's host shows the pseudonym its fleet row shows
            self.saver.key = self.names.key
            self.sanitizer = self.names.s
            self.feeder = Feeder(Monitor(None, interval=self.interval), self.sanitizer)
            self.host = first_host(None, feed, self.sanitizer)
        self.node_feed = feed

    # -- what a node read from Prometheus offers --------------------------------------------------
    def _pane_order(self) -> list[str]:
        """The panes that describe the node: not Mapping and Driver, which read this machine
        (its CUDA_VISIBLE_DEVICES, NVML library and kernel module) and Prometheus has no
        series for."""
        return [p for p in super()._pane_order() if p not in NOT_FROM_PROMETHEUS]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pane" and parameters and PANES[int(parameters[0])] in NOT_FROM_PROMETHEUS:
            return False  # the pane and its key stay out of sight
        if action in REPLAY_ONLY:
            return False  # a live feed from Prometheus has no speed to change or step to take
        return super().check_action(action, parameters)

    def action_pane(self, k: int) -> None:
        if PANES[k] in NOT_FROM_PROMETHEUS:
            return
        super().action_pane(k)

    def _said(self, text: str) -> str:
        """A message about the node or Prometheus as the screen may show it."""
        if self.names is None:
            return text
        self.names.node_of(self.node_feed.key, self.node_feed.hostname)
        return self.names.text(text.replace(self.node_feed.path, "Prometheus"))

    def on_mount(self) -> None:
        # Textual runs GpuTopApp.on_mount after this one: the layout first, then the feed.
        self.call_after_refresh(self.follow)
        self.set_interval(1.0, self._check_stale, name="stale-check")

    def _check_stale(self) -> None:
        """A node that stopped reporting: the banner says how old its last scrape is (the
        figures and the verdict on screen are that old) until a new scrape arrives."""
        age = self.node_feed.stale_for()
        failure = self._failure
        if age is None:
            if failure is not None and failure.source == "stale":
                self._failure = None
                self._render_banner()
            return
        if failure is None or failure.source == "stale":
            self.post_message(
                CollectorFailed(
                    "stale",
                    f"STALE: the last scrape of this node is {age:.0f} s old (its exporter or "
                    "Prometheus' scrape of it stopped); the figures and the verdict are that old",
                    "check the node's exporter (curl NODE:9400/metrics) and Prometheus' targets "
                    "page; q goes back to the fleet",
                )
            )

    @work(thread=True, exit_on_error=False, exclusive=True, group="collect", name="prometheus")
    def follow(self) -> None:
        cancel = get_current_worker().cancelled_event
        feed = self.node_feed
        feed.cancel = cancel
        try:
            feed.load()  # the step, hence the classifier's tick, comes with the window
            # under --sanitize the view only ever sees the session's pseudonyms
            monitor = Monitor(None, interval=self.interval, tick_s=feed.tick_s)
            monitor.paused = self.paused
            self.feeder = Feeder(monitor, self.sanitizer)
            self._extent()
            for snap in feed.snapshots():  # the window, then each new scrape as it comes
                self._show_scrape(snap)
            feed.follow(lambda new: [self._show_scrape(snap) for snap in new]).run()
        except PrometheusError as e:
            self.post_message(
                CollectorFailed("prometheus", self._said(e.message), self._said(e.next_step))
            )
        except NoFleetData as e:
            self.post_message(
                CollectorFailed("prometheus", self._said(str(e)), "q goes back to the fleet")
            )

    def _show_scrape(self, snap) -> None:
        if self.node_feed.cancel.is_set():
            return
        self.post_message(SnapshotReady(self._named(self.feeder.add(snap))))
        self._extent()

    def _named(self, update: Update) -> Update:
        """Under --sanitize, the node's host shown as its Fleet row names it: a node told
        apart by its instance (several on one host) has that instance's pseudonym."""
        if self.names is None or update.sampled is None:
            return update
        shown = self.names.node_of(self.node_feed.key, self.node_feed.hostname)
        snap = update.snapshot
        if snap.system.hostname == shown:
            return update
        return replace(update, snapshot=replace(snap, system=replace(snap.system, hostname=shown)))

    def _extent(self) -> None:
        count, first, last = self.node_feed.extent()
        self.post_message(ReplayExtent(count, first, last))


def run_fleet_view(
    query: FleetQuery, *, sanitize: bool = False, low_bandwidth: bool = False
) -> int:
    """The Fleet pane until q; Enter opens a node's panes and q there comes back. Without a
    terminal on stdout, print the fleet's table once."""
    watch = FleetWatch(query)
    if not sys.stdout.isatty():
        try:
            fv = watch.judge()
        except PrometheusError as e:
            print(f"gputop-diag: {e.message}; next: {e.next_step}", file=sys.stderr)
            return EXIT_PROMETHEUS
        except NoFleetData as e:
            print(f"gputop-diag: {e}", file=sys.stderr)
            return EXIT_NO_GPU
        print(render_fleet_text(fv))
        return 0
    state = FleetViewState()
    names = FleetNames(session_key()) if sanitize else None  # the run's key: one pseudonym each
    while True:
        app = FleetApp(watch, state, names=names)
        app.run()
        if app.open_node is None:
            return app.return_code or 0
        key, hostname, shown_as = app.open_node
        host_label = app.open_label
        state.opened.append(key)
        feed = NodeFeed(
            query, key, hostname, shown_as=shown_as if sanitize else None, host_label=host_label
        )
        node = NodeApp(feed, low_bandwidth=low_bandwidth, names=names)
        node.run()
