"""Whose GPU is this: the GPU processes grouped by who they run for, with the GPUs each owner
holds and the GPU memory its processes hold; and the finding for two owners on one GPU.

An owner is what the process's cgroup names (`model.Owner`, read by `collect/owners.py`): a
Kubernetes pod, a container, a Slurm job; else a Slurm job its environment names
(`SLURM_JOB_ID`); else its user (a login session or a systemd unit: the user column already
says whose). Slurm hands a job its GPUs whole (GRES, unless the node shares them as
`gres/shard` or `gres/mps`: Slurm's gres.html), and so does the NVIDIA device plugin for a pod's
`nvidia.com/gpu` (unless time-slicing or MPS is configured: NVIDIA's k8s-device-plugin README,
"Shared Access to GPUs"): another owner on such a GPU is a warning.

Pure functions: the collector hands in what NVML and /proc said of each process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..model import Owner

KINDS = ("slurm", "pod", "container", "user")  # the summary's order of kinds
# Owners a scheduler gave whole GPUs: a second owner on one of them should not be there.
EXCLUSIVE_KINDS = ("slurm", "pod")
# How to check who was given a GPU, per kind of owner (no identifiers: the text is public).
CHECK_BY_KIND = {
    "slurm": "`scontrol show job -d JOBID` (GRES=gpu:…(IDX:…): the GPUs the job was given) and "
    "`scontrol show node NODE` (Gres=: gpu only, or gres/shard or gres/mps sharing)",
    "pod": "`kubectl get pod -n NAMESPACE NAME -o jsonpath='{..resources.limits}'` "
    "(nvidia.com/gpu) and the device plugin's sharing config (time-slicing, MPS)",
    "container": "`docker inspect CONTAINER --format '{{.HostConfig.DeviceRequests}}'` and its "
    "NVIDIA_VISIBLE_DEVICES (the GPUs it asked for)",
}
# What keeps the GPU one owner's, by the kinds that share it. A container started beside a
# scheduler (`docker run --gpus`) is not bound by the scheduler's device limits: Slurm's
# ConstrainDevices confines a job's own processes (cgroup.conf(5)), the device plugin a pod's.
REMEDY_BY_KIND = {
    "slurm": "ConstrainDevices=yes in Slurm's cgroup.conf keeps a job's processes on its GPUs",
    "pod": "whole-GPU requests (nvidia.com/gpu) without time-slicing in the device plugin",
    "container": "a container started outside the scheduler is not bound by it: give it only "
    "GPUs the scheduler does not hand out (`--gpus device=N`, NVIDIA_VISIBLE_DEVICES)",
    "user": "a process started outside the scheduler is not bound by it: run it as a job",
}
EXCLUSIVE_PROCESS = "or set the GPU's compute mode to Exclusive_Process (`nvidia-smi -c 3`)"
COMPUTE_MODE_CHECK = (
    "`nvidia-smi --query-gpu=index,compute_mode --format=csv` (Exclusive_Process turns a "
    "second process away instead of letting it share)"
)


@dataclass(frozen=True, slots=True)
class Holder:
    """One GPU process, as the summary needs it."""

    pid: int
    user: str | None
    owner: Owner | None  # from its cgroup; None where it was not read (older recordings)
    env_job: str | None  # SLURM_JOB_ID of its environment, where readable
    devices: tuple[tuple[str, int, int | None], ...]  # (device key, NVML index, MIG index)
    memory_bytes: int | None  # the GPU memory it holds, all its GPUs together
    cuda: Mapping[str, int] = field(default_factory=dict)  # device key -> its CUDA ordinal


@dataclass(frozen=True, slots=True)
class HeldGpu:
    key: str  # "gpu3", "gpu1-mig0"
    nvml_index: int
    mig_index: int | None
    cuda: tuple[int, ...]  # the CUDA ordinals its processes see it as (empty: not known)


@dataclass(frozen=True, slots=True)
class OwnerUse:
    """One owner: who, the GPUs its processes hold, the memory they hold there."""

    kind: str  # "slurm", "pod", "container", "user"
    name: str  # "Slurm job 424242", "pod ml/trainer-0", "docker container 3f2a1b0c9d8e"
    pids: tuple[int, ...]
    gpus: tuple[HeldGpu, ...]
    memory_bytes: int | None  # None: NVML gave no figure for any of its processes
    users: tuple[str, ...]
    owner: Owner | None = None  # the cgroup's record (its fields for the JSON)

    @property
    def cuda_differs(self) -> bool:
        """Whether a CUDA ordinal of its processes is not the NVML index of that GPU."""
        return any(
            g.cuda and (g.mig_index is not None or g.cuda != (g.nvml_index,)) for g in self.gpus
        )

    def gpus_text(self) -> str:
        """`GPU 0-7`, `GPU 2, 3 (cuda:0, cuda:1)`, `GPU 1 MIG 0`."""
        return gpus_text(self.gpus, self.cuda_differs)


def owner_of(h: Holder) -> tuple[str, str, str]:
    """(kind, identity, name) of the owner of `h`."""
    o = h.owner
    if o is not None and o.kind == "pod":
        ident = o.pod_uid or f"{o.pod_namespace}/{o.pod_name}"
        if o.pod_namespace and o.pod_name:
            return "pod", ident, f"pod {o.pod_namespace}/{o.pod_name}"
        return "pod", ident, f"pod {o.pod_uid[:8]}" if o.pod_uid else "a pod"
    if o is not None and o.kind == "container":
        ident = o.container_id or o.container_name or f"pid {h.pid}"
        runtime = o.container_runtime or "a"
        short = (o.container_id or "")[:12]  # `docker ps`'s short id
        name = f"{runtime} container {short or o.container_name or '?'}"
        if short and o.container_name:
            name += f" ({o.container_name})"
        return "container", ident, name
    job = o.slurm_job if o is not None and o.kind == "slurm" else None
    job = job or h.env_job
    if job or (o is not None and o.kind == "slurm"):
        return "slurm", job or "?", f"Slurm job {job}" if job else "a Slurm job"
    if h.user:
        return "user", h.user, f"user {h.user}"
    return "user", f"pid {h.pid}", f"pid {h.pid} (user not known)"


def owner_uses(holders: Sequence[Holder]) -> tuple[OwnerUse, ...]:
    """Each owner once, by the first GPU it holds, then kind and name."""
    groups: dict[tuple[str, str], list[Holder]] = {}
    names: dict[tuple[str, str], str] = {}
    for h in holders:
        kind, ident, name = owner_of(h)
        groups.setdefault((kind, ident), []).append(h)
        names.setdefault((kind, ident), name)
    out = []
    for (kind, ident), hs in groups.items():
        gpus: dict[str, tuple[int, int | None, set[int]]] = {}
        for h in hs:
            for key, index, mig in h.devices:
                ords = gpus.setdefault(key, (index, mig, set()))[2]
                if key in h.cuda:
                    ords.add(h.cuda[key])
        known = [h.memory_bytes for h in hs if h.memory_bytes is not None]
        held = tuple(
            HeldGpu(key, index, mig, tuple(sorted(ords)))
            for key, (index, mig, ords) in sorted(
                gpus.items(), key=lambda kv: (kv[1][0], -1 if kv[1][1] is None else kv[1][1])
            )
        )
        out.append(
            OwnerUse(
                kind,
                names[(kind, ident)],
                tuple(sorted({h.pid for h in hs})),
                held,
                sum(known) if known else None,
                tuple(sorted({h.user for h in hs if h.user})),
                next((h.owner for h in hs if h.owner is not None), None),
            )
        )
    first = min((g.nvml_index for u in out for g in u.gpus), default=0)
    return tuple(
        sorted(
            out,
            key=lambda u: (
                min((g.nvml_index for g in u.gpus), default=first),
                KINDS.index(u.kind),
                u.name,
            ),
        )
    )


IDENTIFYING = (
    "pod_uid",
    "pod_namespace",
    "pod_name",
    "container_id",
    "container_name",
    "slurm_job",
)


def shown_name(u: OwnerUse, clean: Callable[[str], str | None]) -> str:
    """An owner's name on a sanitized surface: `clean` (the sanitizer's free text, the path of
    the conclusions and findings that name owners) over it; where an identifier of the owner
    is still in what it gave back, the kind alone ("a pod, name withheld"): fail closed."""
    shown = clean(u.name) or ""
    o = u.owner
    left = [
        v
        for v in (
            *(getattr(o, k) for k in IDENTIFYING if o is not None),
            *(u.users if u.kind == "user" else ()),
        )
        if v and len(str(v)) >= 3
    ]
    low = shown.lower()
    if not shown or any(str(v).lower() in low or str(v)[:8].lower() in low for v in left):
        return f"{WORDS[u.kind]}, name withheld"
    return shown


WORDS = {"slurm": "a Slurm job", "pod": "a pod", "container": "a container", "user": "a user"}


def gpus_text(gpus: Sequence[HeldGpu], with_cuda: bool) -> str:
    if not gpus:
        return "no GPU"
    whole = [g.nvml_index for g in gpus if g.mig_index is None]
    parts = [f"GPU {ranges(whole)}"] if whole else []
    parts += [f"GPU {g.nvml_index} MIG {g.mig_index}" for g in gpus if g.mig_index is not None]
    text = ", ".join(parts)
    if with_cuda:
        seen = [
            f"GPU {g.nvml_index if g.mig_index is None else f'{g.nvml_index}:{g.mig_index}'}="
            + "/".join(f"cuda:{k}" for k in g.cuda)
            for g in gpus
            if g.cuda
        ]
        text += f" ({', '.join(seen)})"
    return text


def ranges(ids: Sequence[int]) -> str:
    """0,1,2,3,5 -> `0-3, 5`."""
    ids = sorted(set(ids))
    out: list[str] = []
    start = prev = None
    for i in [*ids, None]:
        if i is not None and prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    return ", ".join(out)
