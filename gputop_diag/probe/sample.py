"""One step looked at closely, now and then: its matrix multiplications and convolutions (shapes,
the dtype they compute in, their FLOPs), its host-device copies, its batch, its loss and the
job's precision settings. The "sample" record (schema.py).

The other steps pay nothing: the probe's step boundary compares the step's number and the clock
with the next sample's (`StepSampler.due`). A sampled step runs under a `TorchDispatchMode`
(https://pytorch.org/docs/stable/notes/extending.html#extending-all-torch-api-with-modes): every
ATen operator of the step, forward and backward, passes through `__torch_dispatch__` after
autograd and autocast, so the shapes and dtypes seen are those the kernels get. That costs
microseconds an operator, so the sampled step is slower: its step record says "sampled" and the
reader leaves it out of the step's figures. FLOPs per operator are torch's own formulas
(`torch.utils.flop_counter`, which `FlopCounterMode` counts with).

Tensor cores run a matrix multiplication at full speed when its dimensions are multiples of 16
bytes: 8 elements in fp16/bf16, 16 in fp8/int8 (NVIDIA, "Matrix Multiplication Background User's
Guide", https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/
index.html#requirements-tc); a convolution's channels likewise (https://docs.nvidia.com/
deeplearning/performance/dl-performance-convolutional/index.html#tensor-layout).

During the sampled step only, a few functions are wrapped and put back at its end:
`Tensor.backward` (the loss: the scalar it is called on), `GradScaler.scale` (a gradient scaler
in use: https://pytorch.org/docs/stable/amp.html#gradient-scaling), `autocast.__enter__` (the
autocast dtype: inside `__torch_dispatch__` autocast's state reads as off), and the DataLoader
iterator's `__next__` (the batch the step takes).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from .accounts import line_of, site_name

SAMPLE_FIRST_STEP = 3  # the first step sampled: the warm-up (allocator, autotuning) is over
SAMPLE_EVERY_S = 60.0  # then one step in this many seconds
SAMPLE_VARIABLE = "GPUTOP_DIAG_PROBE_SAMPLE_S"  # overrides SAMPLE_EVERY_S; 0 turns sampling off
MAX_SHAPES = 12  # distinct (operator, dtype, dimensions) written, most FLOPs first
MAX_KEYS = 1024  # distinct keys kept during a step (more are counted, not itemised)

# operator -> the names of the dimensions the tensor cores care about
MATMULS = {"mm": "MNK", "addmm": "MNK", "bmm": "MNK", "baddbmm": "MNK", "_scaled_mm": "MNK"}
CONVS = {"convolution": "CO", "_convolution": "CO", "cudnn_convolution": "CO"}
# elements a dimension must be a multiple of, by dtype (the 16-byte rule)
ALIGN = {
    "float16": 8,
    "bfloat16": 8,
    "float8_e4m3fn": 16,
    "float8_e5m2": 16,
    "float8_e4m3fnuz": 16,
    "float8_e5m2fnuz": 16,
    "int8": 16,
}
_clock = time.perf_counter


def sample_every_s(environ: dict[str, str] | None = None) -> float | None:
    """Seconds between sampled steps; None: sampling is off."""
    env = os.environ if environ is None else environ
    try:
        every = float(env.get(SAMPLE_VARIABLE, SAMPLE_EVERY_S))
    except ValueError:
        return SAMPLE_EVERY_S
    return every if every > 0 else None


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def misaligned(dims: dict[str, int], dtype: str) -> list[str]:
    """The dimensions of a matmul or convolution that are not multiples of what the tensor
    cores need in `dtype` (none for a dtype without that rule: fp32, fp64)."""
    k = ALIGN.get(dtype)
    if k is None:
        return []
    return [name for name, n in dims.items() if n % k]


def matmul_dims(op: str, args: tuple) -> dict[str, int] | None:
    """M, N, K of a matrix multiplication's operands (batch dimensions left out)."""
    try:
        if op in ("mm", "bmm", "_scaled_mm"):
            a, b = args[0], args[1]
        else:  # addmm, baddbmm: (input, mat1, mat2)
            a, b = args[1], args[2]
        return {"M": int(a.shape[-2]), "N": int(b.shape[-1]), "K": int(a.shape[-1])}
    except Exception:
        return None


def conv_dims(args: tuple) -> dict[str, int] | None:
    """Input and output channels of a convolution (input, weight, ...): C and O."""
    try:
        weight = args[1]
        groups = int(args[8]) if len(args) > 8 else 1
        return {"C": int(weight.shape[1]) * groups, "O": int(weight.shape[0])}
    except Exception:
        return None


def copy_kind(src: str, dst: str) -> str | None:
    """A copy between the host and a device: "h2d", "d2h", or None (within one side, or to
    the `meta` device, which holds no data)."""
    if src == dst or "meta" in (src, dst):
        return None
    if src == "cpu":
        return "h2d"
    if dst == "cpu":
        return "d2h"
    return None


def copy_of(op: str, args: tuple, kwargs: dict) -> tuple[str, Any, bool] | None:
    """(kind, the source tensor, non_blocking) of a host-device copy operator, else None:
    `aten._to_copy(self, device=...)` (`Tensor.to`, `.cuda()`, `.cpu()`) and
    `aten.copy_(self, src, non_blocking)`."""
    try:
        if op == "_to_copy":
            src = args[0]
            dst = kwargs.get("device")
            dst_type = dst.type if dst is not None else src.device.type
            non_blocking = bool(kwargs.get("non_blocking", False))
        elif op == "copy_":
            src = args[1]
            dst_type = args[0].device.type
            non_blocking = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        else:
            return None
        kind = copy_kind(src.device.type, dst_type)
    except Exception:
        return None
    return None if kind is None else (kind, src, non_blocking)


def pinned(tensor: Any) -> bool:
    try:
        return bool(tensor.is_pinned())
    except Exception:  # a CPU-only build, a tensor subclass
        return False


def _tensor(torch: Any, value: Any) -> Any:
    return value if torch.is_tensor(value) else None


def batch_size(torch: Any, batch: Any) -> dict[str, Any] | None:
    """Samples and tokens in a batch: a tensor (its first dimension; its elements, where it
    holds integer token ids of two dimensions), a mapping of tensors (a Hugging Face batch:
    its "input_ids"), or a list or tuple (its first tensor)."""
    try:
        keys = ()
        if isinstance(batch, dict) or hasattr(batch, "keys"):
            keys = list(batch.keys())
            name = "input_ids" if "input_ids" in keys else None
            if name is None:
                name = next((k for k in keys if torch.is_tensor(batch[k])), None)
            if name is None:
                return None
            tensor, source = batch[name], f"the batch's {name}" if name == "input_ids" else "batch"
        elif isinstance(batch, (list, tuple)):
            tensor = next((x for x in batch if torch.is_tensor(x)), None)
            source = "batch"
        else:
            tensor, source = _tensor(torch, batch), "batch"
        if tensor is None or tensor.dim() == 0:
            return None
        ids = tensor.dim() == 2 and not tensor.is_floating_point() and not tensor.is_complex()
        return {
            "samples": int(tensor.shape[0]),
            "tokens": int(tensor.numel()) if ids else None,
            "from": source,
        }
    except Exception:
        return None


class Sample:
    """What one sampled step showed, as it runs (`record` makes the "sample" record)."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.ops = 0
        self.flops = 0
        self.matmul_flops = 0
        self.dtype_flops: dict[str, int] = {}
        self.shapes: dict[tuple, list] = {}  # (op, dtype, dims) -> [count, flops, site]
        self.transfers: dict[str, list] = {}  # kind -> [count, bytes, s, pinned B, non_blocking]
        self.batch: dict[str, Any] | None = None
        self.embedding_tokens: tuple[int, int] | None = None
        self.loss: Any = None
        self.scaler: bool | None = None
        self.autocast: dict[str, str] = {}
        self.backward = False

    def add_shape(self, op: str, dtype: str, dims: dict[str, int], flops: int, site: Any) -> None:
        key = (op, dtype, tuple(dims.items()))
        entry = self.shapes.get(key)
        if entry is None:
            if len(self.shapes) >= MAX_KEYS:
                return
            self.shapes[key] = [1, flops, site]
        else:
            entry[0] += 1
            entry[1] += flops

    def add_copy(self, kind: str, nbytes: int, seconds: float, pin: bool, non_blocking: bool):
        entry = self.transfers.setdefault(kind, [0, 0, 0.0, 0, 0])
        entry[0] += 1
        entry[1] += nbytes
        entry[2] += seconds
        entry[3] += nbytes if pin else 0
        entry[4] += 1 if non_blocking else 0

    def record(self, step: int, wall_s: float, settings: dict[str, Any]) -> dict[str, Any]:
        shapes = sorted(self.shapes.items(), key=lambda kv: -kv[1][1])
        rows = []
        misaligned_flops = 0
        for (op, dtype, dims), (count, flops, site) in shapes:
            named = dict(dims)
            bad = misaligned(named, dtype)
            if bad:
                misaligned_flops += flops
            rows.append(
                {
                    "op": op,
                    "dtype": dtype,
                    "dims": named,
                    "count": count,
                    "flops": flops,
                    "misaligned": bad,
                    "site": _site_text(site, self.cwd),
                }
            )
        rows.sort(key=lambda r: (not r["misaligned"], -r["flops"]))
        batch = self.batch
        if batch is None and self.embedding_tokens is not None:
            samples, tokens = self.embedding_tokens
            batch = {"samples": samples, "tokens": tokens, "from": "the embedding's token ids"}
        return {
            "kind": "sample",
            "t": time.time(),
            "step": step,
            "wall_s": round(wall_s, 6),
            "ops": self.ops,
            "flops": self.flops,
            "matmul_flops": self.matmul_flops,
            "misaligned_flops": misaligned_flops,
            "dtype_flops": dict(self.dtype_flops),
            "shapes": rows[:MAX_SHAPES],
            "transfers": {
                kind: {
                    "count": c,
                    "bytes": b,
                    "seconds": round(s, 6),
                    "pinned_bytes": p,
                    "non_blocking": nb,
                }
                for kind, (c, b, s, p, nb) in self.transfers.items()
            },
            "batch": batch,
            "loss": self.loss,
            "backward": self.backward,
            "grad_scaler": self.scaler if self.backward else None,
            "autocast": dict(self.autocast),
            **settings,
        }


def _site_text(site: Any, cwd: str) -> str | None:
    if site is None:
        return None
    code, lasti = site
    return f"{site_name(code.co_filename, cwd)}:{line_of(code, lasti)}"


def _finite(x: float) -> float | None:
    return x if x == x and x not in (float("inf"), float("-inf")) else None


class StepSampler:
    """When to sample a step, and the sampling of one: `begin` at a boundary, `end` at the next.

    `acc` is the probe's Accounts: its `depth` keeps the probe's own reads (the loss) out of the
    sync figures, its `user_frame` names the job's line of a shape."""

    def __init__(self, torch: Any, acc: Any, note: Any, every_s: float | None) -> None:
        self.torch = torch
        self.acc = acc
        self.note = note
        self.every_s = every_s
        self.next_n = SAMPLE_FIRST_STEP - 1 if every_s is not None else None
        self.next_at = 0.0
        self.active: Sample | None = None
        self.mode: Any = None
        self.started = 0.0
        self.undo: list[tuple[Any, str, Any]] = []
        self.flop_registry: dict | None = None
        self.broken = False

    def due(self, n: int, now: float) -> bool:
        """The step that begins at boundary `n` is to be sampled (cheap: two comparisons)."""
        return self.next_n is not None and n >= self.next_n and now >= self.next_at

    # -- a sampled step ----------------------------------------------------------------------

    def begin(self, n: int, now: float) -> None:
        try:
            mode = self._mode()
            self.active = Sample(os.getcwd())
            self._wrap()
            mode.__enter__()
            self.mode = mode
            self.started = now
        except Exception as exc:
            self._unwrap()
            self.active = None
            self._off(exc)
        self.next_n = n + 2  # never two steps in a row
        self.next_at = now + (self.every_s or 0.0)

    def end(self, n: int, now: float) -> dict[str, Any] | None:
        sample, mode = self.active, self.mode
        self.active = self.mode = None
        if sample is None:
            return None
        try:
            if mode is not None:
                from torch.utils._python_dispatch import _get_current_dispatch_mode

                if _get_current_dispatch_mode() is not mode:
                    raise RuntimeError("another dispatch mode is open over the probe's")
                mode.__exit__(None, None, None)
        except Exception as exc:
            self._unwrap()
            self._off(exc)
            return None
        self._unwrap()
        try:
            sample.loss = self._loss_value(sample.loss)
            return sample.record(n, now - self.started, self._settings())
        except Exception as exc:
            self._off(exc)
            return None

    def stop(self, restart: bool = False) -> None:
        """Leave a sampled step unfinished (the probe taken out; a forked child, which has the
        parent's mode on its stack): the mode closed, every wrapped function put back."""
        mode, self.active, self.mode = self.mode, None, None
        try:
            if mode is not None:
                from torch.utils._python_dispatch import _get_current_dispatch_mode

                if _get_current_dispatch_mode() is mode:
                    mode.__exit__(None, None, None)
        except Exception:
            pass
        self._unwrap()
        if restart and not self.broken and self.every_s is not None:
            self.next_n, self.next_at = SAMPLE_FIRST_STEP - 1, 0.0

    def _off(self, exc: BaseException) -> None:
        self.next_n = None
        self.broken = True
        self.note(f"probe: sampling a step failed ({type(exc).__name__}) and is off from here on")

    def _loss_value(self, loss: Any) -> float | None:
        if loss is None:
            return None
        acc = self.acc
        depth, acc.depth = acc.depth, 1  # the probe's own read is no sync of the job's
        try:
            return _finite(float(loss.detach().float().sum()))
        except Exception:
            return None
        finally:
            acc.depth = depth

    def _settings(self) -> dict[str, Any]:
        """The precision settings and the device, read at the sampled step's end."""
        torch = self.torch
        out: dict[str, Any] = {"matmul_precision": None, "allow_tf32": None, "cudnn_tf32": None}
        try:
            out["matmul_precision"] = torch.get_float32_matmul_precision()
            out["allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
            out["cudnn_tf32"] = bool(torch.backends.cudnn.allow_tf32)
        except Exception:
            pass
        out["capability"] = out["device_name"] = None
        try:
            if torch.cuda.is_initialized():  # never initializes CUDA (gpu.py)
                out["capability"] = list(torch.cuda.get_device_capability())
                out["device_name"] = torch.cuda.get_device_name()
        except Exception:
            pass
        return out

    # -- the dispatch mode ---------------------------------------------------------------------

    def _mode(self) -> Any:
        if self.flop_registry is None:
            try:
                from torch.utils.flop_counter import flop_registry

                self.flop_registry = {packet.__name__: f for packet, f in flop_registry.items()}
            except Exception:
                self.flop_registry = {}
        return _mode_class()(self)

    def on_op(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """One operator of the sampled step: run it, and count what it is."""
        sample = self.active
        op = func._overloadpacket.__name__
        copy = copy_of(op, args, kwargs) if op in ("_to_copy", "copy_") else None
        t0 = _clock()
        out = func(*args, **kwargs)
        seconds = _clock() - t0
        if sample is None:
            return out
        try:
            sample.ops += 1
            if copy is not None:
                kind, src, non_blocking = copy
                nbytes = src.numel() * src.element_size()
                pin = pinned(src) if kind == "h2d" else False
                sample.add_copy(kind, nbytes, seconds, pin, non_blocking)
                return out
            count = self.flop_registry.get(op)
            flops = int(count(*args, **kwargs, out_val=out)) if count is not None else 0
            sample.flops += flops
            if op in MATMULS or op in CONVS:
                self._shape(sample, op, args, flops)
            elif op == "embedding" and sample.embedding_tokens is None:
                ids = args[1]
                if ids.dim() >= 1:
                    sample.embedding_tokens = (int(ids.shape[0]), int(ids.numel()))
        except Exception:
            pass
        return out

    def _shape(self, sample: Sample, op: str, args: tuple, flops: int) -> None:
        dims = matmul_dims(op, args) if op in MATMULS else conv_dims(args)
        if dims is None:
            return
        operand = args[1] if op in ("addmm", "baddbmm") else args[0]
        dtype = dtype_name(operand.dtype)
        sample.matmul_flops += flops
        sample.dtype_flops[dtype] = sample.dtype_flops.get(dtype, 0) + flops
        key = (op, dtype, tuple(dims.items()))
        site = None
        if key not in sample.shapes and misaligned(dims, dtype):
            site = self._user_site()
        sample.add_shape(op, dtype, dims, flops, site)

    def _user_site(self) -> tuple | None:
        """The job's own line that led to this operator (the forward's; none in the backward,
        which autograd runs)."""
        try:
            frame = sys._getframe(2)
            user = self.acc.user_frame(frame)
            if user is frame or not self.acc.classify(user.f_code):
                return None
            return user.f_code, user.f_lasti
        except Exception:
            return None

    # -- the functions wrapped during a sampled step -------------------------------------------

    def _wrap(self) -> None:
        torch = self.torch
        tensor = torch.Tensor
        self._swap(tensor, "backward", _backward(self, tensor.backward))
        scaler = getattr(sys.modules.get("torch.amp.grad_scaler"), "GradScaler", None)
        if scaler is not None:
            self._swap(scaler, "scale", _scale(self, scaler.scale))
        autocast = getattr(sys.modules.get("torch.amp.autocast_mode"), "autocast", None)
        if autocast is not None:
            self._swap(autocast, "__enter__", _autocast_enter(self, autocast.__enter__))
        loader = sys.modules.get("torch.utils.data.dataloader")
        base = getattr(loader, "_BaseDataLoaderIter", None)
        if base is not None:
            self._swap(base, "__next__", _next_batch(self, base.__next__))

    def _swap(self, owner: Any, name: str, wrapper: Any) -> None:
        own = vars(owner)
        self.undo.append((owner, name, own.get(name, _MISSING)))
        setattr(owner, name, wrapper)

    def _unwrap(self) -> None:
        for owner, name, original in reversed(self.undo):
            try:
                if original is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, original)
            except Exception:
                pass
        self.undo = []


_MISSING = object()
_MODE_CLASS: Any = None


def _mode_class() -> Any:
    """The TorchDispatchMode subclass, made once torch is there (this module imports no torch)."""
    global _MODE_CLASS
    if _MODE_CLASS is None:
        from torch.utils._python_dispatch import TorchDispatchMode

        class _SampleMode(TorchDispatchMode):
            def __init__(self, sampler: StepSampler) -> None:
                super().__init__()
                self.sampler = sampler

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
                return self.sampler.on_op(func, args, kwargs or {})

        _MODE_CLASS = _SampleMode
    return _MODE_CLASS


def _backward(sampler: StepSampler, orig: Any) -> Any:
    def backward(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        sample = sampler.active
        if sample is not None:
            sample.backward = True
            try:
                if sample.loss is None and self.numel() == 1:
                    sample.loss = self.detach()
            except Exception:
                pass
        return orig(self, *args, **kwargs)

    return backward


def _scale(sampler: StepSampler, orig: Any) -> Any:
    def scale(self, outputs, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        sample = sampler.active
        if sample is not None:
            try:
                sample.scaler = bool(self.is_enabled())
                if sample.loss is None and outputs.numel() == 1:
                    sample.loss = outputs.detach()  # the loss before it is scaled
            except Exception:
                pass
        return orig(self, outputs, *args, **kwargs)

    return scale


def _autocast_enter(sampler: StepSampler, orig: Any) -> Any:
    def __enter__(self):  # noqa: ANN001, ANN202, N807
        sample = sampler.active
        if sample is not None:
            try:
                if self._enabled:
                    sample.autocast[str(self.device)] = dtype_name(self.fast_dtype)
            except Exception:
                pass
        return orig(self)

    return __enter__


def _next_batch(sampler: StepSampler, orig: Any) -> Any:
    def __next__(self):  # noqa: ANN001, ANN202, N807
        batch = orig(self)
        sample = sampler.active
        if sample is not None and sample.batch is None:
            sample.batch = batch_size(sampler.torch, batch)
        return batch

    return __next__
