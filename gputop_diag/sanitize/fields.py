"""Values whose field says what they are, as the sanitizer shows them: a host name, a Slurm job
id, a path, a line of the job's code. (A user, a GPU UUID and a bus id are the table's own:
`PseudonymTable.user`, `uuid`, `pci`.)"""

from __future__ import annotations

import re

from .forms import host
from .paths import path_pseudonym
from .table import PseudonymTable
from .text import sanitize
from .work import Work


def hostname(s: PseudonymTable, name: str | None) -> str | None:
    """A host name or FQDN: seeded, then `host-x` (or `host-x.domain-y`)."""
    if not name:
        return name
    s.seed_hostname(name)
    w = Work()
    return w.restore(host(s, name, w))


def job(s: PseudonymTable, job_id: str | None) -> str | None:
    """A Slurm job id (`48213`, `48213_7`, `48213.batch`, `7`): its number replaced."""
    if not job_id:
        return job_id
    s.seed_job(job_id)
    m = re.fullmatch(r"(\s*)(\d+)(.*)", str(job_id), re.S)
    if m is None:
        return sanitize(s, job_id)
    rest = sanitize(s, m.group(3)) or ""
    return m.group(1) + s.pseudonym("job", m.group(2)) + rest


def path(s: PseudonymTable, p: str) -> str:
    """A path: what names a person or a project replaced (`paths.py`); the system's own
    paths as free text (their user and host names replaced)."""
    shown = path_pseudonym(s, p)
    return sanitize(s, p) or p if shown is None else shown


def site(s: PseudonymTable, text: str) -> str:
    """A line of the job's code the probe names (`train.py:42`, `/home/a/llm/train.py:88`):
    the line number kept, an absolute path replaced as paths are, a path in the job's own
    tree (relative to its directory) replaced whole, a bare file name as a command line's
    script is (`python train.py`)."""
    p, sep, line = text.rpartition(":")
    if not sep or not line.isdigit():
        p, line = text, ""
    if not p or p.startswith("("):  # "(other sites)"
        return sanitize(s, text) or text
    if p.startswith(("/", "~")):
        shown = path(s, p)
    else:
        shown = s.pseudonym("path" if "/" in p else "arg", p)
    return shown + (f":{line}" if line else "")
