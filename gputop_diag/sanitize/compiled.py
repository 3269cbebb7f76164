"""The seeded names as patterns, rebuilt whenever a seed is added (`Sanitizer.compiled`).

Names that are also words (`vocabulary.VOCABULARY`: a Jetson's `nvidia` account, a host called
`master`), user names under 3 letters and job ids under `JOB_ID_ANYWHERE` digits get patterns
that need their context: `user=nvidia`, `nvidia@host`, `job 42`, `42.batch`. Every other name
is replaced wherever it stands as a word, host and user names and free words in any case.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from .vocabulary import VOCABULARY
from .work import (
    ALLOWED_L,
    ALLOWED_R,
    DIGIT_L,
    DIGIT_R,
    WORD_L,
    WORD_R,
    WordSet,
    boundary_re,
    trie_pattern,
)

# A job id this long is replaced wherever it stands as a number; a shorter one only where
# the text says it is a job's (`job 42`, `JobId=42`, `42.batch`, `slurm-42.out`): a short id
# is also a percentage, a limit, a count.
JOB_ID_ANYWHERE = 5
# the seeded word classes matched in any letter case (and replaced by `text.scrub` in this order)
CASELESS_CLASSES = (
    "job_name",
    "account",
    "partition",
    "serial",
    "project",
    "namespace",
    "container_name",
)


def needs_context(cls: str, name: str) -> bool:
    """Whether a seeded name is replaced only where its context names it."""
    if cls == "job":
        return len(name) < JOB_ID_ANYWHERE
    if cls == "user":
        return len(name) < 3 or name.lower() in VOCABULARY
    if cls == "hostname":
        return name.lower() in VOCABULARY
    return False


def _in_context(words: Collection[str], before: str, after: str = "") -> re.Pattern[str] | None:
    if not words:
        return None
    return re.compile(f"{before}(?P<n>{trie_pattern(words)}){after}", re.I)


def compile_seeds(
    *,
    allowed: Collection[str],
    hosts: Mapping[str, str],
    stems: Collection[str],
    domains: Collection[str],
    users: Collection[str],
    pods: Collection[str],
    jobs: Collection[str],
    words: Mapping[str, Collection[str]],
) -> dict[str, Any]:
    free_hosts = [h for h in hosts if not needs_context("hostname", h)]
    ctx_hosts = [h for h in hosts if needs_context("hostname", h)]
    free_users = [u for u in users if not needs_context("user", u)]
    ctx_users = [u for u in users if needs_context("user", u)]
    long_jobs = [j for j in jobs if not needs_context("job", j)]
    short_jobs = [j for j in jobs if needs_context("job", j)]
    out: dict[str, Any] = {
        "allowed": boundary_re(allowed, left=ALLOWED_L, right=ALLOWED_R),
        "hosts": WordSet(free_hosts, "host") or None,
        # gpu-node-07's numbered neighbours: `stems` holds `gpu-node-`
        "stems": re.compile(rf"(?<![A-Za-z0-9-])(?:{trie_pattern(stems)})\d+(?![A-Za-z0-9-])", re.I)
        if stems
        else None,
        "domains": re.compile(
            rf"(?<![\w.@/-])(?:[A-Za-z0-9-]+\.)+(?:{trie_pattern(domains)})(?![\w-]|\.[A-Za-z0-9])",
            re.I,
        )
        if domains
        else None,
        "hosts_ctx": _in_context(
            ctx_hosts,
            r"(?:\bhost(?:name)?\s*[=:]?\s*|\bnodes?\s*[=:]?\s*|\bpeer\s+|(?<=@))",
            r"(?![\w-]|\.[A-Za-z0-9])",
        ),
        # a pod's name also where the kubelet joins it with `_` (`NAMESPACE_NAME_UID`), and with
        # more name after a `-` (`NAME-worker`, `NAME-7f9c`): the whole name replaced
        "pods": boundary_re(
            [p for p in pods if not needs_context("hostname", p)],
            left=r"(?<![A-Za-z0-9.-])",
            right=r"(?:-[A-Za-z0-9]+)*(?![A-Za-z0-9-]|\.[A-Za-z0-9])",
            flags=re.I,
        ),
        "users": WordSet(free_users) or None,
        "users_ctx": _in_context(
            ctx_users,
            r"(?:\b(?:user(?:_?name)?|owner|login)\s*[=:]?\s*|\b(?:run|owned|started)\s+by\s+"
            r"|(?<![\w.-])(?=[\w.-]+@))",
            r"(?![\w.-]*\w)",
        ),
        "jobs": boundary_re(long_jobs, left=DIGIT_L, right=DIGIT_R),
        "jobs_ctx": _in_context(
            short_jobs,
            r"(?:\bjob(?:_?id)?\s*[#=:_]?\s*|\bslurm-|(?<![\w.])(?=\d+(?:\.(?:batch|extern|"
            r"interactive)\b|_\d+\b)))",
            r"(?!\d|\.\d)",
        ),
    }
    for cls in (*CASELESS_CLASSES, "secret"):
        flags = re.I if cls in CASELESS_CLASSES else 0
        out[cls] = boundary_re(words.get(cls, ()), left=WORD_L, right=WORD_R, flags=flags)
    return out
