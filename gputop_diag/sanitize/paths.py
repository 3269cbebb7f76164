"""Paths as the sanitizer shows them: what names a person or a project replaced, the system's
own directories and the libraries' names kept.

- a home directory (`/home/alice/…`, `~alice/…`, `/root/…`) becomes `~user-…/path-…`;
- under the storage roots (`/scratch`, `/lustre`, `/data`, `/opt`, `/tmp`, …) the root is kept
  and the rest replaced; an unknown root is replaced whole;
- under the system's roots (`/usr`, `/etc`, `/var`, `/lib`, …) each directory is kept while it
  is one of the system's (`vocabulary.SYSTEM_DIRS`, versions, the multiarch triplets), and a
  public package's files are kept whole; from the first component that is someone's (a
  project under `/usr/local`, a site's config under `/etc`) the rest is replaced;
- /proc, /sys and /dev are the kernel's: kept (bus ids and `/dev/nvidiaN` are replaced by their
  own rules);
- a cgroup's path (`/kubepods.slice/…`, `/system.slice/…`, under /sys/fs/cgroup) keeps its
  layout, the pod, container, job and user ids in it replaced (`cgroups.py`).
A library's or Python's file name is kept at the end of a replaced path
(`/opt/path-x/libcudart.so.12`).
"""

from __future__ import annotations

import re

from . import rules as R
from .cgroups import cgroup_path, is_cgroup_path
from .table import PseudonymTable
from .vocabulary import PACKAGE_DIR, PUBLIC_PACKAGES, SYSTEM_DIR_SHAPES, SYSTEM_DIRS

_KERNEL_ROOTS = frozenset({"proc", "sys", "dev"})


def _system_part(part: str) -> bool:
    part = part.rstrip("*")  # a glob in a command to run: `libnvidia-ml.so*`
    return not part or part in SYSTEM_DIRS or SYSTEM_DIR_SHAPES.match(part) is not None


def path_pseudonym(s: PseudonymTable, path: str) -> str | None:
    """`path` with what names a person or a project replaced; None for the system's own paths,
    kept as they are (their user and host names are still replaced by the other rules)."""
    if path.startswith("~"):
        head, _, rest = path[1:].partition("/")
        user = ""
        if head:
            s.seed_user(head)
            user = head if head in R.SYSTEM_USERS else s.pseudonym("user", head, head.lower())
        return f"~{user}" + (f"/{tail(s, path, rest)}" if rest else "")
    if not path.startswith("/"):
        return _relative(s, path)
    if is_cgroup_path(path):
        return cgroup_path(s, path)
    parts = path.split("/")
    root = parts[1] if len(parts) > 1 else ""
    if root == "dev" and re.fullmatch(r"/dev/nvidia\d+", path):
        s.dropped("minor")
        return "/dev/nvidiaN"
    if root in _KERNEL_ROOTS or path.startswith(R.SYSTEM_PREFIXES):
        return None
    if root in R.SYSTEM_ROOTS or (root in ("var", "run", "srv") and len(parts) > 2):
        return _system(s, path, parts)
    if root in R.HOME_ROOTS and len(parts) > 2 and parts[2]:
        s.seed_user(parts[2])
        name = parts[2]
        shown = name if name in R.SYSTEM_USERS else s.pseudonym("user", name, name.lower())
        rest = "/".join(parts[3:])
        return f"~{shown}" + (f"/{tail(s, path, rest)}" if rest else "")
    if root == "root":
        rest = "/".join(parts[2:])
        return "~root" + (f"/{tail(s, path, rest)}" if rest else "")
    if root not in R.KNOWN_ROOTS:
        return "/" + tail(s, path, "/".join(parts[1:]))
    rest = "/".join(parts[2:])
    return f"/{root}" + (f"/{tail(s, path, rest)}" if rest.strip("/") else "")


def _relative(s: PseudonymTable, path: str) -> str | None:
    """A path relative to the working directory (`run.jsonl`, `out/run.jsonl.gz`,
    `./run.gz`, `../alice/run`): still relative, its leading `.` and `..` kept, the rest
    replaced as what follows an unknown root is (a library's name kept); `.` and `..` alone
    name no one."""
    parts = path.split("/")
    lead = 0
    while lead < len(parts) and parts[lead] in (".", ".."):
        lead += 1
    rest = "/".join(parts[lead:])
    if not rest.strip("/"):
        return None
    kept = "".join(f"{p}/" for p in parts[:lead])
    return kept + tail(s, path, rest)


def _system(s: PseudonymTable, path: str, parts: list[str]) -> str | None:
    """A path under the system's roots: kept up to its first component that is not the
    system's (or whole, inside a public package); the rest replaced."""
    for i in range(2, len(parts)):
        part = parts[i]
        if not part:
            continue
        if parts[i - 1] in ("site-packages", "dist-packages"):
            m = PACKAGE_DIR.match(part.removesuffix(".py"))
            if m and m.group(1) in PUBLIC_PACKAGES:
                return None
        elif _system_part(part):
            continue
        if i == len(parts) - 1 and parts[i - 1] in ("bin", "sbin"):
            return None  # a program's name: kept, as in a command line
        kept = "/".join(parts[:i])
        return f"{kept}/{tail(s, path, '/'.join(parts[i:]))}"
    return None


def tail(s: PseudonymTable, full: str, rest: str) -> str:
    """The pseudonym of what follows a path's root; a library's or Python's name kept."""
    rest = rest.rstrip("/")
    if not rest:
        return ""
    head, _, base = rest.rpartition("/")
    if R.KEEP_BASENAME.match(base):
        return f"{s.pseudonym('path', full.rsplit('/', 1)[0])}/{base}" if head else base
    return s.pseudonym("path", full.rstrip("/"))
