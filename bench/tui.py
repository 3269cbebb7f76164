"""The live view's cost, measured on the real program in a real terminal (tmux).

    python bench/tui.py [--seconds 60] [--scenario compute-bound]

Starts `gputop-diag --demo compute-bound` (8 GPUs, 1 s interval) in a 120x40 tmux pane whose
output is piped to a file, then prints: time to the first painted frame, CPU seconds used and
their share of one core, peak RSS, and the bytes written to the terminal per minute in steady
state (after the first 15 s). Targets: < 2 % of a core, < 120 MB RSS, first frame < 1.5 s,
< 10 KB of terminal output per minute.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psutil

SESSION = "gputop-diag-bench"
WARMUP_S = 15.0


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--scenario", default="compute-bound")
    ap.add_argument("--pane", default="1", help="pane key to show (1 Memory ... 5 Driver)")
    ap.add_argument("--low-bandwidth", action="store_true", help="run with --low-bandwidth")
    ap.add_argument(
        "--warmup",
        type=float,
        default=WARMUP_S,
        help="seconds before the steady state is measured (a history pane fills in ~60 s)",
    )
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        print("bench/tui.py needs tmux", file=sys.stderr)
        return 2
    out = tempfile.NamedTemporaryFile(prefix="gputop-tui-", suffix=".out", delete=False).name
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
    cmd = f"exec {sys.executable} -m gputop_diag --demo {args.scenario} --interval 1"
    if args.low_bandwidth:
        cmd += " --low-bandwidth"
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
    tmux("send-keys", "-t", SESSION, args.pane)
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
    total_cpu = cpu1
    tmux("send-keys", "-t", SESSION, "q")
    time.sleep(1.0)
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True, check=False)
    per_min = (bytes1 - bytes0) / steady * 60
    mode = "--low-bandwidth (2 s interval)" if args.low_bandwidth else "1 s interval"
    print(f"scenario {args.scenario}, pane {args.pane}, 120x40, {mode}, {args.seconds:.0f} s")
    print(
        f"first painted frame   {first_frame if first_frame else float('nan'):.2f} s "
        "(target < 1.5 s)"
    )
    print(
        f"CPU, steady state     {100 * (cpu1 - cpu0) / steady:.2f} % of one core "
        f"(target < 2 %); {total_cpu:.1f} CPU s in all, start-up included"
    )
    print(f"peak RSS              {hwm / 1024:.0f} MB (target < 120 MB)")
    print(f"terminal output       {per_min / 1024:.1f} KB/min in steady state (target < 10 KB)")
    os.unlink(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
