"""The panel's headline is the most severe cause: a fault, then a broken driver chain, then
throttling that explains the class, then the class; and the first next step is the lead's own.
Checked on the demo scenarios the way a user meets them, and on built diagnoses."""

from __future__ import annotations

import pytest

from gputop_diag import sim
from gputop_diag.diagnose.types import Alert, Diagnosis, Evidence
from gputop_diag.monitor.core import Monitor
from gputop_diag.tui.side_panel import lead_of, next_step_of, render_full, render_strip

CHAIN = Alert(
    "driver_chain",
    "critical",
    "driver chain broken at the CUDA runtime: pid 7 (python) runtime 13.0 is newer than the "
    "driver supports; next: a driver >= 580.65.06, or a framework build for CUDA <= 12.4. "
    'Users see: "CUDA driver version is insufficient"',
)
HOT = Alert(
    "thermal",
    "warning",
    "thermal slowdown on GPUs 0, 1 in 100% of busy samples; SM clock 58 % of max: check "
    "cooling and airflow",
    0,
)
LOST = Alert("gpu_lost", "critical", "GPU 3 fell off the bus (Xid 79); next: drain the node", 3)
CHECKS = ("Tensor cores in use? enable AMP (torch.autocast)", "Profile the top kernels")
EV = (Evidence("busy", 99.0, 50.0, "GPU busy 99 %", "%"),)


def diag(primary: str, alerts=(), faults=()) -> Diagnosis:
    return Diagnosis(primary, 0.85, evidence=EV, checks=CHECKS, alerts=alerts, faults=faults)


def test_next_steps_are_read_from_the_alert():
    assert next_step_of(CHAIN) == "a driver >= 580.65.06, or a framework build for CUDA <= 12.4"
    assert next_step_of(HOT) == "check cooling and airflow"
    lost = Alert("gpu_lost", "critical", "GPU 3 is lost (fell off the bus): drain the node", 3)
    assert next_step_of(lost) == "drain the node"
    assert next_step_of(Alert("ecc", "warning", "volatile ECC errors rising")) is None


@pytest.mark.parametrize(
    ("d", "label"),
    [
        (diag("compute", alerts=(HOT, CHAIN), faults=(LOST,)), "FAULT"),
        (diag("idle", alerts=(HOT, CHAIN)), "DRIVER CHAIN"),
        (diag("compute", alerts=(HOT,)), "THROTTLED"),
        (diag("bandwidth", alerts=(HOT,)), "THROTTLED"),
        # throttling does not explain an input-bound job: the class leads
        (diag("input_pipeline", alerts=(HOT,)), None),
        (diag("compute"), None),
        # a warning about the driver chain is not a broken chain
        (diag("idle", alerts=(Alert("driver_chain", "warning", "libcuda from compat"),)), None),
    ],
)
def test_the_lead_is_the_most_severe_cause(d, label):
    lead = lead_of(d)
    assert (lead.label if lead else None) == label


@pytest.mark.parametrize("width", [40, 60])
def test_full_panel_leads_with_the_cause_and_its_step(width):
    text = render_full(diag("idle", alerts=(CHAIN,)), width=width).plain
    lines = text.splitlines()
    assert lines[1].strip() == "DRIVER CHAIN"
    assert text.index("driver chain broken") < text.index("IDLE")
    check1 = next(line for line in lines if line.startswith("1. "))
    assert "580.65.06" in check1 or "580.65.06" in lines[lines.index(check1) + 1]
    assert "2. Tensor cores" in text  # the class's checks follow
    assert text.count("driver chain broken") == 1  # not repeated under ALERTS


@pytest.mark.parametrize("lines", [3, 5, 6])
def test_strip_leads_with_the_cause_at_every_height(lines):
    d = diag("compute", alerts=(HOT,))
    out = render_strip(d, lines=lines).plain.splitlines()
    assert len(out) <= lines
    assert out[0].startswith("THROTTLED thermal slowdown")
    assert "COMPUTE" in out[1]
    assert any(line == "next: check cooling and airflow" for line in out)
    assert not any("enable AMP" in line for line in out[:3])


@pytest.mark.parametrize(
    ("scenario", "seconds", "label", "step"),
    [
        ("driver-mismatch", 12, "DRIVER CHAIN", "driver"),
        ("thermal-throttle", 12, "THROTTLED", "cooling"),
        ("no-gpu", 8, "NO GPU DATA", "install the NVIDIA driver"),
    ],
)
def test_demo_scenarios_lead_with_their_cause(scenario, seconds, label, step):
    src = sim.build(scenario)
    m = Monitor(src, interval=1.0)
    try:
        for _ in range(seconds):
            m.tick()
            src.clock.sleep(1.0)
        _, d = m.window()
    finally:
        m.close()
    lead = lead_of(d)
    assert lead is not None and lead.label == label, (d.primary, d.alerts)
    strip = render_strip(d, lines=3).plain.splitlines()
    assert strip[0].startswith(label)
    assert step in strip[-1] and strip[-1].startswith("next: ")


def test_without_a_driver_the_panel_says_so_instead_of_waiting():
    src = sim.build("no-gpu")
    m = Monitor(src, interval=1.0)
    try:
        for _ in range(8):
            m.tick()
            src.clock.sleep(1.0)
        _, d = m.window()
    finally:
        m.close()
    full = render_full(d, width=50).plain
    assert "NO GPU DATA" in full and "no NVIDIA driver" in full
    assert "nothing to judge" in full and "no verdict yet" not in full
    assert "1. install the NVIDIA driver" in full
    assert "WHY NOT" not in full and "\nnone\n" not in full  # not "alerts: none"


def test_a_second_fault_on_the_same_gpu_is_named_not_repeated():
    xid = Alert(
        "xid",
        "critical",
        "Xid 79 (FALLEN_OFF_BUS) on GPU 3: the GPU stopped answering; drain the node",
        3,
    )
    other = Alert("xid", "critical", "Xid 48 on GPU 5: double-bit ECC; drain the node", 5)
    text = render_full(diag("compute", faults=(LOST, xid, other)), width=80).plain
    assert "FAULT  also Xid 79 (FALLEN_OFF_BUS) on GPU 3\n" in text
    assert text.count("the GPU stopped answering") == 0  # said once, by the first fault
    assert "FAULT  Xid 48 on GPU 5: double-bit ECC" in text  # another GPU: in full
