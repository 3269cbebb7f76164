"""Build the live view with collectors off and feed it simulated ticks, deterministically."""

from __future__ import annotations

from gputop_diag import sim
from gputop_diag.sampler import Sampler
from gputop_diag.tui import GpuTopApp
from gputop_diag.tui.app import SnapshotReady
from gputop_diag.tui.feed import Feeder


class FedApp(GpuTopApp):
    """The real app, with the collector thread replaced by ticks we push ourselves."""

    def __init__(self, scenario: str = "compute-bound", **kw) -> None:
        self.sim_sources = sim.build(scenario)
        super().__init__(self.sim_sources, start_collectors=False, **kw)
        self.test_feeder = Feeder(Sampler(self.sim_sources, interval=1.0))

    def feed(self, seconds: int = 1) -> None:
        """Advance simulated time and post the last tick, as the collector thread would."""
        update = None
        for _ in range(seconds):
            update = self.test_feeder.tick()
            self.sim_sources.clock.sleep(1.0)
        self.post_message(SnapshotReady(update))
