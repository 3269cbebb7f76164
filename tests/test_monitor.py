"""The one Monitor: what a tick does, how often the slow sources are asked, failures, threads."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from gputop_diag import sim
from gputop_diag.monitor import core as monitor_module
from gputop_diag.monitor.core import SLOW_SOURCES_EVERY_S, Monitor, run
from gputop_diag.sources import CommandResult


def counting_commands(sources):
    """Wrap the simulator's command runner and count the squeue and journalctl calls."""
    calls = {"squeue": 0, "journalctl": 0}
    real = sources.run_command

    def run_command(argv, timeout):
        if argv[0] in calls:
            calls[argv[0]] += 1
        return real(argv, timeout)

    sources.run_command = run_command
    return calls


def test_a_tick_carries_the_slow_sources_into_the_history():
    m = Monitor(sim.build("scheduler-wait"))
    t = m.tick()
    assert t.count == 1 and m.history.latest is t.snapshot  # attached before the history
    assert t.snapshot.slow_sources_at == t.snapshot.timestamp
    assert [(j.job_id, j.pending) for j in t.snapshot.scheduler_jobs] == [("48213", True)]
    assert t.snapshot.kernel_ooms == ()  # asked, nothing found: not None
    assert t.diagnosis is m.diagnosis


def test_slow_sources_are_asked_every_ten_seconds_not_every_tick():
    sources = sim.build("capacity")
    calls = counting_commands(sources)
    m = Monitor(sources, interval=1.0)
    m.run_for(40)
    assert m.ticks == 41
    assert calls == {"squeue": 5, "journalctl": 5}  # at 0, 10, 20, 30 and 40 s
    stamps = [s.slow_sources_at - s.timestamp for s in m.history.snapshots()]
    assert all(-SLOW_SOURCES_EVERY_S < d <= 0 for d in stamps)
    # the OOM kill at 40 s reaches the snapshot (and the verdict) on the 40 s query
    assert m.last.snapshot.kernel_ooms and m.last.snapshot.kernel_ooms[0].process_name
    assert any(a.kind.endswith("oom") for a in m.last.diagnosis.alerts)


def test_failing_slow_sources_never_stop_the_ticks(monkeypatch):
    sources = sim.build("scheduler-wait")
    m = Monitor(sources)
    first = m.tick()
    assert first.snapshot.scheduler_jobs

    def broken(argv, timeout):
        raise OSError("squeue hung")

    sources.run_command = broken  # the collectors' own guard: an empty answer
    for _ in range(12):
        sources.clock.sleep(1.0)
        m.tick()
    assert m.ticks == 13 and m.last.snapshot.scheduler_jobs == ()

    def explode(sources):
        raise RuntimeError("parser bug")

    monkeypatch.setattr(monitor_module, "collect_scheduler_evidence", explode)
    sources.run_command = lambda argv, timeout: CommandResult(0, "")
    for _ in range(11):
        sources.clock.sleep(1.0)
        t = m.tick()
    assert m.ticks == 24
    errors = [e for e in t.snapshot.errors if e.source == "slurm"]
    assert errors and "parser bug" in errors[0].message  # said, not swallowed
    assert t.snapshot.scheduler_jobs == ()  # the last answer stands


def test_a_replaying_monitor_asks_nothing_and_judges_the_same():
    sources = sim.build("scheduler-wait")
    live = Monitor(sources)
    verdicts, snaps = [], []
    for k in range(25):
        if k:
            sources.clock.sleep(1.0)
        t = live.tick()
        snaps.append(t.snapshot)
        verdicts.append(t.diagnosis)
    replay = Monitor(None)
    assert replay.replaying
    replayed = [replay.feed(s).diagnosis for s in snaps]
    assert replayed == verdicts
    assert replay.last.snapshot is snaps[-1]  # used as recorded
    with pytest.raises(RuntimeError):
        replay.tick()


def test_a_bare_snapshot_fed_in_gets_the_slow_sources_a_recorded_one_keeps_its_own():
    sources = sim.build("scheduler-wait")
    calls = counting_commands(sources)
    made_elsewhere = Monitor(sources).sampler.collect()
    fed = Monitor(sources)
    t = fed.feed(made_elsewhere)
    assert t.snapshot.scheduler_jobs and calls["squeue"] == 1
    again = Monitor(sources).feed(t.snapshot)  # already carries its evidence
    assert again.snapshot is t.snapshot and calls["squeue"] == 1


def test_one_tick_at_a_time_across_threads():
    m = Monitor(sim.build("compute-bound"))
    errors = []

    def work():
        try:
            for _ in range(15):
                m.tick()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert m.ticks == 60 and len(m.history) == 60 and m.last.count == 60


def test_run_stops_on_ctrl_c_with_what_it_saw():
    seen = []

    def on_tick(t):
        seen.append(t.count)
        if t.count == 5:
            raise KeyboardInterrupt

    m = run(sim.build("idle"), interval=1.0, seconds=30, on_tick=on_tick)
    assert m.interrupted and m.last.count == 5 and seen == [1, 2, 3, 4, 5]

    def at_once(t):
        raise KeyboardInterrupt

    m = run(sim.build("idle"), interval=1.0, seconds=30, on_tick=at_once)
    assert m.interrupted and m.last.count == 1


def test_the_monitor_imports_no_textual():
    code = (
        "import sys, gputop_diag.monitor.core, gputop_diag.recording.store\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the kernel log: Xid lines, access, the log before the run -------------------------------------


def kernel_line(sources, at: float, text: str) -> None:
    """A line the simulated kernel logs at epoch `at` (no NVML event comes with it)."""
    sources.sim.kernel_lines.append((at, text))
    sources.sim.kernel_lines.sort(key=lambda x: x[0])


def test_a_kernel_log_xid_nvml_did_not_report_joins_the_snapshot_and_the_alerts():
    sources = sim.build("compute-bound")
    gpu2 = sources.sim.gpus[2]
    start = sources.clock.now()
    kernel_line(
        sources,
        start + 12.5,
        f"NVRM: Xid (PCI:{gpu2.xid_pci}): 95, pid='<unknown>', "
        "name=<unknown>, Uncontained ECC error",
    )
    m = Monitor(sources)
    m.run_for(25)
    events = [
        (x.xid, x.gpu_index, x.source, x.timestamp)
        for s in m.history.snapshots()
        for x in s.xid_events
    ]
    assert events == [(95, 2, "kernel-log", start + 12.5)]  # once, at the 20 s query
    assert any(a.kind == "xid" and a.code == 95 for a in m.last.diagnosis.alerts)
    assert [g.code for g in m.xid_triage.groups] == [95]
    # the triage names the log that held the line, before and after that log is read whole
    for read in (False, True):
        if read:
            assert m.xid_history(wait=10) is not None
        xids = [(e.code, e.gpu_index, e.sources) for e in m.xid_triage.events if e.kind == "xid"]
        assert xids == [(95, 2, ("journal",))]


def test_an_xid_nvml_reported_is_not_counted_again_from_the_kernel_log():
    m = Monitor(sim.build("xid-79"))
    m.run_for(120)
    events = [(x.xid, x.source) for s in m.history.snapshots() for x in s.xid_events]
    assert events == [(79, "nvml")]
    # one event, and the triage says the journal logged it too
    assert [(e.code, e.sources) for e in m.xid_triage.events if e.kind == "xid"] == [
        (79, ("journal", "nvml"))
    ]


@pytest.mark.parametrize("log_read", ["before the fall", "after the fall", "never"])
def test_the_triage_names_every_source_of_an_xid_whenever_the_log_before_the_run_is_read(
    log_read,
):
    """The live view reads the log before the run when the Xid pane is first shown: before
    GPU 3 falls off the bus (the pane open from the start) or after. Either way, and without
    that read, the fall is one event that NVML reported and the journal logged."""
    m = Monitor(sim.build("xid-79"))
    if log_read == "before the fall":
        m.tick()
        assert m.xid_history(wait=10) is not None
    m.run_for(20 if log_read == "before the fall" else 10)
    assert not [e for e in m.xid_triage.events if e.kind == "xid"]  # GPU 3 falls at ~90 s
    m.run_for(110)
    if log_read == "after the fall":
        assert m.xid_history(wait=10) is not None
    xids = [(e.code, e.gpu_index, e.sources) for e in m.xid_triage.events if e.kind == "xid"]
    assert xids == [(79, 3, ("journal", "nvml"))]
    assert [g.code for g in m.xid_triage.groups] == [79]
    events = [(x.xid, x.source) for s in m.history.snapshots() for x in s.xid_events]
    assert events == [(79, "nvml")]  # counted once


@pytest.mark.parametrize("journal_after_s", [0.0, 0.456, 1.9])
def test_a_line_the_log_before_the_run_merged_from_two_sources_is_one_event_with_the_runs_read(
    journal_after_s,
):
    """A machine with rsyslog: the read of the log before the run finds the Xid in kern.log
    (stamped to the second) and in the journal (to the microsecond) and merges them into one
    event stamped with kern.log's time; the 10-second reads brought the journal's line. One
    event, every source named, no "repeated Xid" made of one line."""
    import math
    import types
    from dataclasses import replace

    from gputop_diag.collect.kernlog.scan import merge
    from gputop_diag.monitor.xid_live import live_triage
    from gputop_diag.xid.events import ParsedLog, parse_lines

    m = Monitor(sim.build("xid-79"))
    m.run_for(130)
    xid_lines = [e for e in m._klog_lines if e.kind == "xid"]
    assert [(e.code, e.source) for e in xid_lines] == [(79, "journal")]
    line = xid_lines[0]
    journal = replace(line, timestamp=math.floor(line.timestamp) + journal_after_s)
    lines = tuple(journal if e is line else e for e in m._klog_lines)
    stamp = time.strftime("%b %d %H:%M:%S", time.localtime(math.floor(line.timestamp)))
    parsed = ParsedLog()
    raw = line.raw.splitlines()[0]
    parse_lines([f"{stamp} gpu-node-07 kernel: {raw}"], "/var/log/kern.log",
                ref_time=line.timestamp + 5, parsed=parsed)  # fmt: skip
    kern_log = [e for e in parsed.events if e.kind == "xid"]
    assert len(kern_log) == 1
    before_run = types.SimpleNamespace(events=tuple(merge([*kern_log, journal])),
                                       module_version=None)  # fmt: skip
    t = live_triage(before_run, m._run_xids(), m.history.snapshots(), m.history.latest, lines)
    xids = [(e.code, e.gpu_index, e.sources) for e in t.events if e.kind == "xid"]
    assert xids == [(79, 3, ("/var/log/kern.log", "journal", "nvml"))]
    assert [(g.code, g.count) for g in t.groups] == [(79, 1)]
    assert not [f for f in t.findings if "repeated" in f.evidence.lower()]


def test_a_kernel_log_nobody_may_read_is_said_with_the_way_in():
    sources = sim.build("idle")
    real = sources.run_command

    def refuse(argv, timeout):
        if argv[0] == "journalctl":
            return CommandResult(
                1, "", "No journal files were opened due to insufficient permissions."
            )
        if argv[0] == "dmesg":
            return CommandResult(1, "", "dmesg: read kernel buffer failed: Operation not permitted")
        return real(argv, timeout)

    sources.run_command = refuse
    t = Monitor(sources).tick()
    (err,) = [e for e in t.snapshot.errors if e.source == "kernel-log"]
    assert "cannot read the kernel log" in err.message and "journal: permission denied" in (
        err.message
    )
    assert "systemd-journal" in err.next_step
    assert t.snapshot.kernel_ooms == ()


def test_the_kernel_log_before_the_run_is_read_in_the_background():
    sources = sim.build("compute-bound")
    gpu1 = sources.sim.gpus[1]
    start = sources.clock.now()
    kernel_line(
        sources,
        start - 3 * 3600,
        f"NVRM: Xid (PCI:{gpu1.xid_pci}): 48, pid='<unknown>', "
        "name=<unknown>, An uncorrectable double bit error",
    )
    kernel_line(
        sources,
        start - 3 * 3600 + 1,
        f"NVRM: Xid (PCI:{gpu1.xid_pci}): 63, pid='<unknown>', name=<unknown>, Row Remapper",
    )
    m = Monitor(sources)
    m.tick()
    assert [x for x in m.last.snapshot.xid_events] == []  # history is not a new event
    assert not m.last.diagnosis.faults
    found = m.xid_history(wait=10)
    assert found is not None and [e.code for e in found.events if e.kind == "xid"] == [48, 63]
    assert {(c.first, c.then) for c in m.xid_triage.chains} >= {
        ("Xid 48 ECC_DBE", "Xid 63 ROW_REMAP_EVENT")
    }
    assert Monitor(None).xid_history() is None  # a replay reads no log


def test_a_feed_that_lags_the_clock_does_not_take_later_kernel_lines_for_new_events():
    """Snapshots made ahead and fed later (the live view's tests do this): the kernel log
    already holds the Xid NVML reports in a later snapshot; it must not arrive twice."""
    sources = sim.build("xid-79")
    sampler = Monitor(sources).sampler
    made = []
    for _ in range(101):
        made.append(sampler.collect())
        sources.clock.sleep(1.0)
    m = Monitor(sources)
    events = [(x.xid, x.source) for s in made for x in m.feed(s).snapshot.xid_events]
    assert events == [(79, "nvml")]


@pytest.mark.parametrize("scenario", ["xid-79", "memory-leak"])
def test_the_series_carried_tick_to_tick_is_the_series_cut_whole(scenario):
    """The live view's histories, carried over from the last tick, are what a cut of the whole
    history makes: past the 240 points kept, across a GPU lost at 90 s (xid-79), with a
    growing GPU's rate (memory-leak), and for another Monitor's history handed to the same
    cutter."""
    from gputop_diag.monitor.series import SeriesCutter

    def cut_series(history, diagnosis, window_s):  # a whole cut: a cutter that holds nothing
        return SeriesCutter().cut(history, diagnosis, window_s)

    m = Monitor(sim.build(scenario))
    cutter = SeriesCutter()
    cuts = []

    def check(tick) -> None:
        got = cutter.cut(m.history, m.diagnosis, 60.0)  # every tick, as the Monitor does
        if tick.count % 4 == 0 or tick.count > 238:
            assert got == cut_series(m.history, m.diagnosis, 60.0), tick.count
        cuts.append(got)

    m.run_for(245, check)
    assert len(cuts[-1].host_cpu) == 240 and len(cuts[0].host_cpu) == 1
    lost = [g for g in cuts[-1].gpus.values() if g.util[-1] is None]
    assert bool(lost) == (scenario == "xid-79")
    assert any(g.mem_growing for g in cuts[-1].gpus.values()) == (scenario == "memory-leak")
    other = Monitor(sim.build("compute-bound"))
    other.run_for(5)
    assert cutter.cut(other.history, None, 60.0) == cut_series(other.history, None, 60.0)
    assert len(cutter.cut(other.history, None, 60.0).host_cpu) == 6
