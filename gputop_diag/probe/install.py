"""Putting the hooks of hooks.py into a job's torch, and taking them out again.

Each part (t_input, t_sync, t_comm, and the step boundaries) is installed on its own; a part
that cannot be installed, or whose hook fails later, is put back to the original functions and
reported once as a note. `uninstall` restores every attribute exactly (tests and the benchmark
use it; a job never needs to).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from types import CodeType, ModuleType
from typing import Any

from . import ddp, hooks, sizes
from .accounts import Accounts
from .imports import AfterImport, after_import

_MISSING = object()
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# the probe's modules whose code runs inside the job's steps
_MODULES = (
    ".accounts",
    ".core",
    ".ddp",
    ".gpu",
    ".hooks",
    ".imports",
    ".install",
    ".sizes",
    ".stacks",
    ".writer",
)


class TorchHooks:
    def __init__(
        self,
        torch: ModuleType,
        acc: Accounts,
        on_step: Callable[[Any], None],
        note: Callable[[str], None],
    ) -> None:
        self.torch = torch
        self.acc = acc
        self.on_step = on_step
        self.note = note
        self.parts = {"t_input": False, "t_sync": False, "t_comm": False, "step": False}
        self.patches: dict[str, list[tuple[Any, str, Any]]] = {}
        self.handle: Any = None
        compiler = getattr(torch, "compiler", None)
        self.is_compiling = getattr(compiler, "is_compiling", None) or (lambda: False)
        self.watchers: list[AfterImport] = []

    # -- installing ---------------------------------------------------------------------------

    def install(self) -> None:
        for part, install in (
            ("t_sync", self._install_syncs),
            ("t_input", self._install_input),
            ("t_comm", self._install_comm),
            ("step", self._install_step),
        ):
            try:
                installed = install()
            except Exception as exc:
                self._restore(part)
                self.note(f"probe: {part} hooks could not be installed ({describe(exc)})")
                continue
            self.parts[part] = installed is not False
        try:
            self._install_ddp_watch()
            self.watchers.append(after_import("transformers.cache_utils", self._watch_caches))
            self.watchers.append(after_import("torch._dynamo", _hide_from_dynamo))
        except Exception as exc:
            self.note(f"probe: model hooks could not be installed ({describe(exc)})")
        self.watchers = [w for w in self.watchers if w is not None]

    def _patch(self, part: str, owner: Any, name: str, wrapper: Any) -> None:
        """Set `owner.name = wrapper`, remembering exactly what to put back: the attribute as
        the owner's own namespace held it, or nothing (inherited: ours is deleted again)."""
        own = vars(owner)
        original = own[name] if name in own else _MISSING
        self.patches.setdefault(part, []).append((owner, name, original))
        setattr(owner, name, wrapper)

    def _install_syncs(self) -> None:
        torch, acc, fail = self.torch, self.acc, self.fail
        tensor = torch.Tensor
        for name, call in hooks.TENSOR_SYNCS_NO_ARGS:
            orig = getattr(tensor, name)
            self._patch("t_sync", tensor, name, hooks._tensor_sync_no_args(acc, orig, call, fail))
        self._patch("t_sync", tensor, "cpu", hooks._sync(acc, tensor.cpu, ".cpu", fail, True))
        cuda = torch.cuda
        self._patch(
            "t_sync",
            cuda,
            "synchronize",
            hooks._sync(acc, cuda.synchronize, "torch.cuda.synchronize", fail, False),
        )
        for cls in (cuda.Event, cuda.Stream):
            label = f"torch.cuda.{cls.__name__}.synchronize"
            wrapper = hooks._sync(acc, cls.synchronize, label, fail, False)
            self._patch("t_sync", cls, "synchronize", wrapper)
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "synchronize"):
            label = "torch.accelerator.synchronize"
            wrapper = hooks._sync(acc, accelerator.synchronize, label, fail, False)
            self._patch("t_sync", accelerator, "synchronize", wrapper)

    def _install_input(self) -> None:
        loader = sys.modules["torch.utils.data.dataloader"]
        base = loader._BaseDataLoaderIter
        self._patch("t_input", base, "__next__", hooks._input(self.acc, base.__next__))
        data_loader = loader.DataLoader
        self._patch(
            "t_input", data_loader, "__iter__", hooks._input(self.acc, data_loader.__iter__)
        )

    def _install_comm(self) -> bool:
        dist = self.torch.distributed
        if not dist.is_available():
            return False
        c10d = sys.modules["torch.distributed.distributed_c10d"]
        for name in hooks.COLLECTIVES:
            orig = getattr(c10d, name, None)
            if orig is None:
                continue
            wrapper = hooks._collective(self.acc, orig, self.fail, c10d.Work, name)
            self._patch("t_comm", c10d, name, wrapper)
            if getattr(dist, name, None) is orig:
                self._patch("t_comm", dist, name, wrapper)
        work = c10d.Work
        self._patch("t_comm", work, "wait", hooks._wait(self.acc, work.wait, self.fail))
        return True

    def _install_step(self) -> None:
        optimizer = sys.modules["torch.optim.optimizer"]
        self.handle = optimizer.register_optimizer_step_post_hook(self._post_step)

    def _post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # An optimizer step traced by torch.compile: the hook is left out of the graph rather
        # than break it (a step boundary needs the host's clock); such a job marks its steps
        # with probe.step() outside the compiled function.
        if self.is_compiling():
            return
        try:
            self.on_step(optimizer)
        except Exception as exc:
            self.fail("step", exc)

    def _install_ddp_watch(self) -> None:
        ddp.DdpHooks(self.torch, self.acc, self.note).install(
            lambda owner, name, wrapper: self._patch("model", owner, name, wrapper)
        )

    def _watch_caches(self, module: ModuleType) -> None:
        cache = getattr(module, "Cache", None)
        if cache is None:
            return
        orig = cache.__init__

        def __init__(obj, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, N807
            orig(obj, *args, **kwargs)
            try:
                sizes.track_cache(obj)
            except Exception:
                pass

        self._patch("model", cache, "__init__", _wraps(orig, __init__))

    # -- failing and restoring ----------------------------------------------------------------

    def fail(self, part: str, exc: BaseException) -> None:
        """A hook of `part` failed: put the part's originals back and say so once."""
        if not self.parts.get(part):
            return
        self.parts[part] = False
        self._restore(part)
        if part == "step" and self.handle is not None:
            self.handle.remove()
            self.handle = None
        self.note(f"probe: the {part} hook failed ({describe(exc)}) and is off from here on")

    def _restore(self, part: str) -> None:
        for owner, name, original in reversed(self.patches.pop(part, [])):
            try:
                if original is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
            except Exception:
                pass

    def uninstall(self) -> None:
        for part in list(self.patches):
            self._restore(part)
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        for watcher in self.watchers:
            watcher.remove()
        for part in self.parts:
            self.parts[part] = False

    def internal_paths(self) -> tuple[str, ...]:
        return (os.path.dirname(self.torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep)


def _probe_code() -> list[CodeType]:
    """Every code object of the probe's modules, nested functions (the wrappers) included."""
    found: dict[int, CodeType] = {}

    def add(code: CodeType) -> None:
        if id(code) not in found:
            found[id(code)] = code
            for const in code.co_consts:
                if isinstance(const, CodeType):
                    add(const)

    package = __name__.rsplit(".", 1)[0]
    for name in ("", *_MODULES):
        module = sys.modules.get(package + name)
        if module is None:
            continue
        for value in list(vars(module).values()):
            for item in [value, *vars(value).values()] if isinstance(value, type) else [value]:
                item = getattr(item, "__func__", item)
                code = getattr(item, "__code__", None)
                if isinstance(code, CodeType) and code.co_filename.startswith(_HERE):
                    add(code)
    return list(found.values())


def _hide_from_dynamo(dynamo: ModuleType) -> None:
    """torch.compile must not compile the probe's own frames: after a graph break, the job's
    eager code runs under dynamo's frame hook, which would compile our wrappers as frames of
    their own (and fail on them). `skip_code` marks a code object as skipped, with no cost
    per call (it is what `torch._dynamo.skip` does; https://pytorch.org/docs/stable/
    torch.compiler_fine_grain_apis.html)."""
    try:
        skip_code = getattr(getattr(dynamo, "eval_frame", None), "skip_code", None)
        if skip_code is not None:
            for code in _probe_code():
                skip_code(code)
    except Exception:  # an older or newer dynamo: compiled jobs may then see our frames
        pass


def _wraps(orig: Any, wrapper: Any) -> Any:
    try:
        return functools.wraps(orig)(wrapper)
    except Exception:
        return wrapper


def describe(exc: BaseException) -> str:
    """An error in a note: its type and first line."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__
