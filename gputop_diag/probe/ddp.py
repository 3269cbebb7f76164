"""DistributedDataParallel's gradient all-reduce, timed through its communication hook.

DDP reduces gradients in buckets, from C++, during `backward()`: no Python collective is called,
so the collective hooks of hooks.py never see it. What DDP does call from Python is its
communication hook (https://pytorch.org/docs/stable/ddp_comm_hooks.html), once per bucket, on
the thread that computed the bucket's gradients, and it waits for the future the hook returns
before `backward()` returns. So every DDP model gets a hook here:

- a model without one of its own gets `allreduce_hook` (`default_hooks.allreduce_hook`: divide by
  the group's size, all-reduce; "DDP results is expected to be same as the case where no hook
  was registered"), wrapped in a timer;
- a hook the job registers (`register_comm_hook`) is wrapped in the same timer, whenever it is
  registered: before ours (in `__init__`, as mixed precision does) it is wrapped as it goes in;
  after ours it takes the place of `allreduce_hook` inside the timer, since a model takes one hook
  only ("can only be called once");
- a built-in hook (`_register_builtin_comm_hook`) runs in C++, unseen: the Python hook of the same
  reduction takes its place inside the timer where one exists (ALLREDUCE, FP16_COMPRESS).

The timer marks when each bucket was issued and when its future finished (on the communication
thread): the step's communication in all runs from the first bucket issued to the last one
finished; the part the host waited for, from the last bucket issued (the last gradient is ready:
the backward's compute is done) to the last one finished (accounts.py `close_buckets`). Each
bucket is one collective in the process's sequence (its op: "all_reduce (DDP bucket)").
A model whose all-reduce runs on the GPU (NCCL, or parameters on CUDA) gets no hook: its future
finishes on the device's stream, the host's clock would time nothing, and a Python hook would
only cost; the step's communication is then reported as not measured (core.py).

The cost, where it is timed: a Python hook and one `.then` callback a bucket instead of DDP's C++
path (each callback takes the GIL on the communication thread): tens of microseconds a step on an
idle host, more where ranks share busy cores (`python bench/probe.py --part ddp`). Set
GPUTOP_DIAG_PROBE_NO_DDP_HOOK=1 to leave DDP as it is (t_comm then not measured).
"""

from __future__ import annotations

import functools
import os
import time
import weakref
from collections.abc import Callable
from typing import Any

from .accounts import Accounts

BUCKET_OP = "all_reduce (DDP bucket)"
OFF_VARIABLE = "GPUTOP_DIAG_PROBE_NO_DDP_HOOK"  # set: DDP's all-reduce is left as it is
ON_DEVICE = "on the GPU"
_clock = time.perf_counter


class Timer:
    """The hook registered on one model: times the bucket, runs the hook it holds.

    `allreduce_hook` itself (`stock`: ours, or the job's, or the twin of the built-in one) is run
    inlined, the same calls in the same order (`default_hooks._allreduce_fut`: divide by the
    group's size, `dist.all_reduce(async_op=True)`, the future's value's first tensor), with its
    `.then` and ours as one callback: each Python callback takes the GIL on the communication
    thread, a handoff that costs most on a loaded machine."""

    __slots__ = ("acc", "state", "hook", "bucket_type", "stock", "dist", "__weakref__")

    def __init__(
        self,
        acc: Accounts,
        state: Any,
        hook: Callable,
        bucket_type: type,
        stock: Callable | None = None,
        dist: Any = None,
    ) -> None:
        self.acc = acc
        self.state = state
        self.hook = hook
        self.bucket_type = bucket_type
        self.stock = stock  # default_hooks.allreduce_hook, run inlined (with `dist`)
        self.dist = dist

    def __call__(self, state: Any, bucket: Any) -> Any:
        hook = self.hook
        if not isinstance(bucket, self.bucket_type):  # DDP's Python reducer (compiled DDP)
            return hook(self.state, bucket)
        acc = self.acc
        buffer = None
        try:
            buffer = bucket.buffer()
            nbytes = buffer.numel() * buffer.element_size()
            if buffer.is_cuda:
                acc.device_comm = True
        except Exception:
            nbytes = None
        now = _clock()
        if acc.bucket_first is None:
            acc.bucket_first = now
        acc.bucket_last = now
        seq = acc.enter(BUCKET_OP, nbytes, now)
        inlined = hook is self.stock and buffer is not None
        depth = acc.depth
        acc.depth = 1  # the hook's own collectives are this one, not others in the sequence
        try:
            # a hook that raises has not left the collective open: the job may catch it
            if inlined:
                dist = self.dist
                group = self.state if self.state is not None else dist.group.WORLD
                buffer.div_(group.size())  # first, as allreduce_hook does (no fp16 overflow)
                # the group's own all-reduce (SUM, what dist.all_reduce asks of it), without
                # distributed_c10d's Python layers on every bucket
                future = group.allreduce([buffer]).get_future()
            else:
                future = hook(self.state, bucket)
        except BaseException:
            acc.finish(seq)
            raise
        finally:
            acc.depth = depth

        def finished(done: Any) -> Any:
            acc.bucket_done = _clock()
            acc.finish(seq)
            return done.value()[0] if inlined else done.value()

        return future.then(finished)


class DdpHooks:
    """The patches of DistributedDataParallel's `__init__`, `register_comm_hook` and
    `_register_builtin_comm_hook`; `patch(owner, name, wrapper)` is the installer's."""

    def __init__(self, torch: Any, acc: Accounts, note: Callable[[str], None]) -> None:
        self.torch = torch
        self.acc = acc
        self.note = note
        self.timers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> Timer

    def install(self, patch: Callable[[Any, str, Any], None]) -> None:
        ddp = self.torch.nn.parallel.DistributedDataParallel
        dist = self.torch.distributed
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        bucket_type = dist.GradBucket
        init, register = ddp.__init__, ddp.register_comm_hook
        builtin = ddp._register_builtin_comm_hook
        python_of_builtin = {
            dist.BuiltinCommHookType.ALLREDUCE: default_hooks.allreduce_hook,
            dist.BuiltinCommHookType.FP16_COMPRESS: default_hooks.fp16_compress_hook,
        }
        timers, acc, note = self.timers, self.acc, self.note
        untimed: weakref.WeakSet = weakref.WeakSet()  # models left as they are (_untimed)
        stock = default_hooks.allreduce_hook

        def register_comm_hook(model, state, hook):  # noqa: ANN001, ANN202
            if model in untimed:
                return register(model, state, hook)
            timer = timers.get(model)
            if timer is None:  # the job's hook, before ours: it goes in timed
                timer = Timer(acc, state, hook, bucket_type, stock, dist)
                register(model, state, _named(timer, hook))
                timers[model] = timer
                return None
            if getattr(timer, "ours", False):  # ours went in first: the job's takes its place
                timer.state, timer.hook = state, hook
                timer.ours = False
                _rename(model, state, hook)
                return None
            return register(model, state, hook)  # a second hook: DDP's own error

        def _register_builtin(model, comm_hook_type):  # noqa: ANN001, ANN202
            hook = python_of_builtin.get(comm_hook_type)
            timer = timers.get(model)
            if hook is not None and (timer is None or getattr(timer, "ours", False)):
                return register_comm_hook(model, model.process_group, hook)
            _unseen(acc, note)
            return builtin(model, comm_hook_type)

        def __init__(model, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, N807
            init(model, *args, **kwargs)
            if model in timers:
                return
            why = _untimed(model, dist)
            if why is not None:  # a hook that measures nothing would only cost
                untimed.add(model)
                if why == ON_DEVICE:
                    acc.device_comm = True
                else:
                    _unseen(acc, note, reason=why)
                return
            try:
                default = default_hooks.allreduce_hook
                timer = _OurTimer(acc, model.process_group, default, bucket_type, stock, dist)
                register(model, model.process_group, _named(timer, default))
                timers[model] = timer
            except Exception as exc:  # a DDP without a reducer, a newer DDP: not timed
                _unseen(acc, note, exc)

        patch(ddp, "__init__", _wraps(init, __init__))
        patch(ddp, "register_comm_hook", _wraps(register, register_comm_hook))
        patch(ddp, "_register_builtin_comm_hook", _wraps(builtin, _register_builtin))


class _OurTimer(Timer):
    """The timer around `allreduce_hook`, put in by us: a hook the job registers later replaces
    the hook inside it."""

    __slots__ = ("ours",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ours = True


def _named(timer: Timer, hook: Callable) -> Callable:
    """The timer as DDP registers it: a plain function of (state, bucket) named as the hook it
    runs (DDP logs the hook's `__qualname__`, and checks the name of some hooks)."""

    def hook_function(state, bucket):  # noqa: ANN001, ANN202
        return timer(state, bucket)

    for attribute in ("__name__", "__qualname__", "__module__", "__doc__"):
        try:
            setattr(hook_function, attribute, getattr(hook, attribute))
        except (AttributeError, TypeError):
            pass
    return hook_function


def _rename(model: Any, state: Any, hook: Callable) -> None:
    """DDP's record of the hook in use, for its own logging: the job's, not ours."""
    try:
        model.logger._set_comm_hook_name(hook.__qualname__)
        if model._comm_hooks:
            model._comm_hooks[-1] = (hook, state)
    except Exception:
        pass


def _untimed(model: Any, dist: Any) -> str | None:
    """Why a model's all-reduce is left untimed: the user said so, or it runs on the GPU, where
    its future finishes on the device's stream and the host's clock would time nothing."""
    if os.environ.get(OFF_VARIABLE):
        return f"the DDP hook is turned off ({OFF_VARIABLE})"
    try:  # "cpu:gloo,cuda:nccl" (init_process_group without a backend): the parameters decide
        first = next(model.module.parameters(), None)
        if first is not None and first.is_cuda:
            return ON_DEVICE
        if dist.get_backend(model.process_group) == "nccl":
            return ON_DEVICE
    except Exception:
        return None
    return None


def _unseen(
    acc: Accounts,
    note: Callable[[str], None],
    exc: BaseException | None = None,
    reason: str | None = None,
) -> None:
    acc.ddp = True
    if reason is not None:
        note(f"probe: t_comm is not measured: {reason}")
        return
    why = f" ({type(exc).__name__})" if exc is not None else ""
    note(
        "probe: t_comm is not measured: DistributedDataParallel's gradient all-reduce runs in "
        f"C++ through a built-in hook, out of the probe's sight{why}"
    )


def _wraps(orig: Any, wrapper: Any) -> Any:
    try:
        return functools.wraps(orig)(wrapper)
    except Exception:
        return wrapper
