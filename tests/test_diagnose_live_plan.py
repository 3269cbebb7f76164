"""The live view's diagnosis carries the plan of `--model-config` (`Monitor(plan=...)`): a
capacity verdict's checks are the plan's terms and what-ifs, as `diagnose --model-config` prints
them; without the option they stay the advice read from the job's command line."""

from __future__ import annotations

from pathlib import Path

from gputop_diag import sim
from gputop_diag.collect.model_config import read_config_file
from gputop_diag.monitor.core import Monitor
from gputop_diag.monitor.view import Feeder

CONFIG = Path(__file__).resolve().parent / "data" / "configs" / "llama-3-8b.json"
PLANNED = "Where the memory goes (training, llama 8.03 B parameters"


def _checks(feeder: Feeder, ticks: int = 8) -> tuple[str, ...]:
    u = None
    for _ in range(ticks):
        u = feeder.tick()
        feeder.monitor.sources.clock.sleep(1.0)
    assert u is not None and u.diagnosis is not None and u.diagnosis.primary == "capacity"
    return u.diagnosis.checks


def test_the_monitor_puts_the_plan_of_model_config_in_capacity_s_checks():
    plain = _checks(Feeder(Monitor(sim.build("capacity"), live=True)))
    assert not any(c.startswith(PLANNED) for c in plain)
    assert any(c.startswith("Plan this job's model: gputop-diag memory --config") for c in plain)
    plan = read_config_file(str(CONFIG)).read
    planned = _checks(Feeder(Monitor(sim.build("capacity"), live=True, plan=plan)))
    assert planned[0].startswith("The config does not look like the running job's model")
    assert planned[1].startswith(PLANNED)
    assert not any(c.startswith("Plan this job's model:") for c in planned)


def test_the_live_view_hands_its_model_config_to_the_monitor():
    from gputop_diag.tui import GpuTopApp

    config = read_config_file(str(CONFIG))
    app = GpuTopApp(sim.build("capacity"), start_collectors=False, model_config=config)
    assert app.feeder.monitor.plan is config.read
    assert any(c.startswith(PLANNED) for c in _checks(app.feeder))
    bare = GpuTopApp(sim.build("capacity"), start_collectors=False)
    assert bare.feeder.monitor.plan is None
