"""Whose GPU it is, in dcgm-exporter's labels: `pod`, `namespace`, `container` and `hpc_job`.

dcgm-exporter's `--kubernetes` (`-k`) asks the kubelet's pod-resources API which pod holds
each GPU and labels its series `pod`, `namespace` and `container` (the Kubernetes container's
name); a GPU no pod holds gets none (NVIDIA/dcgm-exporter `internal/pkg/transformation/
kubernetes.go` and `const.go`; docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/
dcgm-exporter.html). Here the owners of the processes on the GPU say it (`ProcessInfo.owner`,
read from their cgroups): the GPU goes to the one owner whose processes hold most of its
memory (then the most processes), as dcgm-exporter gives each device one pod unless told that
pods share GPUs (`--kubernetes-virtual-gpus`, a copy of every series per sharing container,
which multiplies the series count; not done here). A plain container's `container` is its
runtime's name, as dcgm-exporter's `--container-labels` writes it; a container known only by
its id gets none (dcgm-exporter labels names only).

`hpc_job` comes from dcgm-exporter's HPC job mapping directory where one is named
(`--hpc-job-mapping-dir`, or `DCGM_HPC_JOB_MAPPING_DIR`; `internal/pkg/transformation/hpc.go`
and the README's "How to include HPC jobs in metric labels"): one file per GPU named by its
index (`0`, `1`, ...; `2.0` for GPU 2's MIG instance 0), each line a job id on that GPU; a GPU
whose file names several jobs gets a copy of its series per job, as dcgm-exporter does. The
scheduler's prolog and epilog write the files; they are read again every tick. Without the
directory, the Slurm job of the GPU's owner (its cgroup, `job_<id>`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from ..model import Owner, Snapshot
from ..model.codec import jsonable
from ..sanitize.sanitizer import Sanitizer

POD_LABEL = "pod"
NAMESPACE_LABEL = "namespace"
CONTAINER_LABEL = "container"
OWNER_LABELS = (POD_LABEL, NAMESPACE_LABEL, CONTAINER_LABEL)
HPC_JOB_MAPPING_ENV = "DCGM_HPC_JOB_MAPPING_DIR"  # dcgm-exporter's variable for the directory
# Owners that hold a GPU the way a scheduler grants it; a systemd unit or a user's session does
# not name a pod, a container or a job.
HOLDING_KINDS = ("pod", "container", "slurm")
# A mapping file holds a few job ids; anything longer, or not text, is not one.
MAPPING_FILE_MAX_BYTES = 4096
_MAPPING_NAME = re.compile(r"\d+(?:\.\d+)?")  # GPU index, or GPU index "." MIG instance id
_JOB_ID = re.compile(r"[\x21-\x7e]{1,128}")  # one printable word: a job id of any scheduler


def holder(snap: Snapshot) -> dict[int, Owner]:
    """The owner each GPU is attributed to: of its processes' owners that hold GPUs (a pod, a
    container, a Slurm job), the one whose processes hold most of its memory, then the one
    with most processes on it, then the first in a fixed order (so a tie does not flap)."""
    owner_of = {p.pid: p.owner for p in snap.processes if p.owner is not None}
    # per GPU: {owner's identity: [memory, processes, the owner's record first seen]}
    held: dict[int, dict[tuple[str, str], list]] = {}
    for gp in snap.gpu_processes:
        o = owner_of.get(gp.pid)
        if o is None or o.kind not in HOLDING_KINDS:
            continue
        w = held.setdefault(gp.gpu_index, {}).setdefault(owner_key(o), [0, 0, o])
        w[0] += gp.used_memory_bytes or 0
        w[1] += 1
    return {
        gpu: min(by.values(), key=lambda w: (-w[0], -w[1], _order(w[2])))[2]
        for gpu, by in held.items()
    }


def owner_key(o: Owner) -> tuple[str, str]:
    """Who an owner is, whatever process of it was read: a pod by its uid (else
    namespace/name), a container by its id (else name), a Slurm job by its number, a unit by
    its name; not the pid inside its PID namespace nor the job's step, which differ between
    the processes of one owner. The same identity `mapping/owners.py` `owner_of` gives (this
    layer does not import `mapping`)."""
    if o.kind == "pod":
        uid = (o.pod_uid or "").lower().replace("_", "-")  # systemd's cgroup names write `_`
        return "pod", uid or f"{o.pod_namespace or ''}/{o.pod_name or ''}"
    if o.kind == "container":
        return "container", o.container_id or o.container_name or ""
    if o.kind == "slurm":
        return "slurm", o.slurm_job or ""
    if o.kind == "unit":
        return "unit", o.unit or ""
    return o.kind, o.label or ""


def _order(o: Owner) -> tuple[str, ...]:
    return (
        o.kind,
        o.pod_namespace or "",
        o.pod_name or "",
        o.container_id or "",
        o.container_name or "",
        o.slurm_job or "",
    )


def owner_values(o: Owner | None) -> dict[str, str]:
    """`pod`, `namespace`, `container` of an owner as dcgm-exporter writes them ("" where the
    node did not say, or for a Slurm job)."""
    if o is None or o.kind not in ("pod", "container"):
        return dict.fromkeys(OWNER_LABELS, "")
    pod = o.kind == "pod"
    return {
        POD_LABEL: (o.pod_name or "") if pod else "",
        NAMESPACE_LABEL: (o.pod_namespace or "") if pod else "",
        CONTAINER_LABEL: o.container_name or "",
    }


_OWNER_FIELDS = ("pod_name", "pod_namespace", "container_name")  # Owner's, by OWNER_LABELS


class ShownOwners:
    """The attribution labels as served: as read, or under --sanitize (`sanitizer`) the
    sanitizer's pseudonyms, through the same document rules as a snapshot's processes. Fail
    closed: a value the sanitizer gives no pseudonym (a name it keeps as it is) shows as ""."""

    def __init__(self, sanitizer: Sanitizer | None) -> None:
        self.sanitizer = sanitizer
        self._owners: dict[Owner, dict[str, str]] = {}

    def clear(self) -> None:
        """Judge again (the sanitizer learned new names)."""
        self._owners.clear()

    def owner(self, o: Owner | None) -> dict[str, str]:
        raw = owner_values(o)
        if self.sanitizer is None or o is None or not any(raw.values()):
            return raw
        shown = self._owners.get(o)
        if shown is None:
            doc = {"processes": [{"owner": jsonable(o)}]}
            self.sanitizer.learn_document(doc)
            got = self.sanitizer.document(doc)["processes"][0]["owner"]
            shown = {
                label: self._pseudonym_only(got.get(f), raw[label])
                for label, f in zip(OWNER_LABELS, _OWNER_FIELDS, strict=True)
            }
            self._owners[o] = shown
        return shown

    def job(self, job: str) -> str:
        """A job id: under --sanitize its pseudonym (`job-…`), or "" where it gets none."""
        if self.sanitizer is None or not job:
            return job
        return self._pseudonym_only(self.sanitizer.job(job), job)

    def _pseudonym_only(self, value: object, raw: str) -> str:
        assert self.sanitizer is not None
        if isinstance(value, str) and value != raw and self.sanitizer.is_pseudonym(value):
            return value
        return ""


def _stderr(message: str) -> None:
    print(f"gputop-diag exporter: {message}", file=sys.stderr, flush=True)


@dataclass
class HpcJobMapping:
    """dcgm-exporter's HPC job mapping directory, read every tick. A directory that is missing
    or unreadable, or a file that is not a list of job ids (binary, too long, unreadable),
    leaves its GPUs without a job and is said once (`say`), never raised."""

    directory: str
    say: Callable[[str], None] = _stderr
    _said: set[str] = field(default_factory=set)

    def read(self) -> dict[str, tuple[str, ...]]:
        """{file name ("0", "2.0"): the job ids in it}; files that hold none are left out."""
        try:
            names = sorted(os.listdir(self.directory))
        except OSError as e:
            self._once(
                f"HPC job mapping directory {self.directory}: {e.strerror or e}; GPUs carry no "
                "job from it (the scheduler's prolog writes it)"
            )
            return {}
        out: dict[str, tuple[str, ...]] = {}
        for name in names:
            if not _MAPPING_NAME.fullmatch(name):
                continue  # dcgm-exporter skips names that are no GPU id
            path = os.path.join(self.directory, name)
            if os.path.isdir(path):
                continue
            jobs = self._jobs(path)
            if jobs:
                out[name] = jobs
        return out

    def _jobs(self, path: str) -> tuple[str, ...]:
        try:
            with open(path, "rb") as f:
                data = f.read(MAPPING_FILE_MAX_BYTES + 1)
        except OSError as e:
            self._once(f"HPC job mapping file {path}: {e.strerror or e}; its GPU carries no job")
            return ()
        try:
            if len(data) > MAPPING_FILE_MAX_BYTES:
                raise ValueError(f"over {MAPPING_FILE_MAX_BYTES} bytes")
            lines = [ln.strip() for ln in data.decode("utf-8").splitlines()]
            jobs = tuple(dict.fromkeys(ln for ln in lines if ln))  # blank lines hold no job
            bad = next((j for j in jobs if not _JOB_ID.fullmatch(j)), None)
            if bad is not None:
                raise ValueError("a line that is not one job id")
        except (UnicodeDecodeError, ValueError) as e:
            reason = "not text" if isinstance(e, UnicodeDecodeError) else str(e)
            self._once(
                f"HPC job mapping file {path} is not a list of job ids ({reason}); its GPU "
                "carries no job"
            )
            return ()
        return jobs

    def _once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            self.say(message)
