"""Command lines, process titles and process and thread names, as the sanitizer shows them.

A command line keeps its program's name and the options known to be safe (`rules.SAFE_FLAGS`
with values that are numbers or switches); every other argument becomes `arg-…`.

A process may rewrite its title (setproctitle, which PyTorch launchers, Ray, vLLM and many
dataloaders use; `exec -a NAME`): /proc/PID/cmdline is then one string with spaces in it, or a
first element that is not the program at all, and /proc/PID/comm may hold its first 15
characters. Such a title is read as a command line of words, never as the program's name:
its first word is kept only when it names a public program (`vocabulary.SAFE_PROGRAM`), the
rest as arguments. A process or thread name is kept when it names a public program or is the
program's own name in an untouched command line; otherwise it is read as a title. The run and
project names a command line gives are seeded first (`run_names.py`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from . import rules as R
from .rules import safe_program
from .run_names import base_name, learn_names
from .table import PseudonymTable
from .text import learn, sanitize

_SPACE = re.compile(r"\s")


def same_program(argv0: str, name: str) -> bool:
    """Whether `name` (/proc/PID/comm, at most 15 characters) is the program `argv0` names:
    then argv[0] is the program's own, not a rewritten title."""
    base = base_name(argv0)
    return bool(name) and (base.startswith(name[:15]) or name.startswith(base[:15]))


def is_title(args: Sequence[str], name: str | None) -> bool:
    """argv[0] has spaces in it (a title written over the command line), is a lone word with
    no path (`setproctitle("orion-7b")`), or does not name the program the kernel knows the
    process by (`exec -a`); a script run by its interpreter (`python3 train.py`, comm
    `train.py`) and any public program are no title."""
    first = args[0]
    if _SPACE.search(first.strip()):
        return True
    if safe_program(base_name(first)):
        return False
    if len(args) == 1 and "/" not in first:  # a lone word: a title as likely as a program
        return True
    if not name or same_program(first, name):
        return False
    return not any(same_program(a, name) for a in args[1:3])


def argv(s: PseudonymTable, args: Sequence[str], name: str | None = None) -> list[str]:
    """A command line with its program's name and safe options kept, the rest replaced; a
    rewritten title read word by word (`name`: the process's comm, to tell one)."""
    args = list(args)
    if not args:
        return []
    learn(s, args)
    if is_title(args, name):
        words = args[0].split()
        learn_names(s, [*words, *args[1:]])
        first = base_name(words[0]) if words else ""
        head = [first if _public(s, first) else s.pseudonym("arg", words[0])] if words else []
        return head + arguments(s, [*words[1:], *args[1:]])
    learn_names(s, args)
    prog = base_name(args[0])
    return [
        prog if prog in R.INTERPRETERS else (sanitize(s, prog) or prog),
        *arguments(s, args[1:]),
    ]


def arguments(s: PseudonymTable, args: Sequence[str]) -> list[str]:
    out: list[str] = []
    module_next = False
    for a in args:
        if module_next:
            module_next = False
            out.append(a if R.SAFE_MODULES.match(a) else s.pseudonym("arg", a))
        elif a.startswith("-") and len(a) > 1 and not R.SAFE_VALUE.match(a):
            flag, eq, value = a.partition("=")
            if flag not in R.SAFE_FLAGS:
                out.append(s.pseudonym("arg", a))
            elif eq:
                out.append(f"{flag}={arg_value(s, value)}")
            else:
                out.append(flag)
                module_next = flag == "-m"
        else:
            out.append(arg_value(s, a))
    return out


def arg_value(s: PseudonymTable, v: str) -> str:
    if R.SAFE_VALUE.match(v):
        return sanitize(s, v) or v
    return s.pseudonym("arg", v)


def process_name(
    s: PseudonymTable, name: str | None, cmdline: Sequence[str] | None = None
) -> str | None:
    """A process's or thread's name: kept when it names a public program, or the program of an
    untouched command line (`cmdline`); otherwise read as a title (`arg-…`)."""
    if not name or not name.strip():
        return name
    if _public(s, name.strip()):
        return name
    if cmdline and not is_title(cmdline, name) and same_program(cmdline[0], name):
        return sanitize(s, name) or name
    learn(s, [name])
    words = name.split()
    head = words[0] if _public(s, words[0]) else s.pseudonym("arg", words[0])
    return " ".join([head, *arguments(s, words[1:])])


def _public(s: PseudonymTable, name: str) -> bool:
    r"""A public program's or runtime's name with nothing seeded in it: the vocabulary's shapes
    are open (`pt_[a-z]+`, `nccl[\w-]*`, `NCCL Word N`), so `pt_<project>` or
    `nccl-<host>`, a title cut to 15 characters, fits them and is still someone's. What
    follows each `-`, `_` or space is read on its own too (`nccl-gpu-07` holds the host
    `gpu-07`, which the whole does not show as a word)."""
    if not safe_program(name):
        return False
    starts = [0, *(k + 1 for k, c in enumerate(name) if c in "-_ ")]
    return all(sanitize(s, name[k:]) == name[k:] for k in starts)
