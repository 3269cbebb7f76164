"""The options of a command line whose value is a run's, a project's or an experiment's name
(`--run-name X`, `--project=Y`, `--output-dir Z`): seeded, so that the name is replaced
wherever it shows, in the job's output too. The command lines' rules (`titles.py`) and the
free-text rules (`text.py`, a launcher or a job echoing its command line) both read them."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .table import PseudonymTable

_NAME_OPTION = (
    r"(?:[\w-]*[-_])?(?:run|project|experiment|exp|job|wandb|name|tags?|group|entity|"
    r"output[-_]dir|save[-_]dir|logdir|log[-_]dir|checkpoint[-_]dir|ckpt[-_]dir)"
    r"(?:[-_]name|[-_]id)?"
)
_NAME_FLAG = re.compile(rf"^--?{_NAME_OPTION}$")
# The same options, long ones, with their values in free text (a launcher or a job echoing
# its command line: `--run-name X`, `--project=Y`; not find's `-name`).
NAME_OPTION_IN_TEXT = re.compile(rf"(?<![\w-])--{_NAME_OPTION}(?:=|[ \t]+)(?!-)[^\s'\",;]+")


def base_name(arg: str) -> str:
    """The last component of a path (`/opt/run-7/` -> `run-7`); the argument itself if none."""
    return arg.rstrip("/").rsplit("/", 1)[-1] or arg


def learn_names(s: PseudonymTable, args: Sequence[str]) -> None:
    """Seed the run and project names a command line gives (`--run-name X`, `--project=Y`)."""
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        if _NAME_FLAG.match(flag) and "model" not in flag and value and value[0] != "-":
            s.seed_word("job_name", base_name(value))  # not `--served-model-name`: public
