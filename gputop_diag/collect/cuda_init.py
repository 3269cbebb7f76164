"""The CUDA initialisation probe, in the user's environment and in a scrubbed one
(`gputop-diag driver --clean-env`): a small program run by an interpreter in a subprocess that
loads `libcuda.so.1` with ctypes and calls the driver API (`cuDriverGetVersion`, `cuInit(0)`,
`cuDeviceGetCount`: https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__INITIALIZE.html),
so it needs no framework; and `--probe-python`'s framework probe run the same two ways.

The scrubbed run is `env -i PATH=/usr/bin:/bin HOME=... LANG=... <interpreter> -c ...`
(`driver/clean_env.py` says what is kept), so it goes through the same command runner as any
other command: the simulator answers both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..driver.clean_env import InitRun, clean_environment
from ..sources import Sources
from .cuda_libs import Probe, probe_python

INIT_TIMEOUT_S = 30.0
MARK = "GPUTOP_DIAG_CUDA_INIT "

# Standard library only: it runs in any interpreter, and prints one line.
CUDA_INIT_PROBE = r"""
import ctypes, json, os
out = {"variables": {k: v for k, v in os.environ.items() if k in (
    "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    or k.startswith(("CUDA_", "CONDA_", "NVIDIA_"))}}
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    out["loaded"] = False
    out["error_text"] = str(e)
else:
    out["loaded"] = True
    try:
        with open("/proc/self/maps") as f:
            paths = [x.split(None, 5)[5].strip() for x in f if len(x.split(None, 5)) == 6]
        out["library"] = next((p for p in paths if "/libcuda.so" in p), None)
    except OSError:
        pass
    v = ctypes.c_int(0)
    try:
        out["driver_cuda"] = v.value if cu.cuDriverGetVersion(ctypes.byref(v)) == 0 else None
    except AttributeError:
        pass
    rc = cu.cuInit(0)
    out["code"] = rc
    for fn, key in (("cuGetErrorName", "error_name"), ("cuGetErrorString", "error_text")):
        s = ctypes.c_char_p()
        try:
            if rc != 0 and getattr(cu, fn)(rc, ctypes.byref(s)) == 0 and s.value:
                out[key] = s.value.decode("utf-8", "replace")
        except AttributeError:
            pass
    if rc == 0:
        n = ctypes.c_int(0)
        out["count_code"] = cu.cuDeviceGetCount(ctypes.byref(n))
        out["device_count"] = n.value
print("GPUTOP_DIAG_CUDA_INIT " + json.dumps(out))
"""


def clean_argv(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """`argv` run in a scrubbed environment: `env -i PATH=/usr/bin:/bin HOME=.. LANG=..`."""
    kept = [f"{k}={v}" for k, v in clean_environment(environ).items()]
    return ["env", "-i", *kept, *argv]


def run_init_probe(
    sources: Sources, interpreter: str, clean: bool, timeout: float = INIT_TIMEOUT_S
) -> InitRun:
    """One run of the CUDA initialisation probe, in this environment or a scrubbed one."""
    where = "a clean environment" if clean else "your environment"
    argv = [interpreter, "-c", CUDA_INIT_PROBE]
    if clean:
        argv = clean_argv(argv, sources.environ)
    try:
        r = sources.run_command(argv, timeout)
    except FileNotFoundError:
        return InitRun(where, False, error=f"{argv[0]}: no such program")
    except Exception as e:  # noqa: BLE001 - a timeout is the answer, said plainly
        if type(e).__name__ == "TimeoutExpired":
            return InitRun(where, False, error=f"did not answer in {timeout:g} s")
        return InitRun(where, False, error=f"{type(e).__name__}: {e}")
    line = next((x for x in r.stdout.splitlines() if x.startswith(MARK)), None)
    if line is None:
        if r.returncode < 0:
            return InitRun(where, False, error=f"killed by signal {-r.returncode} (in cuInit?)")
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        return InitRun(where, False, error=f"exited {r.returncode}: {tail[0]}")
    try:
        doc = json.loads(line[len(MARK) :])
    except ValueError:
        return InitRun(where, False, error="an unreadable answer")
    return InitRun(
        where,
        True,
        bool(doc.get("loaded")),
        doc.get("library"),
        doc.get("driver_cuda"),
        doc.get("code"),
        doc.get("error_name"),
        doc.get("error_text"),
        doc.get("device_count"),
        {str(k): str(v) for k, v in (doc.get("variables") or {}).items()},
    )


def probe_python_clean(sources: Sources, interpreter: str, timeout: float) -> Probe:
    """`--probe-python`'s framework probe in a scrubbed environment."""

    def scrubbed(argv: Sequence[str], t: float):
        return sources.run_command(clean_argv(argv, sources.environ), t)

    return probe_python(replace(sources, run_command=scrubbed), interpreter, timeout)
