"""Run a callback right after a module is first imported, without importing it ourselves.

The probe must not import torch into a job that does not (it costs a second and more at start),
yet its hooks must be in place before the job's first step. A finder at the front of
`sys.meta_path` (https://docs.python.org/3/reference/import.html#the-meta-path) lets the real
finder locate the module, then wraps the loader so that, once the module's code has run, the
callback sees the finished module. The module's own `__loader__` and `__spec__.loader` are the
real loader again before its code runs, so nothing in it can tell.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from types import ModuleType


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, hook: AfterImport) -> None:
        self.inner = inner
        self.hook = hook

    def create_module(self, spec):  # noqa: ANN001 - importlib's signature
        create = getattr(self.inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        if spec is not None:
            spec.loader = self.inner
        module.__loader__ = self.inner
        self.hook.remove()
        self.inner.exec_module(module)
        try:
            self.hook.callback(module)
        except Exception:  # the callback guards itself; never fail the job's import
            pass


class AfterImport(importlib.abc.MetaPathFinder):
    """One-shot: calls `callback(module)` after `name` is imported for the first time."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.callback = callback
        self.searching = False

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001 - importlib's
        if fullname != self.name or self.searching:
            return None
        self.searching = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self.searching = False
        # Not removed yet: `importlib.util.find_spec(name)` (an availability check) comes here
        # too without loading anything; the hook goes when the module's code runs.
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _CallbackLoader(spec.loader, self)
        return spec

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def after_import(name: str, callback: Callable[[ModuleType], None]) -> AfterImport | None:
    """`callback(module)` now if `name` is already imported, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return None
    hook = AfterImport(name, callback)
    sys.meta_path.insert(0, hook)
    return hook
