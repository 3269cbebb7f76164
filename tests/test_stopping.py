"""docs/architecture.md, "Stopping": one behaviour per event, for every command.

Each command runs as a user runs it (a subprocess of the installed entry point, on the
simulator). A stop signal is sent once the paced loop's handlers are in place (read off
/proc/PID/status: SigCgt has SIGTERM's bit), so it lands inside the loop, never before; a closed
pipe and a full disk (/dev/full) are met by every command."""

from __future__ import annotations

import ast
import functools
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from gputop_diag.monitor.run import MIN_INTERVAL_S, Run

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc, uses /dev/full")

PY = sys.executable
LONG = "86400"  # simulated seconds: minutes of CPU, so the signal lands mid-run


def _caught(pid: int, signum: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def _default_stop_signals() -> None:
    """In the child: the stop signals at their defaults, whatever this test run inherited
    (`nohup pytest`, a CI runner that ignores SIGHUP): a program keeps an ignored signal
    ignored, as it should, and the test would measure that instead."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def _signalled(
    argv: list[str], sig: int, tmp_path, env: dict | None = None, again_after: float | None = None
) -> subprocess.CompletedProcess:
    p = subprocess.Popen(
        [PY, "-m", "gputop_diag", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        preexec_fn=_default_stop_signals,
        env=None if env is None else {**os.environ, **env},
    )
    try:
        deadline = time.monotonic() + 60
        while not _caught(p.pid, signal.SIGTERM) and time.monotonic() < deadline:
            assert p.poll() is None, p.communicate()
            time.sleep(0.02)
        time.sleep(0.2)  # a few ticks in
        p.send_signal(sig)
        if again_after is not None:
            time.sleep(again_after)
            p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]

# (argv, what stdout holds once stopped) for the commands that sample over a span
WITH_SPAN = {
    "diagnose": (["--demo", "idle", "diagnose", "--seconds", LONG], "Bottleneck"),
    "report": (["--demo", "idle", "report", "--seconds", LONG], "# "),
    "record": (["--demo", "idle", "record", "-o", "r.jsonl", "--seconds", LONG], ""),
    "watch": (
        ["--demo", "compute-bound", "watch", "--pid", "41200", "--no-tui", "--seconds", LONG],
        "watch: ",
    ),
}


@pytest.mark.e2e
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("command", sorted(WITH_SPAN))
def test_a_stop_signal_ends_a_run_with_a_span_with_what_it_saw(command, sig, tmp_path):
    argv, shown = WITH_SPAN[command]
    r = _signalled(argv, sig, tmp_path)
    name = signal.Signals(sig).name
    assert r.returncode == 128 + sig, r.stderr
    assert "Traceback" not in r.stderr
    if command == "record":  # the summary counts what the file holds, closed whole
        assert "(stopped early)" in r.stderr, r.stderr
        lines = (tmp_path / "r.jsonl").read_text().splitlines()
        assert len(lines) >= 2 and f"recorded {len(lines) - 1} snapshots" in r.stderr
    elif command == "watch":  # the summary says how watching stopped
        said = {"SIGINT": "by Ctrl-C", "SIGTERM": "by SIGTERM", "SIGHUP": "the terminal closed"}
        assert shown in r.stdout and said[name] in r.stdout, r.stdout
    else:
        assert f"stopped early ({name}) after" in r.stderr, r.stderr
        assert shown in r.stdout, r.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_ends_a_run_without_a_span_with_status_0(sig, tmp_path):
    """The exporter runs until stopped: a signal is how it is meant to end."""
    argv = ["--demo", "idle", "exporter", "--listen", "127.0.0.1:0", "--interval", "0.2"]
    r = _signalled(argv, sig, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "stopped early" not in r.stderr


# Every command, with what makes it print something (a closed pipe and a full disk are met
# when it writes).
EVERY_COMMAND = {
    "snapshot": ["--demo", "idle", "snapshot"],
    "diagnose": ["--demo", "idle", "diagnose", "--seconds", "5"],
    "report": ["--demo", "idle", "report", "--seconds", "5"],
    "record": ["--demo", "idle", "record", "-o", "-", "--seconds", "5"],
    "xid": ["--demo", "xid-79", "xid"],
    "mapping": ["--demo", "idle", "mapping"],
    "driver": ["--demo", "idle", "driver"],
    "health": ["--demo", "idle", "health"],
    "memory": ["memory", "--layers", "32", "--hidden", "4096", "--heads", "32"]
    + ["--intermediate", "11008", "--vocab", "32000"],
    "watch": ["--demo", "compute-bound", "watch", "--pid", "41200", "--no-tui", "--seconds", "5"],
    "demo": ["demo", "--list"],
}


def _run_into(command: str, stdout, tmp_path) -> subprocess.CompletedProcess:
    """`command` of EVERY_COMMAND with its standard output on `stdout`."""
    return subprocess.run(
        [PY, "-m", "gputop_diag", *EVERY_COMMAND[command]],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("command", sorted(EVERY_COMMAND))
def test_a_closed_output_ends_every_command_quietly_with_141(command, tmp_path):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    try:
        r = _run_into(command, write, tmp_path)
    finally:
        os.close(write)
    assert r.returncode == 141, r.stderr
    for noise in ("Traceback", "Broken pipe", "BrokenPipe", "Exception ignored"):
        assert noise not in r.stderr, r.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("command", sorted(EVERY_COMMAND))
def test_an_unwritable_output_is_said_in_one_line_with_status_1(command, tmp_path):
    with open("/dev/full", "w") as full:
        r = _run_into(command, full, tmp_path)
    assert r.returncode == 1, r.stderr
    assert "No space left on device" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("interval", ["0.001", "0.05", "0", "-1", "nan"])
def test_an_interval_below_the_floor_is_refused_in_one_line(cli, interval):
    r = cli("--interval", interval, "diagnose", "--demo", "idle", "--seconds", "3")
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert "--interval" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


# -- the loop itself ---------------------------------------------------------------------------


class SlowClock:
    """A simulated clock whose ticks take `tick_s` of its time (a GPU slow to answer)."""

    def __init__(self, tick_s: float) -> None:
        self.t = 1.7e9
        self.tick_s = tick_s
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds, cancel=None) -> bool:
        self.slept.append(seconds)
        self.t += seconds
        return False

    def step(self) -> float:
        self.t += self.tick_s
        return self.t


@pytest.mark.parametrize("tick_s", [0.0, 0.03, 0.25, 1.0, 2.5])
def test_seconds_are_time_on_the_clock_whatever_a_tick_costs(tick_s):
    """`--seconds 3` ends by 3 s of the clock (plus the tick in flight), with the missed ticks
    skipped, never burst: the mock library's one-second ticks once made it 55 s."""
    clock = SlowClock(tick_s)
    start = clock.t
    run = Run(clock.step, clock=clock, interval=1.0, seconds=3.0)
    ending = run.run()
    assert ending.reason == "done"
    assert clock.t - start <= 3.0 + max(tick_s, 1e-9) + 1e-6
    expected = 4 if tick_s <= 1.0 else 2  # at 0, 1, 2, 3; a 2.5 s tick: at 0 and 3 (1, 2 missed)
    assert ending.ticks == expected, (clock.slept, ending)
    assert all(s >= 0 for s in clock.slept)


def test_a_subscriber_that_is_done_ends_the_run_after_its_tick():
    from gputop_diag.monitor.run import Done

    clock = SlowClock(0.0)
    seen = []

    def on(value):
        seen.append(value)
        if len(seen) == 3:
            raise Done

    ending = Run(clock.step, clock=clock, interval=MIN_INTERVAL_S).subscribe(on).run()
    assert ending.reason == "done" and ending.ticks == 3 and len(seen) == 3
    assert Run(lambda: 1, clock=clock, interval=1.0).ending is None


def test_a_run_paused_takes_only_its_first_tick_and_a_cancel_ends_its_wait():
    import threading

    clock = SlowClock(0.0)
    paused = [True]
    run = Run(clock.step, clock=clock, interval=1.0, seconds=10, paused=lambda: paused[0])
    assert run.run().ticks == 1  # the first tick, then ten seconds paused
    paused[0] = False
    assert Run(clock.step, clock=clock, interval=1.0, seconds=10).run().ticks == 11

    cancel = threading.Event()
    wall = Run(lambda: cancel.set(), clock=SlowClockWall(), interval=60.0, cancel=cancel)
    t0 = time.monotonic()
    assert wall.run().reason == "cancelled" and time.monotonic() - t0 < 5


class SlowClockWall:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds, cancel=None) -> bool:
        return cancel.wait(seconds) if cancel is not None else time.sleep(seconds) or False


# -- one paced loop ------------------------------------------------------------------------------

# The loops that wait (a sleep, an event's wait: `time.sleep`, `sleep` imported bare, `.wait`)
# outside the paced loop, and why each is not a second one: a wait inside one call, or code that
# runs inside the user's job.
WAITS_INSIDE_ONE_CALL = {
    "gputop_diag/monitor/run.py": "the paced loop itself",
    "gputop_diag/collect/job.py": "a started job's stop grace: SIGTERM, then SIGKILL after it",
    "gputop_diag/probe/writer.py": "the probe's flush thread, inside the user's job",
    "tui/hangup.py": "the terminal guard's watch of a closed terminal",
    "tui/replaying.py": "the replay clock's sleep: one recorded gap at the speed, held on pause",
}
# Textual timers of the live view: screen upkeep that reads nothing of the machine, never a tick.
VIEW_TIMERS = {
    "tui/app.py": "the banner's check of a stuck tick (`Run.stuck_for`)",
    "tui/fleet_app.py": "a node's STALE check against its last scrape's time",
    "tui/job_quit.py": "whether a job being stopped has ended (asks the control seam)",
    "tui/process_screens.py": "the details screen redrawn from the last tick",
    "tui/saver.py": "how long the saved-file note stays",
}


def _waits(node) -> bool:
    for c in ast.walk(node):
        if isinstance(c, ast.Call):
            f = c.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in ("sleep", "wait"):
                return True
    return False


@functools.cache
def _our_modules() -> tuple[tuple[str, ast.Module], ...]:
    """Each module's path and syntax tree, parsed once for both checks below (on one worker)."""
    repo = pathlib.Path(__file__).resolve().parent.parent
    out = []
    for root in ("gputop_diag", "tui", "widgets"):
        for path in (repo / root).rglob("*.py"):
            rel = path.relative_to(repo)
            if rel.parts[:2] == ("gputop_diag", "sim"):  # the simulated machine's own clock
                continue
            out.append((str(rel), ast.parse(path.read_text())))
    return tuple(out)


READS_THE_SOURCE = pytest.mark.xdist_group("stopping-source")


@READS_THE_SOURCE
def test_no_surface_paces_a_loop_of_its_own():
    found = {
        rel
        for rel, tree in _our_modules()
        for node in ast.walk(tree)
        if isinstance(node, (ast.While, ast.For, ast.AsyncFor)) and _waits(node)
    }
    assert found == set(WAITS_INSIDE_ONE_CALL), found ^ set(WAITS_INSIDE_ONE_CALL)


@READS_THE_SOURCE
def test_the_live_views_timers_are_screen_upkeep_only():
    found = {
        rel
        for rel, tree in _our_modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("set_interval", "set_timer")
    }
    assert found == set(VIEW_TIMERS), found ^ set(VIEW_TIMERS)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_stop_signal_ends_the_wait_at_once_and_puts_the_handlers_back(sig):
    import threading

    inherited = signal.signal(sig, signal.SIG_DFL)  # not as `nohup` left it
    try:
        paced = Run(lambda: None, clock=SlowClockWall(), interval=30.0, seconds=60)
        threading.Timer(0.3, os.kill, (os.getpid(), sig)).start()
        t0 = time.monotonic()
        ending = paced.run()
        assert ending.reason == signal.Signals(sig).name and ending.ticks == 1
        assert time.monotonic() - t0 < 10  # not the 30 s interval
        assert ending.exit_status() == 128 + sig and ending.exit_status(until_stopped=True) == 0
        assert signal.getsignal(sig) == signal.SIG_DFL
    finally:
        signal.signal(sig, inherited)


def test_a_signal_that_on_signal_answers_keeps_the_run_going():
    """`watch -- CMD`: the first Ctrl-C is passed on to the job and watching goes on; the
    second one (nothing left to pass on) stops it."""
    import threading

    asked = []

    def on_signal(name: str) -> bool:
        asked.append(name)
        return len(asked) == 1

    paced = Run(lambda: None, clock=SlowClockWall(), interval=30.0, seconds=60, on_signal=on_signal)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    threading.Timer(0.8, os.kill, (os.getpid(), signal.SIGINT)).start()
    ending = paced.run()
    assert asked == ["SIGINT", "SIGINT"] and ending.reason == "SIGINT"
    assert ending.ticks == 2  # the run went on with a tick after the first


class LateClock(SlowClock):
    """Every sleep overshoots by `late_s` (a loaded machine's scheduler)."""

    def __init__(self, late_s: float) -> None:
        super().__init__(0.0)
        self.late_s = late_s

    def sleep(self, seconds, cancel=None) -> bool:
        return super().sleep(seconds + self.late_s, cancel)


@pytest.mark.parametrize("late_s", [0.0, 0.002, 0.05, 0.3])
def test_a_late_wake_up_never_costs_the_last_tick_of_a_span(late_s):
    """`diagnose --seconds 3` at 1 s: four samples (0, 1, 2, 3) however late each wake-up, and
    no drift: each tick is due on the grid from the start, not an interval after the last."""
    clock = LateClock(late_s)
    start = clock.t
    began = []
    ending = Run(lambda: began.append(clock.t - start), clock=clock, interval=1.0, seconds=3).run()
    assert ending.ticks == 4, began
    assert all(abs(t - k) <= late_s + 1e-6 for k, t in enumerate(began)), began  # epoch ulp


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_a_signal_the_program_was_started_ignoring_stays_ignored():
    """`nohup gputop-diag record …`: the hang-up it was protected from does not stop it."""
    from gputop_diag.monitor.run import StopSignals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopSignals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL  # caught
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.e2e
def test_a_stop_signal_ends_a_run_whose_sample_never_comes_back(tmp_path):
    """A GPU that stopped answering holds the sample in flight: the signal waits for it a
    grace period (STUCK_GRACE_S), then ends the program with 128 + the signal and says why
    (SIGTERM: what systemd, Slurm and `timeout` send; the grace does not depend on which)."""
    sig = signal.SIGTERM
    from gputop_diag.monitor.run import STUCK_GRACE_S

    hang = {"GPUTOP_DIAG_SIM_FAULTS": "hang:nvmlDeviceGetUtilizationRates"}
    argv = ["--demo", "idle", "diagnose", "--seconds", "30"]
    t0 = time.monotonic()
    r = _signalled(argv, sig, tmp_path, env=hang)
    took = time.monotonic() - t0
    assert r.returncode == 128 + sig, r.stderr
    assert f"did not come back in {STUCK_GRACE_S:g} s" in r.stderr and "Traceback" not in r.stderr
    assert took < STUCK_GRACE_S + 20


@pytest.mark.e2e
def test_a_second_stop_signal_ends_a_stuck_run_at_once(tmp_path):
    hang = {"GPUTOP_DIAG_SIM_FAULTS": "hang:nvmlDeviceGetUtilizationRates"}
    argv = ["--demo", "idle", "diagnose", "--seconds", "30"]
    t0 = time.monotonic()
    r = _signalled(argv, signal.SIGINT, tmp_path, env=hang, again_after=0.3)
    assert r.returncode == 130 and "a second stop signal" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 4.5  # well inside the grace period


def test_a_stop_signal_in_a_one_shot_commands_warm_up_ends_it_without_an_answer(monkeypatch):
    """`snapshot` takes two readings 0.11 s apart; a signal during the first ends it with
    128 + the signal (`Stopped`, which the entry point returns), not a one-reading snapshot."""
    from gputop_diag import sim
    from gputop_diag.commands.common import sample_once
    from gputop_diag.monitor.run import Stopped
    from gputop_diag.monitor.sampler import Sampler

    collect = Sampler.collect

    def signalled_during(self):
        os.kill(os.getpid(), signal.SIGTERM)  # its handler takes note; the reading finishes
        return collect(self)

    monkeypatch.setattr(Sampler, "collect", signalled_during)
    inherited = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(Stopped) as stopped:
            sample_once(sim.build("idle"), fast=False)
    finally:
        signal.signal(signal.SIGTERM, inherited)
    assert stopped.value.status == 143
