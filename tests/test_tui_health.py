"""The Health section of the Driver pane (pane 5): the fabric manager as a layer of the driver
chain, the health findings that are not ok worst first with their evidence, where it was read,
the class they bear on and a next step that pastes as one command; its words readable without
colour, its text through the sanitizer under --sanitize."""

from __future__ import annotations

import re
from dataclasses import replace

from test_tui_support import FedApp, screen_text, settled

from gputop_diag import sim
from gputop_diag.model.health import Finding, HealthEvidence
from gputop_diag.monitor.core import Monitor
from gputop_diag.monitor.view import Feeder, Update
from gputop_diag.tui import SnapshotReady
from gputop_diag.tui.panes.base import View
from gputop_diag.tui.panes.driver import render
from gputop_diag.widgets import DiffText


def pane_text(app) -> str:
    return app.query_one("#driver-text", DiffText).plain


def health_part(text: str) -> str:
    return text[text.index("Health (read") :]


def unwrapped_steps(text: str) -> list[str]:
    """Each health next step as a shell reads it pasted: ` \\` and the newline after it join
    lines, and a comment's own lines (`# …`) after them are one comment again."""
    lines = health_part(text).splitlines()
    steps = []
    for k, line in enumerate(lines):
        if not line.lstrip().startswith("next: "):
            continue
        parts = [line.split("next: ", 1)[1]]
        j = k + 1
        while parts[-1].endswith(" \\"):
            parts[-1] = parts[-1].removesuffix(" \\")
            parts.append(lines[j].strip())
            j += 1
        command, _, comment = " ".join(parts).partition("  # ")
        comments = [comment] if comment else []
        while j < len(lines) and lines[j].lstrip().startswith("# "):
            comments.append(lines[j].strip().removeprefix("# "))
            j += 1
        steps.append(command + ("  # " + " ".join(comments) if comments else ""))
    return steps


async def test_fabric_manager_down_breaks_the_chain_and_lists_the_critical_findings(monkeypatch):
    """Under NO_COLOR the broken layer and the severities are words on the screen; resized to
    80x24 and 40x12 in between, each next step is on one line or goes on with ` \\`, no word
    of it broken, and no line is wider than the pane."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = FedApp("fabric-manager-down")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(1)
        await pilot.press("5")
        assert await settled(pilot, lambda: "Health (read" in pane_text(app))
        text = pane_text(app)
        lines = text.splitlines()
        # the layer sits between the kernel module and NVML, broken
        order = [next(k for k, x in enumerate(lines) if x.startswith(w)) for w in LAYERS]
        assert order == sorted(order)
        row = lines[order[1]]
        assert "BROKEN (error 802)" in row and "the fabric manager is failed" in row
        assert "kernel module → fabric manager → user-space library" in text
        assert "! fabric manager:" in text and "error 802" in text  # the verdict's problem
        health = health_part(text)
        flat = " ".join(health.split())
        assert "Health (read 10:00:00 UTC, every 30 s)" in health
        assert health.count("CRITICAL") == 3
        # worst first: the three critical findings before the info ones
        assert health.index("INFO") > health.rindex("CRITICAL")
        assert "fabric manager 570.86.15 is not the driver's version 570.124.06" in flat
        assert "driver 570.124.06 (nvmlSystemGetDriverVersion)" in flat  # where it was read
        assert "bears on: communication; driver-chain layer: fabric manager" in flat
        assert re.search(r"\b8 checks ok: env\.ok, .*ib\.peermem$", flat)
        steps = [f.next_step for f in app.latest.snapshot.health.findings if f.severity != "ok"]
        assert unwrapped_steps(text) == steps
        assert "BROKEN (error 802)" in screen_text(app)
        for size in ((80, 24), (40, 12)):
            await pilot.resize_terminal(*size)
            app.feed(1)
            await pilot.pause()
            pane = app.query_one("#driver")
            width = pane.scrollable_content_region.width
            assert await settled(
                pilot, lambda w=width: max(map(len, pane_text(app).splitlines())) <= w
            ), size
            text = pane_text(app)
            # no word broken or lost; a comment that did not fit is on lines of its own
            assert unwrapped_steps(text) == steps, size
            # the words a person reads without colour, on the screen
            lines = text.splitlines()
            first = lines.index(next(x for x in lines if x.startswith("CRITICAL")))
            pane.scroll_to(y=first, animate=False)
            assert await settled(pilot, lambda: "CRITICAL" in screen_text(app)), size


LAYERS = ("kernel module", "fabric manager", "NVML library")


async def test_launch_blocking_shows_the_warning_with_the_pid_and_where_it_was_read():
    app = FedApp("launch-blocking")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(1)
        await pilot.press("5")
        assert await settled(pilot, lambda: "WARNING" in pane_text(app))
        health = health_part(pane_text(app))
        assert "WARNING   CUDA_LAUNCH_BLOCKING=1 in a GPU job's environment" in health
        flat = " ".join(health.split())
        assert "in pid 41200's environment (GPU 0) (/proc/41200/environ)" in flat
        assert "bears on: synchronization" in health
        assert "unset CUDA_LAUNCH_BLOCKING" in health
        # no NVSwitch trouble: the fabric manager's row is there and ok
        row = next(x for x in pane_text(app).splitlines() if x.startswith("fabric manager"))
        assert " ok " in row
        assert "fabric manager" in screen_text(app) and "WARNING" in screen_text(app)


async def test_a_health_read_that_came_while_the_pane_was_hidden_shows_when_it_is_shown():
    app = FedApp("launch-blocking")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(1)
        await pilot.press("5")
        assert await settled(pilot, lambda: "read 10:00:00 UTC" in pane_text(app))
        await pilot.press("1")
        app.sources.clock.sleep(29)  # the next read: 30 simulated seconds after the first
        app.feed(1)
        await pilot.pause()
        assert app.latest.snapshot.health.facts.timestamp == 1768471230.0
        await pilot.press("5")
        assert await settled(pilot, lambda: "read 10:00:30 UTC" in pane_text(app))
        assert "read 10:00:00" not in pane_text(app)


SECRET_PATH = "/home/alice/proj-orion/shards"
PLANTED = Finding(
    "procs.d_state",
    "critical",
    f"1 process of GPU jobs stuck in uninterruptible I/O wait on {SECRET_PATH}",
    (
        HealthEvidence(
            f"pid 41328 has {SECRET_PATH}/part-0007.tar open (nfs4 from fs-orion:/export, fd 3)",
            "/proc/41328/fdinfo, /proc/41328/mountinfo",
        ),
    ),
    f"timeout 5 stat -f {SECRET_PATH} >/dev/null && echo answers",
    ("input_pipeline",),
    "processes",
    pids=(41328,),
)


async def test_under_sanitize_a_path_in_a_findings_evidence_does_not_survive():
    app = FedApp("launch-blocking", sanitize=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(1)
        await pilot.press("5")
        await pilot.pause()
        sampled = app.latest.sampled  # what was read, before the screen's sanitizer
        health = replace(sampled.health, findings=(PLANTED, *sampled.health.findings))
        app.post_message(SnapshotReady(app.feeder.add(replace(sampled, health=health))))
        assert await settled(pilot, lambda: "uninterruptible" in pane_text(app))
        text = " ".join(pane_text(app).split())
        assert "CRITICAL" in text and "(/proc/41328/fdinfo, /proc/41328/mountinfo)" in text
        for secret in ("/home/alice", "proj-orion", "part-0007", "alice", "fs-orion"):
            assert secret not in text, secret  # the path, the mount's server
            assert secret not in screen_text(app), secret


def _update(scenario: str, **changes) -> Update:
    u = Feeder(Monitor(sim.build(scenario), interval=1.0)).tick()
    return replace(u, snapshot=replace(u.snapshot, health=None), **changes)


def test_before_the_first_read_and_in_a_recording_without_it_the_section_says_why():
    u = _update("launch-blocking")
    live = render(u, View(), 74).plain
    assert "Health: not read yet (every 30 s)" in live
    assert "fabric manager" not in live  # the layer comes from the health read
    replayed = render(replace(u, replaying=True), View(), 74).plain
    assert "Health: not in this recording" in replayed and "not read yet" not in replayed
