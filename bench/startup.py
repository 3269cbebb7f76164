"""Start-up cost: whole-process wall time of the quick commands, hyperfine-style.

    python bench/startup.py [--runs N] [--venv PATH] [--nvitop-venv PATH]
    python bench/startup.py --mock-nvml DIR [--mock-config YAML] [--runs N] [--before-venv PATH]

Runs, from the virtual environment PATH (default: the one running this script; give a venv
where gputop-diag is pip-installed, not editable, to leave out the editable finder's cost),

- `python -c pass` (the interpreter's own start-up: the floor),
- `gputop-diag --version`,
- `gputop-diag --help`,
- `gputop-diag --demo idle snapshot --json` (the simulator's 8 GPUs),
- `gputop-diag snapshot --json` (this machine's NVML, one reading; without a driver it exits 3
  after the host figures), and with `--rates` (two readings: NVML's GPM figures need them 0.1 s
  apart),

N times each (default 10, after one untimed warm-up run each; the runs of the commands are
interleaved, so a load that comes and goes touches them alike) and prints the median, min and max
wall time of each process.

Bytecode: the commands run with PYTHONPYCACHEPREFIX set to a fresh temporary directory and
PYTHONDONTWRITEBYTECODE unset, so the warm-up run compiles every module once and the timed runs
read bytecode, as after `pip install` (which compiles at install time). Without this an editable
install under PYTHONDONTWRITEBYTECODE=1 compiles every module of ours it imports from source on
every run (0.05 s of the demo snapshot on a 2-core machine). `--env-as-is` keeps the environment
as it is. An editable install also pays for its import finder (about 15 ms, in `python -c pass`
too).

With `--nvitop-venv PATH` (default: /tmp/nvitop-venv when it exists; make it with
`python -m venv /tmp/nvitop-venv && /tmp/nvitop-venv/bin/pip install nvitop`) it also times
`python -c "import nvitop"` and `nvitop --once` there and prints the ratio of the snapshot to
each. `nvitop --once` needs an NVIDIA driver: without one it fails at once (exit 1), and its time
is then only its import plus the failure, not a sample of GPUs; the table says so.

With `--mock-nvml DIR`, both programs run on NVIDIA's mock NVML library
(https://github.com/NVIDIA/k8s-test-infra, `pkg/gpu/mocknvml`, built into DIR): every command
gets `LD_LIBRARY_PATH=DIR` and `MOCK_NVML_CONFIG=YAML` (`--mock-config`, default the library's
H100 configuration beside DIR when it is there), so `gputop-diag snapshot --json` and
`nvitop --once` both read its 8 H100s, and the ratio compares two samples of the same GPUs.

With `--before-venv PATH` (another installed copy, e.g. the previous commit's, `pip install`ed
into PATH), its `snapshot --json` (and `--demo idle snapshot --json`) run in the same interleave,
named `before: ...`, and the table ends with each one's change.

Figures only: nothing here passes or fails (the targets: `--help` at most 0.15 s, the snapshot at
most 1.2x `nvitop --once`; printed beside the ratios).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_NVITOP_VENV = Path("/tmp/nvitop-venv")
# where the mock library's source keeps its configurations, from the build directory DIR
MOCK_CONFIG = "k8s-test-infra/pkg/gpu/mocknvml/configs/mock-nvml-config-h100.yaml"
TARGET_SNAPSHOT_X = 1.2  # `snapshot --json` at most this times `nvitop --once`


def mock_environment(lib: Path, config: Path | None) -> dict[str, str]:
    """The variables that put NVIDIA's mock NVML library under both programs: its directory
    first on the loader's path, and the YAML file that describes its GPUs."""
    if not (lib / "libnvidia-ml.so.1").exists():
        raise SystemExit(f"no libnvidia-ml.so.1 in {lib}")
    if config is None:
        guess = lib.parent / MOCK_CONFIG
        config = guess if guess.exists() else None
    env = {"LD_LIBRARY_PATH": str(lib)}
    if config is not None:
        env["MOCK_NVML_CONFIG"] = str(config)
    elif "MOCK_NVML_CONFIG" not in os.environ:
        raise SystemExit("the mock library needs --mock-config YAML (or MOCK_NVML_CONFIG)")
    return env


def _bin(venv: Path, name: str) -> str:
    return str(venv / ("Scripts" if os.name == "nt" else "bin") / name)


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    r = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False
    )
    return time.perf_counter() - t0, r.returncode


def measure(
    cases: dict[str, list[str]], runs: int, env: dict[str, str]
) -> dict[str, tuple[list[float], set[int]]]:
    """Wall times of each case, the cases interleaved run by run, after one warm-up each."""
    for argv in cases.values():
        time_once(argv, env)
    out: dict[str, tuple[list[float], set[int]]] = {k: ([], set()) for k in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            dt, rc = time_once(argv, env)
            out[name][0].append(dt)
            out[name][1].add(rc)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10, help="timed runs of each command (default 10)")
    p.add_argument(
        "--venv",
        type=Path,
        default=Path(sys.prefix),
        help="the virtual environment gputop-diag is installed in (default: this one)",
    )
    p.add_argument(
        "--nvitop-venv",
        type=Path,
        default=DEFAULT_NVITOP_VENV if DEFAULT_NVITOP_VENV.exists() else None,
        help="a virtual environment with nvitop installed (default: /tmp/nvitop-venv if it exists)",
    )
    p.add_argument(
        "--env-as-is",
        action="store_true",
        help="do not give the commands a bytecode cache (see the module's docstring)",
    )
    p.add_argument(
        "--mock-nvml",
        type=Path,
        metavar="DIR",
        help="run both programs on NVIDIA's mock NVML library built into DIR",
    )
    p.add_argument(
        "--mock-config",
        type=Path,
        metavar="YAML",
        help="the mock library's GPUs (default: its H100 configuration beside DIR)",
    )
    p.add_argument(
        "--before-venv",
        type=Path,
        metavar="PATH",
        help="another installed copy whose snapshot runs in the same interleave (before/after)",
    )
    args = p.parse_args(argv)

    gputop = _bin(args.venv, "gputop-diag")
    if not Path(gputop).exists():
        print(f"no gputop-diag in {args.venv}", file=sys.stderr)
        return 2
    cases = {
        "python -c pass": [_bin(args.venv, "python"), "-c", "pass"],
        "gputop-diag --version": [gputop, "--version"],
        "gputop-diag --help": [gputop, "--help"],
        "gputop-diag --demo idle snapshot --json": [gputop, "--demo", "idle", "snapshot", "--json"],
        # the machine's own NVML: without a driver it fails at once (exit 3), like nvitop --once
        "gputop-diag snapshot --json": [gputop, "snapshot", "--json"],
        # two readings: also each process's CPU %, NVLink throughput and NVML's GPM figures
        "gputop-diag snapshot --json --rates": [gputop, "snapshot", "--json", "--rates"],
        # the floor of any GPM figure: the interpreter, pynvml and nvmlInit, then 0.1 s
        "python -c 'import pynvml; nvmlInit()'": [
            _bin(args.venv, "python"),
            "-c",
            "import pynvml; pynvml.nvmlInit()",
        ],
    }
    before = {}
    if args.before_venv is not None:
        old = _bin(args.before_venv, "gputop-diag")
        for name in ("gputop-diag --demo idle snapshot --json", "gputop-diag snapshot --json"):
            before[name] = f"before: {name}"
            cases[before[name]] = [old, *cases[name][1:]]
    if args.nvitop_venv is not None:
        cases['nvitop: python -c "import nvitop"'] = [
            _bin(args.nvitop_venv, "python"),
            "-c",
            "import nvitop",
        ]
        cases["nvitop --once"] = [_bin(args.nvitop_venv, "nvitop"), "--once"]

    env = dict(os.environ)
    machine = "this machine's NVML"
    if args.mock_nvml is not None:
        env.update(mock_environment(args.mock_nvml, args.mock_config))
        machine = f"NVIDIA's mock NVML ({env['LD_LIBRARY_PATH']}, {env['MOCK_NVML_CONFIG']})"
    with tempfile.TemporaryDirectory(prefix="startup-pycache-") as cache:
        if args.env_as_is:
            bytecode = "environment as is"
            if env.get("PYTHONDONTWRITEBYTECODE"):
                bytecode += " (PYTHONDONTWRITEBYTECODE is set: modules without bytecode compile "
                bytecode += "on every run)"
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = cache
            bytecode = "bytecode cached by the warm-up run"
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"{args.runs} runs each (+1 warm-up), interleaved; {os.cpu_count()} CPUs, "
            f"load average {load:.2f} at the start; {bytecode}; gputop-diag from {args.venv}; "
            f"{machine}"
        )
        results = measure(cases, args.runs, env)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"load average {load:.2f} at the end")

    width = max(len(k) for k in cases)
    print(f"\n{'command':<{width}}  {'median ms':>9}  {'min ms':>7}  {'max ms':>7}  exit")
    for name, (times, rcs) in results.items():
        print(
            f"{name:<{width}}  {statistics.median(times) * 1e3:>9.1f}  {min(times) * 1e3:>7.1f}"
            f"  {max(times) * 1e3:>7.1f}  {','.join(str(c) for c in sorted(rcs))}"
        )

    for name, old in before.items():
        now, then = statistics.median(results[name][0]), statistics.median(results[old][0])
        print(f"{name}: {then * 1e3:.1f} -> {now * 1e3:.1f} ms (medians, {now / then:.2f}x)")
    if args.nvitop_venv is not None:
        print()
        for ours in (
            "gputop-diag --demo idle snapshot --json",
            "gputop-diag snapshot --json",
            "gputop-diag snapshot --json --rates",
        ):
            mine = statistics.median(results[ours][0])
            for name in ('nvitop: python -c "import nvitop"', "nvitop --once"):
                other = statistics.median(results[name][0])
                target = ""
                if ours == "gputop-diag snapshot --json" and name == "nvitop --once":
                    target = f" (target <= {TARGET_SNAPSHOT_X}x)"
                print(f"{ours} / {name}: {mine / other:.2f}x (medians){target}")
        waits = statistics.median(
            results["gputop-diag snapshot --json --rates"][0]
        ) - statistics.median(results["gputop-diag snapshot --json"][0])
        floor = statistics.median(results["python -c 'import pynvml; nvmlInit()'"][0]) + 0.1
        nvitop = statistics.median(results["nvitop --once"][0])
        print(
            f"--rates costs {waits * 1e3:.0f} ms more (medians): NVML's GPM figures (SM "
            "activity, DRAM bandwidth, tensor pipes) need two samples more than 100 ms apart "
            "(https://docs.nvidia.com/deploy/nvml-api/group__nvmlGpmFunctions.html); the first "
            "are taken right after nvmlInit (collect/nvml/head.py), so the wait overlaps the "
            "imports and the first reading of the processes' CPU and NVLink (at least 0.05 s "
            "before the second). One reading, the default (as nvitop --once, which reads no "
            "GPM), averages the host's CPU % and disk rates from the command's start "
            "(collect/host_head.py)"
        )
        print(
            f"no program can give a GPM figure before the interpreter, pynvml, nvmlInit and "
            f"0.1 s: {floor * 1e3:.0f} ms here, {floor / nvitop:.2f}x nvitop --once"
        )
        if results["nvitop --once"][1] != {0}:
            print(
                "\nnvitop --once failed (no NVIDIA driver here?): its time is its start-up and "
                "the failure to load NVML, not a sample of the GPUs. The nearest pair is "
                "`gputop-diag snapshot --json` (the machine's NVML: the same failure, exit 3, "
                "then one reading of the host); with --rates it also waits for a second "
                "reading; `--demo idle` samples the simulator's 8 GPUs instead."
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
