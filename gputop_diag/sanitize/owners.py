"""Who a GPU process runs for (`model.Owner`), as the sanitizer shows it: every field that
identifies replaced by the pseudonym that identifier has everywhere else, the rest readable.

- a pod's uid: a UUID (`uuid-…`), the same in the kubelet's cgroup names (`-` as `_`) and for
  its first 8 hex digits (`pod 5f0c9a1e`, the label of a pod without names);
- a pod's name: the pod's host name (Kubernetes sets it to the pod's name), `host-…`, as
  `POD_NAME`, a peer or a log line names it; its namespace `ns-…` (Kubernetes' own namespaces,
  `default` and `kube-*`, kept);
- a container's id: `container-…`, the same for every prefix of it (`ctr 8e1f0d2c`,
  `docker logs 8e1f0d2c94a1`); its name `ctrname-…`;
- a Slurm job's number: `job-…`, as in `scontrol`'s answers and the job's `SLURM_JOB_ID`;
- a systemd unit keeps its shape (`user-USER.slice`, `session-N.scope`, `NAME.service`), the
  uid or the name a person gave replaced (`cgroups.py`);
- kept: the kind, the pod's QoS class, the container runtime, the Slurm step (a number,
  `batch`, `extern`, `interactive`) and the pid in the process's own PID namespace (pids are
  kept on every surface).

Every id is seeded when a document is learnt (`learn_owner`), before anything is written, so a
pod's name in a job's output line or a container's prefix in a process table is replaced
wherever it stands, before or after the owner that names it.
"""

from __future__ import annotations

import re
from typing import Any

from . import cgroups as C
from . import fields
from . import rules as R
from .table import PseudonymTable
from .text import sanitize

_KEPT = ("kind", "qos", "container_runtime", "ns_pid")
_STEP = re.compile(r"\d+|batch|extern|interactive")


def is_owner(v: Any) -> bool:
    """`v` is an owner's document (`Owner` as JSON)."""
    return isinstance(v, dict) and isinstance(v.get("kind"), str) and "pod_uid" in v


def learn_owner(s: PseudonymTable, o: dict[str, Any]) -> None:
    """Seed every id an owner's document names."""
    if isinstance(o.get("pod_uid"), str):
        s.seed_pod_uid(o["pod_uid"])
    if isinstance(o.get("container_id"), str):
        s.seed_container(o["container_id"])
    if isinstance(o.get("pod_name"), str):
        s.seed_pod_name(o["pod_name"])
    ns = o.get("pod_namespace")
    if isinstance(ns, str) and ns.lower() not in R.K8S_NAMESPACES:
        s.seed_word("namespace", ns)
    if isinstance(o.get("container_name"), str):
        s.seed_word("container_name", o["container_name"])
    if isinstance(o.get("slurm_job"), str):
        s.seed_job(o["slurm_job"])


def owner_document(s: PseudonymTable, o: dict[str, Any]) -> dict[str, Any]:
    """An owner's document with every id replaced (`learn_owner` first)."""
    return {k: _field(s, k, v) for k, v in o.items()}


def _field(s: PseudonymTable, key: str, v: Any) -> Any:
    if not isinstance(v, str) or not v:
        return v
    if key in _KEPT:
        return v if re.fullmatch(r"[\w.-]+", v) else sanitize(s, v)
    if key == "slurm_step":
        return v if _STEP.fullmatch(v) else sanitize(s, v)
    if key == "pod_uid":
        uid = v.lower().replace("_", "-")
        return s.pseudonym("uuid", v, uid) if re.fullmatch(R.UUID, uid) else sanitize(s, v)
    if key == "container_id":
        return s.container(v) if re.fullmatch(r"[0-9a-fA-F]{8,64}", v) else sanitize(s, v)
    if key == "pod_name":
        return fields.hostname(s, v)
    if key == "pod_namespace":
        if v.lower() in R.K8S_NAMESPACES:
            return v
        return s.pseudonym("namespace", v, v.lower())
    if key == "container_name":
        return C.container_name(s, v)
    if key == "slurm_job":
        return fields.job(s, v)
    if key == "unit":
        return C.unit(s, v)
    return sanitize(s, v)


def owner_label(s: PseudonymTable, o: dict[str, Any]) -> str | None:
    """What a process table shows of an owner (`Owner.label`), with whole pseudonyms: `job
    job-…`, `pod ns-…/host-…`, `pod uuid-…`, `ctr container-…`; None for a unit or a user's
    session, as `Owner.label`."""
    shown = owner_document(s, o)
    kind = o.get("kind")
    if kind == "slurm":
        return f"job {shown['slurm_job']}" if shown.get("slurm_job") else "job"
    if kind == "pod":
        if shown.get("pod_namespace") and shown.get("pod_name"):
            return f"pod {shown['pod_namespace']}/{shown['pod_name']}"
        return f"pod {shown['pod_uid']}" if shown.get("pod_uid") else "pod"
    if kind == "container":
        if shown.get("container_id"):
            return f"ctr {shown['container_id']}"
        return f"ctr {shown['container_name']}" if shown.get("container_name") else "container"
    return None
