"""The job's host side over a window: host CPU, iowait and I/O pressure, the job's helpers
(child processes and non-main threads that burn CPU) and its main thread."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ..model import Snapshot
from ..model.stats import median
from . import thresholds as T
from .memo import SnapshotMemo

MAIN_THREAD = "pt_main_thread"  # torch/csrc/Module.cpp names the main thread so
# Names input pipelines give their workers (prefixes of /proc/<pid>/comm, 15 characters at
# most). They only raise confidence: any helper that burns CPU counts, named or not.
LOADER_NAMES = (
    ("pt_data_worker", "PyTorch DataLoader"),  # torch/utils/data/_utils/worker.py
    ("pt_pin_memory", "PyTorch DataLoader"),
    ("tf_data", "tf.data"),  # tensorflow/core/data: tf_data_private_threadpool, ...
    ("ForkPoolWorker", "multiprocessing pool"),
    ("SpawnPoolWorker", "multiprocessing pool"),
    ("dali", "DALI"),
    ("grain", "Grain"),
)

# Threads the CUDA runtime, NCCL and PyTorch start for the GPU itself. NCCL's proxy threads
# busy-poll the network and the autograd threads drive the backward pass: they burn CPU in any
# multi-GPU job and feed nothing to the input pipeline, so they are not the job's helpers.
RUNTIME_THREADS = (
    "NCCL ",  # NCCL >= 2.19: "NCCL Progress N", "NCCL Service N"
    "ncclProxy",
    "cuda-EvtHandlr",  # the CUDA driver's event handler
    "cuda0",  # the CUDA driver's worker threads, "cuda00001400006"
    "pt_autograd",  # torch/csrc/autograd/engine.cpp: one per device
    "pt_nccl",  # ProcessGroupNCCL's watchdog and heartbeat monitor
)


_RUNTIME: dict[str | None, bool] = {}  # name -> _runtime(name): thread names repeat


def _runtime(name: str | None) -> bool:
    got = _RUNTIME.get(name)
    if got is None:
        got = bool(name) and name.startswith(RUNTIME_THREADS)
        if len(_RUNTIME) < 4096:  # bounded: names come from /proc
            _RUNTIME[name] = got
    return got


def _read_rows(s: Snapshot) -> tuple:
    """(helpers, mains, job cores) of one snapshot: helpers as (key, CPU, name, child pid or
    None), in the order the processes list them (children, then threads, per process); mains
    as (pid, CPU, name)."""
    helpers: list[tuple[tuple[str, int], float, str, int | None]] = []
    mains: list[tuple[int, float, str]] = []
    for p in s.processes:
        for c in p.children:
            if c.cpu_pct is not None:
                helpers.append((("p", c.pid), c.cpu_pct, c.name or "", c.pid))
        main_tid = _main_tid(p)
        for t in p.busiest_threads:
            if t.cpu_pct is not None and t.tid != main_tid and not _runtime(t.name):
                helpers.append((("t", t.tid), t.cpu_pct, t.name or "", None))
        main = _main_thread(p)
        if main is not None:
            name = next((t.name for t in p.busiest_threads if t.tid == main_tid), "")
            mains.append((p.pid, main, name))
    return (tuple(helpers), tuple(mains), _job_cores(s) if s.host is not None else None)


# each snapshot's rows, read once however many host windows it stays in (`memo.py`)
_rows = SnapshotMemo(_read_rows)
forget = _rows.forget


def host_figures(snaps: Sequence[Snapshot], gpu_pids: set[int]) -> dict:
    """Host CPU, iowait and the job's helpers over the host window.

    A helper is any descendant process of a GPU process that is not itself a GPU process, and
    any thread of a GPU process but its main thread and the GPU runtime's own threads
    (RUNTIME_THREADS): whatever the input pipeline is called, it burns CPU there.
    """
    host = [s.host for s in snaps if s.host is not None]
    helpers: dict[tuple[str, int], list[float]] = {}
    names: dict[tuple[str, int], str] = {}
    mains: dict[int, list[float]] = {}
    main_names: dict[int, str] = {}
    cores = []
    for s in snaps:
        rows, main_rows, job_cores = _rows(s)
        for key, cpu, name, child in rows:
            if child is None or child not in gpu_pids:
                helpers.setdefault(key, []).append(cpu)
                names[key] = name
        for pid, cpu, name in main_rows:
            mains.setdefault(pid, []).append(cpu)
            main_names[pid] = name
        if s.host is not None:
            cores.append(job_cores)
    # A helper seen in one tick only (a thread that just entered the busiest list) is noise.
    seen = {k: median(v) for k, v in helpers.items() if len(v) >= 2}
    busy = {k: v for k, v in seen.items() if v >= T.HELPER_ACTIVE_PCT}
    named = sorted({_loader_name(names[k]) for k in busy if _loader_name(names[k]) is not None})
    m = {pid: median(v) for pid, v in mains.items() if len(v) >= 2}
    cpu_count = host[-1].cpu_count if host else 0
    job_cores = median(cores)
    return dict(
        cpu_count=cpu_count,
        host_cpu_median=median([h.cpu_pct for h in host]),
        job_cpu_pct=(
            min(100.0, 100.0 * job_cores / cpu_count)
            if job_cores is not None and cpu_count
            else None
        ),
        iowait_median=median([h.iowait_pct for h in host]),
        io_pressure_median=median(
            [h.pressure["io"].some_avg10 for h in host if "io" in h.pressure]
        ),
        helper_count=len(seen),
        worker_count=len(busy),
        worker_cpu_mean=statistics.fmean(busy.values()) if busy else None,
        worker_cores=sum(seen.values()) / 100.0 if seen else None,
        workers_named=tuple(named),
        main_thread_cpu=median(list(m.values())),
        main_thread_pid=(top := max(m, key=m.__getitem__) if m else None),
        main_thread_name=main_names.get(top) if top is not None else None,
    )


def _job_cores(s: Snapshot) -> float | None:
    """The cores the job's own processes burn in one snapshot: every GPU process (psutil's
    figure of the whole process, its threads together), each of their descendants (data-loader
    workers, compile workers) and the watched job's processes, each once. None when one GPU
    process's figure is missing (another user's process without /proc access, a container
    without the host's PID namespace): the machine's figure cannot then be split."""
    gpu_pids = {p.pid for p in s.gpu_processes}
    if not gpu_pids:
        return None
    info = {p.pid: p for p in s.processes if p.pid in gpu_pids}
    if len(info) < len(gpu_pids) or any(p.cpu_pct is None for p in info.values()):
        return None
    seen = set(gpu_pids)
    total = sum(p.cpu_pct or 0.0 for p in info.values())
    more = [(c.pid, c.cpu_pct) for p in info.values() for c in p.children]
    if s.job is not None:
        more += [(j.pid, j.cpu_pct) for j in s.job.processes]
    for pid, cpu in more:
        if pid not in seen and cpu is not None:
            seen.add(pid)
            total += cpu
    return total / 100.0


def _loader_name(name: str) -> str | None:
    """The input-pipeline family a helper's name shows, if any (raises confidence only)."""
    for prefix, family in LOADER_NAMES:
        if name.startswith(prefix):
            return family
    return None


def _main_tid(p) -> int | None:
    """The main thread's tid: the pid itself when listed, else the busiest `pt_main_thread`."""
    named = None
    for t in p.busiest_threads:
        if t.tid == p.pid:
            return t.tid
        if t.name == MAIN_THREAD and named is None:
            named = t.tid
    return named


def _main_thread(p) -> float | None:
    """CPU of the process's main thread: tid == pid, else its busiest `pt_main_thread` thread.

    Threads started by the main thread inherit its name, so the name alone is not enough.
    """
    named = None
    for t in p.busiest_threads:
        if t.cpu_pct is None:
            continue
        if t.tid == p.pid:
            return t.cpu_pct
        if t.name == MAIN_THREAD and (named is None or t.cpu_pct > named):
            named = t.cpu_pct
    return named
