"""Stand-ins for the commands the tool runs: `journalctl`, `dmesg`, and Slurm's `squeue`,
`scontrol` and `sacct` (in `fake_slurm.py`).

Each answers in the real program's output format with what the machine logged up to the clock's
now (`journalctl` in the short formats and `-o json`; a match such as `_TRANSPORT=kernel` is
taken as the kernel log it already is). A program the scenario lacks raises FileNotFoundError,
as when it is not installed: Slurm exists only in scenarios that have Slurm jobs.
`journalctl --file`/`--directory` reads a real journal, so it runs the real program.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timezone

from ..driver.compat import (
    ERR_NO_DRIVER_TORCH,
    ERR_TORCH_TOO_OLD,
    cuda_tuple,
    max_cuda_for_driver,
    runtime_verdict,
)
from ..driver.kernel_images import check
from ..driver.wording import ERR_TORCH_CAPABILITY
from ..sources import CommandResult, run_real_command
from .fake_slurm import FakeSlurm
from .fake_slurm import option as _opt
from .machine import SimMachine

_MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
_DAYS = "Mon Tue Wed Thu Fri Sat Sun".split()


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def parse_time(val: str, now: float) -> float | None:
    """journalctl's time specs: `@EPOCH`, ISO dates and times, `-5min`, `today`, `now`."""
    val = val.strip()
    if val.startswith("@"):
        try:
            return float(val[1:])
        except ValueError:
            return None
    if val in ("now", "today", "yesterday"):
        day = now - now % 86400
        return {"now": now, "today": day, "yesterday": day - 86400}[val]
    m = re.fullmatch(r"-(\d+)\s*(s|sec|min|m|h|hours?|d|days?)", val)
    if m:
        unit = m.group(2)[0]
        return now - int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    try:
        dt = datetime.fromisoformat(val.replace(" ", "T"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


# What PyTorch warns when libcuda and the kernel module differ (torch.cuda.is_available()).
MISMATCH_WARNING = (
    "CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
    "functions before calling NumCudaDevices() that might have already set an error? Error 803: "
    "system has unsupported display driver / cuda driver combination"
)


LIBCUDA_MISSING = "libcuda.so.1: cannot open shared object file: No such file or directory"
# Where the fault `env-libcuda:VERSION` puts the libcuda the user's LD_LIBRARY_PATH picks
ENV_LIBCUDA_DIR = "/opt/site/nvidia-{version}/lib"


class FakeCommands:
    """`run_command(argv, timeout) -> CommandResult` over the simulated machine."""

    def __init__(self, machine: SimMachine, hostname: str) -> None:
        self._m = machine
        self._host = hostname
        self._slurm = FakeSlurm(machine, hostname)

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        argv = list(argv)
        if not argv:
            raise FileNotFoundError(2, "No such file or directory", "")
        prog = argv[0].rsplit("/", 1)[-1]
        if prog == "journalctl":
            if _opt(argv, "--file", "--directory", "-D") is not None:
                return run_real_command(argv, timeout)
            return self._journalctl(argv)
        if prog == "dmesg":
            return self._dmesg(argv)
        if prog in ("squeue", "scontrol", "sacct") and self._m.slurm:
            return getattr(self._slurm, prog)(argv)
        health = getattr(self._m, "health", None)
        if health is not None and prog in ("lspci", "systemctl", "nv-fabricmanager"):
            answer = health.command(prog, argv)
            if answer is not None:
                return answer
        if prog == "env" and argv[1:2] == ["-i"]:  # a scrubbed run: env -i VAR=VALUE... argv
            rest = argv[2:]
            while rest and "=" in rest[0] and not rest[0].startswith("-"):
                rest = rest[1:]
            return self._python(rest, clean=True) or self._missing(rest)
        return self._python(argv, clean=False) or self._missing(argv)

    @staticmethod
    def _missing(argv: list[str]) -> CommandResult:
        raise FileNotFoundError(2, "No such file or directory", argv[0] if argv else "")

    def _python(self, argv: list[str], clean: bool) -> CommandResult | None:
        """The jobs' interpreter answering the framework probe or the CUDA initialisation
        probe (`--clean-env`), in the user's environment or a scrubbed one."""
        prog = argv[0].rsplit("/", 1)[-1] if argv else ""
        if not (prog.startswith("python") and argv[1:2] == ["-c"] and len(argv) > 2):
            return None
        if "GPUTOP_DIAG_PROBE" in argv[2]:
            return self._python_probe(argv[0], clean)
        if "GPUTOP_DIAG_CUDA_INIT" in argv[2]:
            return self._cuda_init(clean)
        return None

    def _cuda_init(self, clean: bool) -> CommandResult:
        """`cuInit(0)` through libcuda.so.1 on the simulated machine: the driver's library in a
        clean environment; in the user's, the one its LD_LIBRARY_PATH picks under the fault
        `env-libcuda:VERSION`."""
        m = self._m
        other = None if clean else getattr(m, "env_libcuda", None)
        out: dict = {"variables": {} if clean else self._user_variables()}
        if m.no_driver and other is None:
            out.update(loaded=False, error_text=LIBCUDA_MISSING)
            return CommandResult(0, "GPUTOP_DIAG_CUDA_INIT " + json.dumps(out) + "\n")
        version = other or m.driver_version
        lib = (
            f"{ENV_LIBCUDA_DIR.format(version=other)}/libcuda.so.{other}"
            if other
            else f"/usr/lib/x86_64-linux-gnu/libcuda.so.{m.driver_version}"
        )
        code = 0
        if m.module_version is None:
            code = 100  # no kernel module: no device the driver can open
        elif version != m.module_version:
            code = 803
        cuda = max_cuda_for_driver(other) if other else None
        driver_cuda = cuda[0] * 1000 + cuda[1] * 10 if cuda else m.cuda_version
        out.update(loaded=True, library=lib, driver_cuda=driver_cuda, code=code)
        if code == 0:
            out.update(count_code=0, device_count=len(m.gpus))
        return CommandResult(0, "GPUTOP_DIAG_CUDA_INIT " + json.dumps(out) + "\n")

    def _user_variables(self) -> dict[str, str]:
        """The scrubbed variables the user's environment holds on the simulated machine."""
        other = getattr(self._m, "env_libcuda", None)
        out = {"CONDA_DEFAULT_ENV": "train", "CONDA_PREFIX": "/opt/conda/envs/train"}
        if other:
            out["LD_LIBRARY_PATH"] = ENV_LIBCUDA_DIR.format(version=other)
        return out

    def _python_probe(self, interpreter: str, clean: bool = False) -> CommandResult:
        """The jobs' interpreter answering `gputop-diag driver --probe-python`: its torch build
        and whether it initialises CUDA on this driver, with PyTorch's warning when it cannot."""
        m = self._m
        planted = getattr(m, "probe_answer", None)  # sim/plant.py: what a planted one says
        if planted is not None:
            return planted
        if getattr(m, "probe_torch_cpu", False):  # the fault `probe-torch:cpu`
            return self._cpu_torch(interpreter)
        cuda = next((p.torch_cuda for p in m.procs.values() if p.cuda_runtime), "12.8")
        out = {
            "python": "3.11.10",
            "executable": interpreter,
            "torch": f"2.9.0+cu{cuda.replace('.', '')}",
            "torch_cuda": cuda,
            "cudnn": 91002,
            "warnings": [],
        }
        other = None if clean else getattr(m, "env_libcuda", None)  # LD_LIBRARY_PATH's libcuda
        if (m.no_driver and other is None) or m.module_version is None:
            ok, warning = False, ERR_NO_DRIVER_TORCH
        elif m.module_version != (other or m.driver_version):
            ok, warning = False, MISMATCH_WARNING
        else:
            v = runtime_verdict(cuda, cuda_tuple(m.cuda_version), m.driver_version)
            ok = v is None or v.status != "too_new"
            warning = None if ok else ERR_TORCH_TOO_OLD.format(found=m.cuda_version)
        out["cuda_available"] = ok
        out["device_count"] = len(m.gpus) if ok else 0
        out["arch_list"] = list(m.torch_arch_list(cuda))
        out["capabilities"] = [list(m.model["cc"]) for _ in m.gpus] if ok else []
        images = check(out["arch_list"], tuple(m.model["cc"])) if ok and m.gpus else None
        if images is not None and not images.runs:  # said when CUDA initialises
            cc = "".join(str(x) for x in m.model["cc"])
            warning = ERR_TORCH_CAPABILITY.format(gpu_name=m.model["name"], sm=cc)
        if warning:
            out["warnings"] = [warning]
        return CommandResult(0, "GPUTOP_DIAG_PROBE " + json.dumps(out) + "\n")

    @staticmethod
    def _cpu_torch(interpreter: str) -> CommandResult:
        """A CPU-only torch answering the probe: no CUDA version, no architectures, CUDA never
        available (and no warning: a CPU build does not try)."""
        out = {
            "python": "3.11.10",
            "executable": interpreter,
            "torch": "2.9.0+cpu",
            "torch_cuda": None,
            "cudnn": None,
            "arch_list": [],
            "cuda_available": False,
            "device_count": 0,
            "capabilities": [],
            "warnings": [],
        }
        return CommandResult(0, "GPUTOP_DIAG_PROBE " + json.dumps(out) + "\n")

    def _lines(self, since: float | None, until: float | None, grep: str | None):
        now = self._m.clock.now()
        pat = re.compile(grep, re.IGNORECASE) if grep else None
        for t, text in self._m.kernel_lines:
            if t > now or (since is not None and t < since) or (until is not None and t > until):
                continue
            if pat is not None and not pat.search(text):
                continue
            yield t, text

    def _journalctl(self, argv: list[str]) -> CommandResult:
        now = self._m.clock.now()
        since_s, until_s = _opt(argv, "--since", "-S"), _opt(argv, "--until", "-U")
        since = parse_time(since_s, now) if since_s else None
        until = parse_time(until_s, now) if until_s else None
        if (since_s and since is None) or (until_s and until is None):
            bad = since_s if since_s and since is None else until_s
            return CommandResult(1, "", f"Failed to parse timestamp: {bad}\n")
        fmt = _opt(argv, "-o", "--output") or "short"
        rows = []
        grep = _opt(argv, "--grep", "-g")
        for t, text in self._lines(since, until, grep):
            d = _utc(t)
            if fmt == "json":  # one entry per line, as journald stores a kernel message
                rows.append(json.dumps(self._entry(t, text)))
                continue
            if fmt == "cat":
                rows.append(text)
                continue
            if fmt == "short-iso":
                stamp = d.strftime("%Y-%m-%dT%H:%M:%S+0000")
            elif fmt == "short-precise":
                stamp = f"{_MONTHS[d.month - 1]} {d.day:02d} {d:%H:%M:%S}.{d.microsecond:06d}"
            elif fmt == "short-unix":
                stamp = f"{t:.6f}"
            else:
                stamp = f"{_MONTHS[d.month - 1]} {d.day:02d} {d:%H:%M:%S}"
            rows.append(f"{stamp} {self._host} kernel: {text}")
        n = _opt(argv, "-n", "--lines")
        if n is not None and n.isdigit():
            rows = rows[-int(n) :] if int(n) else []
        if "-r" in argv or "--reverse" in argv:
            rows.reverse()
        if fmt == "json":  # no "-- No entries --" line; with --grep and no match, exit 1
            return CommandResult(1 if grep and not rows else 0, "".join(r + "\n" for r in rows))
        out = "\n".join(rows) + "\n" if rows else "-- No entries --\n"
        return CommandResult(0, out)

    def _entry(self, t: float, text: str) -> dict[str, str]:
        """A kernel message as `journalctl -o json` prints it (the fields a reader uses)."""
        return {
            "__REALTIME_TIMESTAMP": str(int(t * 1e6)),
            "__MONOTONIC_TIMESTAMP": str(int((t - self._m.boot_time) * 1e6)),
            "_BOOT_ID": "5f0c9c1f3e2a4b6d8e7f90a1b2c3d4e5",
            "_TRANSPORT": "kernel",
            "SYSLOG_IDENTIFIER": "kernel",
            "PRIORITY": "3" if "NVRM: Xid" in text else "6",
            "_HOSTNAME": self._host,
            "MESSAGE": text,
        }

    def _dmesg(self, argv: list[str]) -> CommandResult:
        boot = self._m.boot_time
        iso = _opt(argv, "--time-format") == "iso"
        ctime = "-T" in argv or "--ctime" in argv
        rows = []
        for t, text in self._lines(None, None, None):
            if iso:
                d = _utc(t)
                rows.append(f"{d:%Y-%m-%dT%H:%M:%S},{d.microsecond:06d}+00:00 {text}")
            elif ctime:
                d = _utc(t)
                rows.append(
                    f"[{_DAYS[d.weekday()]} {_MONTHS[d.month - 1]} {d.day:>2} {d:%H:%M:%S} "
                    f"{d.year}] {text}"
                )
            else:
                rows.append(f"[{t - boot:12.6f}] {text}")
        return CommandResult(0, "".join(r + "\n" for r in rows))
