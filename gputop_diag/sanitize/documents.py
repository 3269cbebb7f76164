"""Documents of the model's JSON shape (a snapshot, a recording line, a diagnosis, a driver
chain), read by field: names seeded from their fields first (`learn_document`), then every
field written through the sanitizer by what it holds (`document`): a host name, a UUID, a
serial, a bus id, a user, a command line read with its process's name (a rewritten title is
told by the two disagreeing), thread and child names, a job id, a process's owner by the owner
rules (`owners.py`), a health finding by the health rules (`health.py`), raw kernel-log text
dropped, minor numbers and device nodes removed, the rest as free text."""

from __future__ import annotations

import re
import shlex
from typing import Any

from . import fields
from . import health as HEALTH
from . import rules as R
from .forms import cuda_visible_devices
from .owners import is_owner, learn_owner, owner_document
from .rules import H
from .run_names import learn_names
from .table import PseudonymTable
from .text import learn, sanitize
from .titles import argv, process_name

KERNEL_TEXT = ("message", "raw", "detail")  # raw kernel-log text: dropped, never shared
_PROCESS_PARENTS = ("processes", "busiest_threads", "children")
_PCI_FIELD = re.compile(rf"(?:{H}+:)?{H}{{2}}:{H}{{2}}(?:\.[0-7])?")


def learn_document(s: PseudonymTable, doc: Any) -> None:
    """Seed from a document of the model's JSON shape (a snapshot, a recording line, a
    diagnosis): its names by field, the GPU models and versions as allowed, then whatever
    its free text reveals."""
    s.allow_document(doc)
    texts: list[str] = []
    _seed_walk(s, doc, None, None, texts)
    learn(s, texts)


def _seed_walk(
    s: PseudonymTable, v: Any, key: str | None, parent: str | None, texts: list[str]
) -> None:
    if HEALTH.is_finding(v):  # a health finding (a snapshot's `health`, `health --json`)
        texts += HEALTH.learn_finding(s, v)
    elif HEALTH.quotes_findings(v):  # a diagnosis's evidence or alert quoting one
        HEALTH.seed_texts(s, [v["text"]])
        texts.append(v["text"])
    elif is_owner(v):  # a process's owner: its pod's, container's and job's ids
        learn_owner(s, v)
        if isinstance(v.get("unit"), str):
            texts.append(v["unit"])
    elif isinstance(v, dict):
        if isinstance(v.get("uid"), int) and isinstance(v.get("user"), str):
            s.seed_uid(v["uid"], v["user"])  # a user's session names them by uid
        for k, x in v.items():
            _seed_walk(s, x, k, key or parent, texts)
    elif isinstance(v, list):
        if key == "cmdline" and all(isinstance(x, str) for x in v):
            learn_names(s, v)
        for x in v:
            _seed_walk(s, x, key, parent, texts)
    elif isinstance(v, str) and v:
        if key in ("hostname", "node"):  # "node": the host a probed rank runs on
            s.seed_hostname(v)
        elif key in ("user", "parent_user"):
            s.seed_user(v)
        elif key in ("job_id", "scope_job"):
            s.seed_job(v)
        elif key in ("uuid", "gpu_uuid"):
            s.seed_gpu_uuid(v)
        elif key == "serial":
            s.seed_word("serial", v)
        elif key in ("pci_bus_id", "pci"):
            s.seed_pci(v)
            texts.append(v)
        elif key == "name" and parent in ("scheduler_jobs", "slurm"):
            s.seed_word("job_name", v)
        elif key == "partition" and parent in ("scheduler_jobs", "slurm"):
            s.seed_word("partition", v)
        elif key == "nodes" and parent in ("scheduler_jobs", "slurm"):
            for part in re.findall(r"[A-Za-z][\w.-]*(?:\[[\d,\-]+\][\w.-]*)?", v):
                for name in R.expand_nodelist(part):
                    s.seed_hostname(name)
        elif not (key in KERNEL_TEXT and parent in ("xid_events", "kernel_events")):
            texts.append(v)


def document(s: PseudonymTable, doc: Any) -> Any:
    """A sanitized copy of `doc` (JSON values of the model's shape). `learn_document` first,
    so that every seed is known before the first field is written."""
    return _walk(s, doc, None, None)


def _walk(s: PseudonymTable, v: Any, key: str | None, parent: str | None) -> Any:
    if HEALTH.is_finding(v):
        return HEALTH.finding_document(s, v)
    if HEALTH.quotes_findings(v):
        return {
            # the tool's sentence: its quoted evidence says a non-flag value as `NAME set`
            k: HEALTH.own_text(s, x) if k == "text" else _walk(s, x, k, key or parent)
            for k, x in v.items()
        }
    if is_owner(v):
        return owner_document(s, v)
    if isinstance(v, dict):
        if "cmdline" in v and isinstance(v.get("cmdline"), list):
            return _process(s, v, key or parent)
        out = {k: _walk(s, x, k, key or parent) for k, x in v.items()}
        if key == "job" and v.get("target") == "command" and isinstance(v.get("label"), str):
            out["label"] = _command_label(s, v["label"])  # a command line, as cmdlines are
        return out
    if isinstance(v, list):
        if key == "cmdline" and all(isinstance(x, str) for x in v):
            return argv(s, v)
        return [_walk(s, x, key, parent) for x in v]
    if key in ("minor_number", "minor", "device_node") and v is not None:
        s.dropped("minor")
        return None
    if not isinstance(v, str) or not v:
        return v
    if key in KERNEL_TEXT and parent in ("xid_events", "kernel_events"):
        s.dropped("kernel_log")
        return ""
    if key in ("hostname", "node"):
        return fields.hostname(s, v)
    if key in ("uuid", "gpu_uuid") and re.match(r"(?i)(?:GPU|MIG)-", v):
        return s.uuid(v)
    if key == "serial":
        return s.pseudonym("serial", v, v.lower())
    if key in ("pci_bus_id", "pci") and _PCI_FIELD.fullmatch(v):
        return s.pci(v)
    if key in ("user", "parent_user"):
        return s.user(v)
    if key == "cuda_visible_devices":
        return cuda_visible_devices(s, v)
    if key == "name" and parent in ("scheduler_jobs", "slurm"):
        return s.pseudonym("job_name", v, v.lower())
    if key == "partition" and parent in ("scheduler_jobs", "slurm"):
        return s.pseudonym("partition", v, v.lower())
    if key in ("job_id", "scope_job"):
        return fields.job(s, v)
    if (key == "name" and parent in _PROCESS_PARENTS) or key == "process_name":
        return process_name(s, v)
    if key == "site":
        return fields.site(s, v)
    return sanitize(s, v)


def _process(s: PseudonymTable, v: dict[str, Any], parent: str | None) -> dict[str, Any]:
    """A process (its name and command line read together: a title tells itself by the
    two disagreeing)."""
    cmd = v["cmdline"]
    name = v.get("name") if isinstance(v.get("name"), str) else None
    out = {}
    for k, x in v.items():
        if k == "cmdline" and all(isinstance(a, str) for a in cmd):
            out[k] = argv(s, cmd, name=name)
        elif k == "name" and name:
            out[k] = process_name(s, name, cmd)
        else:
            out[k] = _walk(s, x, k, parent)
    return out


def _command_label(s: PseudonymTable, label: str) -> str:
    """A watched command's label (its command line, shell-quoted) sanitized as a command
    line: the program's name kept, its arguments replaced."""
    try:
        args = shlex.split(label)
    except ValueError:  # unbalanced quotes: every word an argument all the same
        args = label.split()
    return shlex.join(argv(s, args) or [])
