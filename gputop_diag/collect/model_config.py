"""A model's config.json: read from a path the user gave (`gputop-diag memory --config`, the live
view's and the report's `--model-config`), or found from a job's command line where it names
one (a config.json, a model directory, or a Hugging Face model id already in the local hub
cache). Never a download: only files already on this machine are read.

The file is parsed here (JSON, at most `MAX_BYTES`); what it means is the planner's business
(`planner.configs.shape_from_config`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..planner.hints import JobHints, hints_from_argv
from ..sources import Sources

if TYPE_CHECKING:  # the planner's reader loads with a config found
    from ..planner.configs import ReadConfig

MAX_BYTES = 4 * 2**20  # a model's config.json is a few KiB; anything this large is not one
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class ModelConfigError(Exception):
    """The file cannot be used: the message says which file and why, in one line."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    path: str  # the file read
    doc: dict[str, Any]
    read: ReadConfig  # the shape the planner reads from it
    found_in: str | None = None  # the argument of the job's command line that named it


def _parse(path: str, text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ModelConfigError(
            f"{path}: not JSON (line {e.lineno}, column {e.colno}: {e.msg})"
        ) from None
    if not isinstance(doc, dict):
        raise ModelConfigError(f"{path}: a config.json holds one JSON object")
    return doc


def _interpret(path: str, doc: dict[str, Any], found_in: str | None = None) -> ModelConfig:
    from ..planner.configs import ConfigError, shape_from_config

    try:
        return ModelConfig(path, doc, shape_from_config(doc), found_in)
    except ConfigError as e:
        raise ModelConfigError(f"{path}: {e}") from None


def read_config_file(path: str) -> ModelConfig:
    """The config at `path` (a file, or a model directory holding config.json)."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise ModelConfigError(
                f"{path}: {size / 2**20:.1f} MiB is too large for a config.json (is it the "
                "weights?)"
            )
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ModelConfigError(f"{path}: no such file") from None
    except PermissionError:
        raise ModelConfigError(f"{path}: not readable (permission denied)") from None
    except UnicodeDecodeError:
        raise ModelConfigError(f"{path}: not text (a binary file?)") from None
    except OSError as e:
        raise ModelConfigError(f"{path}: {e.strerror or e}") from None
    return _interpret(path, _parse(path, text))


def _hub_cache_dirs(environ: dict[str, str]) -> list[str]:
    """Where huggingface_hub keeps downloaded models (HF_HUB_CACHE, HF_HOME/hub, ~/.cache)."""
    out = []
    if environ.get("HF_HUB_CACHE"):
        out.append(environ["HF_HUB_CACHE"])
    if environ.get("HF_HOME"):
        out.append(os.path.join(environ["HF_HOME"], "hub"))
    home = environ.get("HOME")
    if home:
        out.append(os.path.join(home, ".cache", "huggingface", "hub"))
    return out


class ConfigFinder:
    """Finds the config a process's command line names, once per process (the answer is kept
    by pid and command line: a config is not read again every tick)."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self._seen: dict[tuple[int, tuple[str, ...]], ModelConfig | None] = {}

    def find(self, pid: int, cmdline: Sequence[str] | None) -> ModelConfig | None:
        if not cmdline:
            return None
        key = (pid, tuple(cmdline))
        if key not in self._seen:
            if len(self._seen) > 256:  # many short-lived processes: start over
                self._seen.clear()
            self._seen[key] = self._look(pid, hints_from_argv(cmdline))
        return self._seen[key]

    def _look(self, pid: int, hints: JobHints) -> ModelConfig | None:
        if not hints.config_paths:
            return None
        try:
            cwd = self.sources.psutil.Process(pid).cwd()
        except Exception:  # noqa: BLE001 - gone, another user's: relative paths unknown
            cwd = None
        for named in hints.config_paths:
            for path in self._candidates(named, cwd):
                found = self._read(path, named)
                if found is not None:
                    return found
        return None

    def _candidates(self, named: str, cwd: str | None) -> list[str]:
        out = []
        base = named if os.path.isabs(named) else (os.path.join(cwd, named) if cwd else None)
        if base is not None:
            base = os.path.normpath(base)
            out.append(base if base.endswith(".json") else os.path.join(base, "config.json"))
        if _HUB_ID.match(named) and not named.endswith(".json"):
            folder = "models--" + named.replace("/", "--")
            for cache in _hub_cache_dirs(self.sources.environ):
                out += self._hub_snapshot(os.path.join(cache, folder))
        return out

    def _hub_snapshot(self, repo: str) -> list[str]:
        """The config.json of the revision refs/main points to, in the hub cache's layout."""
        try:
            commit = self.sources.procfs.read_text(os.path.join(repo, "refs", "main")).strip()
        except OSError:
            return []
        if not re.fullmatch(r"[0-9a-f]{40}", commit):
            return []
        return [os.path.join(repo, "snapshots", commit, "config.json")]

    def _read(self, path: str, named: str) -> ModelConfig | None:
        try:
            text = self.sources.procfs.read_text(path)
        except (OSError, UnicodeDecodeError):
            return None
        if len(text) > MAX_BYTES:
            return None
        try:
            return _interpret(path, _parse(path, text), found_in=named)
        except ModelConfigError:
            return None  # not a model's config (a training config that is JSON, say)
