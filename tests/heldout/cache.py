"""A disk cache of generated held-out cases, keyed by what generates them.

Generating the 600 held-out cases takes tens of seconds; the cases depend only on the
generator's source, the model's source (the dataclasses they are built of), the seeds and the
Python version (`random`'s algorithms). `cached_cases(seeds)` hashes those and keeps the cases
in one file per key under the cache directory, so a second run reads them instead:

    $GPUTOP_DIAG_HELDOUT_CACHE, else $XDG_CACHE_HOME/gputop-diag/heldout,
    else ~/.cache/gputop-diag/heldout

Any edit to a source file that the generator imports (found by following its imports inside
`gputop_diag`) gives a new key, so a stale case is never read. The file is written to a
temporary name and renamed into place, under an exclusive lock on `<key>.lock`: processes that
ask at the same time (pytest-xdist workers) generate once, the others wait and read. Where the
directory cannot be written the cases are generated and nothing is kept.

The file is a pickle of one dict: the key, the seeds and one pickled blob per case, so a single
case can be read back without the rest (`read_case`). The blobs rebuild the model's frozen
dataclasses by calling the class with its field values, which reads several times faster than
pickle's default for `slots=True` dataclasses; the result compares equal to a fresh `generate`.
"""

from __future__ import annotations

import ast
import dataclasses
import gc
import hashlib
import io
import os
import pickle
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import gputop_diag

from . import Case, generate

__all__ = ["cache_dir", "cache_path", "cached_cases", "dumps_case", "loads_case", "read_case"]

FORMAT = 1  # bump when the file layout or the blob encoding changes
KEEP = 3  # entries kept per directory (other checkouts, other branches); older ones go
_PACKAGE_ROOT = Path(gputop_diag.__file__).resolve().parent.parent  # holds gputop_diag/


def cache_dir() -> Path:
    env = os.environ.get("GPUTOP_DIAG_HELDOUT_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gputop-diag" / "heldout"


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    base = _PACKAGE_ROOT.joinpath(*parts)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    """The `gputop_diag` modules a source file imports (absolute or relative)."""
    is_pkg = path.name == "__init__.py"
    package = module if is_pkg else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]  # `from . import x`
        else:
            continue
        found.update(n for n in names if n.split(".")[0] == "gputop_diag")
    return found


def source_files() -> list[Path]:
    """Every source file the generator depends on: its package and, following imports, the
    `gputop_diag` modules it reaches (the model)."""
    here = Path(__file__).resolve().parent
    todo = [
        (p, f"{__package__}.{p.stem}" if p.stem != "__init__" else __package__)
        for p in sorted(here.glob("*.py"))
    ]
    seen: dict[Path, str] = {}
    while todo:
        path, module = todo.pop()
        if path in seen:
            continue
        seen[path] = module
        for name in _imports(path, module):
            f = _module_file(name)
            if f is not None and f not in seen:
                todo.append((f, name))
    return sorted(seen)


def cache_key(seeds: Iterable[int]) -> str:
    h = hashlib.sha256()
    h.update(f"format={FORMAT} python={sys.version_info[0]}.{sys.version_info[1]}\n".encode())
    h.update(("seeds=" + ",".join(str(s) for s in seeds) + "\n").encode())
    for f in source_files():
        h.update(f.relative_to(_PACKAGE_ROOT).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:32]


def cache_path(seeds: Iterable[int], directory: Path | None = None) -> Path:
    seeds = list(seeds)
    return (directory or cache_dir()) / f"heldout-{cache_key(seeds)}.pickle"


# -- one case as bytes -------------------------------------------------------------------------

_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _init_fields(cls: type) -> tuple[str, ...] | None:
    """The field names to rebuild `cls(*values)` from, or None where that would not give the
    same object back (a field not in __init__, a __post_init__)."""
    if cls not in _FIELDS:
        fields = dataclasses.fields(cls)
        plain = all(f.init for f in fields) and not hasattr(cls, "__post_init__")
        _FIELDS[cls] = tuple(f.name for f in fields) if plain else None
    return _FIELDS[cls]


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        cls = type(obj)
        if dataclasses.is_dataclass(cls) and not isinstance(obj, type):
            names = _init_fields(cls)
            if names is not None:
                return cls, tuple([getattr(obj, n) for n in names])
        return NotImplemented


def dumps_case(case: Case) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(case)
    return buf.getvalue()


def loads_case(blob: bytes) -> Case:
    case = pickle.loads(blob)
    if not isinstance(case, Case):
        raise ValueError("not a held-out case")
    return case


# -- the file ---------------------------------------------------------------------------------


def _read(path: Path, key: str, seeds: list[int]) -> dict[int, bytes] | None:
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f)
    except Exception:  # missing, half-copied, from another layout: generate again
        return None
    if not isinstance(entry, dict) or entry.get("key") != key or entry.get("seeds") != seeds:
        return None
    if len(entry.get("blobs") or ()) != len(seeds):
        return None
    return dict(zip(seeds, entry["blobs"], strict=True))


def read_case(seed: int, seeds: Iterable[int], directory: Path | None = None) -> Case | None:
    """One case as the cache holds it, or None where the cache has no entry for `seeds`."""
    seeds = list(seeds)
    path = cache_path(seeds, directory)
    blobs = _read(path, path.stem.removeprefix("heldout-"), seeds)
    return None if blobs is None else loads_case(blobs[seed])


def _lock(f) -> None:
    """Hold an exclusive lock on the open file `f` until it is closed."""
    try:
        import fcntl
    except ImportError:  # no flock: the rename alone keeps readers from a half-written file
        return
    fcntl.flock(f, fcntl.LOCK_EX)


def _write(path: Path, key: str, seeds: list[int], blobs: list[bytes]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump({"key": key, "seeds": seeds, "blobs": blobs}, f, pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _prune(directory: Path, keep: Path) -> None:
    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0

    entries = sorted(directory.glob("heldout-*.pickle"), key=mtime)
    for old in [p for p in entries if p != keep][: max(0, len(entries) - KEEP)]:
        for p in (old, old.with_suffix(".lock")):
            try:
                p.unlink()
            except OSError:
                pass


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic collection while millions of objects are built that none of can be freed: the
    collector would walk them again and again (it more than doubles the time to read)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def cached_cases(seeds: Iterable[int], directory: Path | None = None) -> list[Case]:
    """`[generate(s) for s in seeds]`, read from the cache where an entry for the same
    sources and seeds is there, else generated (once across processes) and kept."""
    with _gc_paused():
        return _cached_cases(list(seeds), directory)


def _cached_cases(seeds: list[int], directory: Path | None) -> list[Case]:
    directory = directory or cache_dir()
    path = cache_path(seeds, directory)
    key = path.stem.removeprefix("heldout-")
    blobs = _read(path, key, seeds)
    if blobs is None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            lock = open(path.with_suffix(".lock"), "a+b")
        except OSError:  # nowhere to keep them
            return [generate(s) for s in seeds]
        with lock:
            _lock(lock)
            blobs = _read(path, key, seeds)  # another process may have written it meanwhile
            if blobs is None:
                cases = [generate(s) for s in seeds]
                try:
                    _write(path, key, seeds, [dumps_case(c) for c in cases])
                    _prune(directory, path)
                except OSError:
                    pass
                return cases
    try:
        os.utime(path)  # recently used: pruned last
    except OSError:
        pass
    return [loads_case(blobs[s]) for s in seeds]
