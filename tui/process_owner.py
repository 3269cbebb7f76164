"""A GPU process's owner as the process table shows, filters and sorts it: the OWNER column's
text (`owner_text`, `owner_short`), the process details' OWNER lines (`owner_lines`), the
filter's `job:`, `pod:` and `ctr:` terms (their shapes and how they match) and the sort value.
Pure functions over `model.Owner`."""

from __future__ import annotations

import re
from collections.abc import Collection

from gputop_diag.model import Owner

_HEX_ID = re.compile(r"[0-9a-f]{12,}")  # a container id as the runtime writes it (64 digits)
_HEX_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f-]+")  # a pod's uid: a UUID
MIN_ID_PREFIX = 8  # hex digits of a pod's uid or (under --sanitize) a container's id to match


def owner_text(owner: Owner | None) -> str | None:
    """What the OWNER column says of a process: its owner's label (`job 424242`,
    `pod ml-research/llama-ddp-0`, `ctr 8e1f0d2c`); None for a unit, a user's session or an
    owner not read. Under --sanitize an id is a pseudonym (`ctr container-aixa`, `pod uuid-6a22`),
    not hex: shown whole, as its first 8 characters would name nothing."""
    if owner is None:
        return None
    if owner.kind == "container" and owner.container_id:
        if not _HEX_ID.fullmatch(owner.container_id):
            return f"ctr {owner.container_id}"
    if owner.kind == "pod" and not (owner.pod_namespace and owner.pod_name) and owner.pod_uid:
        if not _HEX_UID.fullmatch(owner.pod_uid):
            return f"pod {owner.pod_uid}"
    return owner.label


def owner_short(owner: Owner | None, width: int) -> str | None:
    """`owner_text` in at most `width` cells: a pod by `pod NAME`, then by its name alone,
    where `pod NS/NAME` does not fit (the name is what `kubectl get pods` lists, and a
    StatefulSet's pods differ by its end: `llama-ddp-0`), then cut with `+` as htop marks a
    cut name. A pseudonym (under --sanitize) is never cut: a cut one names nothing and cannot
    be typed into the filter; where `ctr container-aixa` does not fit, the pseudonym alone
    (`container-aixa`, a few cells wider than the column at most)."""
    text = owner_text(owner)
    if text is None or len(text) <= width:
        return text
    pseudonym = _pseudonym(owner)
    if pseudonym is not None:
        return pseudonym
    if owner is not None and owner.kind == "pod" and owner.pod_name:
        text = next((t for t in (f"pod {owner.pod_name}", owner.pod_name) if len(t) <= width),
                    owner.pod_name)  # fmt: skip
    return text if len(text) <= width else text[: max(0, width - 1)] + "+"


def _pseudonym(owner: Owner | None) -> str | None:
    """The id of `owner` where it is a pseudonym (--sanitize): a container's id that is not
    hex, a pod's uid that is no UUID (and the pod has no names), a Slurm job that is no
    number."""
    if owner is None:
        return None
    if owner.kind == "container" and owner.container_id:
        return None if _HEX_ID.fullmatch(owner.container_id) else owner.container_id
    if owner.kind == "pod" and owner.pod_uid and not (owner.pod_namespace and owner.pod_name):
        return None if _HEX_UID.fullmatch(owner.pod_uid) else owner.pod_uid
    if owner.kind == "slurm" and owner.slurm_job:
        return None if owner.slurm_job.isdigit() else owner.slurm_job
    return None


KINDS = {
    "pod": "Kubernetes pod",
    "container": "container",
    "slurm": "Slurm job",
    "unit": "systemd unit",
    "user": "a user's session",
}


def owner_lines(owner: Owner | None, pid: int) -> list[str]:
    """The whole owner of process `pid`, a line per fact, for its details (Enter): what it runs
    for, the pod (namespace/name, uid, QoS class), the container (runtime, whole id, name), the
    Slurm job and step, the systemd unit, and its pid inside its own PID namespace."""
    if owner is None:
        return ["not read (a recording made before owners were, or a process that ended first)"]
    o = owner
    lines = [f"runs for   {KINDS.get(o.kind, o.kind)}"]
    if o.pod_name or o.pod_namespace:
        lines.append(f"pod        {o.pod_namespace or '?'}/{o.pod_name or '?'}")
    if o.pod_uid:
        lines.append(f"pod uid    {o.pod_uid}")
    if o.qos:
        lines.append(f"QoS class  {o.qos}")
    if o.container_id or o.container_name or o.container_runtime:
        facts = [o.container_runtime or "runtime not known", o.container_id or "id not known"]
        if o.container_name:
            facts.append(f"name {o.container_name}")
        lines.append("container  " + "  ".join(facts))
    if o.slurm_job:
        step = f"  step {o.slurm_step}" if o.slurm_step else ""
        lines.append(f"Slurm      job {o.slurm_job}{step}")
    if o.unit:
        lines.append(f"unit       {o.unit}")
    if o.ns_pid is not None and o.ns_pid != pid:
        lines.append(f"ns pid     {o.ns_pid}: its pid in its own PID namespace ({pid} on the host)")
    return lines


# What an owner's term takes: a Slurm job id as its cgroup names it (`job_424242`: digits;
# https://slurm.schedmd.com/cgroup_v2.html), or one step of it (`424242.0`, `424242.batch`), or
# its pseudonym copied from the screen under --sanitize (`job-7j4k`); a pod's `NAMESPACE/NAME`,
# `NAME`, `NAMESPACE/` or uid prefix (Kubernetes names are DNS labels and subdomains: letters,
# digits, `-` and `.`); a container's id prefix, name (Docker's: `[a-zA-Z0-9][a-zA-Z0-9_.-]`)
# or pseudonym (`container-aixa`).
_OWNER_TERMS: dict[str, tuple[re.Pattern[str], str]] = {
    "job": (
        re.compile(r"(\d+|job-[a-z0-9]+)(\.[A-Za-z0-9+]+)?"),
        "job ids (424242, 424242.0)",
    ),
    "pod": (
        re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9.-]*)?"),
        "a pod's namespace/name, name or uid",
    ),
    "ctr": (re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*"), "a container's id or name"),
}
OWNER_KEYS = {
    "job": "job", "jobs": "job", "slurm": "job",
    "pod": "pod", "pods": "pod",
    "ctr": "ctr", "container": "ctr", "containers": "ctr",
}  # fmt: skip


def owner_term(key: str) -> str | None:
    """The owner's term a filter key names (`job`, `pod`, `ctr`; `container:`, `slurm:` too),
    None for another key."""
    return OWNER_KEYS.get(key.lower())


def owner_values(value: str, term: str) -> set[str]:
    """The values of an owner's term (`424242,424243`); ValueError, saying what the term
    takes and quoting what was typed, where one is not of its shape."""
    pattern, takes = _OWNER_TERMS[term]
    values = {v for v in value.split(",") if v}
    if not values or not all(pattern.fullmatch(v) for v in values):
        raise ValueError(f"{term}: takes {takes}: {value!r}")
    return values


def _job_matches(o: Owner, wanted: str) -> bool:
    """`424242` is the job and every step of it; `424242.0` one step (`sacct`'s spelling)."""
    if not o.slurm_job:
        return False
    job, _, step = wanted.partition(".")
    return o.slurm_job == job and (not step or o.slurm_step == step)


def _pod_matches(o: Owner, wanted: str) -> bool:
    """`NAMESPACE/NAME`, `NAME`, `NAMESPACE/` (every pod of it) or a prefix of the pod's uid
    (`kubectl get pod -o yaml` shows it), as typed in any letter case (Kubernetes names are
    lower case)."""
    w = wanted.lower()
    ns, name, uid = (o.pod_namespace or "").lower(), (o.pod_name or "").lower(), o.pod_uid or ""
    if "/" in w:
        want_ns, _, want_name = w.partition("/")
        return bool(ns) and ns == want_ns and (not want_name or name == want_name)
    w = w.replace("_", "-")  # a systemd-driver cgroup writes the uid with `_`
    uid = uid.lower().replace("_", "-")
    return (bool(name) and name == w) or (
        bool(uid) and len(w) >= MIN_ID_PREFIX and uid.startswith(w)
    )


def _container_matches(o: Owner, wanted: str) -> bool:
    """A prefix of the container's id (as `docker`, `crictl` and `podman` take one) or its
    name (Docker's names are case sensitive)."""
    cid = (o.container_id or "").lower()
    return (bool(cid) and cid.startswith(wanted.lower())) or o.container_name == wanted


def owner_matches(
    owner: Owner | None,
    jobs: Collection[str] = (),
    pods: Collection[str] = (),
    containers: Collection[str] = (),
) -> bool:
    """Whether `owner` is one the filter's `job:`, `pod:` and `ctr:` terms name: each term
    given must hold (any of its values), as `gpu:` and `user:` do together."""
    if not (jobs or pods or containers):
        return True
    if owner is None:
        return False
    checks = (
        (jobs, _job_matches),
        (pods, _pod_matches),
        (containers, _container_matches),
    )
    return all(not wanted or any(match(owner, w) for w in wanted) for wanted, match in checks)


def owner_sort_key(owner: Owner | None) -> tuple[str | int, ...] | None:
    """The OWNER column's sort value: its text with numbers as numbers; None (last) for a
    process without a job, pod or container."""
    text = owner_text(owner)
    return None if text is None else _natural(text)


def _natural(text: str) -> tuple[str | int, ...]:
    """`text` with its numbers as numbers (`job 99` before `job 424242`, `pod x-2` before
    `pod x-10`): strings at even places, numbers at odd, so two keys always compare."""
    parts = re.split(r"(\d+)", text.lower())
    return tuple(int(p) if k % 2 else p for k, p in enumerate(parts))
