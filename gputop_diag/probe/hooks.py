"""The probe's hooks into PyTorch: input waits, host-device syncs, collectives, step boundaries.

Every hook wraps a Python-level attribute and calls the original unchanged: same arguments,
same result, same exception. What the hook adds is guarded; if it fails, that part's hooks are
put back, the part is no longer measured and a note says so once.

- Input: `torch.utils.data.dataloader._BaseDataLoaderIter.__next__` (every loader iterator, any
  `num_workers`, and every loader that wraps a DataLoader) and `DataLoader.__iter__` (worker
  start-up at each epoch: https://pytorch.org/docs/stable/data.html#multi-process-data-loading).
- Syncs: `Tensor.item`, `.tolist`, `.cpu`, `bool()`, `float()`, `int()` of a tensor, which wait
  for the device when the tensor is on it (https://pytorch.org/docs/stable/notes/cuda.html
  #asynchronous-execution), and `torch.cuda.synchronize`, `torch.cuda.Event.synchronize`,
  `torch.cuda.Stream.synchronize`, `torch.accelerator.synchronize`. A call made by torch itself
  counts only on a device tensor (torch reads small CPU tensors all the time, e.g. Adam's step
  count); it is put on the user's line that led to it.
- Collectives: the `torch.distributed` functions (https://pytorch.org/docs/stable/distributed.html
  #collective-functions), and `Work.wait` for `async_op=True`. DistributedDataParallel's
  gradient all-reduce runs in C++ and is not seen; a comm hook would see it, but a module takes
  one comm hook only (`register_comm_hook` "can only be called once"), so registering ours
  would break a job that registers its own: with DDP, t_comm is reported as not measured.
- Steps: a global optimizer step post-hook
  (`torch.optim.optimizer.register_optimizer_step_post_hook`,
  https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.register_step_post_hook.html).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .accounts import Accounts

COLLECTIVES = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_coalesced",
    "all_gather_into_tensor",
    "_all_gather_base",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "reduce",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
)
TENSOR_SYNCS_NO_ARGS = (
    ("item", ".item"),
    ("tolist", ".tolist"),
    ("__bool__", "bool()"),
    ("__float__", "float()"),
    ("__int__", "int()"),
)

_getframe = sys._getframe
_clock = time.perf_counter
_ident = threading.get_ident

# A hook's `fail(part, error)`: called when its own code fails. Only in annotations (strings
# here): `Callable[...]` at run time needs Python 3.9, and a child may run an older Python.


def _tensor_sync_no_args(
    acc: Accounts, orig: Any, call: str, fail: Callable[[str, BaseException], None]
) -> Any:
    """The hot path: about a microsecond on top of the call (bench/probe.py measures it)."""

    user_code = acc.user  # one dict for the probe's life (cleared, never replaced)
    sites = acc.sites

    def wrapper(self):  # noqa: ANN001, ANN202 - the Tensor method's own signature
        if acc.depth or _ident() != acc.owner:
            return orig(self)
        frame = _getframe(1)
        user = user_code.get(frame.f_code)
        if user is None:
            user = acc.classify(frame.f_code)
        if not user:
            try:
                on_cpu = self.is_cpu
            except Exception:
                on_cpu = False
            if on_cpu:
                return orig(self)
            frame = acc.user_frame(frame)
        acc.depth = 1
        t0 = _clock()
        try:
            result = orig(self)
        finally:
            acc.depth = 0
        seconds = _clock() - t0
        try:  # Accounts.add_sync, inlined: a method call is a tenth of the budget
            acc.t_sync += seconds
            acc.n_sync += 1
            key = (frame.f_code, frame.f_lasti, call)
            entry = sites.get(key)
            if entry is None:
                acc.add_site(key, seconds)
            else:
                entry[0] += 1
                entry[1] += seconds
        except Exception as exc:
            fail("t_sync", exc)
        return result

    return functools.wraps(orig)(wrapper)


def _sync(
    acc: Accounts, orig: Any, call: str, fail: Callable[[str, BaseException], None], tensor: bool
) -> Any:
    """Any other sync: `Tensor.cpu(...)`, `torch.cuda.synchronize(device)`, `Event.synchronize`."""

    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if acc.depth or _ident() != acc.owner:
            return orig(*args, **kwargs)
        frame = _getframe(1)
        user = acc.user.get(frame.f_code)
        if user is None:
            user = acc.classify(frame.f_code)
        if not user:
            if tensor:
                try:
                    on_cpu = args[0].is_cpu
                except Exception:
                    on_cpu = False
                if on_cpu:
                    return orig(*args, **kwargs)
            frame = acc.user_frame(frame)
        acc.depth = 1
        t0 = _clock()
        try:
            result = orig(*args, **kwargs)
        finally:
            acc.depth = 0
        try:
            acc.add_sync(frame, call, _clock() - t0)
        except Exception as exc:
            fail("t_sync", exc)
        return result

    return functools.wraps(orig)(wrapper)


def _input(acc: Accounts, orig: Any) -> Any:
    def wrapper(self):  # noqa: ANN001, ANN202 - `__next__(self)`, `__iter__(self)`
        if acc.depth or _ident() != acc.owner:
            return orig(self)
        t0 = _clock()
        if acc.open_t is None:  # the first step starts when the job first asks for data
            acc.begin(t0)
        acc.depth = 1
        try:
            return orig(self)
        finally:
            acc.depth = 0
            acc.t_input += _clock() - t0

    return functools.wraps(orig)(wrapper)


def _on_a_device(args: tuple, kwargs: dict) -> bool:
    """Whether a collective's tensors are on a GPU: NCCL's collectives, and their `wait()`,
    return once the work is queued on the stream (https://pytorch.org/docs/stable/
    distributed.html#synchronous-and-asynchronous-collective-operations)."""
    try:
        for a in (*args, *kwargs.values()):
            items = a if isinstance(a, (list, tuple)) else (a,)
            if any(getattr(x, "is_cuda", False) is True for x in items[:4]):
                return True
    except Exception:
        return False
    return False


def _nbytes(args: tuple) -> int | None:
    """The bytes of a collective's first argument (a tensor or a list of them), where it is."""
    try:
        first = args[0]
        items = first if isinstance(first, (list, tuple)) else (first,)
        return sum(t.numel() * t.element_size() for t in items)
    except Exception:
        return None


def _collective(
    acc: Accounts,
    orig: Any,
    fail: Callable[[str, BaseException], None],
    work_type: type,
    op: str,
) -> Any:
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if acc.depth or _ident() != acc.owner:
            return orig(*args, **kwargs)
        acc.depth = 1
        if not acc.device_comm and _on_a_device(args, kwargs):
            acc.device_comm = True
        t0 = _clock()
        seq = acc.enter(op, _nbytes(args), t0)
        try:
            result = orig(*args, **kwargs)
        except BaseException:
            acc.finish(seq)  # a collective that raised is no longer waited in
            raise
        finally:
            acc.depth = 0
        seconds = _clock() - t0
        try:
            acc.t_comm_exposed += seconds
            works = result if isinstance(result, list) else (result,)
            issued = [w for w in works if isinstance(w, work_type)]
            for work in issued:  # async_op=True: the rest is counted when it is waited for
                acc.issued[id(work)] = (t0, seq)
            if not issued:
                acc.t_comm += seconds
                acc.finish(seq)
        except Exception as exc:
            fail("t_comm", exc)
        return result

    return functools.wraps(orig)(wrapper)


def _wait(acc: Accounts, orig: Any, fail: Callable[[str, BaseException], None]) -> Any:
    def wrapper(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if acc.depth or _ident() != acc.owner:
            return orig(self, *args, **kwargs)
        acc.depth = 1
        t0 = _clock()
        try:
            result = orig(self, *args, **kwargs)
        except BaseException:
            entry = acc.issued.pop(id(self), None)
            if entry is not None:
                acc.finish(entry[1])
            raise
        finally:
            acc.depth = 0
        t1 = _clock()
        try:
            acc.t_comm_exposed += t1 - t0
            issued, seq = acc.issued.pop(id(self), (t0, 0))
            if acc.open_t is not None:
                issued = max(issued, acc.open_t)  # this step's share of an op issued before it
            acc.t_comm += t1 - min(issued, t0)
            acc.finish(seq)
        except Exception as exc:
            fail("t_comm", exc)
        return result

    return functools.wraps(orig)(wrapper)
