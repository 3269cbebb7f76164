"""`gputop-diag watch`: watch one job — a process and its descendants (`--pid`), a command it
starts (`-- CMD ARGS...`), or a Slurm job (`--slurm JOBID`) — with the diagnosis of the machine.

On a terminal it opens the live view on the Job pane; otherwise (or with `--no-tui`) it watches
headless: a status line every `STATUS_EVERY_S` on stderr, a summary at the end on stdout (text,
or one JSON document with `--json`). A started command's exit code is ours; a command killed by
a signal is said so, and our code is 128 + the signal's number, as a shell's.

Ctrl-C stops a started command as a shell stops the job in its foreground: SIGINT to its
process group, SIGTERM on the second Ctrl-C, SIGKILL on the third; watching goes on until it
has ended, and its exit status is ours (130 for a job SIGINT ended). A job we did not start
(`--pid`, `--slurm`) is not ours to signal: Ctrl-C stops watching it. A terminal that closes
(SIGHUP) stops watching and leaves the job running, and says so in the job's log.

`--probe` starts the command with the probe in every Python process it starts
(`probe.launch.probe_environment`): the step split, the host syncs and the allocator are then
measured inside the job, not estimated from outside. A job watched by `--pid` or `--slurm` is
read the same way when it was started with the probe some other way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import sys
import time

from ..collect.flight_recorder import dump_prefix, hang_from_dumps, read_dumps
from ..collect.job import INTERRUPT_SIGNALS, JobWatch, WatchError, default_log_path, signal_name
from ..diagnose.job_view import rank_probes
from ..diagnose.measured_render import measured_json
from ..diagnose.ranks import judge_ranks
from ..diagnose.ranks_render import ranks_json
from ..diagnose.watch_summary import (
    WATCH_SCHEMA,
    ProbesSeen,
    SeenProcesses,
    job_owners,
    quiet,
    status_line,
    summary_json,
    summary_text,
)
from ..job.steps import StepRegexError, compile_step_regex
from ..model import JobProcess, JobState
from ..model.codec import rounded
from ..model.exits import EXIT_USAGE
from ..model.formats import count
from ..monitor.core import Monitor
from ..monitor.run import Done, Run, session_key
from ..planner.configs import ReadConfig
from ..sources import Sources
from .common import (
    add_sanitize,
    input_problem,
    output_problem,
    said_text,
    sanitized_output,
    say,
    seeded_sanitizer,
    shown_path,
)
from .options import add_time_options, capped, time_problem, with_progress

STATUS_EVERY_S = 10.0
HANGUP_EXIT = 128 + getattr(signal, "SIGHUP", 1)  # 129: what a shell reports for a hang-up
DEMO_SECONDS = 300.0  # a simulated watch without --seconds stops after this much simulated time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = "gputop-diag watch [options] (--pid PID | --slurm JOBID | -- CMD [ARGS...])"
    p.epilog = (
        "A started command: Ctrl-C stops it as a shell would (SIGINT to its process group; "
        "again: SIGTERM; a third time: SIGKILL) and watch exits with its status. In the live "
        "view q asks: y stops it, d leaves it running (its pid and log are printed), n stays. "
        "A terminal that closes leaves it running, with a line saying so in its log. A --pid "
        "or --slurm job is not ours to signal: Ctrl-C stops watching it."
    )
    p.add_argument("--pid", type=int, metavar="PID", help="watch this process and its descendants")
    p.add_argument(
        "--slurm",
        metavar="JOBID",
        help="watch this Slurm job: its state, pending reason, queue time, time left, requested "
        "GPUs (scontrol/squeue), and its processes when it runs on this machine",
    )
    p.add_argument(
        "--log",
        metavar="FILE",
        help="read the job's output from FILE (default: the output of a started command, the "
        "file a --pid's stdout goes to, a Slurm job's StdOut)",
    )
    p.add_argument(
        "--wait-for-log",
        action="store_true",
        help="with --log: FILE may not exist yet (the job creates it later; its directory must "
        "exist): watch waits for it and says so; without it a missing FILE is a usage error",
    )
    p.add_argument(
        "--output",
        metavar="FILE",
        help="where a started command's output goes (default: gputop-watch-<time>-<pid>.log in "
        "$XDG_STATE_HOME/gputop-diag, else ~/.local/state/gputop-diag; the path is printed)",
    )
    p.add_argument(
        "--step-regex",
        metavar="RE",
        help="a regular expression for step lines, with a group (?P<step>\\d+) for the counter "
        "or (?P<seconds>...) / (?P<ms>...) for the step time (default: tqdm, Lightning, Hugging "
        "Face Trainer, Megatron and `step N ... loss` lines)",
    )
    add_time_options(
        p,
        "stop watching after N seconds (the job keeps running); default: until it ends",
    )
    p.add_argument(
        "--probe",
        action="store_true",
        help="start the command with the probe in each of its Python processes: the step split "
        "(input, host syncs and where they are, communication, GPU time) and the allocator's "
        "memory measured inside the job instead of estimated from outside",
    )
    p.add_argument("--no-tui", action="store_true", help="watch headless even on a terminal")
    p.add_argument(
        "--record",
        metavar="FILE",
        help="headless: also record every tick, the job included, for a later --replay FILE "
        "(`diagnose --replay FILE` reaches the same verdict and job alerts)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help=f"headless: print one JSON document at the end (schema {WATCH_SCHEMA})",
    )
    add_sanitize(p)
    p.add_argument(
        "command_argv",
        nargs=argparse.REMAINDER,
        metavar="-- CMD ARGS",
        help="start CMD with its output captured, and watch it",
    )


def _usage(msg: str) -> int:
    say(msg)
    return EXIT_USAGE


def out_path(args: argparse.Namespace, path: str) -> str:
    """The job's log path as printed: under --sanitize its pseudonym, the same in every line
    of this run (the start line, errors, the status lines, the summary: `session_key()`)."""
    return shown_path(path) if getattr(args, "sanitize", False) else path


def said(args: argparse.Namespace, text: str) -> str:
    """An error's text (it may name the output file, the recording, the job's log or the
    command) as stderr says it: under --sanitize the paths the user named as their pseudonyms
    (`common.said_text`), the rest sanitized."""
    paths = (args.output, args.record, args.log, getattr(args, "model_config", None))
    return said_text(text, getattr(args, "sanitize", False), paths)


def build_watch(args: argparse.Namespace, feed: Sources) -> JobWatch:
    argv = list(args.command_argv or [])
    if argv and argv[0] == "--":
        argv = argv[1:]
    chosen = [x for x in (args.pid is not None, args.slurm is not None, bool(argv)) if x]
    if len(chosen) != 1:
        raise WatchError(
            "name one job: --pid PID, --slurm JOBID, or -- CMD ARGS... "
            "(e.g. gputop-diag watch -- python train.py)",
            code=EXIT_USAGE,
        )
    regex = None
    if args.step_regex is not None:
        try:
            regex = compile_step_regex(args.step_regex)
        except StepRegexError as e:
            raise WatchError(str(e), code=EXIT_USAGE) from None
    if getattr(args, "probe", False) and not argv:
        raise WatchError(
            "--probe starts a command with the probe (watch --probe -- CMD ARGS...); a running "
            "job (--pid, --slurm) is read with its probe files when it was started with one",
            code=EXIT_USAGE,
        )
    if args.log is not None and (args.pid is not None or args.slurm is not None):
        problem = log_problem(args.log, getattr(args, "wait_for_log", False))
        if problem is not None:
            raise WatchError(problem, code=EXIT_USAGE)
    if args.pid is not None:
        if args.pid <= 0:
            raise WatchError(f"--pid {args.pid} is not a process id", code=EXIT_USAGE)
        return JobWatch.for_pid(feed, args.pid, log=args.log, step_regex=regex)
    if args.slurm is not None:
        return JobWatch.for_slurm(feed, args.slurm, log=args.log, step_regex=regex)
    if args.log is not None:
        raise WatchError(
            "--log is for --pid and --slurm; a started command's output goes to --output",
            code=EXIT_USAGE,
        )
    path = args.output or default_log_path()
    env = None
    if getattr(args, "probe", False):
        from ..probe.launch import probe_environment

        try:
            env = probe_environment(dict(os.environ))
        except OSError as e:  # the probe's directory: not ours, not writable
            raise WatchError(
                f"--probe: cannot prepare the probe's directory: {e}; without --probe the job "
                "runs unprobed"
            ) from None
    return JobWatch.for_command(feed, argv, log_path=path, step_regex=regex, env=env)


def log_problem(path: str, wait: bool) -> str | None:
    """Why `--log FILE` cannot be read (a usage error, said before watching), or None. A file
    the job has yet to create is waited for only when asked (`--wait-for-log`), as `xid --log`
    refuses a missing file: a typo would otherwise watch nothing, quietly."""
    if wait and not os.path.lexists(path):
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            return f"--log {path}: no such directory {parent} (--wait-for-log waits for the file)"
        return None
    problem = input_problem(path, "--log")
    if problem is not None and not os.path.lexists(path):
        problem += " (a log the job creates later: add --wait-for-log)"
    return problem


def run(args: argparse.Namespace, feed: Sources) -> int:
    problem = time_problem(args.seconds, args.interval)
    if problem is not None:
        return _usage(problem)
    if getattr(args, "wait_for_log", False) and args.log is None:
        return _usage("--wait-for-log waits for the file --log names: give --log FILE")
    for path, option in ((args.record, "--record"), (args.output, "--output")):
        problem = None if path is None else output_problem(path, option)
        if problem is not None:  # before the job is started, not after
            return _usage(said(args, problem))
    tui = sys.stdout.isatty() and not args.no_tui and not args.json and not args.record
    plan = None
    if not tui and getattr(args, "model_config", None):  # the job's model: its plan, its MFU
        from ..collect.model_config import ModelConfigError, read_config_file

        try:
            plan = read_config_file(args.model_config).read
        except ModelConfigError as e:
            return _usage(said(args, f"--model-config {e}"))
    if tui and feed.simulated and getattr(args, "demo", None):
        from .. import sim

        feed = sim.build(args.demo, realtime=True)  # the live view runs on the wall clock
    try:
        watch = build_watch(args, feed)
    except WatchError as e:
        say(f"{said(args, str(e))}")
        return e.code
    # under --sanitize nothing printed names the machine, stderr included (a shared screen):
    # the log's path is said as its pseudonym, the label (a command line) not at all
    where = f"; output: {out_path(args, watch.tail.path)}" if watch.tail is not None else ""
    if watch.tail is not None and not os.path.lexists(watch.tail.path):
        where += " (not there yet: waiting for it)"
    if getattr(args, "sanitize", False):
        say(f"watching the job ({watch.target}){where}")
    else:
        say(f"watching {watch.label}{where}")
    if getattr(args, "sanitize", False):
        watch.sanitize_key = session_key()  # the live view names the log as stderr does
    if tui:
        from ..tui.app import run_app

        code = run_app(
            feed,
            interval=args.interval,
            sanitize=args.sanitize,
            job=watch,
            model_config=getattr(args, "model_config", None),
        )
        for line in after_lines(watch, out_path(args, watch.tail.path) if watch.tail else None):
            say(line)
        return _exit_code(watch, code)
    return headless(args, feed, watch, plan)


class RanksNews:
    """The ranks' verdict said on stderr the tick it changes to a straggler or a hang (or back),
    not at the status line's pace: a hang is news."""

    def __init__(self) -> None:
        self.said: tuple | None = None
        self.view = None

    def line(self, snap) -> str | None:
        job = snap.job
        if job is None or not snap.probes:
            return None
        view = judge_ranks(rank_probes(job, (snap,), snap), snap)
        h = view.hang if view is not None else None
        s = view.straggler if view is not None else None
        what = ("hang", h.missing) if h else ("straggler", s.rank) if s else None
        if what == self.said or (what is None and self.said is None):
            return None
        self.said, self.view = what, view
        return view.verdict if what is not None else "ranks: no straggler and no hang now"

    def shown(self, line: str, sanitizer) -> str | None:
        """Under --sanitize: the line of the sanitized view, None where it still leaks."""
        if sanitizer is None:
            return line
        if self.said is not None and self.view is not None:
            line = sanitizer.model(self.view).verdict
        return None if sanitizer.leaks(line) else line


def stop_note(watch: JobWatch) -> str | None:
    """How we stopped the job, when we did: `y` when quitting (SIGTERM, SIGKILL after the
    grace period), or Ctrl-C (the signals it sent)."""
    if watch.stopped and watch.killed:
        return (
            f"the job did not end within {watch.stop_grace_s:g} s of SIGTERM: it was killed "
            "with SIGKILL"
        )
    if watch.stopped:
        return "SIGTERM sent to the job's process group"
    if watch.signals_sent:
        return f"Ctrl-C sent {', then '.join(watch.signals_sent)} to the job's process group"
    return None


def after_lines(watch: JobWatch, shown_log: str | None) -> list[str]:
    """What is said on stderr once watching a started command stops, as it is now (asked of the
    machine, not of the last tick): it ended (how, and how we stopped it), or it still runs
    (its pid, its log, how to stop it)."""
    if not watch.started:
        return []
    pid = watch.roots[0]
    log = f", output {shown_log}" if shown_log else ""
    if watch.alive():
        why = "watching stopped" if watch.detached else "quit"
        return [
            f"left running ({why}): pid {pid}{log}; it goes on in its own session "
            f"(stop it: kill -INT -{pid})"
        ]
    note = stop_note(watch)
    head = f"{note}; " if note else ""
    return [f"{head}the job (pid {pid}) ended: {watch.ended_words()}{log}"]


def _exit_code(watch: JobWatch, fallback: int = 0) -> int:
    if watch.started and not watch.detached:
        watch._reap()
        if watch.exit_code is not None:
            return watch.exit_code
    if watch.target == "slurm" and watch.finished and watch.exit_code is not None:
        return watch.exit_code  # Slurm's ExitCode=, as a started command's
    return fallback


def headless(
    args: argparse.Namespace, feed: Sources, watch: JobWatch, plan: ReadConfig | None = None
) -> int:
    until_stopped = args.seconds is None  # watching until the job ends or is stopped
    if feed.simulated and not watch.started:
        # simulated time runs instantly and a simulated process never ends: stop somewhere
        seconds, note = capped(args.seconds or DEMO_SECONDS, True, args.interval)
        if args.seconds is None:
            note = f"under --demo, watching stops after {DEMO_SECONDS:g} s of simulated time"
        if note is not None:
            say(note)
        args.seconds = seconds
    monitor = Monitor(feed, interval=args.interval, job=watch, plan=plan, threaded_slow=True)
    model = plan.shape if plan is not None else None
    sanitize = getattr(args, "sanitize", False)
    # under --sanitize one key for what this command prints: the status lines and the summary
    key = session_key() if sanitize else None  # the start line's too
    status_sanitizer = None  # seeded at the first status line (a short job has none)
    writer = None
    if args.record:
        from ..recording.store import RecordingError
        from ..recording.writer import RecordingWriter

        try:
            writer = RecordingWriter(
                args.record,
                interval_s=args.interval,
                sanitize=sanitize,
                sanitizer=seeded_sanitizer(feed) if sanitize else None,
                option="--record",
            )
        except RecordingError as e:
            say(said(args, str(e)))
            return 1
    clock = feed.clock
    last_status = clock.now()
    started_at = time.time()
    seen = SeenProcesses()
    seen.update(_roots_known_at_start(watch))  # one that ends before the first tick is still seen
    probed = ProbesSeen()
    news = RanksNews()

    def on_tick(t) -> None:
        nonlocal last_status, status_sanitizer
        if writer is not None:
            writer.write(t.snapshot)
        if t.snapshot.job is not None:
            seen.update(t.snapshot.job.processes)
        probed.update(t.snapshot)
        said = news.line(t.snapshot)
        if said is not None:
            if sanitize and status_sanitizer is None:
                status_sanitizer = seeded_sanitizer(feed, key=key)
            said = news.shown(said, status_sanitizer)
            if said is not None:
                say(said, flush=True)
        now = clock.now()
        if now - last_status >= STATUS_EVERY_S and not feed.simulated:
            last_status = now
            if sanitize and status_sanitizer is None:
                status_sanitizer = seeded_sanitizer(feed, key=key)
            line = shown_status(t.snapshot, watch, status_sanitizer)
            if line is not None:
                say(line)
        if watch.finished:
            raise Done

    def on_signal(name: str) -> bool:
        """Ctrl-C while a command we started runs: passed on to it, and watching goes on
        until it has ended (a shell's foreground job); anything else stops watching."""
        if name != "SIGINT" or not watch.started or watch.detached:
            return False
        line = interrupted_line(watch)
        if line is not None:
            say(line)
            return True
        return watch.interrupts <= len(INTERRUPT_SIGNALS)  # nothing left: the next tick sees

    paced = Run(monitor.tick, clock=clock, interval=args.interval, seconds=args.seconds)
    paced.on_signal = on_signal
    try:
        simulated = feed.simulated and not watch.started
        ending = paced.subscribe(with_progress(on_tick, args.seconds, simulated)).run()
    finally:
        monitor.close()
        if writer is not None:
            writer.close()
    ended_by = _ENDED_BY.get(ending.reason, "seconds")
    if ending.reason == "done" and watch.finished:
        ended_by = "ended"
    if writer is not None and writer.withheld:  # as `record --sanitize` says it
        say(
            f"{count(writer.withheld, 'snapshot')} not written: they could not be "
            "sanitized with confidence"
        )
    if ended_by == "hangup":
        watch.left_by_hangup()  # it goes on; its log says the watcher left
    if monitor.last is None:
        return ending.exit_status() or 1
    if ended_by != "ended":
        watch.detach()
    t = monitor.last
    snaps = monitor.history.snapshots()
    job, diag, procs = t.snapshot.job, t.diagnosis, seen.processes()
    probes, memory = probed.probes(), probed.memory()
    ranks = probed.ranks()
    owners = job_owners(procs, snaps)
    sanitizer = None
    if sanitize:
        sanitizer = seeded_sanitizer(feed, snaps, key=key)
        job = shown_job(job, watch, sanitizer)
        diag = sanitizer.model(diag)
        procs = [sanitizer.model(p) for p in procs]
        probes = [sanitizer.model(p) for p in probes]
        owners = [sanitizer.model(o) for o in owners]
        ranks = sanitizer.model(ranks) if ranks is not None else None
    if args.json:
        doc = summary_json(job, procs, snaps, diag, ended_by, owners)
        doc["processes_ended_not_listed"] = seen.ended_not_kept
        doc["measured"] = measured_json(probes, memory, model)
        doc["ranks"] = ranks_json(ranks)
        if doc["ranks"] is not None and ranks.hang is not None:
            doc["ranks"]["flight_recorder"] = flight_lines(watch, started_at)
        text = json.dumps(rounded(doc), indent=2)
    else:
        text = summary_text(
            job,
            procs,
            snaps,
            diag,
            ended_by,
            seen.ended_not_kept,
            probes,
            memory,
            owners,
            ranks,
            model=model,
        )
        if ranks is not None and ranks.hang is not None:
            text += "\n" + "\n".join(f"  {line}" for line in flight_lines(watch, started_at))
    if sanitizer is not None:
        text = sanitized_output(text, sanitizer)
        if text is None:
            return 1
    try:
        print(text, flush=True)
        if watch.started and (ended_by != "ended" or watch.signals_sent):  # the user's terminal
            for line in after_lines(watch, out_path(args, watch.tail.path)):
                say(line)
    except OSError:
        if ended_by != "hangup":  # a closed pipe, a full disk: said as for every command
            raise
        # a closed terminal: the job's log says it
    if ended_by == "hangup":
        return HANGUP_EXIT
    return _exit_code(watch, ending.exit_status(until_stopped) or 0)


def flight_lines(watch: JobWatch, since: float) -> list[str]:
    """What PyTorch's Flight Recorder dumps say of a hang, where the job wrote them since the
    watch began (a started command's environment is ours: it names where they go); else what
    could not be seen, and how the job would write them."""
    if not watch.started:
        return ["flight recorder: not read (the job's environment is not this program's)"]
    prefix = dump_prefix(os.environ)
    if prefix is None:
        return ["flight recorder: off in the job's environment (TORCH_FR_BUFFER_SIZE=0)"]
    dumps = [d for d in read_dumps(prefix) if _newer(d.path, since)]
    if not dumps:
        return [
            "flight recorder: no dump from this job (TORCH_FR_DUMP_TEMP_FILE names where they "
            "go; a job writes one with torch's _dump_fr_trace, NCCL's watchdog on its timeout)"
        ]
    hang = hang_from_dumps(dumps)
    if hang is None:
        return [f"flight recorder: {len(dumps)} rank dumps, no collective left open"]
    missing = ", ".join(str(r) for r in hang.ranks_missing) or "none"
    return [
        f"flight recorder ({len(dumps)} rank dumps): the ranks wait in {hang.op} #{hang.seq}; "
        f"ranks that never entered it: {missing}"
    ]


def _newer(path: str, since: float) -> bool:
    try:
        return os.stat(path).st_mtime >= since
    except OSError:
        return False


# How a paced run's ending reads in the summary (`watch_ended_by`).
_ENDED_BY = {
    "done": "seconds",
    "SIGINT": "interrupted",
    "SIGTERM": "terminated",
    "SIGHUP": "hangup",
    "closed": "closed",
    "cancelled": "interrupted",
}


def interrupted_line(watch: JobWatch) -> str | None:
    """Ctrl-C while a started command runs: pass it on (`JobWatch.interrupt`) and say what was
    sent and what the next Ctrl-C sends; None when no process of the job was left."""
    sig = watch.interrupt()
    if sig is None:
        return None
    pid = watch.roots[0]
    then = (
        "it cannot be caught"
        if sig == signal.SIGKILL
        else f"waiting for it to end; Ctrl-C again sends {watch.next_interrupt()}"
    )
    return f"Ctrl-C: {signal_name(sig)} sent to the job's process group (pid {pid}); {then}"


def _roots_known_at_start(watch: JobWatch) -> list[JobProcess]:
    """The processes the job is known by before any tick: the command we started, the pid we
    were given. A command that ends before the first sample (a loaded machine, a fast failure)
    is then listed as ended, not missing from the processes seen."""
    if watch.target == "slurm":
        return []
    name = os.path.basename(watch.argv[0]) if watch.argv else None
    return [JobProcess(pid, depth=0, name=name, cmdline=watch.argv) for pid in watch.roots]


# -- words ------------------------------------------------------------------------------------
def shown_job(job: JobState, watch: JobWatch, sanitizer) -> JobState:
    """The job as a sanitized output names it: its names replaced, its output's text left out
    (`quiet`), a started command's label its command line sanitized as cmdlines are."""
    job = sanitizer.model(quiet(job))
    if watch.argv:
        job = dataclasses.replace(job, label=shlex.join(sanitizer.argv(list(watch.argv))))
    return job


def shown_status(snap, watch: JobWatch, sanitizer=None) -> str | None:
    """The status line; under --sanitize (`sanitizer`) with the job named as the summary names
    it, and None (not printed) when something in it still looks like an identifier."""
    if sanitizer is None:
        return status_line(snap)
    if snap.job is not None:
        snap = dataclasses.replace(snap, job=shown_job(snap.job, watch, sanitizer))
    line = status_line(snap)
    return None if sanitizer.leaks(line) else line
