"""The processes of GPU jobs: the variables of their environments that change how the job runs,
and the ones stuck in uninterruptible sleep with the mounts they wait on.

Only the GPU processes (NVML's process list) and a watched job's processes are read, with their
descendants (data-loader workers) up to `MAX_PROCESSES`: never every process of the machine.

- /proc/<pid>/environ: NUL-separated `NAME=value` entries as the process was started (proc(5));
  only `WATCHED_VARIABLES` are kept.
- /proc/<pid>/stat: the state after the command name; "D" is uninterruptible sleep, almost
  always a wait on I/O (proc(5)).
- /proc/<pid>/wchan: the kernel function a sleeping process waits in.
- /proc/<pid>/fdinfo/<fd>: `mnt_id:` names the mount of each open file (Linux 3.15 and later,
  https://docs.kernel.org/filesystems/proc.html), matched against the mount ids of
  /proc/<pid>/mountinfo (or /proc/self/mountinfo when the process's own is not readable).
"""

from __future__ import annotations

import errno
from collections.abc import Iterable, Mapping
from dataclasses import replace

from ...model.health import ABSENT, DENIED, MountRef, ProcessEnv, ProcessFacts, StuckProcess
from ..proctree import ProcTree

# The variables the health checks judge (health/rules.py says why each matters).
WATCHED_VARIABLES = (
    "CUDA_LAUNCH_BLOCKING",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_IB_DISABLE",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
)
MAX_PROCESSES = 512  # GPU processes, watched ones and their descendants examined, at most
MAX_FDS = 64  # open files of one stuck process whose mount is looked up
# (pid, its start time) -> the environment read of it (`read_environments`' cache)
EnvCache = dict[tuple[int, str | None], ProcessEnv]
# File systems a process can hang on when the server or the network stops answering.
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "lustre", "ceph", "gpfs", "beegfs", "9p", "glusterfs")


def problem_of(e: OSError) -> str:
    """An unreadable file in a person's words: permission denied, absent, or the error."""
    if isinstance(e, PermissionError) or e.errno in (errno.EACCES, errno.EPERM):
        return DENIED
    if isinstance(e, FileNotFoundError) or e.errno == errno.ENOENT:
        return ABSENT
    return e.strerror or type(e).__name__


def parse_environ(text: str, names: Iterable[str] = WATCHED_VARIABLES) -> dict[str, str]:
    """The entries of /proc/<pid>/environ named in `names` (NUL-separated NAME=value)."""
    want = set(names)
    out = {}
    for entry in text.split("\0"):
        name, sep, value = entry.partition("=")
        if sep and name in want:
            out[name] = value
    return out


def parse_state(stat: str) -> tuple[str, str]:
    """(command name, state letter) of /proc/<pid>/stat; ValueError when malformed."""
    lo, hi = stat.find("("), stat.rfind(")")
    rest = stat[hi + 1 :].split(None, 1)
    if lo < 0 or hi < lo or not rest:
        raise ValueError(f"not a /proc stat line: {stat[:60]!r}")
    return stat[lo + 1 : hi], rest[0]


def parse_mountinfo(text: str) -> dict[str, tuple[str, str, str]]:
    """mount id -> (mount point, fs type, source) of /proc/<pid>/mountinfo (proc(5)): id, parent,
    major:minor, root, mount point, options, optional fields up to "-", type, source, options.
    Spaces in a mount point are written as \\040."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        try:
            dash = f.index("-", 6)
            out[f[0]] = (_unescape(f[4]), f[dash + 1], _unescape(f[dash + 2]))
        except (ValueError, IndexError):
            continue
    return out


def _unescape(s: str) -> str:
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")


def read_environments(
    procfs,
    gpu_pids: Mapping[int, tuple[int, ...]],
    watched: Iterable[int],
    cache: EnvCache | None = None,
    stats: dict[int, str] | None = None,
):
    """The watched variables of each GPU process (with the GPUs it is on) and watched process.
    With `cache` ((pid, start time) -> ProcessEnv), each process's environment is read once: a
    pid seen before with the same start time is taken from it, a pid gone or reused is
    dropped from it; `stats` keeps the /proc/<pid>/stat read for the start time."""
    envs = []
    keys = set()
    for pid in sorted(set(gpu_pids) | set(watched)):
        gpus = gpu_pids.get(pid, ())
        key = None
        if cache is not None:
            key = (pid, start_time(procfs, pid, stats))
            keys.add(key)
            hit = cache.get(key)
            if hit is not None:
                envs.append(hit if hit.gpus == gpus else replace(hit, gpus=gpus))
                continue
        env = read_environment(procfs, pid, gpus)
        if cache is not None:
            cache[key] = env
        envs.append(env)
    if cache is not None:
        for key in [k for k in cache if k not in keys]:
            del cache[key]
    return tuple(envs)


def read_environment(procfs, pid: int, gpus: tuple[int, ...] = ()) -> ProcessEnv:
    path = f"/proc/{pid}/environ"
    try:
        found = parse_environ(procfs.read_text(path))
    except OSError as e:
        return ProcessEnv(pid, None, path, problem=problem_of(e), gpus=gpus)
    return ProcessEnv(pid, None, path, tuple(sorted(found.items())), gpus=gpus)


def start_time(procfs, pid: int, stats: dict[int, str] | None = None) -> str | None:
    """Field 22 of /proc/<pid>/stat (starttime, clock ticks after boot): with the pid, it tells
    one process from a later one that reuses its pid. None when unreadable. The text read is
    kept in `stats`."""
    try:
        stat = procfs.read_text(f"/proc/{pid}/stat")
    except OSError:
        return None
    if stats is not None:
        stats[pid] = stat
    fields = stat[stat.rfind(")") + 1 :].split()
    return fields[19] if len(fields) > 19 else None


def _descendants(tree: ProcTree, roots: list[int]) -> list[tuple[int, int]]:
    """(pid, its root) of the roots and their descendants, breadth first, at most
    MAX_PROCESSES."""
    seen: dict[int, int] = {}
    queue = [(r, r) for r in roots]
    while queue and len(seen) < MAX_PROCESSES:
        pid, root = queue.pop(0)
        if pid in seen:
            continue
        seen[pid] = root
        queue += [(c, root) for c in tree.children(pid) if c not in seen]
    return list(seen.items())


def read_processes(
    procfs,
    gpu_pids: Mapping[int, tuple[int, ...]],
    watched: Iterable[int] = (),
    now: float = 0.0,
    env_cache: EnvCache | None = None,
) -> ProcessFacts:
    """Environments of the GPU and watched processes (with `env_cache`, each read once per
    process: `read_environments`); their trees' processes in state D."""
    watched = list(watched)
    stats: dict[int, str] = {}  # read once in this pass: for the start time and the state
    envs = read_environments(procfs, gpu_pids, watched, env_cache, stats)
    roots = sorted(set(gpu_pids) | set(watched))
    tree = ProcTree(procfs)
    tree.refresh(roots, now)
    stuck, examined, unreadable = [], 0, 0
    for pid, root in _descendants(tree, roots):
        examined += 1
        try:
            stat = stats.pop(pid, None) or procfs.read_text(f"/proc/{pid}/stat")
            name, state = parse_state(stat)
        except (OSError, ValueError):
            unreadable += 1
            continue
        if state == "D":
            stuck.append(_stuck(procfs, pid, name, root))
    return ProcessFacts(tuple(envs), tuple(stuck), examined, unreadable)


def _stuck(procfs, pid: int, name: str, root: int) -> StuckProcess:
    try:
        wchan = procfs.read_text(f"/proc/{pid}/wchan").strip() or None
    except OSError:
        wchan = None
    mounts, problem = read_mounts(procfs, pid)
    return StuckProcess(pid, name, "D", wchan, root, mounts, problem)


def read_mounts(procfs, pid: int) -> tuple[tuple[MountRef, ...], str | None]:
    """The mounts of `pid`'s open files (fdinfo's mnt_id); where those cannot be read, the
    network mounts it can see. (refs, why the open files could not be read)."""
    table, table_path = None, f"/proc/{pid}/mountinfo"
    for path in (table_path, "/proc/self/mountinfo"):
        try:
            table = parse_mountinfo(procfs.read_text(path))
            break
        except OSError:
            continue
    if table is None:
        return (), f"{table_path}: not readable"
    try:
        fds = sorted(
            procfs.listdir(f"/proc/{pid}/fdinfo"), key=lambda s: int(s) if s.isdigit() else 0
        )
    except OSError as e:
        return _network_mounts(table), f"/proc/{pid}/fdinfo: {problem_of(e)}"
    refs: dict[str, MountRef] = {}
    for fd in fds[:MAX_FDS]:
        try:
            info = procfs.read_text(f"/proc/{pid}/fdinfo/{fd}")
        except OSError:
            continue
        mnt = next((ln.split()[1] for ln in info.splitlines() if ln.startswith("mnt_id:")), None)
        if mnt in table and mnt not in refs:
            point, fs, dev = table[mnt]
            if fs.split(".")[0] in NETWORK_FS or fs.startswith("fuse"):
                refs[mnt] = MountRef(point, fs, dev, f"fd {fd}")
    return tuple(refs.values()), None


def _network_mounts(table: dict[str, tuple[str, str, str]]) -> tuple[MountRef, ...]:
    return tuple(
        MountRef(point, fs, dev, "mounted")
        for point, fs, dev in table.values()
        if fs.split(".")[0] in NETWORK_FS
    )
