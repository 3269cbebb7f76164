"""`gputop-diag watch`: a started command (its tree, step rate, output, exit code, a signal),
a process by pid, SIGHUP, and the usage errors. Real subprocesses, real /proc."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop_diag.collect.job import JobWatch, OutputTail, default_log_path
from gputop_diag.sources import Sources

DATA = Path(__file__).parent / "data" / "watch"
TRAIN = str(DATA / "train_like.py")
PY = sys.executable


def watch(cli, tmp_path, *args, **kw):
    return cli("watch", "--interval", "0.2", *args, **kw)


def _json(r):
    assert r.stdout.strip(), r.stderr
    return json.loads(r.stdout)


def test_started_command_tree_steps_output_and_exit_code(cli, tmp_path):
    log = tmp_path / "job.log"
    r = watch(cli, tmp_path, "--json", "--output", str(log), "--", PY, TRAIN, "25", "0.04", "3")
    assert r.returncode == 3, r.stderr  # the job's own exit code
    assert f"output: {log}" in r.stderr  # the log's path is shown
    doc = _json(r)
    job = doc["job"]
    assert job["target"] == "command" and job["exit_code"] == 3 and job["exit_signal"] is None
    # the tree: the command and its two workers, one level below it
    seen = {p["pid"]: p for p in doc["processes_seen"]}
    root = job["root_pids"][0]
    workers = [int(x) for x in log.read_text().split("\n")[0].split()[1:]]
    assert root in seen and seen[root]["depth"] == 0
    for w in workers:
        assert seen[w]["ppid"] == root and seen[w]["depth"] == 1
    assert all(p["rss_bytes"] > 0 and p["num_threads"] >= 1 for p in seen.values())
    # the step rate: the bar prints 20.00 it/s
    assert job["steps"]["source"] == "tqdm"
    assert job["steps"]["step"] == 25 and job["steps"]["total"] == 25
    assert doc["steps"]["steps_per_s"] == pytest.approx(20.0)
    assert doc["steps"]["median_s"] == pytest.approx(0.05)
    # the output: in the file, in the ring buffer (the \r redraws folded into one line), and the
    # CUDA error line found and turned into an alert
    text = log.read_text()
    assert "25/25" in text and "illegal memory access" in text
    tail = job["output_tail"]
    assert sum("it/s" in line for line in tail) == 1 and "25/25" in tail[-2]
    kinds = [e["kind"] for e in job["output_events"]]
    assert kinds == ["cuda_error"]
    alerts = {a["kind"] for a in doc["diagnosis"]["alerts"]}
    assert {"job_cuda_error", "job_exit"} <= alerts


def test_command_killed_by_a_signal_is_said_so(cli, tmp_path):
    log = tmp_path / "job.log"
    r = watch(cli, tmp_path, "--output", str(log), "--", PY, TRAIN, "3", "0.01", "0", "SIGKILL")
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    assert "killed by SIGKILL (exit code 137)" in r.stdout
    assert "the job was killed by SIGKILL" in r.stdout  # the alert


def test_started_command_survives_sighup_of_the_watcher(tmp_path):
    log = tmp_path / "job.log"
    code = "import time; print('started', flush=True); time.sleep(1.0); print('finished')"
    w = subprocess.Popen(
        [PY, "-m", "gputop_diag", "watch", "--interval", "0.2", "--output", str(log)]
        + ["--", PY, "-c", code],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            if log.exists() and "started" in log.read_text():
                break
            time.sleep(0.02)
        w.send_signal(signal.SIGHUP)  # what a dropped SSH link sends
        assert w.wait(10) == 128 + signal.SIGHUP  # the watcher goes, as a shell says it...
        said = log.read_text()
        assert "the terminal closed (SIGHUP): gputop-diag stopped watching" in said
        assert "was left running" in said  # ...and the job's log says so
        for _ in range(300):
            if "finished" in log.read_text():
                break
            time.sleep(0.02)
        assert "finished" in log.read_text()  # ...the job finishes its work
    finally:
        if w.poll() is None:
            w.kill()


def test_watch_pid_reads_the_tree_and_leaves_the_process_running(cli, tmp_path):
    out = tmp_path / "out.log"
    with open(out, "w") as f:
        p = subprocess.Popen(
            [PY, "-u", TRAIN, "400", "0.05", "0"], stdout=f, stderr=subprocess.STDOUT
        )
    try:
        for _ in range(200):
            if out.read_text().startswith("workers"):
                break
            time.sleep(0.02)
        r = watch(cli, tmp_path, "--pid", str(p.pid), "--seconds", "0.6", "--json")
        assert r.returncode == 0, r.stderr
        doc = _json(r)
        job = doc["job"]
        assert job["target"] == "pid" and job["running"]
        assert doc["watch_ended_by"] == "seconds"
        pids = {q["pid"] for q in job["processes"]}
        workers = [int(x) for x in out.read_text().split("\n")[0].split()[1:]]
        assert {p.pid, *workers} <= pids
        assert job["log_path"] == str(out)  # its stdout is a file: that is its output
        assert job["steps"]["source"] == "tqdm"
        assert p.poll() is None  # still running
    finally:
        p.kill()
        p.wait()


def test_watch_pid_ends_when_the_process_ends(cli, tmp_path):
    p = subprocess.Popen([PY, "-c", "import time; time.sleep(0.5)"])
    try:
        r = watch(cli, tmp_path, "--pid", str(p.pid), "--seconds", "20")
        assert r.returncode == 0, r.stderr
        assert "state: ended" in r.stdout
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        ((), 2, "name one job"),
        (("--pid", "1", "--", "true"), 2, "name one job"),
        (("--pid", "999999999"), 2, "no process 999999999"),
        (("--", "no-such-command-here"), 127, "command not found"),
        (("--step-regex", "(", "--", "true"), 2, "not a regular expression"),
        (("--step-regex", "loss", "--", "true"), 2, "needs a group"),
        (("--slurm", "abc"), 2, "not a Slurm job id"),
        (("--seconds", "-1", "--", "true"), 2, "--seconds must be a positive"),
        (("--log", "x", "--", "true"), 2, "--log is for --pid and --slurm"),
    ],
)
def test_usage_errors_are_messages(cli, tmp_path, args, code, words):
    r = cli("watch", "--output", str(tmp_path / "o.log"), *args)
    assert r.returncode == code
    assert words in r.stderr and "Traceback" not in r.stderr


def test_exit_code_of_a_plain_command(cli, tmp_path):
    r = watch(cli, tmp_path, "--output", str(tmp_path / "o.log"), "--", PY, "-c", "pass")
    assert r.returncode == 0, r.stderr
    assert "exited with code 0" in r.stdout


def test_log_file_and_step_regex(cli, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("")
    p = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"])
    try:
        with open(log, "a") as f:
            for k in range(1, 9):
                f.write(f"[it {k}] took 250ms\n")
        r = watch(
            cli, tmp_path, "--pid", str(p.pid), "--log", str(log), "--step-regex",
            r"\[it (?P<step>\d+)\] took (?P<ms>\d+)ms", "--seconds", "0.3", "--json",
        )  # fmt: skip
        doc = _json(r)
        assert doc["job"]["steps"]["source"] == "regex"
        assert doc["job"]["steps"]["step"] == 8
        assert doc["steps"]["median_s"] == pytest.approx(0.25)
    finally:
        p.kill()
        p.wait()


# -- the pieces, in process ----------------------------------------------------------------------
def test_output_tail_follows_a_growing_file_and_folds_redraws(tmp_path):
    path = tmp_path / "o.log"
    path.write_bytes(b"one\ntw")
    t = OutputTail(str(path), from_start=True, lines=3)
    assert t.read() == [(1, "one")]  # "tw" is not a whole line yet
    with open(path, "ab") as f:
        f.write(b"o\r\n 1/3 bar\r 2/3 bar\r 3/3 bar\nfour\n")
    # a bar redrawn with \r keeps its line number, and is one line in the buffer
    assert t.read() == [(2, "two"), (3, " 1/3 bar"), (3, " 2/3 bar"), (3, " 3/3 bar"), (4, "four")]
    assert list(t.lines) == ["two", " 3/3 bar", "four"] and t.count == 4
    path.write_bytes(b"new\n")  # truncated: read again from the start
    assert [x for _, x in t.read()] == ["new"]
    missing = OutputTail(str(tmp_path / "nope"), from_start=True)
    assert missing.read() == [] and "does not exist" in missing.problem


def test_output_tail_from_outside_starts_near_the_end(tmp_path):
    path = tmp_path / "big.log"
    path.write_bytes(b"".join(b"line %d\n" % k for k in range(20000)))
    t = OutputTail(str(path), from_start=False)
    lines = [x for _, x in t.read()]
    assert lines[-1] == "line 19999" and len(lines) < 20000
    assert all(x.startswith("line ") for x in lines)  # no cut first line


def test_job_watch_in_process_uses_real_psutil(tmp_path):
    import psutil  # the real bundle opens pynvml; this one needs only the host

    from gputop_diag.sources import RealClock, RealProcFS, run_real_command

    sources = Sources(
        nvml=None,
        psutil=psutil,
        procfs=RealProcFS(),
        clock=RealClock(),
        run_command=run_real_command,
        hostname=lambda: "h",
    )
    w = JobWatch.for_command(
        sources, [PY, "-c", "import time; time.sleep(5)"], log_path=str(tmp_path / "x.log")
    )
    try:
        s1 = w.sample()
        assert s1.running and s1.processes[0].pid == w.roots[0]
        assert s1.processes[0].cpu_pct is None  # the first reading measures nothing
        time.sleep(0.05)
        s2 = w.sample()
        assert s2.processes[0].cpu_pct is not None
        assert w.send(signal.SIGTERM)
        w.popen.wait(5)
        s3 = w.sample()
        assert not s3.running and s3.exit_signal == "SIGTERM" and s3.exit_code == 143
    finally:
        w.stop(grace_s=1)
    assert os.path.exists(tmp_path / "x.log")


def test_sanitize_leaves_no_paths_or_output_text(cli, tmp_path):
    log = tmp_path / "secret-run.log"
    r = watch(
        cli, tmp_path, "--sanitize", "--json", "--output", str(log),
        "--", PY, TRAIN, "3", "0.01", "0", f"--data={tmp_path}/alice_secret", "--token",
        "s3cr3tT0ken",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert str(tmp_path) not in r.stdout and "secret-run" not in r.stdout
    # stderr too may be on a shared screen: the output's path is said as its pseudonym
    assert "output: " in r.stderr and str(tmp_path) not in r.stderr and "secret-run" not in r.stderr
    assert "s3cr3tT0ken" not in r.stderr
    for secret in ("alice_secret", "s3cr3tT0ken"):
        assert secret not in r.stdout, secret
    doc = _json(r)
    # the label says what the command line says: the same pseudonyms as the process's cmdline
    root = next(p for p in doc["processes_seen"] if p["pid"] == doc["job"]["root_pids"][0])
    assert doc["job"]["label"] == shlex.join(root["cmdline"])
    text = watch(
        cli, tmp_path, "--sanitize", "--no-tui", "--output", str(log),
        "--", PY, TRAIN, "2", "0.01", "0", "--token", "s3cr3tT0ken",
    )  # fmt: skip
    assert "s3cr3tT0ken" not in text.stdout and re.match(r"watch: python[0-9.]* arg-", text.stdout)
    # the failure line's place is given, and why its text is not (not an empty tail)
    assert re.search(r"at line \d+: \(the line left out under --sanitize", text.stdout)
    assert doc["job"]["output_tail"] == [] and doc["job"]["output_events"][0]["line"] == ""
    assert doc["job"]["output_events"][0]["kind"] == "cuda_error"
    assert doc["steps"]["steps_per_s"] == pytest.approx(20.0)


def test_step_split_estimate_under_the_simulator(cli, tmp_path):
    # the simulator's input-starved rank 0, with a log of tqdm lines: the GPU-busy share of the
    # step is t_gpu, the wait is t_input (the diagnosis names the input pipeline)
    log = tmp_path / "rank0.log"
    log.write_text("".join(f"{k}/500 [00:10<01:00, 2.00it/s]\n" for k in range(1, 30)))
    r = cli("--demo", "input-starved", "watch", "--pid", "41200", "--log", str(log),
            "--seconds", "30", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = _json(r)
    assert doc["diagnosis"]["primary"] == "input_pipeline"
    split = doc["step_split"]
    assert split["estimate"] and split["step_s"] == pytest.approx(0.5)
    parts = split["parts"]
    assert parts["t_gpu"] + parts["t_input"] == pytest.approx(0.5, abs=1e-3)
    assert 0 < parts["t_gpu"] < 0.4 and parts["t_sync"] is None
    assert "nsys profile" in split["measure_with"][0]
    text = cli("--demo", "input-starved", "watch", "--pid", "41200", "--log", str(log),
               "--seconds", "30").stdout  # fmt: skip
    assert "step split (an estimate, from outside): t_input" in text


def test_an_existing_output_file_is_added_to_and_only_the_new_lines_read(cli, tmp_path):
    log = tmp_path / "job.log"
    log.write_text("RuntimeError: CUDA out of memory (an earlier run)\n")
    r = watch(cli, tmp_path, "--json", "--output", str(log), "--", PY, "-c", "print('hello')")
    assert r.returncode == 0, r.stderr
    job = _json(r)["job"]
    assert job["output_tail"] == ["hello"] and job["output_events"] == []
    assert log.read_text().startswith("RuntimeError: CUDA out of memory (an earlier run)\n")


def test_a_recorded_watch_replays_to_the_same_job_alerts(cli, tmp_path):
    rec = tmp_path / "watch.jsonl"
    r = watch(cli, tmp_path, "--json", "--record", str(rec), "--output", str(tmp_path / "o.log"),
              "--", PY, TRAIN, "5", "0.02", "0")  # fmt: skip
    assert r.returncode == 0, r.stderr
    live = {a["kind"] for a in _json(r)["diagnosis"]["alerts"]}
    replayed = cli("--replay", str(rec), "diagnose", "--json")
    assert replayed.returncode in (0, 3), replayed.stderr  # 3: no GPU on this machine
    again = {a["kind"] for a in json.loads(replayed.stdout)["alerts"]}
    assert "job_cuda_error" in live and live == again


def test_output_tail_skips_a_backlog_it_cannot_keep_up_with(tmp_path):
    from gputop_diag.collect import job as J

    path = tmp_path / "flood.log"
    path.write_bytes(b"".join(b"line %07d\n" % k for k in range(300000)))  # 3.6 MB
    t = OutputTail(str(path), from_start=True)
    lines = [x for _, x in t.read()]
    assert lines[-1] == "line 0299999" and len(lines) <= J.READ_CHUNK // 13 + 1
    assert t.skipped_bytes > 0 and all(len(x) == 12 for x in lines)


def _workers(log):
    return [int(x) for x in log.read_text().split("\n")[0].split()[1:]]


def _reap_workers(pids):
    for w in pids:
        try:
            os.kill(w, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_workers_that_outlive_the_main_process_are_watched_not_called_ended(cli, tmp_path):
    # the main process SIGKILLs itself; its two workers go on (reparented), in its session
    log = tmp_path / "job.log"
    args = ("--output", str(log), "--seconds", "3", "--", PY, TRAIN, "2", "0.01", "0")
    try:
        r = watch(cli, tmp_path, "--json", *args, "SIGKILL", "--keep-workers")
        doc = _json(r)
        job, workers = doc["job"], _workers(log)
        assert doc["watch_ended_by"] == "seconds"  # not "ended": the workers still run
        assert job["exit_signal"] == "SIGKILL" and job["exit_code"] == 137 and job["running"]
        assert set(workers) <= {p["pid"] for p in job["processes"]}
        assert all(psutil_alive(w) for w in workers)
        _reap_workers(workers)
        r = watch(cli, tmp_path, *args, "SIGKILL", "--keep-workers")
        workers = _workers(log)
        assert "processes (2 now, 3 seen)" in r.stdout, r.stdout
        assert "main process killed by SIGKILL (exit code 137)" in r.stdout
        ended = [line for line in r.stdout.splitlines() if "(ended)" in line]
        assert len(ended) == 1  # the main process only
        assert not any(str(w) in line for w in workers for line in ended)
    finally:
        _reap_workers(workers)


def test_watching_goes_on_until_the_last_worker_ends(cli, tmp_path):
    log = tmp_path / "job.log"
    r = watch(
        cli, tmp_path, "--output", str(log), "--seconds", "30",
        "--", PY, TRAIN, "2", "0.01", "0", "SIGKILL", "--keep-workers=3",
    )  # fmt: skip
    workers = _workers(log)
    try:
        assert r.returncode == 137, r.stderr  # the main process's code
        assert "killed by SIGKILL (exit code 137)" in r.stdout
        assert "processes (0 now, 3 seen)" in r.stdout
        assert not any(psutil_alive(w) for w in workers)  # watched until they ended
    finally:
        _reap_workers(workers)


def test_watch_pid_keeps_descendants_that_are_reparented(tmp_path):
    import psutil

    from gputop_diag.sources import RealClock, RealProcFS, run_real_command

    sources = Sources(
        nvml=None,
        psutil=psutil,
        procfs=RealProcFS(),
        clock=RealClock(),
        run_command=run_real_command,
        hostname=lambda: "h",
    )
    # a parent that starts a sleeping child, then waits to be told to exit
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print(c.pid, flush=True)\n"
        "sys.stdin.readline()\n"
    )
    p = subprocess.Popen([PY, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    try:
        w = JobWatch.for_pid(sources, p.pid)
        s1 = w.sample()
        assert {p.pid, child} <= {q.pid for q in s1.processes}
        p.stdin.close()
        p.wait(5)
        s2 = w.sample()
        assert [q.pid for q in s2.processes] == [child] and s2.running
        assert not w.finished
        os.kill(child, signal.SIGKILL)
        for _ in range(100):
            if not psutil_alive(child):
                break
            time.sleep(0.02)
        s3 = w.sample()
        assert s3.processes == () and not s3.running and w.finished
    finally:
        _reap_workers([child])
        p.kill()
        p.wait()


def psutil_alive(pid):
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_command_not_found_leaves_no_empty_log(cli, tmp_path):
    log = tmp_path / "new.log"
    r = watch(cli, tmp_path, "--output", str(log), "--", "no-such-command-here")
    assert r.returncode == 127 and "command not found" in r.stderr
    assert not log.exists()
    log.write_text("earlier\n")  # a file that was there stays
    r = watch(cli, tmp_path, "--output", str(log), "--", "no-such-command-here")
    assert r.returncode == 127 and log.read_text() == "earlier\n"


def test_one_line_is_one_line(cli, tmp_path):
    r = watch(cli, tmp_path, "--output", str(tmp_path / "o.log"), "--", PY, "-c", "print('x')")
    assert r.returncode == 0, r.stderr
    assert "(1 line)" in r.stdout


def test_ended_processes_are_capped_with_a_count():
    from gputop_diag.diagnose.watch_summary import MAX_ENDED_KEPT, SeenProcesses
    from gputop_diag.model import JobProcess

    seen = SeenProcesses()
    main = JobProcess(pid=1)
    for pid in range(100, 100 + MAX_ENDED_KEPT + 30):  # a short-lived process a tick
        seen.update([main, JobProcess(pid=pid)])
    seen.update([main])
    assert len(seen.processes()) == 1 + MAX_ENDED_KEPT and seen.ended_not_kept == 30
    assert seen.count == 1 + MAX_ENDED_KEPT + 30  # every process seen, listed or not
    kept = {p.pid for p in seen.processes()}
    assert 1 in kept and 100 + MAX_ENDED_KEPT + 29 in kept and 100 not in kept  # newest kept


def test_a_process_read_as_it_exits_keeps_the_figures_it_ran_with():
    """A process read between its exit and its reaping (a zombie: no memory, 0 bytes) is listed
    with what it held while it ran, not 0 (a race a loaded machine hits)."""
    from gputop_diag.diagnose.watch_summary import SeenProcesses
    from gputop_diag.model import JobProcess

    seen = SeenProcesses()
    seen.update([JobProcess(7, name="w", rss_bytes=5 << 20, num_threads=4)])
    seen.update([JobProcess(7, name="w", rss_bytes=0, num_threads=1)])  # the zombie
    assert [(p.rss_bytes, p.num_threads) for p in seen.processes()] == [(5 << 20, 4)]
    seen.update([JobProcess(7, name="w", rss_bytes=6 << 20, num_threads=3)])  # still running
    assert [(p.rss_bytes, p.num_threads) for p in seen.processes()] == [(6 << 20, 3)]
    fresh = SeenProcesses()  # never seen running: what was read is what is listed
    fresh.update([JobProcess(8, rss_bytes=0)])
    assert [p.rss_bytes for p in fresh.processes()] == [0]


def test_durations_round_as_the_diagnosis_does():
    from gputop_diag.model.formats import clock

    assert clock(4.6) == "0:05"  # the evidence says "for 5 s"
    assert clock(59.5) == "1:00"


def test_a_command_that_ends_before_the_first_sample_is_still_seen():
    """On a loaded machine the main process may be gone before the first tick: it is the job's
    root all the same, listed as ended, not missing (it once made "3 seen" read "2 seen")."""
    from types import SimpleNamespace

    from gputop_diag.commands.watch import _roots_known_at_start
    from gputop_diag.diagnose.watch_summary import SeenProcesses
    from gputop_diag.model import JobProcess

    watch = SimpleNamespace(target="command", argv=("/usr/bin/python3", "train.py"), roots=(41,))
    seen = SeenProcesses()
    seen.update(_roots_known_at_start(watch))
    seen.update([JobProcess(42, ppid=1, depth=0, name="python3")])  # a worker, reparented
    procs = seen.processes()
    assert [p.pid for p in procs] == [41, 42] and seen.count == 2
    assert procs[0].name == "python3" and procs[0].cmdline == watch.argv
    # alive at the first tick: its sampled figures replace what was known at the start
    seen = SeenProcesses()
    seen.update(_roots_known_at_start(watch))
    seen.update([JobProcess(41, depth=0, name="python3", rss_bytes=1 << 20)])
    assert [(p.pid, p.rss_bytes) for p in seen.processes()] == [(41, 1 << 20)]
    slurm = SimpleNamespace(target="slurm", argv=None, roots=())
    assert _roots_known_at_start(slurm) == []


# -- stopping and leaving ----------------------------------------------------------------------


def _watching(log: Path, args: list[str], env: dict | None = None) -> subprocess.Popen:
    """`gputop-diag watch --output LOG ARGS` headless in a subprocess, once its job has started
    (the job prints `up` first)."""
    w = subprocess.Popen(
        [PY, "-m", "gputop_diag", "watch", "--interval", "0.2", "--output", str(log), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    for _ in range(500):
        if log.exists() and log.read_text().startswith("up"):
            break
        time.sleep(0.02)
    time.sleep(0.3)  # its loop is running
    return w


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


@pytest.mark.e2e
def test_ctrl_c_stops_the_started_job_and_watch_returns_its_status(tmp_path):
    """Ctrl-C (SIGINT to the watcher, as the terminal sends it) reaches the job as a shell
    passes it on: SIGINT to its process group; the job ends, watch says so and exits 130."""
    log = tmp_path / "job.log"
    code = "import time; print('up', flush=True); time.sleep(30)"
    w = _watching(log, ["--", PY, "-c", code])
    try:
        w.send_signal(signal.SIGINT)
        out, err = w.communicate(timeout=20)
        assert w.returncode == 130, err
        pid = int(re.search(r"SIGINT sent to the job's process group \(pid (\d+)\)", err)[1])
        assert _gone(pid)
        assert "Ctrl-C again sends SIGTERM" in err
        assert "killed by SIGINT" in out  # the summary's state
        assert f"the job (pid {pid}) ended: killed by SIGINT, exit code 130" in err
        assert "left running" not in err
    finally:
        if w.poll() is None:
            w.kill()


@pytest.mark.e2e
def test_ctrl_c_again_escalates_to_sigterm_then_sigkill(tmp_path):
    log = tmp_path / "job.log"
    code = (
        "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(30)"
    )
    w = _watching(log, ["--", PY, "-c", code])
    try:
        for _ in range(3):  # SIGINT and SIGTERM are ignored; SIGKILL cannot be
            w.send_signal(signal.SIGINT)
            time.sleep(0.5)
        out, err = w.communicate(timeout=20)
        assert w.returncode == 128 + signal.SIGKILL, err
        sent = re.findall(r"Ctrl-C: (\w+) sent", err)
        assert sent == ["SIGINT", "SIGTERM", "SIGKILL"], err
        assert "Ctrl-C sent SIGINT, then SIGTERM, then SIGKILL" in err
    finally:
        if w.poll() is None:
            w.kill()


@pytest.mark.e2e
def test_seconds_leaves_the_job_running_and_says_where(cli, tmp_path):
    """`--seconds N` stops watching, not the job: stderr names its pid and log, and it runs."""
    code = "import time; print('up', flush=True); time.sleep(30)"
    r = watch(
        cli, tmp_path, "--seconds", "1", "--output", str(tmp_path / "j.log"), "--", PY, "-c", code
    )
    m = re.search(r"left running \(watching stopped\): pid (\d+), output (\S+);", r.stderr)
    assert r.returncode == 0 and m, r.stderr
    pid = int(m[1])
    try:
        assert m[2] == str(tmp_path / "j.log") and not _gone(pid)
        assert "(watched for --seconds; the job goes on)" in r.stdout
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_the_log_goes_to_the_state_directory_by_default(tmp_path, monkeypatch):
    state = tmp_path / "state"
    path = default_log_path(environ={"XDG_STATE_HOME": str(state)})
    assert path.startswith(str(state / "gputop-diag") + "/") and path.endswith(".log")
    assert (state / "gputop-diag").is_dir() and (
        state / "gputop-diag"
    ).stat().st_mode & 0o777 == 0o700
    home = default_log_path(environ={"HOME": str(tmp_path / "h")})
    assert home.startswith(str(tmp_path / "h" / ".local" / "state" / "gputop-diag") + "/")
    monkeypatch.chdir(tmp_path)
    refused = tmp_path / "refused"
    refused.write_text("")  # a file where the directory should be: the temporary directory
    assert not default_log_path(environ={"XDG_STATE_HOME": str(refused)}).startswith(str(tmp_path))


@pytest.mark.e2e
def test_a_started_commands_log_path_is_shown_and_in_the_state_directory(cli, tmp_path):
    state = tmp_path / "state"
    r = cli("watch", "--", PY, "-c", "print('hi')", env={"XDG_STATE_HOME": str(state)})
    assert r.returncode == 0, r.stderr
    shown = re.search(r"output: (\S+)", r.stderr)[1]
    assert shown.startswith(str(state / "gputop-diag" / "gputop-watch-"))
    assert Path(shown).read_text() == "hi\n"
    r = cli(
        "watch", "--sanitize", "--", PY, "-c", "print('hi')", env={"XDG_STATE_HOME": str(state)}
    )
    assert str(tmp_path) not in r.stderr and "output: " in r.stderr  # its pseudonym


def test_ctrl_c_after_y_goes_on_from_sigterm_to_sigkill(tmp_path):
    """`y` (stop) sent SIGTERM already: the next Ctrl-C escalates, it never falls back to
    SIGINT."""
    w = JobWatch.for_command(
        Sources.real(), [PY, "-c", "import time; time.sleep(30)"], log_path=str(tmp_path / "j.log")
    )
    try:
        assert w.next_interrupt() == "SIGINT"
        w.stop(grace_s=5)
        assert w.exit_signal == "SIGTERM" and w.next_interrupt() == "SIGKILL"
        assert not w.alive() and w.interrupt() is None  # nothing left to signal
    finally:
        if w.popen.poll() is None:
            w.popen.kill()


def test_a_missing_log_is_a_usage_error_unless_waited_for(tmp_path, capsys):
    """`--log` names a file to read, as `xid --log` does: missing, it is one line and exit 2
    (it was "0 lines", exit 0); `--wait-for-log` waits for a file the job creates later, in a
    directory that exists, and says so."""
    from gputop_diag.cli import main

    me = str(os.getpid())
    missing = tmp_path / "train.log"
    assert main(["watch", "--pid", me, "--log", str(missing), "--no-tui"]) == 2
    err = capsys.readouterr().err
    assert f"--log {missing}: no such file" in err and "--wait-for-log" in err
    nodir = tmp_path / "no" / "train.log"
    assert main(["watch", "--pid", me, "--log", str(nodir), "--wait-for-log", "--no-tui"]) == 2
    assert f"no such directory {tmp_path / 'no'}" in capsys.readouterr().err
    assert main(["watch", "--pid", me, "--wait-for-log", "--no-tui"]) == 2
    assert "give --log FILE" in capsys.readouterr().err
    args = ["--demo", "input-starved", "watch", "--pid", "41200", "--log", str(missing)]
    assert main([*args, "--wait-for-log", "--no-tui", "--seconds", "3", "--json"]) == 0
    out = capsys.readouterr()
    assert f"output: {missing} (not there yet: waiting for it)" in out.err
    assert json.loads(out.out)["schema"] == "gputop-diag.watch/1"


def test_an_unwritable_record_or_output_is_said_before_the_job_starts(tmp_path, capsys):
    from gputop_diag.cli import main

    marker = tmp_path / "started"
    job = ["--", "sh", "-c", f"touch {shlex.quote(str(marker))}"]
    for option in ("--record", "--output"):
        bad = str(tmp_path / "no" / "file")
        assert main(["--demo", "idle", "watch", option, bad, "--seconds", "2", *job]) == 2
        assert f"{option} {bad}: cannot write" in capsys.readouterr().err
    time.sleep(0.2)
    assert not marker.exists()  # no job was started
