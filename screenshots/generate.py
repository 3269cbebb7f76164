"""Regenerate the screenshots: one SVG per pane for a few scenarios.

    python screenshots/generate.py

Each scenario is simulated (instant time, fixed seed) for a while, then every pane is saved as
`screenshots/<scenario>-<pane>.svg` at 120x40, plus the 80x24 layout of the first pane.
"""

from __future__ import annotations

import asyncio
import pathlib

from gputop_diag import sim
from gputop_diag.sampler import Sampler
from gputop_diag.tui import GpuTopApp
from gputop_diag.tui.app import PANES, SnapshotReady
from gputop_diag.tui.feed import Feeder

HERE = pathlib.Path(__file__).resolve().parent
SCENARIOS = {
    "compute-bound": 60,
    "input-starved": 60,
    "sync-stall": 60,
    "comm-bound": 60,
    "xid-79": 100,
    "mig": 30,
    "scheduler-wait": 30,
}


async def shoot(scenario: str, seconds: int) -> list[str]:
    sources = sim.build(scenario)
    feeder = Feeder(Sampler(sources, interval=1.0))
    update = None
    for _ in range(seconds):
        update = feeder.tick()
        sources.clock.sleep(1.0)
    written = []
    for size, panes in (((120, 40), PANES[:5]), ((80, 24), PANES[:1])):
        app = GpuTopApp(sources, start_collectors=False)
        async with app.run_test(size=size) as pilot:
            for k, pane in enumerate(PANES):
                if pane not in panes:
                    continue
                await pilot.press(str(k + 1))
                app.post_message(SnapshotReady(update))
                await pilot.pause()
                suffix = "" if size == (120, 40) else "-80x24"
                name = f"{scenario}-{pane}{suffix}.svg"
                app.save_screenshot(name, path=str(HERE))
                written.append(name)
    return written


async def main() -> None:
    for scenario, seconds in SCENARIOS.items():
        names = await shoot(scenario, seconds)
        print(f"{scenario}: {', '.join(names)}")


if __name__ == "__main__":
    asyncio.run(main())
