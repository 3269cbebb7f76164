"""The live view's cost, measured on the real program in a real terminal (tmux).

    python bench/tui.py [--seconds 60] [--scenario compute-bound] [--pane 1 --pane 2]
                        [--low-bandwidth] [--sanitize] [--from-source]
    python bench/tui.py --others 100,2000,10000 [--no-children-files] [--seconds 60]
    python bench/tui.py --starts 9 [--from-source]

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

import psutil

SESSION = "gputop-diag-bench"
WARMUP_S = 15.0
PANE_NAMES = {"1": "Memory", "2": "Utilization", "3": "Mapping", "4": "Xid", "5": "Driver"}
TARGET_KB_MIN = 20.0


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


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
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
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
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
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
    subprocess.run(["tmux", "send-keys", "-t", SESSION, "q"], capture_output=True, check=False)
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
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
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
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
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
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
    tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "40", cmd)
    pid = int(tmux("list-panes", "-t", SESSION, "-F", "#{pane_pid}").strip())
    time.sleep(seconds)
    try:
        with open(f"/proc/{pid}/status") as f:
            hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    except (OSError, StopIteration):
        hwm = None
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
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
    ap.add_argument("--serve-ranks", help=argparse.SUPPRESS)  # inside the pane: the live view
    args = ap.parse_args()
    if args.serve_ranks:
        return serve_ranks(args.serve_ranks, not args.no_children_files)
    if shutil.which("tmux") is None:
        print("bench/tui.py needs tmux", file=sys.stderr)
        return 2
    if not args.from_source:
        compile_bytecode()
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
