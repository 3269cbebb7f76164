"""Build the live view with the collectors off and feed it simulated ticks, deterministically.

Not a test module of its own: the TUI tests import `FedApp` from here.
"""

from __future__ import annotations

from gputop_diag import sim
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.tui import GpuTopApp, SnapshotReady


class FedApp(GpuTopApp):
    """The real app, with the collector thread replaced by ticks we post ourselves."""

    def __init__(self, scenario: str = "compute-bound", **kw) -> None:
        self.sim_sources = sim.build(scenario)
        super().__init__(self.sim_sources, start_collectors=False, **kw)
        self.test_sampler = Sampler(self.sim_sources, interval=1.0)

    def feed(self, seconds: int = 1) -> None:
        """Advance simulated time one second at a time and post each tick's snapshot, as
        the collector thread would (the app derives its history and diagnosis from them)."""
        for _ in range(seconds):
            snap = self.test_sampler.sample()
            self.sim_sources.clock.sleep(1.0)
            self.post_message(SnapshotReady(snap))


def screen_lines(app) -> list[str]:
    """The screen as the terminal shows it, one string per row (what a person reads: a widget
    whose region is too narrow for its text shows the cut text here, not in its `plain`)."""
    import io

    from rich.console import Console

    console = Console(
        width=app.size.width,
        height=app.size.height,
        file=io.StringIO(),
        record=True,
        color_system=None,
        legacy_windows=False,
    )
    # The compositor's full frame: the same strips Textual writes to the terminal.
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text(styles=False).splitlines()


def screen_text(app) -> str:
    return "\n".join(screen_lines(app))
