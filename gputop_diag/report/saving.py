"""Where the live view's `s` writes the report and `S` the snapshot: the save directory, else
the user's state directory, else /tmp.

A live view is often started in a directory the user cannot write (a shared project folder,
`/`); the file must still land somewhere, and the view must say where. File names use the
wall clock, never the simulator's or a recording's time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

APP_DIR = "gputop-diag"


def save_dirs(save_dir: str | None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The directories to try, in order: `save_dir` (`--save-dir`) when given, then
    `$XDG_STATE_HOME/gputop-diag` or `~/.local/state/gputop-diag`, then `/tmp`; absolute, so a
    toast never names a refused directory as `.`."""
    env = os.environ if environ is None else environ
    out = [os.path.abspath(save_dir)] if save_dir else []
    state = env.get("XDG_STATE_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".local", "state"
    )
    out.append(os.path.abspath(os.path.join(state, APP_DIR)))
    out.append(os.path.abspath(env.get("TMPDIR") or "/tmp"))
    seen: list[str] = []
    for d in out:
        if d and os.path.abspath(d) not in map(os.path.abspath, seen):
            seen.append(d)
    return seen


@dataclass(frozen=True)
class Saved:
    path: str | None  # None when no directory took it
    problems: tuple[str, ...] = ()  # "DIR: why", for each directory that refused
    also: tuple[str, ...] = ()  # the other files written beside `path` (a report's JSON)


def _free_name(directory: str, stamp: str) -> str:
    path = os.path.join(directory, f"gputop-diag-snapshot-{stamp}.json")
    n = 1
    while os.path.exists(path):  # two saves in one second: keep both
        n += 1
        path = os.path.join(directory, f"gputop-diag-snapshot-{stamp}-{n}.json")
    return path


def write_json(
    doc: Any, dirs: list[str], now: datetime | None = None, create_first: bool = True
) -> Saved:
    """Write `doc` into the first directory of `dirs` that takes it, made if missing; except
    the first when `create_first` is False: a `--save-dir` that does not exist is a typo to
    report, not to create."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    problems: list[str] = []
    for k, directory in enumerate(dirs):
        try:
            if k > 0 or create_first:
                os.makedirs(directory, mode=0o700, exist_ok=True)
            path = _free_name(directory, stamp)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as e:
            problems.append(f"{directory}: {e.strerror or e}")
            continue
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=2)
        except OSError as e:  # a full disk: no half-written file left behind
            problems.append(f"{directory}: {e.strerror or e}")
            try:
                os.unlink(path)
            except OSError:
                pass
            continue
        return Saved(path, tuple(problems))
    return Saved(None, tuple(problems))


def write_into(
    write: Callable[[str], tuple[str, ...]], dirs: list[str], create_first: bool = True
) -> Saved:
    """Call `write(directory)` (it returns the paths it wrote, the main one first, and raises
    OSError without leaving anything behind) for each directory of `dirs` until one takes it;
    the directories are made if missing (the first only with `create_first`)."""
    problems: list[str] = []
    for k, directory in enumerate(dirs):
        try:
            if k > 0 or create_first:
                os.makedirs(directory, mode=0o700, exist_ok=True)
            paths = write(directory)
        except OSError as e:
            problems.append(f"{directory}: {e.strerror or e}")
            continue
        return Saved(paths[0], tuple(problems), tuple(paths[1:]))
    return Saved(None, tuple(problems))
