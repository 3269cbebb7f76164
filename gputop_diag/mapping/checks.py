"""Which physical GPU a job really uses: Slurm's variables, its GRES, and the mapping findings.

Slurm (the gres/gpu plugin) sets, per job and step:

- `SLURM_JOB_GPUS` (batch or interactive job) and `SLURM_STEP_GPUS` (an srun step): *global*
  GPU ids, Slurm's numbering of the node's GPUs (the order of gres.conf, normally PCI order: the
  NVML index), "not relative to any device cgroup";
- `CUDA_VISIBLE_DEVICES` and `GPU_DEVICE_ORDINAL`: *step-local* ids. With `ConstrainDevices=yes`
  the job sees only its GPUs, renumbered from 0, so `CUDA_VISIBLE_DEVICES=0` can be global GPU
  5; without it they equal the global ids;
- `SLURM_GPUS_ON_NODE`: how many GPUs the job has on this node.

`scontrol show job -d` prints, per node, `GRES=gpu:h100:4(IDX:0-3)`: the global ids again, for
a job whose environment we cannot read. Pure functions: the collector passes the text in.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..model.formats import count
from .ordinals import Entry, Visibility, row_key
from .owners import (
    CHECK_BY_KIND,
    COMPUTE_MODE_CHECK,
    EXCLUSIVE_KINDS,
    EXCLUSIVE_PROCESS,
    REMEDY_BY_KIND,
)

SLURM_VARS = (
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "GPU_DEVICE_ORDINAL",
    "SLURM_GPUS_ON_NODE",
    "CUDA_VISIBLE_DEVICES",
)
GLOBAL_CAVEAT = (
    "SLURM_JOB_GPUS/SLURM_STEP_GPUS are global ids (Slurm's numbering of the node, PCI order "
    "like NVML); CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL are step-local: under "
    "ConstrainDevices=yes the job's GPUs are renumbered from 0"
)


def parse_id_list(text: str | None) -> tuple[int, ...] | None:
    """`0,2-3,7` -> (0, 2, 3, 7); None when empty or not a list of ids (e.g. UUIDs)."""
    if text is None or not text.strip():
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo or hi - lo > 4096:
            return None
        out.extend(range(lo, hi + 1))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class SlurmGpus:
    """Slurm's GPU variables of one environment, and what they mean together."""

    job_id: str | None
    step_id: str | None
    job_gpus: tuple[int, ...] | None  # global
    step_gpus: tuple[int, ...] | None  # global
    device_ordinal: str | None  # step-local
    gpus_on_node: int | None
    cvd: str | None

    @property
    def in_job(self) -> bool:
        return self.job_id is not None

    @property
    def global_ids(self) -> tuple[int, ...] | None:
        """The node's GPUs this step (else the job) was given, Slurm's global numbering."""
        return self.step_gpus if self.step_gpus is not None else self.job_gpus

    @property
    def uuid_entries(self) -> tuple[str, ...] | None:
        """CUDA_VISIBLE_DEVICES's entries where Slurm wrote GPU UUIDs (gres.conf
        `Flags=env_uuid`, Slurm 26.05; MIG instances always), in the order of the global ids:
        Slurm writes entry k with the k-th id of SLURM_JOB_GPUS/SLURM_STEP_GPUS."""
        entries = tuple(x.strip() for x in (self.cvd or "").split(","))
        if not self.cvd or not all(x.upper().startswith(("GPU-", "MIG-")) for x in entries):
            return None
        return entries

    @property
    def constrained(self) -> bool | None:
        """True when CUDA_VISIBLE_DEVICES was renumbered (ConstrainDevices=yes), False when it
        holds the global ids, None when the variables cannot tell."""
        glob = self.global_ids
        local = parse_id_list(self.cvd)
        if glob is None or local is None:
            return None
        if tuple(local) == tuple(glob):
            # 0..n-1 given as GPUs 0..n-1 reads the same either way
            return None if tuple(glob) == tuple(range(len(glob))) else False
        if tuple(local) == tuple(range(len(local))):
            return True
        return None

    def global_of_local(self, local: int) -> int | None:
        """The global id of step-local index `local` (CUDA_VISIBLE_DEVICES's entry `local`)."""
        glob = self.global_ids
        ids = parse_id_list(self.cvd)
        uuids = self.uuid_entries
        if glob is not None and uuids is not None and len(uuids) == len(glob):
            return glob[local] if local < len(glob) else None  # UUIDs name GPUs everywhere
        if glob is None or ids is None or local >= len(ids):
            return None
        if self.constrained:
            k = ids[local]
            return sorted(glob)[k] if k < len(glob) else None
        return ids[local]


SLURM_UNKNOWN = (
    "Slurm's variables cannot tell whether CUDA_VISIBLE_DEVICES holds step-local ids "
    "(renumbered under ConstrainDevices) or global ids"
)


def slurm_visibility(v: Visibility, s: SlurmGpus, keys: Sequence[str]) -> Visibility:
    """`v` (CUDA_VISIBLE_DEVICES resolved against the whole node) corrected for a Slurm job:
    under ConstrainDevices its index entries are step-local, so entry k is the job's k-th GPU in
    Slurm's global numbering; when the variables cannot tell, the job's GPUs and those the
    entries name read `?`. `keys`: the device keys of the node."""
    glob = s.global_ids
    local = parse_id_list(s.cvd)
    if not s.in_job or glob is None or local is None:
        return v  # UUID entries, or no global ids: nothing to renumber
    c = s.constrained
    if c is False or (c is None and tuple(local) == tuple(glob)):
        return v  # global ids, or 0..n-1 given as GPUs 0..n-1: the same either way
    if c is None:
        cand = tuple(dict.fromkeys([*v.visible, *(row_key(g) for g in glob)]))
        return replace(
            v,
            visible=tuple(k for k in keys if k in cand),
            order_known=False,
            unknown_why=SLURM_UNKNOWN,
        )
    entries: list[Entry] = []
    visible: list[str] = []
    stopped = False
    for k, text in enumerate(x.strip() for x in (s.cvd or "").split(",")):
        g = s.global_of_local(k)
        key = row_key(g) if g is not None and row_key(g) in keys else None
        if stopped:
            entries.append(Entry(text, key, "", ignored=key is not None))
        elif key is None or key in visible:
            why = "names a device already listed" if key else "names none of the job's GPUs"
            entries.append(Entry(text, None, why))
            stopped = True
        else:
            entries.append(Entry(text, key))
            visible.append(key)
    return replace(v, entries=tuple(entries), visible=tuple(visible))


def slurm_gpus(env: Mapping[str, str]) -> SlurmGpus:
    on_node = env.get("SLURM_GPUS_ON_NODE", "").strip()
    return SlurmGpus(
        job_id=env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or None,
        step_id=env.get("SLURM_STEP_ID") or None,
        job_gpus=parse_id_list(env.get("SLURM_JOB_GPUS")),
        step_gpus=parse_id_list(env.get("SLURM_STEP_GPUS")),
        device_ordinal=env.get("GPU_DEVICE_ORDINAL"),
        gpus_on_node=int(on_node) if on_node.isdigit() else None,
        cvd=env.get("CUDA_VISIBLE_DEVICES"),
    )


# -- scontrol show job -d -----------------------------------------------------------------------
_GRES = re.compile(r"\bGRES=(\S+)")
_GRES_IDX = re.compile(r"\bGRES_IDX=(\S+)")  # Slurm 17-20: GRES_IDX=gpu(IDX:0-3)
_GPU_IDX = re.compile(r"gpu(?::[^:(,\s]+)?(?::\d+)?\(IDX:([0-9,\-]+)\)")


@dataclass(frozen=True, slots=True)
class JobGres:
    job_id: str
    state: str | None
    nodes: dict[str, tuple[int, ...]]  # node expression -> global GPU ids there

    def gpus_on(self, host: str) -> tuple[int, ...] | None:
        for expr, ids in self.nodes.items():
            if host in expand_hostlist(expr):
                return ids
        return None


def parse_scontrol_gres(text: str) -> list[JobGres]:
    """The per-node GPU indices of each job in `scontrol show job -d` output (one job per block
    or, with -o, per line)."""
    jobs: list[JobGres] = []
    cur: dict | None = None
    for line in text.splitlines():
        m = re.search(r"\bJobId=(\S+)", line)
        if m:
            if cur is not None:
                jobs.append(JobGres(cur["id"], cur["state"], cur["nodes"]))
            cur = {"id": m.group(1), "state": None, "nodes": {}}
        if cur is None:
            continue
        st = re.search(r"\bJobState=(\S+)", line)
        if st:
            cur["state"] = st.group(1)
        for node_m in re.finditer(r"\bNodes=(\S+)", line):
            tail = line[node_m.end() :]
            nxt = re.search(r"\bNodes=", tail)
            seg = tail[: nxt.start()] if nxt else tail
            gres = _GRES.search(seg) or _GRES_IDX.search(seg)
            if gres is None:
                continue
            ids: list[int] = []
            for g in _GPU_IDX.finditer(gres.group(1)):
                ids.extend(parse_id_list(g.group(1)) or ())
            if ids:
                cur["nodes"][node_m.group(1)] = tuple(ids)
    if cur is not None:
        jobs.append(JobGres(cur["id"], cur["state"], cur["nodes"]))
    return jobs


def expand_hostlist(expr: str) -> list[str]:
    """Slurm's `gpu-node-[01-04,07]` -> the host names (one bracket group per name part)."""
    out: list[str] = []
    for item in _split_top(expr):
        m = re.match(r"^(.*?)\[([^\]]+)\](.*)$", item)
        if not m:
            out.append(item)
            continue
        head, body, tail = m.groups()
        for part in body.split(","):
            lo, _, hi = part.partition("-")
            if hi and lo.isdigit() and hi.isdigit():
                width = len(lo)
                for n in range(int(lo), int(hi) + 1):
                    out.extend(f"{head}{n:0{width}d}{t}" for t in expand_hostlist(tail or ""))
            else:
                out.extend(f"{head}{lo}{t}" for t in expand_hostlist(tail or ""))
    return out or [""]


def _split_top(expr: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p] or [""]


# -- findings -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # outside_allocation, order_differs, minor_not_index, invalid_entry, loose_entry,
    # shared_gpu
    severity: str  # "info", "warning", "critical"
    text: str  # what, with the evidence
    next_step: str
    gpus: tuple[int, ...] = ()
    pids: tuple[int, ...] = ()
    public_text: str = ""  # the text without the per-node layout, where `text` has it


@dataclass(frozen=True, slots=True)
class ProcView:
    """One GPU process, as the findings need it."""

    pid: int
    user: str | None
    gpus: tuple[int, ...]  # NVML indices NVML lists it on
    where: tuple[tuple, ...] = ()  # (gpu, gi, ci) per GPU it is on (gi/ci None without MIG)
    env: Mapping[str, str] | None = None  # None: not readable
    visibility: Visibility | None = None  # from its environment, when readable
    allowed: tuple[int, ...] | None = None  # the NVML indices its job or CVD names
    allowed_from: str = "NVML index, from its environment"  # where `allowed` was read
    owner_kind: str | None = None  # its owner's kind (`owners.owner_of`): slurm, pod, ...
    owner_name: str | None = None  # its owner as the findings name it ("Slurm job 424242")


def minor_findings(rows: Sequence[tuple[int, int | None]]) -> list[Finding]:
    """(NVML index, minor number) per GPU -> one finding naming those that differ."""
    diff = [(i, m) for i, m in rows if m is not None and m != i]
    if not diff:
        return []
    shown = ", ".join(f"GPU {i} is /dev/nvidia{m}" for i, m in diff[:4])
    more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
    return [
        Finding(
            "minor_not_index",
            "info",
            f"minor number differs from the NVML index on {count(len(diff), 'GPU')}: {shown}{more}",
            "a device cgroup or a container's --device list names /dev/nvidiaN by minor number; "
            "map by UUID or bus id, never assume /dev/nvidiaN is GPU N",
            gpus=tuple(i for i, _ in diff),
            public_text=f"minor numbers differ from the NVML indices on {count(len(diff), 'GPU')}: "
            "devices were mapped by UUID, not by /dev/nvidiaN",
        )
    ]


def visibility_findings(who: str, v: Visibility, pids: tuple[int, ...] = ()) -> list[Finding]:
    """An invalid entry that hides later devices; an order that is not nvidia-smi's."""
    out = []
    bad = v.invalid
    if bad is not None and v.emptied:
        out.append(
            Finding(
                "invalid_entry",
                "warning",
                f"{who}: CUDA_VISIBLE_DEVICES={v.cvd!r}: entry {bad.text!r} repeats a device "
                "listed before; a repeated entry makes CUDA show no device at all",
                "list each device once, by UUID (`nvidia-smi --query-gpu=index,uuid --format=csv`)",
                pids=pids,
            )
        )
    elif bad is not None:
        hidden = v.hidden_by_invalid
        lost = f"; it hides {', '.join(e.text for e in hidden)} listed after it" if hidden else ""
        after = v.entries[v.entries.index(bad) + 1 :]
        unread = [e.text for e in after if e not in hidden]
        if unread:
            said = ", ".join(repr(t) for t in unread)
            lost += f"; {said} after it {'is' if len(unread) == 1 else 'are'} never read"
        # Only a negative index alone (`-1`, `0,-1`) is the usual way to hide devices on
        # purpose; an entry that hides what follows it, or every device, is a mistake to fix.
        meant = bad.text.strip().startswith("-") and not after
        out.append(
            Finding(
                "invalid_entry",
                "warning" if after or not (v.visible or meant) else "info",
                f"{who}: CUDA_VISIBLE_DEVICES={v.cvd!r}: entry {bad.text!r} {bad.why}; CUDA "
                f"stops there and shows {count(len(v.visible), 'device')}{lost}",
                "fix or remove the entry; list devices by UUID "
                "(`nvidia-smi --query-gpu=index,uuid --format=csv`)",
                pids=pids,
            )
        )
    loose = v.loose
    if loose and not v.emptied:
        out.append(
            Finding(
                "loose_entry",
                "info",
                f"{who}: CUDA_VISIBLE_DEVICES={v.cvd!r}: "
                + "; ".join(f"entry {e.text!r} {e.why}" for e in loose),
                "write plain indices or UUIDs so that every tool reads the list alike",
                pids=pids,
            )
        )
    if v.mixed_models and v.order != "PCI_BUS_ID" and (v.cvd is None or not v.order_known):
        out.append(
            Finding(
                "order_differs",
                "warning",
                f"{who}: CUDA_DEVICE_ORDER is FASTEST_FIRST (the default) on a machine with "
                "mixed GPU models: cuda:0 is the fastest model, not nvidia-smi's GPU 0",
                "export CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA, nvidia-smi and Slurm count alike",
                pids=pids,
            )
        )
    return out


def process_findings(procs: Sequence[ProcView], job_of) -> list[Finding]:
    """A process on a GPU outside what its job or CUDA_VISIBLE_DEVICES gave it; two jobs on one
    GPU (or one MIG instance). `job_of(ProcView)` names the job a process belongs to."""
    out = []
    for p in procs:
        if p.allowed is None:
            continue
        outside = tuple(g for g in p.gpus if g not in p.allowed)
        if outside:
            given = ", ".join(map(str, sorted(p.allowed))) or "none"
            out.append(
                Finding(
                    "outside_allocation",
                    "critical",
                    f"pid {p.pid} runs on GPU {', '.join(map(str, outside))} but was given "
                    f"GPU{'s' * (len(p.allowed) != 1)} {given} ({p.allowed_from})",
                    "check the job's CUDA_VISIBLE_DEVICES and the code's device selection "
                    "(torch.cuda.set_device, --gpu flags); with Slurm, ConstrainDevices=yes in "
                    "cgroup.conf enforces the allocation",
                    gpus=outside,
                    pids=(p.pid,),
                )
            )
    holders: dict[tuple, dict[str, list[ProcView]]] = {}
    for p in procs:
        for where in p.where or tuple((g, None, None) for g in p.gpus):
            holders.setdefault(where, {}).setdefault(job_of(p), []).append(p)
    for (gpu, gi, _ci), jobs in sorted(holders.items(), key=lambda kv: str(kv[0])):
        if len(jobs) >= 2:
            out.append(_shared(gpu, gi, jobs))
    return out


def _shared(gpu: int, gi: int | None, jobs: Mapping[str, Sequence[ProcView]]) -> Finding:
    """Two owners on one GPU (or MIG instance): a warning where a scheduler gave one of them
    the GPU whole (a Slurm job, a pod) or where they are different users' (they compete for
    memory and SM time); information where one user's own sessions or containers share it."""
    place = f"GPU {gpu}" if gi is None else f"GPU {gpu} MIG instance GI {gi}"
    names = "; ".join(
        f"{job} (pid {', '.join(str(p.pid) for p in sorted(ps, key=lambda p: p.pid))})"
        for job, ps in jobs.items()
    )
    pids = tuple(sorted(p.pid for ps in jobs.values() for p in ps))
    every = [p for ps in jobs.values() for p in ps]
    kinds = list(dict.fromkeys(ps[0].owner_kind for ps in jobs.values() if ps[0].owner_kind))
    scheduled = [k for k in kinds if k in EXCLUSIVE_KINDS]
    users = {p.user for p in every}
    severity = "warning" if scheduled or len(users) > 1 or None in users else "info"
    why = ""
    if scheduled:
        who = " and ".join(dict.fromkeys(SCHEDULER_WORDS[k] for k in scheduled))
        why = (
            f"; {who} hands out GPUs whole unless the node is set up to share them, so one of "
            "these was not given this GPU"
        )
    check = "; ".join(CHECK_BY_KIND[k] for k in kinds if k in CHECK_BY_KIND)
    remedy = "; ".join(
        [REMEDY_BY_KIND[k] for k in kinds if k in REMEDY_BY_KIND and scheduled]
        or ["run them as jobs of one scheduler"]
    )
    remedy += f"; {EXCLUSIVE_PROCESS}"
    counts = Counter(ps[0].owner_kind for ps in jobs.values() if ps[0].owner_kind)
    what = " and ".join(
        OWNER_WORDS[k][0] if n == 1 else f"{n} {OWNER_WORDS[k][1]}"
        for k, n in counts.items()
        if k in OWNER_WORDS
    )
    return Finding(
        "shared_gpu",
        severity,
        f"{len(jobs)} owners share {place}: {names}{why}",
        "they compete for memory and SM time: check who was given the GPU"
        + (f" ({check})" if check else "")
        + f"; {COMPUTE_MODE_CHECK}; then move one, or keep the GPU one owner's: {remedy}",
        gpus=(gpu,),
        pids=pids,
        public_text=f"{len(jobs)} owners{f' ({what})' if what else ''} share {place} "
        f"(pid {', '.join(map(str, pids))})",
    )


SCHEDULER_WORDS = {"slurm": "Slurm", "pod": "Kubernetes' device plugin"}
OWNER_WORDS = {
    "slurm": ("a Slurm job", "Slurm jobs"),
    "pod": ("a pod", "pods"),
    "container": ("a container", "containers"),
    "user": ("a user's session", "users' sessions"),
}
