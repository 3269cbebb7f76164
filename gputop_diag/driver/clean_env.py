"""The host or the project? The CUDA initialisation probe run twice, in the user's environment
and in a scrubbed one (`env -i` with only PATH, HOME and LANG: no LD_LIBRARY_PATH, LD_PRELOAD,
CUDA_*, conda or venv variables), and which layer the failure follows: a failure only in the
user's environment is the project's environment (the variables that differ and matter are
named), a failure in both is the host's (driver, kernel module, its libraries).

The probe calls the CUDA driver API through `libcuda.so.1` (ctypes: `cuDriverGetVersion`,
`cuInit(0)`, `cuDeviceGetCount`), so it needs no framework. Its result codes are CUresult's
(CUDA Driver API, "Data types used by CUDA driver", enum cudaError_enum:
https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html). The driver API has no
code 35: "insufficient driver" (cudaErrorInsufficientDriver) is the runtime API's. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..model.formats import count

# What `env -i` keeps: the command search path, the home directory, the language.
CLEAN_PATH = "/usr/bin:/bin"
KEPT = ("HOME", "LANG")
# The variables a scrubbed run goes without, by name or prefix, and the probe reports as it saw
# them (a variable outside these is the same in both runs, or not there in either).
SCRUBBED = (
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
)
SCRUBBED_PREFIXES = ("CUDA_", "CONDA_", "NVIDIA_")

# CUresult codes cuInit and cuDeviceGetCount return, with what they mean and what to do.
CU_RESULTS: dict[int, tuple[str, str, str]] = {
    0: ("CUDA_SUCCESS", "no error", ""),
    3: (
        "CUDA_ERROR_NOT_INITIALIZED",
        "initialization has failed",
        "the kernel log (`journalctl -k | grep -i nvrm`) says why the driver failed",
    ),
    34: (
        "CUDA_ERROR_STUB_LIBRARY",
        "the libcuda loaded is the toolkit's stub (lib64/stubs), not a driver",
        "take the toolkit's `stubs` directory out of LD_LIBRARY_PATH: it is for linking only",
    ),
    46: (
        "CUDA_ERROR_DEVICE_UNAVAILABLE",
        "every GPU is busy or unavailable (compute mode exclusive-process or prohibited)",
        "`nvidia-smi -q -d COMPUTE` shows the compute mode; another process holds the GPU",
    ),
    100: (
        "CUDA_ERROR_NO_DEVICE",
        "no CUDA-capable device is detected",
        "`nvidia-smi -L` lists the GPUs the driver sees; CUDA_VISIBLE_DEVICES empty or -1 hides "
        "them all; in a container, run it with the GPUs (`--gpus all`)",
    ),
    101: (
        "CUDA_ERROR_INVALID_DEVICE",
        "the device ordinal is not valid",
        "CUDA_VISIBLE_DEVICES names GPUs that do not exist (`nvidia-smi -L`)",
    ),
    102: (
        "CUDA_ERROR_DEVICE_NOT_LICENSED",
        "the device has no valid Grid license",
        "check the vGPU license (`nvidia-smi -q | grep -i license`)",
    ),
    304: (
        "CUDA_ERROR_OPERATING_SYSTEM",
        "an OS call failed",
        "the device files /dev/nvidia* must be readable and writable by this user",
    ),
    802: (
        "CUDA_ERROR_SYSTEM_NOT_READY",
        "the system is not yet ready (an NVSwitch system's fabric manager)",
        "`systemctl status nvidia-fabricmanager`",
    ),
    803: (
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "the CUDA driver library does not match the kernel module",
        "load the libcuda of the kernel module's version (the driver's own packages); reboot "
        "if the packages were upgraded under a loaded module",
    ),
    804: (
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        "forward compatibility was attempted on hardware that does not support it",
        "take the cuda-compat directory out of LD_LIBRARY_PATH, or upgrade the driver",
    ),
    999: (
        "CUDA_ERROR_UNKNOWN",
        "an unknown internal error",
        "the kernel log (`journalctl -k | grep -i nvrm`) and `nvidia-smi` say more",
    ),
}


def cu_name(code: int | None) -> str:
    if code is None:
        return "?"
    return CU_RESULTS.get(code, (f"CUresult {code}", "", ""))[0]


@dataclass(frozen=True, slots=True)
class InitRun:
    """One run of the CUDA initialisation probe."""

    where: str  # "your environment", "a clean environment"
    answered: bool  # the probe printed its line (not: crashed, timed out, no interpreter)
    loaded: bool = False  # libcuda.so.1 was found and loaded
    library: str | None = None  # the file the dynamic linker picked (/proc/self/maps)
    driver_cuda: int | None = None  # cuDriverGetVersion (12080)
    code: int | None = None  # cuInit(0)'s CUresult
    error_name: str | None = None  # the library's own cuGetErrorName
    error_text: str | None = None  # cuGetErrorString, or the loader's message
    device_count: int | None = None
    variables: Mapping[str, str] = field(default_factory=dict)  # the scrubbed ones it saw
    error: str | None = None  # why it did not answer

    @property
    def state(self) -> str:
        """ "ok", "no_library", "failed" (cuInit's code), "no_answer"."""
        if not self.answered:
            return "no_answer"
        if not self.loaded:
            return "no_library"
        if self.code == 0 and (self.device_count or 0) > 0:
            return "ok"
        return "failed"

    def said(self) -> str:
        """What the run gave, in one phrase."""
        state = self.state
        if state == "no_answer":
            return f"no answer ({self.error})"
        if state == "no_library":
            return "libcuda.so.1 not found by the dynamic linker"
        cuda = _cuda(self.driver_cuda)
        lib = f"{self.library or 'libcuda.so.1'}{f', CUDA {cuda}' if cuda else ''}"
        if state == "ok":
            return f"cuInit ok, {count(self.device_count, 'GPU')} ({lib})"
        code = self.code if self.code != 0 else 100  # initialised, but no device counted
        name = self.error_name or cu_name(code)
        return f"cuInit {name} ({code}): {self.error_text or _meaning(code)} ({lib})"


def _cuda(v: int | None) -> str | None:
    return f"{v // 1000}.{(v % 1000) // 10}" if v else None


def _meaning(code: int | None) -> str:
    return CU_RESULTS.get(code, ("", "an error this table does not know", ""))[1]


@dataclass(frozen=True, slots=True)
class CleanEnvVerdict:
    follows: str  # "nothing" (both initialise), "environment", "host", "unknown"
    text: str
    next_step: str
    variables: tuple[tuple[str, str], ...] = ()  # (name, your value) that differ and matter


def scrubbed(name: str) -> bool:
    """Whether a clean run goes without the variable `name`."""
    return name in SCRUBBED or name.startswith(SCRUBBED_PREFIXES)


def clean_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What `env -i` passes to the clean run: PATH=/usr/bin:/bin, HOME and LANG."""
    out = {"PATH": CLEAN_PATH}
    out.update({k: environ[k] for k in KEPT if environ.get(k)})
    return out


def _suspects(yours: InitRun, clean: InitRun) -> tuple[tuple[str, str], ...]:
    """The variables of your environment that explain its failure, the likeliest first."""
    env = dict(yours.variables)
    out: list[tuple[str, str]] = []
    # the loader's variables matter where they gave another libcuda than the host's
    other_lib = bool(yours.library and clean.library and yours.library != clean.library)
    for name in ("LD_PRELOAD", "LD_LIBRARY_PATH"):
        value = env.get(name)
        if value and (other_lib or (yours.loaded and not clean.loaded)):
            out.append((name, value))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and yours.code in (100, 101, 0):
        out.append(("CUDA_VISIBLE_DEVICES", visible))
    if not out:  # nothing points at one: every scrubbed variable that was set
        out = [(k, v) for k, v in sorted(env.items()) if scrubbed(k)]
    return tuple(out)


def compare_runs(yours: InitRun, clean: InitRun) -> CleanEnvVerdict:
    """Which layer the CUDA initialisation failure follows: your environment or the host."""
    a, b = yours.state, clean.state
    if "no_answer" in (a, b):
        return CleanEnvVerdict(
            "unknown",
            f"the probe did not answer: {yours.said() if a == 'no_answer' else clean.said()}",
            "run it again with a longer --timeout; a probe that crashes in cuInit points at the "
            "driver (`journalctl -k | grep -i nvrm`)",
        )
    if a == "ok" and b == "ok":
        note = (
            f"; your environment loads {yours.library}, a clean one {clean.library}"
            if yours.library != clean.library
            else ""
        )
        return CleanEnvVerdict(
            "nothing",
            "CUDA initialises in both environments "
            f"({count(yours.device_count, 'GPU')}){note}: the "
            "driver and the host are fine",
            "if the job still fails, look above the driver: its CUDA runtime and framework "
            "build (layers 4 to 7)",
        )
    if b == "ok":
        suspects = _suspects(yours, clean)
        named = ", ".join(f"{k}={v}" for k, v in suspects) or "no scrubbed variable was set"
        return CleanEnvVerdict(
            "environment",
            f"CUDA fails only in your environment ({yours.said()}); a clean environment "
            f"initialises ({clean.said()}): the project's environment, not the host: {named}",
            _environment_step(yours, suspects),
            suspects,
        )
    if a == "ok":
        return CleanEnvVerdict(
            "host",
            f"CUDA initialises only in your environment ({yours.said()}); a clean one fails "
            f"({clean.said()}): the host's default library search has no working driver "
            "library, your environment supplies one",
            "register the driver's libraries with the dynamic linker (`ldconfig -p | grep "
            "libcuda` lists them; the driver's packages install them in the system library "
            "directory); in a container, the NVIDIA container toolkit mounts them",
        )
    same = (yours.state, yours.code) == (clean.state, clean.code)
    differs = "" if same else f"; your environment changes the failure: {yours.said()}"
    return CleanEnvVerdict(
        "host",
        f"CUDA fails in a clean environment too ({clean.said()}){differs}: the host (the driver, "
        "its kernel module or its libraries), not the project",
        _host_step(clean),
    )


def _environment_step(yours: InitRun, suspects: Sequence[tuple[str, str]]) -> str:
    names = [k for k, _ in suspects]
    loader = next((k for k in ("LD_PRELOAD", "LD_LIBRARY_PATH") if k in names), None)
    if loader is not None and yours.library:
        where = yours.library.rsplit("/", 1)[0]
        first = (
            f"take {where} out of {loader}: it gives another libcuda ({yours.library}) than the "
            "driver's; libcuda must come from the driver's own packages"
        )
    elif yours.code in CU_RESULTS and CU_RESULTS[yours.code][2] and yours.code not in (3, 999):
        first = CU_RESULTS[yours.code][2]
    else:
        first = "start from a clean environment and add the project's variables back one by one"
    unset = " ".join(f"-u {k}" for k in names[:3])
    how = f"; check with `env {unset} <your command>`" if unset else ""
    return f"{first}{how}"


def _host_step(clean: InitRun) -> str:
    if clean.state == "no_library":
        return (
            "install the NVIDIA driver (its user-space libraries provide libcuda.so.1); in a "
            "container, run it with the NVIDIA container toolkit (`--gpus all`)"
        )
    code = clean.code if clean.code != 0 else 100
    step = CU_RESULTS.get(code, ("", "", ""))[2]
    return step or "the kernel log (`journalctl -k | grep -i nvrm`) and `nvidia-smi` say more"


def with_framework(
    verdict: CleanEnvVerdict, yours: InitRun, torch_yours: bool | None, torch_clean: bool | None
) -> CleanEnvVerdict:
    """The verdict once `--probe-python`'s torch was asked both ways too (whether
    `torch.cuda.is_available()`): where the driver initialises in both, a torch that fails only
    in your environment is the environment's (another torch or CUDA runtime on PYTHONPATH or
    LD_LIBRARY_PATH), in both the framework build's."""
    if verdict.follows != "nothing" or torch_yours is None or torch_clean is None:
        return verdict
    if torch_yours and torch_clean:
        return verdict
    if torch_clean:
        env = dict(yours.variables)
        suspects = tuple(
            (k, env[k])
            for k in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONHOME")
            if k in env
        ) or tuple((k, v) for k, v in sorted(env.items()) if scrubbed(k))
        named = ", ".join(f"{k}={v}" for k, v in suspects) or "no scrubbed variable was set"
        return CleanEnvVerdict(
            "environment",
            "the driver initialises in both environments, but torch initialises CUDA only in "
            f"a clean one: your environment gives it another torch or CUDA runtime: {named}",
            "compare `python -c 'import torch; print(torch.__file__, torch.version.cuda)'` in "
            "both; take the stray directory out of PYTHONPATH or LD_LIBRARY_PATH",
            suspects,
        )
    return CleanEnvVerdict(
        "framework",
        "the driver initialises in both environments, and torch fails to initialise CUDA in "
        "both: the framework build and its CUDA runtime, not the host or the environment",
        "the runtime and kernel-image layers above (4 to 7) say what its build needs",
    )


@dataclass(frozen=True, slots=True)
class CleanEnvCheck:
    """`driver --clean-env`: both runs, what torch said each way (None: not probed), the
    verdict."""

    interpreter: str
    kept: Mapping[str, str]  # what the clean run was given
    yours: InitRun
    clean: InitRun
    verdict: CleanEnvVerdict
    torch_yours: bool | None = None
    torch_clean: bool | None = None
    torch_clean_warnings: tuple[str, ...] = ()


def check(
    interpreter: str,
    environ: Mapping[str, str],
    yours: InitRun,
    clean: InitRun,
    torch_yours: bool | None = None,
    torch_clean: bool | None = None,
    torch_clean_warnings: Sequence[str] = (),
) -> CleanEnvCheck:
    verdict = with_framework(compare_runs(yours, clean), yours, torch_yours, torch_clean)
    return CleanEnvCheck(
        interpreter,
        clean_environment(environ),
        yours,
        clean,
        verdict,
        torch_yours,
        torch_clean,
        tuple(torch_clean_warnings),
    )


def run_doc(r: InitRun) -> dict:
    return {
        "where": r.where,
        "state": r.state,
        "said": r.said(),
        "library": r.library,
        "driver_cuda": _cuda(r.driver_cuda),
        "code": r.code,
        "code_name": r.error_name or (cu_name(r.code) if r.code is not None else None),
        "device_count": r.device_count,
        "variables": dict(r.variables),
    }


def check_doc(c: CleanEnvCheck) -> dict:
    """The check as `gputop-diag driver --json` shows it (`layers.clean_env`)."""
    v = c.verdict
    return {
        "interpreter": c.interpreter,
        "clean_environment": dict(c.kept),
        "runs": [run_doc(c.yours), run_doc(c.clean)],
        "torch_initialises": None
        if c.torch_yours is None
        else {"yours": c.torch_yours, "clean": c.torch_clean},
        "follows": v.follows,
        "text": v.text,
        "next_step": v.next_step,
        "variables": [{"name": k, "value": val} for k, val in v.variables],
    }
