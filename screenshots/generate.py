"""Regenerate the screenshots: one SVG per pane for a few scenarios.

    python screenshots/generate.py

Each scenario is simulated (instant time, fixed seed) for a while, then every pane is saved as
`screenshots/<scenario>-<pane>.svg` at 120x40, plus the 80x24 and 200x50 layouts of the first
two panes.
"""

from __future__ import annotations

import asyncio
import pathlib

from gputop_diag import sim
from gputop_diag.tui import GpuTopApp, SnapshotReady
from gputop_diag.tui.keys import PANES

HERE = pathlib.Path(__file__).resolve().parent
SCENARIOS = {  # scenario -> simulated seconds before the shot
    "compute-bound": 60,
    "input-starved": 60,
    "xid-79": 100,
    "sync-stall": 60,
    "comm-bound": 60,
    "memory-leak": 120,
    "thermal-throttle": 60,
    "mig": 30,
    "no-gpu": 10,
}
SHOTS = (
    ((120, 40), PANES[:5], ""),
    ((80, 24), PANES[:2], "-80x24"),
    ((200, 50), PANES[:2], "-200x50"),
)


async def shoot(scenario: str, seconds: int) -> list[str]:
    written = []
    for size, panes, suffix in SHOTS:
        # the app's own Monitor ticks the simulated machine, as its collector thread would
        sources = sim.build(scenario)
        app = GpuTopApp(sources, start_collectors=False)
        update = app.feeder.tick()
        for _ in range(seconds):
            sources.clock.sleep(1.0)
            update = app.feeder.tick()
        app.monitor.xid_history(wait=30)  # the kernel log before the run, as the Xid pane shows
        update = app.feeder.with_xid_history(update)
        async with app.run_test(size=size) as pilot:
            for pane in panes:
                await pilot.press(str(PANES.index(pane) + 1))
                app.post_message(SnapshotReady(update))
                await pilot.pause()
                name = f"{scenario}-{pane}{suffix}.svg"
                app.save_screenshot(name, path=str(HERE))
                written.append(name)
    return written


async def main() -> None:
    for old in HERE.glob("*.svg"):
        old.unlink()
    for scenario, seconds in SCENARIOS.items():
        names = await shoot(scenario, seconds)
        print(f"{scenario}: {', '.join(names)}")


if __name__ == "__main__":
    asyncio.run(main())
