"""The live view's cost, measured on the real program in a real terminal (tmux).

    python bench/tui.py [--seconds 60] [--scenario compute-bound] [--pane 1 --pane 2]
                        [--low-bandwidth] [--sanitize] [--from-source]
    python bench/tui.py --others 100,2000,10000 [--no-children-files] [--seconds 60]
    python bench/tui.py --starts 9 [--from-source]
    python bench/tui.py --mock-nvml DIR [--mock-config YAML] [--others 0,2000] [--runs 3]
                        [--size 80x24] [--venv PATH] [--before-venv PATH] [--nvitop-venv PATH]

The package's bytecode is compiled first, as `pip install` does (`--from-source`: not; an
editable checkout under PYTHONDONTWRITEBYTECODE=1 then compiles every module on each start).
For each pane asked for (default: Memory and Utilization), starts `gputop-diag --demo
compute-bound` (8 GPUs, 1 s interval) in a 120x40 tmux pane whose output is piped to a file,
shows the pane, and prints: time to the first painted frame, CPU used in steady state as a
share of one core, peak RSS, the time a resize to 200x50 takes to be painted (and the RSS after
it), the bytes written to the terminal per minute in steady state
(after `--warmup` seconds; the default 15 s includes the Utilization pane's histories filling
up, which costs more than the steady state after they are full: `--warmup 70` measures that),
and the time from `q` to the program's exit. Targets: < 2 % of a core, < 120 MB RSS, first
frame <= 1.0 s, quit <= 0.5 s, <= 20 KB of terminal output per minute on every pane at a 1 s
interval. Then the RSS it compares with: a bare Textual app's in the same pane, and nvitop's
(`--nvitop-venv PATH`, where an NVIDIA driver lets it run; else the figure measured on an NVIDIA
machine, 32 MiB): the target there is <= 1.5x nvitop's.

With `--others`, the processes are real: for each count, that many idle processes and 8 stand-ins
for GPU ranks with 4 children each are spawned (bench/collect.py's), and the live view runs on
the 8 simulated GPUs of `compute-bound` whose processes are those ranks, reading them through
the real psutil and /proc; it prints the steady CPU at each count and its ratio to the first
(target: within 1.2x at 2,000 of its figure at 100). `--no-children-files` hides the kernel's
`children` files from the live view (a kernel built without them).

With `--mock-nvml DIR`, the live view runs without `--demo` on NVIDIA's mock NVML library
(https://github.com/NVIDIA/k8s-test-infra, `pkg/gpu/mocknvml`, built into DIR; its 8 H100s from
`--mock-config`, as `bench/startup.py` sets it), beside nvitop's live view on the same library
and a bare Textual app, each in a fresh tmux pane of `--size` (80x24), `--runs` times
interleaved at each count of `--others` idle processes spawned first (0 and 2,000: the machine's
own ~100 and ~2,100). Each program runs at its own defaults. Printed per program, medians: the
first frame with figures (our GPU rows, nvitop's header over its device table: the live view's
skeleton, drawn before the first tick, does not count), the steady CPU as a share of one core
(the commands a program runs included), the peak RSS; then the ratios and the targets (CPU
<= 0.8x nvitop's at ~100 processes, <= 1.0x at 2,000; RSS <= the bare app's + 20 MiB; first
frame <= 1 s). `--before-venv` runs a second installed copy in the same interleave.

    python bench/tui.py --headless 60 [--mock-nvml DIR] [--size 80x24] [--runs 3]
                        [--before-path DIR]

The live view's own cost per tick, without a terminal: the app runs headless (Textual's
`run_test`, which lays out and renders every frame but writes no bytes) at its own defaults, on
the mock library (`--mock-nvml`) or else the `compute-bound` demo, and after 5 ticks the next N
are measured: CPU milliseconds per tick of the whole process, of which the sampling thread's
tick (collect, judge, the view model), the main thread's (drawing, Textual) and the other
threads' (the slow sources: `squeue`, the driver chain, the kernel log).
`--before-path` (repeatable) runs another checkout of the package (say, a `git worktree` of the
code before a change) in the same interleave. Less noisy than the tmux figures: no terminal, no
pane.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SESSION = "gputop-diag-bench"
# a tmux server of this run's own: another bench (or a person's tmux) is never touched, and the
# panes get this process's environment, not a running server's
TMUX = ["tmux", "-L", f"gputop-diag-bench-{os.getpid()}"]
WARMUP_S = 15.0
PANE_NAMES = {"1": "Memory", "2": "Utilization", "3": "Mapping", "4": "Xid", "5": "Driver"}
TARGET_KB_MIN = 20.0


def tmux(*args: str) -> str:
    """Run a tmux command on the bench's own server (started on first use, held by an idle
    session so that it never exits between two panes); its error output on a failure."""
    global _SERVER
    if not _SERVER:
        subprocess.run([*TMUX, "new-session", "-d", "-s", "keep", "sleep 86400"], check=True)
        _SERVER = True
    r = subprocess.run([*TMUX, *args], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


_SERVER = False


def resize_s(width: int = 200, height: int = 50, timeout: float = 15.0) -> float | None:
    """Resize the tmux window and time until the new layout is painted: the footer on the last
    row and the side panel's border out past column 120 (None: not within `timeout`)."""
    tmux("resize-window", "-t", SESSION, "-x", str(width), "-y", str(height))
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        lines = tmux("capture-pane", "-p", "-t", SESSION).splitlines()
        if (
            len(lines) >= height
            and "quit" in lines[height - 1]
            and any(len(line) > 120 and line[120:].strip() for line in lines[3:10])
        ):
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


def compile_bytecode() -> None:
    """Compile the package's modules as `pip install` does, so that a start is timed as a user
    meets it: an editable checkout run with PYTHONDONTWRITEBYTECODE=1 compiles every one of its
    ~160 modules again on each start (0.3-0.5 s on a loaded 2-core machine), a cost no
    installed copy pays. The files go to the modules' own (git-ignored) __pycache__."""
    import compileall
    import importlib

    for name in ("gputop_diag", "gputop_diag.tui", "gputop_diag.widgets"):
        folder = os.path.dirname(importlib.import_module(name).__file__)
        compileall.compile_dir(folder, quiet=1)


def demo_command(args: argparse.Namespace) -> str:
    cmd = f"exec {sys.executable} -m gputop_diag --demo {args.scenario} --interval 1"
    if args.low_bandwidth:
        cmd += " --low-bandwidth"
    if args.sanitize:
        cmd += " --sanitize"
    return cmd


def measure(args: argparse.Namespace, pane: str, cmd: str) -> dict:
    out = tempfile.NamedTemporaryFile(prefix="gputop-tui-", suffix=".out", delete=False).name
    subprocess.run([*TMUX, "kill-session", "-t", SESSION], capture_output=True, check=False)
    t0 = time.monotonic()
    tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "40", cmd)
    tmux("pipe-pane", "-t", SESSION, "-o", f"cat >> {out}")
    pid = int(tmux("list-panes", "-t", SESSION, "-F", "#{pane_pid}").strip())
    proc = psutil.Process(pid)
    first_frame = None
    while time.monotonic() - t0 < 15 and first_frame is None:
        if "BOTTLENECK" in tmux("capture-pane", "-p", "-t", SESSION):
            first_frame = time.monotonic() - t0
        time.sleep(0.02)
    tmux("send-keys", "-t", SESSION, pane)
    time.sleep(max(0.0, args.warmup - (time.monotonic() - t0)))
    cpu0 = sum(proc.cpu_times()[:2])
    bytes0 = os.path.getsize(out)
    steady0 = time.monotonic()
    time.sleep(max(1.0, args.seconds - args.warmup))
    steady = time.monotonic() - steady0
    cpu1 = sum(proc.cpu_times()[:2])
    bytes1 = os.path.getsize(out)
    with open(f"/proc/{pid}/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    resized = resize_s()  # after the steady state: it does not count in the bytes above
    time.sleep(1.0)
    with open(f"/proc/{pid}/status") as f:
        rss_after = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
    quit_s = quit_time(proc)
    subprocess.run([*TMUX, "kill-session", "-t", SESSION], capture_output=True, check=False)
    os.unlink(out)
    return {
        "first_frame_s": first_frame,
        "cpu_pct": 100 * (cpu1 - cpu0) / steady,
        "cpu_s": cpu1,
        "rss_mb": hwm / 1024,
        "resize_s": resized,
        "rss_after_resize_mb": rss_after / 1024,
        "kb_min": (bytes1 - bytes0) / steady * 60 / 1024,
        "quit_s": quit_s,
    }


def quit_time(proc: psutil.Process, timeout: float = 10.0) -> float | None:
    """Press `q` and time until the program has exited (None: not within `timeout`)."""
    t0 = time.monotonic()
    subprocess.run([*TMUX, "send-keys", "-t", SESSION, "q"], capture_output=True, check=False)
    while time.monotonic() - t0 < timeout:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return time.monotonic() - t0
        except psutil.NoSuchProcess:
            return time.monotonic() - t0
        time.sleep(0.005)
    return None


def start_and_quit(cmd: str, runs: int) -> tuple[list[float], list[float]]:
    """`runs` starts of `cmd` in a fresh 120x40 tmux pane: the time to the first painted frame
    and, a second after it, from `q` to the program's exit."""
    frames: list[float] = []
    quits: list[float] = []
    for _ in range(runs):
        subprocess.run([*TMUX, "kill-session", "-t", SESSION], capture_output=True, check=False)
        t0 = time.monotonic()
        tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "40", cmd)
        proc = psutil.Process(int(tmux("list-panes", "-t", SESSION, "-F", "#{pane_pid}").strip()))
        while time.monotonic() - t0 < 15:
            if "BOTTLENECK" in tmux("capture-pane", "-p", "-t", SESSION):
                frames.append(time.monotonic() - t0)
                break
            time.sleep(0.01)
        time.sleep(1.0)
        q = quit_time(proc)
        if q is not None:
            quits.append(q)
        subprocess.run([*TMUX, "kill-session", "-t", SESSION], capture_output=True, check=False)
    return frames, quits


# A bare Textual program: a header, one Static and a footer (the framework's own floor).
BARE_TEXTUAL_APP = """
from textual.app import App
from textual.widgets import Footer, Header, Static
class Bare(App):
    def compose(self):
        yield Header()
        yield Static("BOTTLENECK")
        yield Footer()
Bare().run()
"""
NVITOP_MIB = 32.0  # nvitop's live view, as measured on an NVIDIA machine (it needs a driver)
# (the figures here are /proc's kB, which are KiB: printed as MiB)


def peak_rss_mb(cmd: str, seconds: float = 10.0) -> float | None:
    """Peak RSS of `cmd` run in a 120x40 tmux pane for `seconds` (None: it exited before)."""
    subprocess.run([*TMUX, "kill-session", "-t", SESSION], capture_output=True, check=False)
    tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "40", cmd)
    pid = int(tmux("list-panes", "-t", SESSION, "-F", "#{pane_pid}").strip())
    time.sleep(seconds)
    try:
        with open(f"/proc/{pid}/status") as f:
            hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    except (OSError, StopIteration):
        hwm = None
    subprocess.run([*TMUX, "kill-session", "-t", SESSION], capture_output=True, check=False)
    return None if hwm is None else hwm / 1024


def print_baselines(nvitop_venv: str | None) -> None:
    """What the live view's RSS compares with: a bare Textual program on this machine and
    nvitop (run where it can: it needs an NVIDIA driver)."""
    bare = peak_rss_mb(f"exec {sys.executable} -c '{BARE_TEXTUAL_APP}'")
    bare_mib = bare or float("nan")
    print(f"  a bare Textual app    {bare_mib:.1f} MiB peak RSS (header, Static, footer)")
    nvitop = None
    if nvitop_venv:
        nvitop = peak_rss_mb(f"exec {os.path.join(nvitop_venv, 'bin', 'nvitop')}")
    if nvitop is None:
        nvitop = NVITOP_MIB
        print(
            f"  nvitop                {nvitop:.0f} MiB (measured on an NVIDIA machine: it does "
            "not run without a driver)"
        )
    else:
        print(f"  nvitop                {nvitop:.1f} MiB peak RSS, measured here")
    print(f"  1.5x nvitop           {1.5 * nvitop:.0f} MiB")


def serve_ranks(pids: str, children_files: bool) -> int:
    """The live view over the real ranks `pids` (run inside the tmux pane by `--others`)."""
    from collect import HiddenChildren, sources_for_ranks

    from gputop_diag.sources import RealProcFS
    from gputop_diag.tui import run_app

    procfs = RealProcFS() if children_files else HiddenChildren()
    ranks = [int(x) for x in pids.split(",")]
    return run_app(sources_for_ranks(ranks, realtime=True, procfs=procfs), interval=1.0)


def by_process_count(args: argparse.Namespace) -> int:
    from collect import Spawned, processes_here

    counts = sorted(int(x) for x in args.others.split(",") if x)
    pane = (args.pane or ["1"])[0]
    kind = "hidden" if args.no_children_files else "read"
    print(
        f"live view over 8 real ranks x 4 children on 8 simulated GPUs, pane {pane} "
        f"({PANE_NAMES.get(pane, pane)}), 120x40, 1 s interval, {args.seconds:.0f} s, steady "
        f"state after {args.warmup:.0f} s; the kernel's children files {kind}"
    )
    print(f"{'others':>7} {'on /proc':>8} {'CPU, steady':>14} {'ratio':>6} {'peak RSS':>9}")
    spawned = Spawned()
    first = None
    try:
        for n in counts:
            spawned.grow_to(n)
            cmd = f"exec {sys.executable} {os.path.abspath(__file__)} --serve-ranks " + ",".join(
                map(str, spawned.rank_pids)
            )
            if args.no_children_files:
                cmd += " --no-children-files"
            here = processes_here()
            r = measure(args, pane, cmd)
            first = first or r["cpu_pct"]
            print(
                f"{n:>7} {here:>8} {r['cpu_pct']:>8.2f} % core {r['cpu_pct'] / first:>5.2f}x "
                f"{r['rss_mb']:>5.0f} MiB"
            )
    finally:
        spawned.close()
    return 0


# What each program shows once its first figures are drawn (the live view's skeleton, drawn
# before the first tick, holds none of these): our GPU rows, nvitop's header over its device
# table, the bare app's one Static.
FIGURES_DRAWN = {
    "gputop-diag": "GPU0",
    "gputop-diag, before": "GPU0",
    "nvitop": "NVITOP",
    "bare Textual": "BOTTLENECK",
}
TARGET_FIRST_FRAME_S = 1.0
TARGET_CPU_X = {"~100": 0.8, "2,000": 1.0}  # the live view's steady CPU over nvitop's
TARGET_RSS_OVER_BARE_MIB = 20.0


def cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of `proc` and of the children it has waited for (the commands a program
    runs, `squeue`, `journalctl`, `lspci`, are its cost too)."""
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def in_pane(cmd: str, marker: str, size: tuple[int, int], warmup: float, seconds: float) -> dict:
    """Run `cmd` in a fresh tmux pane of `size` for `seconds`: the time until `marker` is on
    the screen, the CPU it used from `warmup` to the end as a share of one core, and its peak
    RSS (VmHWM, MiB) at the end."""
    subprocess.run([*TMUX, "kill-session", "-t", SESSION], capture_output=True, check=False)
    t0 = time.monotonic()
    tmux("new-session", "-d", "-s", SESSION, "-x", str(size[0]), "-y", str(size[1]), cmd)
    pid = int(tmux("list-panes", "-t", SESSION, "-F", "#{pane_pid}").strip())
    proc = psutil.Process(pid)
    first_frame = None
    while time.monotonic() - t0 < min(15.0, warmup) and first_frame is None:
        if marker in tmux("capture-pane", "-p", "-t", SESSION):
            first_frame = time.monotonic() - t0
        time.sleep(0.02)
    time.sleep(max(0.0, warmup - (time.monotonic() - t0)))
    try:
        cpu0, steady0 = cpu_s(proc), time.monotonic()
        time.sleep(max(1.0, seconds - warmup))
        cpu1, steady = cpu_s(proc), time.monotonic() - steady0
        with open(f"/proc/{pid}/status") as f:
            hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
        cpu_pct, rss = 100 * (cpu1 - cpu0) / steady, hwm / 1024
    except (psutil.Error, OSError, StopIteration):  # it exited: no figure
        cpu_pct = rss = float("nan")
    quit_time(proc, timeout=3.0)
    subprocess.run([*TMUX, "kill-session", "-t", SESSION], capture_output=True, check=False)
    return {"first_frame_s": first_frame, "cpu_pct": cpu_pct, "rss_mib": rss}


def _median(xs: list[float | None]) -> float:
    vals = [x for x in xs if x is not None and x == x]
    return statistics.median(vals) if vals else float("nan")


def beside_nvitop(args: argparse.Namespace) -> int:
    """The live view on NVIDIA's mock NVML library (no --demo), nvitop's live view and a bare
    Textual app in turn, in a pane of the same size, `--runs` times interleaved at each count
    of other processes: first frame with figures, steady CPU, peak RSS; medians and ratios."""
    from collect import Spawned, processes_here
    from startup import mock_environment

    env = mock_environment(args.mock_nvml, args.mock_config)
    prefix = "exec env " + " ".join(f"{k}={v}" for k, v in env.items())
    ours = f"{prefix} {sys.executable} -m gputop_diag"
    if args.venv:
        ours = f"{prefix} {os.path.join(args.venv, 'bin', 'gputop-diag')}"
    nvitop = os.path.join(args.nvitop_venv or "/tmp/nvitop-venv", "bin", "nvitop")
    programs = {"gputop-diag": ours}
    if args.before_venv:  # another copy (the code before a change), in the same interleave
        programs["gputop-diag, before"] = f"{prefix} {os.path.join(args.before_venv, 'bin')}/"
        programs["gputop-diag, before"] += "gputop-diag"
    programs["nvitop"] = f"{prefix} {nvitop}"
    programs["bare Textual"] = f"exec {sys.executable} -c '{BARE_TEXTUAL_APP}'"
    size = tuple(int(x) for x in args.size.split("x"))
    counts = [int(x) for x in (args.others or "0,2000").split(",") if x]
    print(
        f"on NVIDIA's mock NVML ({env['LD_LIBRARY_PATH']}, {env.get('MOCK_NVML_CONFIG')}); "
        f"{args.size} tmux pane; each program at its own defaults (gputop-diag: 1 s interval; "
        f"nvitop: its panels every 0.5 s); {args.runs} runs interleaved per count, medians; "
        f"steady state from {args.warmup:.0f} s to {args.seconds:.0f} s; CPU includes the "
        f"commands a program runs; {os.cpu_count()} CPUs"
    )
    spawned = Spawned(ranks=0)  # the mock lists no GPU processes: the others are the machine
    try:
        for n in counts:
            spawned.grow_to(n)
            runs: dict[str, list[dict]] = {k: [] for k in programs}
            loads = [os.getloadavg()[0]]
            here = processes_here()
            for _ in range(args.runs):
                for name, cmd in programs.items():
                    # the bare app only for its first frame and RSS: a short run
                    secs = min(args.seconds, 12.0) if name == "bare Textual" else args.seconds
                    warm = min(args.warmup, secs - 2)
                    runs[name].append(in_pane(cmd, FIGURES_DRAWN[name], size, warm, secs))
                loads.append(os.getloadavg()[0])
            print(
                f"\n{n} others spawned, {here} processes on /proc; load average "
                f"{min(loads):.2f}-{max(loads):.2f} over the runs"
            )
            med = {
                name: {key: _median([r[key] for r in rs]) for key in rs[0]}
                for name, rs in runs.items()
            }
            print(f"  {'':<19} {'first frame':>11} {'CPU, steady':>14} {'peak RSS':>10}")
            for name, m in med.items():
                each = " ".join(f"{r['cpu_pct']:.2f}" for r in runs[name])
                print(
                    f"  {name:<19} {m['first_frame_s']:>9.2f} s {m['cpu_pct']:>7.2f} % core "
                    f"{m['rss_mib']:>6.1f} MiB   (CPU each run: {each})"
                )
            ratio = med["gputop-diag"]["cpu_pct"] / med["nvitop"]["cpu_pct"]
            which = "~100" if here < 1000 else "2,000"
            print(
                f"  CPU gputop-diag / nvitop: {ratio:.2f}x (target <= {TARGET_CPU_X[which]}x "
                f"with {which} processes)"
            )
            bare = med["bare Textual"]["rss_mib"]
            print(
                f"  RSS gputop-diag {med['gputop-diag']['rss_mib']:.1f} MiB, bare Textual "
                f"{bare:.1f} MiB + {TARGET_RSS_OVER_BARE_MIB:.0f} = "
                f"{bare + TARGET_RSS_OVER_BARE_MIB:.1f} MiB (target: at most that); nvitop "
                f"{med['nvitop']['rss_mib']:.1f} MiB"
            )
            print(
                f"  first frame with figures at {args.size}: gputop-diag "
                f"{med['gputop-diag']['first_frame_s']:.2f} s (target <= "
                f"{TARGET_FIRST_FRAME_S} s), nvitop {med['nvitop']['first_frame_s']:.2f} s"
            )
    finally:
        spawned.close()
    return 0


def headless_child(ticks: int, size: str, demo: bool) -> int:
    """Inside the child process: run the app headless and print one line of figures."""
    import asyncio
    import threading

    from gputop_diag.sources import Sources
    from gputop_diag.tui.app import GpuTopApp

    if demo:
        from gputop_diag import sim

        sources = sim.build("compute-bound", realtime=True)
    else:
        sources = Sources.real()
    app = GpuTopApp(sources)
    spent = {"tick": 0.0}
    tick = app.feeder.tick

    def timed():
        t0 = time.thread_time()
        try:
            return tick()
        finally:
            spent["tick"] += time.thread_time() - t0

    app.feeder.tick = timed
    width, height = (int(x) for x in size.split("x"))
    warm = 5

    def by_thread() -> dict[str, float]:
        """CPU seconds of each live thread, by its name (threads that ended are not listed)."""
        hz = os.sysconf("SC_CLK_TCK")
        out: dict[str, float] = {}
        for t in threading.enumerate():
            try:
                with open(f"/proc/self/task/{t.native_id}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[t.name] = out.get(t.name, 0.0) + (int(fields[11]) + int(fields[12])) / hz
        return out

    async def run() -> tuple[float, float, float, dict]:
        async with app.run_test(size=(width, height)):
            while app.sampling.collector is None or app.sampling.collector.ticks < warm:
                await asyncio.sleep(0.2)
            c0, k0, w0, t0 = time.process_time(), spent["tick"], time.monotonic(), by_thread()
            while app.sampling.collector.ticks < warm + ticks:
                await asyncio.sleep(0.2)
            c1, k1, w1, t1 = time.process_time(), spent["tick"], time.monotonic(), by_thread()
            threads = {k: v - t0.get(k, 0.0) for k, v in t1.items()}
            return c1 - c0, k1 - k0, w1 - w0, threads

    cpu, tick_cpu, wall, threads = asyncio.run(run())
    main = threads.get("MainThread", 0.0)
    print(f"HEADLESS {cpu / ticks * 1000:.3f} {tick_cpu / ticks * 1000:.3f} "
          f"{main / ticks * 1000:.3f} {wall:.1f}")  # fmt: skip
    for name, v in sorted(threads.items(), key=lambda kv: -kv[1]):
        print(f"  thread {name}: {v / ticks * 1000:.2f} ms/tick")
    return 0


def headless(args: argparse.Namespace) -> int:
    """`--headless N`: CPU ms per tick of the live view run headless, `--runs` interleaved."""
    env = dict(os.environ)
    where = "the compute-bound demo"
    if args.mock_nvml:
        from startup import mock_environment

        env.update(mock_environment(args.mock_nvml, args.mock_config))
        where = f"NVIDIA's mock NVML ({env['LD_LIBRARY_PATH']})"
    copies: dict[str, str | None] = {"this checkout": None}
    for path in args.before_path or ():
        copies[os.path.basename(path.rstrip("/")) or path] = path
    print(
        f"headless live view on {where}, {args.size}, its default 1 s interval; {args.headless} "
        f"ticks after 5, {args.runs} runs interleaved, medians; CPU ms per tick of the whole "
        f"process; {os.cpu_count()} CPUs"
    )
    got: dict[str, list[tuple[float, float, float]]] = {k: [] for k in copies}
    loads = [os.getloadavg()[0]]
    for _ in range(args.runs):
        for name, path in copies.items():
            e = dict(env)
            if path:
                e["PYTHONPATH"] = path
            argv = [sys.executable, os.path.abspath(__file__), "--headless-child",
                    str(args.headless), "--size", args.size]  # fmt: skip
            if not args.mock_nvml:
                argv.append("--demo-child")
            r = subprocess.run(argv, env=e, capture_output=True, text=True, check=False)
            line = next((x for x in r.stdout.splitlines() if x.startswith("HEADLESS")), None)
            if line is None:
                print(f"  {name}: no figures\n{r.stderr[-2000:]}", file=sys.stderr)
                continue
            cpu, tick, main = (float(x) for x in line.split()[1:4])
            got[name].append((cpu, tick, main))
            loads.append(os.getloadavg()[0])
    print(f"  load average {min(loads):.2f}-{max(loads):.2f} over the runs")
    for name, rs in got.items():
        if not rs:
            continue
        cpu = statistics.median(r[0] for r in rs)
        tick = statistics.median(r[1] for r in rs)
        main = statistics.median(r[2] for r in rs)
        each = " ".join(f"{r[0]:.2f}" for r in rs)
        print(
            f"  {name:<14} {cpu:6.2f} ms/tick: sampling tick {tick:5.2f}, main thread (drawing, "
            f"Textual) {main:5.2f}, other threads {cpu - tick - main:5.2f}   (each run: {each})"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--scenario", default="compute-bound")
    ap.add_argument(
        "--pane",
        action="append",
        help="pane key to show (1 Memory ... 5 Driver); repeat for several (default 1 and 2)",
    )
    ap.add_argument("--low-bandwidth", action="store_true", help="run with --low-bandwidth")
    ap.add_argument(
        "--sanitize", action="store_true", help="run with --sanitize (every tick sanitized)"
    )
    ap.add_argument(
        "--warmup",
        type=float,
        default=WARMUP_S,
        help="seconds before the steady state is measured (the Utilization pane's histories "
        "fill in ~50-130 s, depending on the width)",
    )
    ap.add_argument(
        "--others",
        metavar="N,N,...",
        help="spawn this many other processes (each count in turn) and 8 real ranks; measure the "
        "live view over them (e.g. 100,2000,10000)",
    )
    ap.add_argument(
        "--no-children-files",
        action="store_true",
        help="with --others: hide the kernel's children files from the live view",
    )
    ap.add_argument(
        "--from-source",
        action="store_true",
        help="do not compile the package's bytecode first (a checkout that cannot write it "
        "then compiles every module on each start)",
    )
    ap.add_argument(
        "--starts",
        type=int,
        metavar="N",
        help="only start and quit the demo N times: the first frame and quit, median and max",
    )
    ap.add_argument(
        "--nvitop-venv",
        help="a virtual environment with nvitop installed: its RSS is measured beside ours "
        "(where a driver lets it run)",
    )
    ap.add_argument(
        "--mock-nvml",
        metavar="DIR",
        type=Path,
        help="run the live view (no --demo) and nvitop's on NVIDIA's mock NVML library built "
        "into DIR, beside a bare Textual app; --others N,... spawns N idle processes first "
        "(default 0,2000)",
    )
    ap.add_argument(
        "--mock-config",
        metavar="YAML",
        type=Path,
        help="the mock library's GPUs (default: its H100 configuration beside DIR)",
    )
    ap.add_argument("--runs", type=int, default=3, help="with --mock-nvml: runs per count")
    ap.add_argument("--size", default="80x24", help="with --mock-nvml: the pane (default 80x24)")
    ap.add_argument("--venv", help="with --mock-nvml: run gputop-diag from this environment")
    ap.add_argument(
        "--before-venv",
        help="with --mock-nvml: also run the gputop-diag installed here (say, the code before a "
        "change) in the same interleave",
    )
    ap.add_argument(
        "--headless",
        type=int,
        metavar="N",
        help="CPU ms per tick of the live view run headless over N ticks (no tmux)",
    )
    ap.add_argument(
        "--before-path",
        action="append",
        help="with --headless: also run the package found under this directory (PYTHONPATH); "
        "repeat for several",
    )
    ap.add_argument("--serve-ranks", help=argparse.SUPPRESS)  # inside the pane: the live view
    ap.add_argument("--headless-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--demo-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.headless_child:
        return headless_child(args.headless_child, args.size, args.demo_child)
    if args.headless:
        return headless(args)
    if args.serve_ranks:
        return serve_ranks(args.serve_ranks, not args.no_children_files)
    if shutil.which("tmux") is None:
        print("bench/tui.py needs tmux", file=sys.stderr)
        return 2
    if not args.from_source:
        compile_bytecode()
    try:
        if args.mock_nvml:
            return beside_nvitop(args)
        return by_mode(args)
    finally:
        subprocess.run([*TMUX, "kill-server"], capture_output=True, check=False)


def by_mode(args: argparse.Namespace) -> int:
    if args.others:
        return by_process_count(args)
    if args.starts:
        frames, quits = start_and_quit(demo_command(args), args.starts)
        how = "compiled from source" if args.from_source else "bytecode compiled first"
        print(f"scenario {args.scenario}, 120x40, {how}, {args.starts} starts (median, max)")
        for name, xs, target in (("first painted frame", frames, 1.0), ("quit", quits, 0.5)):
            mid = statistics.median(xs) if xs else float("nan")
            print(f"  {name:<21} {mid:.2f} s, max {max(xs, default=float('nan')):.2f} s "
                  f"(target <= {target} s)")  # fmt: skip
        return 0
    mode = "--low-bandwidth (2 s interval)" if args.low_bandwidth else "1 s interval"
    mode += ", compiled from source" if args.from_source else ", bytecode compiled first"
    if args.sanitize:
        mode += ", --sanitize"
    for pane in args.pane or ["1", "2"]:
        r = measure(args, pane, demo_command(args))
        name = PANE_NAMES.get(pane, pane)
        print(
            f"scenario {args.scenario}, pane {pane} ({name}), 120x40, {mode}, "
            f"{args.seconds:.0f} s, steady state after {args.warmup:.0f} s"
        )
        ff = r["first_frame_s"]
        print(f"  first painted frame   {ff if ff else float('nan'):.2f} s (target <= 1.0 s)")
        print(
            f"  CPU, steady state     {r['cpu_pct']:.2f} % of one core (target < 2 %); "
            f"{r['cpu_s']:.1f} CPU s in all, start-up included"
        )
        print(f"  peak RSS              {r['rss_mb']:.1f} MiB (target < 120 MB, 114 MiB)")
        rs = r["resize_s"]
        print(
            f"  resize to 200x50      {rs if rs is not None else float('nan'):.2f} s to repaint; "
            f"RSS after it {r['rss_after_resize_mb']:.1f} MiB"
        )
        print(
            f"  terminal output       {r['kb_min']:.1f} KB/min in steady state "
            f"(target <= {TARGET_KB_MIN:.0f} KB)"
        )
        qs = r["quit_s"]
        print(
            f"  quit                  {qs if qs is not None else float('nan'):.2f} s from q to "
            "the program's exit (target <= 0.5 s)"
        )
    print("RSS beside (the issue's target: <= 1.5x nvitop)")
    print_baselines(args.nvitop_venv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
