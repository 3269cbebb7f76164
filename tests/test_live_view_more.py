"""The live view's later fixes: the tree view's launcher row names its user (and that name is
sanitized like every user name), and the other items of the live view's review."""

from __future__ import annotations

import dataclasses
import random
import string

from gputop_diag import sim
from gputop_diag.model import formats
from gputop_diag.monitor.core import Monitor
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.sanitize.snapshot import sanitized_snapshot_json


def _name(rng: random.Random) -> str:
    return rng.choice(string.ascii_lowercase) + "".join(
        rng.choice(string.ascii_lowercase + string.digits) for _ in range(rng.randint(3, 9))
    )


def test_a_launchers_user_is_sanitized_on_every_form():
    snap = Monitor(sim.build("comm-bound")).tick().snapshot
    rng = random.Random(20261203)
    for _ in range(20):
        owner = _name(rng)
        procs = tuple(
            dataclasses.replace(p, parent_user=owner if k % 2 else owner.upper())
            for k, p in enumerate(snap.processes)
        )
        doc = sanitized_snapshot_json(dataclasses.replace(snap, processes=procs))
        shown = [p["parent_user"] for p in doc["processes"]]
        assert all(u.startswith("user-") for u in shown), shown
        assert len(set(shown)) == 1  # one name, one pseudonym, whatever its case
        assert owner not in str(doc).lower()
        clean = Sanitizer().model(dataclasses.replace(snap, processes=procs))
        assert all(p.parent_user.startswith("user-") for p in clean.processes)


# -- the health checks' static parts never hold up a tick ----------------------------------------


def test_a_hung_lspci_does_not_hold_up_the_tick_on_a_wall_clock():
    import threading

    from gputop_diag.monitor.health import HealthWatch
    from gputop_diag.monitor.sampler import Sampler

    src = sim.build("acs-enabled", realtime=True)
    release, entered = threading.Event(), threading.Event()
    inner = src.run_command

    def run_command(argv, timeout):
        if argv[0] == "lspci":  # hangs until released, as lspci on a wedged bus does
            entered.set()
            release.wait(30)
        return inner(argv, timeout)

    src.run_command = run_command
    sampler = Sampler(src)
    watch = HealthWatch(src, wait_first=False)  # the live view's
    assert watch.background  # a wall clock: the static read has a thread of its own
    first = watch.poll(sampler.collect())  # returns while lspci is still hung
    assert entered.wait(10) and watch.static_pending()
    checks = {f.check for f in first.findings}
    assert not checks & {"pcie_acs", "pcie_link", "gpu_count", "fabric_manager"}  # not judged
    assert "environment" in checks and "persistence" in checks  # over nothing; the rest is
    assert not any("check failed" in f.title for f in first.findings)
    assert watch.poll(sampler.collect()) is first  # not due yet, nothing new
    release.set()
    assert watch.join_static(10)
    assert watch.due()  # the scan is in: the next tick takes it at once
    second = watch.poll(sampler.collect())
    acs = next(f for f in second.findings if f.id == "pcie.acs")
    assert acs.severity == "warning" and "pci.gpu_count" in {f.id for f in second.findings}
    assert watch.static_reads == 1


def test_on_a_clock_that_jumps_the_static_parts_are_read_where_they_are_due():
    from gputop_diag.monitor.health import HealthWatch
    from gputop_diag.monitor.sampler import Sampler

    src = sim.build("acs-enabled")
    watch = HealthWatch(src)
    assert not watch.background
    report = watch.poll(Sampler(src).collect())
    assert ("pcie.acs", "warning") in {(f.id, f.severity) for f in report.findings}
    assert watch.static_reads == 1 and not watch.static_pending()


def test_a_failing_scan_in_its_thread_is_said_and_tried_again_a_pass_later_not_each_tick():
    from gputop_diag.monitor.health import HEALTH_EVERY_S, HealthWatch
    from gputop_diag.monitor.sampler import Sampler

    src = sim.build("acs-enabled", realtime=True)
    inner = src.procfs
    scans = []

    class Broken:
        def __getattr__(self, name):
            return getattr(inner, name)

        def listdir(self, path):
            if path == "/sys/bus/pci/devices":
                scans.append(path)
                raise RuntimeError("the bus scan broke")  # a reader's bug, not an unreadable file
            return inner.listdir(path)

    src.procfs = Broken()
    sampler, watch = Sampler(src), HealthWatch(src, wait_first=False)
    watch.poll(sampler.collect())
    assert watch.join_static(10) and watch.due()
    said = watch.poll(sampler.collect())  # the failure, said once it is in
    failed = [f for f in said.findings if f.id == "health.check_failed"]
    assert failed and "pci" in failed[0].title and "the bus scan broke" in failed[0].title
    for _ in range(3):  # no new scan tick after tick: the next pass, 30 s on, tries again
        watch.poll(sampler.collect())
    assert watch.join_static(10) and len(scans) == 1 and watch.static_reads == 1
    assert not watch.due()
    assert watch.due(src.clock.now() + HEALTH_EVERY_S)


def test_a_one_shot_commands_first_report_is_whole_and_its_refreshes_are_threaded():
    from gputop_diag.monitor.health import STATIC_EVERY_S, HealthWatch
    from gputop_diag.monitor.sampler import Sampler

    src = sim.build("acs-enabled", realtime=True)
    sampler, watch = Sampler(src), HealthWatch(src)  # diagnose, report, record: wait_first
    first = watch.poll(sampler.collect())
    assert ("pcie.acs", "warning") in {(f.id, f.severity) for f in first.findings}
    assert watch._static_thread is None  # read where it was due
    later = src.clock.now() + STATIC_EVERY_S
    src.clock.start -= STATIC_EVERY_S  # five minutes on, on the wall clock
    assert watch.due(later)
    again = watch.poll(sampler.collect())  # starts the refresh in its thread: the last scan
    assert watch.static_reads == 2 and watch._static_thread is not None
    assert ("pcie.acs", "warning") in {(f.id, f.severity) for f in again.findings}
    scanned = watch._good["pci"]
    assert watch.join_static(10) and watch.due()
    taken = watch.poll(sampler.collect())  # the next tick takes the refreshed scan in
    assert taken is not again and watch._good["pci"] is not scanned
    assert ("pcie.acs", "warning") in {(f.id, f.severity) for f in taken.findings}
    assert watch.static_reads == 2  # and starts none again


def test_a_scan_that_ends_before_the_pass_does_is_never_judged_as_empty_facts():
    from gputop_diag.monitor.health import HealthWatch
    from gputop_diag.monitor.sampler import Sampler

    for scenario in ("gpu-missing-from-nvml", "fabric-manager-down", "acs-enabled"):
        src = sim.build(scenario, realtime=True)
        inner, finished = src.run_command, []

        def run_command(argv, timeout, inner=inner, finished=finished):
            out = inner(argv, timeout)
            finished.append(argv[0])
            return out

        src.run_command = run_command
        sampler, watch = Sampler(src), HealthWatch(src, wait_first=False)
        first = watch.poll(sampler.collect())
        watch.join_static(10)  # ended before, during or after the pass: the same verdict
        assert not any(
            f.check in ("pcie_acs", "pcie_aer") or f.id.startswith(("pci.", "fabric."))
            for f in first.findings
        ), (scenario, [f.id for f in first.findings])
        second = watch.poll(sampler.collect())
        assert any(f.id.startswith("pci.") for f in second.findings), scenario


def test_a_failed_fabric_manager_read_is_never_followed_by_a_false_ok(monkeypatch):
    from gputop_diag.monitor import health as H
    from gputop_diag.monitor.sampler import Sampler

    src = sim.build("fabric-manager-down", realtime=True)
    real, calls = H.read_fabric_manager, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("systemctl broke")
        return real(*a, **k)

    monkeypatch.setattr(H, "read_fabric_manager", flaky)
    sampler, watch = Sampler(src), H.HealthWatch(src, wait_first=False)
    said = []
    for step in range(6):
        watch.join_static(10)
        if step in (2, 4):
            src.clock.start -= H.HEALTH_EVERY_S + 1  # the next pass is due
        said.append({(f.id, f.severity) for f in watch.poll(sampler.collect()).findings})
    fm = [{x for x in s if x[0].startswith("fabric.")} for s in said]
    assert ("fabric.manager", "ok") not in set().union(*fm)  # never a false "ok"
    assert any(x[0] == "health.check_failed" for s in said for x in s)  # the failure said
    assert any(sev == "critical" for s in fm for _, sev in s)  # then the real finding


# -- a named cause's checks ------------------------------------------------------------------


def test_loader_workers_stuck_on_a_mount_get_the_storage_check_not_more_workers():
    m = Monitor(sim.build("dataloader-d-state"))
    m.run_for(30)
    d = m.last.diagnosis
    assert d.primary == "input_pipeline"
    assert "stat -f /data" in d.checks[0]
    assert d.checks[1].startswith("Storage:")
    assert not any("num_workers" in c for c in d.checks)  # a new worker blocks on it too
    assert not any(c.startswith("Time the loader alone") for c in d.checks)  # it hangs too
    plain = Monitor(sim.build("input-starved"))  # loaders short of CPU: more workers is right
    plain.run_for(30)
    assert plain.last.diagnosis.primary == "input_pipeline"
    assert plain.last.diagnosis.checks[0].startswith("Raise DataLoader num_workers")


def test_a_hanging_indent_break_at_a_double_space_starts_no_line_with_a_space():
    from rich.text import Text

    from gputop_diag.tui.panes.base import hang_text

    for width in range(12, 30):
        lines = hang_text(Text("   first words  then  more words  after that"), width).plain
        for line in lines.split("\n")[1:]:
            assert line.startswith("   ") and line[3] != " ", (width, lines)
        assert " ".join(lines.split()) == "first words then more words after that"


# -- health --replay ---------------------------------------------------------------------------


def test_health_replays_a_recordings_findings_sanitized_or_not(capsys, tmp_path):
    import json

    from gputop_diag import cli

    path = str(tmp_path / "run.jsonl.gz")
    assert cli.main(["--demo", "dataloader-d-state", "record", "--seconds", "3", "-o", path]) == 0
    capsys.readouterr()
    assert cli.main(["--replay", path, "health", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gputop-diag.health/1" and doc["examined"] is None
    assert doc["recorded"] is True
    stuck = next(x for x in doc["findings"] if x["id"] == "procs.d_state")
    assert stuck["severity"] == "critical" and "fs01:/export" in json.dumps(stuck)
    assert doc["hostname"] == "gpu-node-07"
    assert cli.main(["--replay", path, "health", "--sanitize"]) == 0
    text = capsys.readouterr().out
    assert "CRITICAL" in text and "in state D" in text and "  health (recorded)  " in text
    assert "fs01" not in text and "/export" not in text and "gpu-node-07" not in text
    assert cli.main(["--replay", path, "health", "--pid", "1"]) == 2
    assert "not a recording's" in capsys.readouterr().err


def test_health_replay_of_a_recording_without_a_health_read_says_so(capsys, tmp_path):
    import dataclasses

    from gputop_diag import cli
    from gputop_diag.monitor.core import Monitor
    from gputop_diag.recording.writer import write_recording

    snaps = [dataclasses.replace(Monitor(sim.build("idle")).tick().snapshot, health=None)]
    path = str(tmp_path / "old.jsonl")
    write_recording(path, snaps)
    assert cli.main(["--replay", path, "health"]) == 2
    assert "holds no health read" in capsys.readouterr().err


# -- the host line (nvitop's CPU / MEM / SWP) --------------------------------------------------


def _host(**kw):
    from gputop_diag.model import HostState

    base = dict(
        cpu_count=64, cpu_pct=40.0, iowait_pct=3.0, load_avg=(20.0, 18.0, 15.0),
        mem_total_bytes=512 * 2**30, mem_used_bytes=200 * 2**30,
        swap_total_bytes=8 * 2**30, swap_used_bytes=0,
    )  # fmt: skip
    return HostState(**{**base, **kw})


def test_the_host_line_takes_the_form_that_fits():
    from gputop_diag.tui.panes.memory import host_text

    wide = host_text(_host(), 200)
    assert wide.startswith("  HOST  CPU ████░░░░░░ 40% iowait 3%  MEM ████░░░░░░ 200G/512G")
    assert "SWP ░░░░░░░░░░ 0M/8.0G  load 20.0/64" in wide
    for width in range(20, 200):
        line = host_text(_host(), width)
        assert len(line) <= width
        if width >= 44:
            assert "CPU 40%" in line or "40% iowait" in line
    assert host_text(_host(), 60) == "  HOST  CPU 40% iowait 3%  MEM 200G/512G  SWP 0M/8.0G"
    assert "#" in host_text(_host(), 200, plain=True) and "█" not in host_text(_host(), 200, True)
    assert "SWP none" in host_text(_host(swap_total_bytes=0), 120)
    assert "MEM n/a" in host_text(_host(mem_total_bytes=None, mem_used_bytes=None), 120)
    assert host_text(None, 120) == "  HOST  not read"


def test_the_host_figures_hold_until_they_move_by_a_step():
    from gputop_diag.tui.holds import Holds
    from gputop_diag.tui.panes.memory import held_host

    holds = Holds(max_hold_s=30.0)
    shown = held_host(holds, _host(cpu_pct=40.0), 0.0)
    assert held_host(holds, _host(cpu_pct=42.0), 1.0).cpu_pct == 40.0  # a wobble: held
    assert held_host(holds, _host(cpu_pct=80.0), 2.0).cpu_pct == 80.0  # a move: repainted
    grown = _host(mem_used_bytes=260 * 2**30)
    assert held_host(holds, grown, 3.0).mem_used_bytes == 260 * 2**30
    assert held_host(holds, _host(cpu_pct=80.5), 40.0).cpu_pct == 80.5  # due after 30 s
    assert shown is not None


async def test_the_host_line_follows_the_host_and_gives_way_on_a_short_terminal():
    import dataclasses

    from test_tui_support import FedApp, screen_lines, settled

    from gputop_diag.tui import SnapshotReady

    app = FedApp("input-starved")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        await settled(pilot, lambda: any("HOST  CPU" in line for line in screen_lines(app)))
        host = app.latest.snapshot.host
        line = next(line for line in screen_lines(app) if "HOST  CPU" in line)
        assert f"CPU {host.cpu_pct:.0f}%" in line and f"/{host.cpu_count}" in line
        u = app.feeder.tick()
        calm = dataclasses.replace(host, cpu_pct=3.0, iowait_pct=0.0)
        app.post_message(SnapshotReady(dataclasses.replace(
            u, snapshot=dataclasses.replace(u.snapshot, host=calm)
        )))  # fmt: skip
        await settled(pilot, lambda: any("CPU 3% iowait 0%" in x for x in screen_lines(app)))
        assert any("CPU 3% iowait 0%" in x for x in screen_lines(app))
        await pilot.resize_terminal(80, 24)
        app.feed(1)
        await settled(pilot, lambda: not any("HOST  CPU" in x for x in screen_lines(app)))
        assert not any("HOST  CPU" in x for x in screen_lines(app))  # rows first
        await pilot.resize_terminal(200, 50)
        app.feed(1)
        await settled(pilot, lambda: any("HOST  CPU █" in x for x in screen_lines(app)))
        assert any("HOST  CPU █" in x and "SWP" in x for x in screen_lines(app))


# -- tagging: m tags, U untags, T/K/I ask for every tagged process ----------------------------


async def test_tagged_processes_are_marked_and_a_signal_asks_for_all_of_them():
    from test_tui_support import FedApp, screen_text, settled

    from gputop_diag.tui.process_table import ProcessTable

    app = FedApp("compute-bound")  # eight ranks of alice's, one process of bob's on GPU 0
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(3)
        table = app.query_one("#mem-procs", ProcessTable)
        await settled(pilot, lambda: table.row_count == 9)
        pid_col = list(table.columns).index("pid")
        pids = [int(str(table.get_row_at(r)[pid_col])) for r in range(3)]
        await pilot.press("m", "m", "m")  # each tags its row and moves on, as htop's Space
        await settled(pilot, lambda: "3 tagged" in screen_text(app))
        assert table.cursor_row == 3
        marks = [str(table.get_row_at(r)[0]) for r in range(4)]
        assert [m.endswith("*") for m in marks] == [True, True, True, False]
        await pilot.press("up", "m")  # again: untagged
        await settled(pilot, lambda: "2 tagged" in screen_text(app))
        owners = {p.pid: p.user for p in app.latest.snapshot.processes}
        theirs = [p for p in pids[:2] if owners[p] != "alice"]
        await pilot.press("K")
        await settled(pilot, lambda: "tagged process" in app.screen.text)
        text = app.screen.text
        mine = [p for p in pids[:2] if owners[p] == "alice"]
        tagged = formats.count(len(mine), "tagged process", "tagged processes")
        assert f"Send SIGKILL to {tagged}?" in text
        assert all(f"pid {p} (" in text for p in pids[:2]) and f"pid {pids[2]} (" not in text
        if theirs:  # bob's: refused, with why
            assert "belongs to bob" in text and "cannot be sent to 1 of them" in text
        await pilot.press("y")
        await pilot.pause()
        machine = app.sim_sources.sim
        assert all(machine.alive(p) is None for p in mine)  # sent to each of them
        assert all(machine.alive(p) is not None for p in theirs)
        app.feed(1)  # the ended ones are untagged; bob's stays tagged
        await settled(pilot, lambda: f"{len(theirs)} tagged" in screen_text(app) or not theirs)
        await pilot.press("U")
        await settled(pilot, lambda: "tagged" not in screen_text(app))
        assert not any(str(table.get_row_at(r)[0]).endswith("*") for r in range(table.row_count))
        await pilot.press("T")  # nothing tagged: the selected process, as before
        await settled(pilot, lambda: "Send SIGTERM to pid" in app.screen.text
                      or "cannot be sent to pid" in app.screen.text)  # fmt: skip
        await pilot.press("n")


async def test_the_keys_for_tagging_are_in_the_help():
    from test_tui_support import FedApp

    app = FedApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("h")
        await pilot.pause()
        text = app.screen.query_one("#help-text").plain
        assert "m / U" in text and "every tagged process" in text


def test_an_input_pipeline_on_a_saturated_host_is_not_told_to_add_workers():
    import dataclasses

    from gputop_diag.diagnose import thresholds as T
    from gputop_diag.diagnose.checks import checks_for
    from gputop_diag.diagnose.features import Features

    f = Features(cpu_count=32, host_cpu_median=T.HOST_CPU_SATURATED_PCT + 5)
    busy = checks_for("input_pipeline", f)
    assert busy[0].startswith("The host's 32 cores are 90 % busy: more DataLoader workers")
    assert not any(c.startswith("Raise DataLoader num_workers") for c in busy)
    spare = checks_for("input_pipeline", dataclasses.replace(f, host_cpu_median=60.0))
    assert spare[0].startswith("Raise DataLoader num_workers")
    assert checks_for("compute", f) == checks_for("compute", dataclasses.replace(f, cpu_count=4))


def test_a_gpu_whose_last_rank_is_killed_in_the_demo_falls_idle():
    import signal

    src = sim.build("compute-bound")
    m = Monitor(src)
    m.run_for(5)
    before = {g.index: g.util_gpu_pct for g in m.last.snapshot.gpus}
    assert before[0] > 90 and before[1] > 90
    rank0 = next(p.pid for p in m.last.snapshot.gpu_processes if p.gpu_index == 0 and
                 p.used_memory_bytes and p.used_memory_bytes > 2**34)  # fmt: skip
    sent, said = src.send_signal(rank0, signal.SIGTERM)
    assert sent, said
    m.run_for(5)
    after = m.last.snapshot.gpus
    assert after[0].util_gpu_pct < 10 and after[1].util_gpu_pct > 90
    assert after[0].power_w < 0.5 * after[1].power_w  # its power falls with it


def test_a_broken_driver_chain_is_not_asked_about_again_in_the_checks():
    from gputop_diag.diagnose.render import shown_checks

    broken = Monitor(sim.build("driver-mismatch"))
    broken.run_for(10)
    d = broken.last.diagnosis
    assert any(c.startswith("Driver and runtime agree?") for c in d.checks)  # the class's own
    assert not any(c.startswith("Driver and runtime agree?") for c in shown_checks(d))
    idle = Monitor(sim.build("idle"))
    idle.run_for(10)
    assert any(c.startswith("Driver and runtime agree?") for c in shown_checks(idle.last.diagnosis))
