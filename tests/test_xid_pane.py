"""The Xid pane with the app's own Monitor: the kernel log before the run, the triage under the
table, plain kernel text, and --sanitize."""

from __future__ import annotations

from gputop_diag import sim
from gputop_diag.monitor.core import Monitor
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.tui import GpuTopApp, SnapshotReady
from gputop_diag.tui.feed import Feeder


class MonitoredApp(GpuTopApp):
    """The real app with a Monitor of its own (as the collector thread has), fed by hand."""

    def __init__(self, scenario: str, **kw) -> None:
        self.sim_sources = sim.build(scenario)
        super().__init__(self.sim_sources, start_collectors=False, **kw)
        self.feeder = Feeder(Monitor(self.sim_sources))
        self._sampler = Sampler(self.sim_sources, interval=1.0)

    def feed(self, seconds: int) -> None:
        for _ in range(seconds):
            snap = self._sampler.sample()
            self.sim_sources.clock.sleep(1.0)
            self.post_message(SnapshotReady(snap, self.feeder.add(snap)))


def text_of(app, selector: str) -> str:
    return app.query_one(selector).plain


def with_history(app: MonitoredApp) -> None:
    """Lines the kernel logged hours before the run: a memory error, then a failed remap,
    with kernel text that looks like markup."""
    src = app.sim_sources
    gpu1 = src.sim.gpus[1]
    start = src.clock.now()
    for dt, text in (
        (
            -7200.0,
            f"NVRM: Xid (PCI:{gpu1.xid_pci}): 48, pid=4242, name=secret_proj, "
            "DBE [bold]at[/bold] partition 6",
        ),
        (
            -7199.0,
            f"NVRM: Xid (PCI:{gpu1.xid_pci}): 64, pid='<unknown>', name=<unknown>, "
            "Row remapping failed",
        ),
    ):
        src.sim.kernel_lines.append((start + dt, text))
    src.sim.kernel_lines.sort(key=lambda x: x[0])


async def test_the_pane_shows_the_log_before_the_run_and_the_triage():
    app = MonitoredApp("compute-bound")
    with_history(app)
    async with app.run_test(size=(140, 50)) as pilot:
        await pilot.press("4")
        app.feed(2)  # the first show starts the background read
        await pilot.pause()
        app.feeder.monitor.xid_history(wait=10)
        app.feed(1)
        await pilot.pause()
        table = app.query_one("#xid-table")
        rows = [[str(c) for c in table.get_row_at(k)] for k in range(table.row_count)]
        assert [r[2:5] for r in rows] == [["1", "64", "ROW_REMAP_FAILURE"], ["1", "48", "ECC_DBE"]]
        triage = text_of(app, "#xid-triage")
        assert "Kernel log read (journal), 2 driver event(s)" in triage
        assert "Xid 48 ECC_DBE → Xid 64 ROW_REMAP_FAILURE on GPU 1" in triage
        assert triage.index("ask:") < triage.index("Then:")
        await pilot.press("down")
        await pilot.pause()
        detail = text_of(app, "#xid-detail")
        assert "Xid 48 ECC_DBE on GPU 1 (critical)" in detail
        assert "next: Did the driver retire or remap the page" in detail
        assert "DBE [bold]at[/bold] partition 6" in detail  # plain text, not markup
        assert "secret_proj" in detail


async def test_sanitize_hides_kernel_text_and_process_names():
    app = MonitoredApp("compute-bound", sanitize=True)
    with_history(app)
    async with app.run_test(size=(140, 50)) as pilot:
        await pilot.press("4")
        app.feed(1)
        app.feeder.monitor.xid_history(wait=10)
        app.feed(1)
        await pilot.pause()
        await pilot.press("down")
        await pilot.pause()
        shown = text_of(app, "#xid-detail") + text_of(app, "#xid-triage")
        assert "Xid 48 ECC_DBE" in shown and "(hidden under --sanitize)" in shown
        for secret in ("secret_proj", "partition 6", app.sim_sources.sim.gpus[1].uuid):
            assert secret not in shown


async def test_a_replay_says_the_log_before_it_is_not_read():
    app = MonitoredApp("xid-79")
    app.feeder = Feeder(Monitor(None))
    live = Feeder(Monitor(app.sim_sources))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        for _ in range(100):
            snap = live.add(app._sampler.sample()).snapshot  # recorded with its evidence
            app.sim_sources.clock.sleep(1.0)
            app.post_message(SnapshotReady(snap, app.feeder.add(snap)))
        await pilot.pause()
        assert "a recording holds the Xid events it recorded" in text_of(app, "#xid-triage")
        assert "Xid 79 FALLEN_OFF_BUS on GPU 3" in text_of(app, "#xid-triage")
