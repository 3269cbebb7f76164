"""The chain's verdict: which problems the facts show, from the host layer upward (debugging
starts at the host). The words of each problem are `wording.py`'s table; `problem` fills them."""

from __future__ import annotations

from collections.abc import Sequence

from .facts import ChainFacts, FabricFacts, LoadedRuntime, Problem
from .kernels import kernel_problems
from .problem import problem
from .versions import MVC_FLOOR, cuda_tuple, min_driver_for, runtime_verdict, version_tuple
from .wording import NEED_ANY, NEED_BRANCH, NEED_MAJOR, RUNTIME_OF

__all__ = ["fabric_problem", "judge_chain", "problem", "runtimes_named", "status_of"]

# No driver, or no module: nothing above the host layer is judged (the fabric manager needs it).
_NO_FABRIC_BELOW = ("no_driver", "module_not_loaded")


def judge_chain(f: ChainFacts, fabric: FabricFacts | None = None) -> tuple[Problem, ...]:
    """The problems of the chain, from the host layer upward (debugging starts at the host).
    `fabric`: the fabric manager of an NVSwitch system (`fabric_facts`), judged between the
    kernel module and NVML; None where there is no NVSwitch or it was not read. The builds'
    kernel images (`f.kernels`) last, where the host layer lets anything start."""
    out = list(_judge_chain(f))
    if not any(p.code in _NO_FABRIC_BELOW for p in out):
        out += kernel_problems(f.kernels)
    found = fabric_problem(fabric)
    if found is None or any(p.code in _NO_FABRIC_BELOW for p in out):
        return tuple(out)
    # host layer first: the kernel module's problems, the fabric manager's, the layers above
    below = [p for p in out if p.layer == "kernel module"]
    return (*below, found, *(p for p in out if p.layer != "kernel module"))


def _judge_chain(f: ChainFacts) -> tuple[Problem, ...]:
    if f.library_found is False and not f.module_loaded and not f.nvml_answered:
        return (problem("no_driver"),)
    if (f.module_loaded is False and not f.nvml_answered) or f.nvml_error == "DRIVER_NOT_LOADED":
        return (problem("module_not_loaded", library=f.library_version),)
    out: list[Problem] = []
    if f.library_found is False:
        out.append(problem("nvml_missing", module=f.module_version))
    mismatch = _mismatch(f)
    if mismatch is not None:
        out.append(problem(mismatch, module=f.module_version, library=f.library_version))
    out += _runtimes(f, broken_pair=mismatch is not None)
    if f.toolkit and f.driver_max:
        tk = cuda_tuple(f.toolkit)
        if tk is not None and tk > f.driver_max:
            major = tk[0] > f.driver_max[0]
            key = "toolkit_major_too_new" if major else "toolkit_too_new"
            out.append(problem(key, toolkit=f.toolkit, dmax=_dotted(f.driver_max)))
    return tuple(out)


def _mismatch(f: ChainFacts) -> str | None:
    """The kernel module and the user-space library differ: the wording's key, by which is the
    older; None when they agree."""
    module, library = version_tuple(f.module_version), version_tuple(f.library_version)
    if f.module_version is None or f.library_version is None or module == library:
        return "mismatch" if f.nvml_error == "LIB_RM_VERSION_MISMATCH" else None
    return "mismatch_module_older" if module < library else "mismatch_module_newer"


def _runtimes(f: ChainFacts, broken_pair: bool) -> list[Problem]:
    """Each process's runtime against the driver, and the libcuda it mapped against the
    module; the runtimes too new for the driver as one problem, last."""
    # One version for the runtimes: the driver's maximum CUDA is the user-space library's
    # (libcuda answers it), so under a mismatch they are judged against the library.
    driver = (f.library_version or f.module_version) if broken_pair else f.module_version
    driver = driver or f.library_version
    out: list[Problem] = []
    too_new: list[LoadedRuntime] = []
    for p in f.processes:
        v = runtime_verdict(_runtime_of(p), f.driver_max, driver, p.libcuda_compat)
        if v is None:
            continue
        if v.status == "too_new":
            too_new.append(p)
        elif v.status == "compat" and f.datacenter_gpu is False:
            out.append(problem("compat_hw", (p.pid,), pid=p.pid, name=p.name, libcuda=p.libcuda))
        elif v.status == "mvc":
            out.append(problem("mvc", (p.pid,), pid=p.pid, name=p.name, verdict=v.text))
        if (
            p.libcuda
            and not p.libcuda_compat
            and f.module_version
            and version_tuple(p.libcuda) != version_tuple(f.module_version)
        ):
            key = "libcuda_replaced" if p.libcuda_deleted else "libcuda_mismatch"
            out.append(
                problem(
                    key,
                    (p.pid,),
                    pid=p.pid,
                    name=p.name,
                    libcuda=p.libcuda,
                    deleted=p.libcuda_deleted,
                    module=f.module_version,
                )
            )
    if too_new:
        out.append(_too_new(f, too_new, driver, broken_pair))
    return out


def _runtime_of(p: LoadedRuntime) -> str | None:
    """The runtime version to judge: libcudart's, or the framework's where it says the minor
    the soname does not."""
    soname = version_tuple(p.runtime)
    if p.runtime and p.framework_cuda and soname and len(soname) < 2:
        return p.framework_cuda
    return p.runtime or p.framework_cuda


def _too_new(
    f: ChainFacts, procs: Sequence[LoadedRuntime], driver: str | None, broken_pair: bool
) -> Problem:
    dmax = _dotted(f.driver_max)
    return problem(
        "runtime_too_new_mismatch" if broken_pair else "runtime_too_new",
        tuple(p.pid for p in procs),
        who=runtimes_named(procs),
        driver=driver,
        dmax=dmax,
        cu=dmax.replace(".", ""),
        need=_needed(procs),
        found=f"{f.driver_max[0] * 1000 + f.driver_max[1] * 10}" if f.driver_max else "?",
    )


def _dotted(cuda: tuple[int, int] | None) -> str:
    return f"{cuda[0]}.{cuda[1]}" if cuda else "?"


def _needed(procs: Sequence[LoadedRuntime]) -> str:
    """The minimum driver for the newest runtime among `procs` (the table, GA release)."""
    best: tuple[int, int] | None = None
    major_only: int | None = None
    for p in procs:
        c = cuda_tuple(p.framework_cuda) or cuda_tuple(p.runtime)
        if c is not None:
            best = max(best, c) if best else c
        else:
            t = version_tuple(p.runtime)
            if t:
                major_only = max(major_only or 0, t[0])
    if best is None and major_only is not None:
        best = (major_only, 0)
    need = min_driver_for(best) if best else None
    if need is None and best is not None:
        floor = MVC_FLOOR.get(best[0])
        return NEED_BRANCH.format(floor=floor) if floor else NEED_MAJOR.format(major=best[0])
    return need or NEED_ANY


def status_of(problems: Sequence[Problem]) -> str:
    """ "broken" (something cannot work), "warnings", or "ok"."""
    if any(p.severity == "critical" for p in problems):
        return "broken"
    if any(p.severity == "warning" for p in problems):
        return "warnings"
    return "ok"


def fabric_problem(fabric: FabricFacts | None) -> Problem | None:
    """The layer's problem when it is broken or warns; None when it is well or not known."""
    if fabric is None or fabric.state in ("ok", "unknown"):
        return None
    return problem(
        "fabric_broken" if fabric.state == "broken" else "fabric_warning",
        text=fabric.text,
        title=fabric.text.split("; ")[0],
        next_step=fabric.next_step,
    )


def runtimes_named(procs) -> str:
    """ "pid 7 (python) runtime 13.0, pid 8 (?) runtime 13" for the first three."""
    return ", ".join(
        RUNTIME_OF.format(pid=p.pid, name=p.name or "?", runtime=p.framework_cuda or p.runtime)
        for p in procs[:3]
    )
