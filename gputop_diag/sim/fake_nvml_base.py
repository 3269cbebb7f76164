"""Plumbing of the pynvml stand-in: the real module's constants, errors and structs, the call
wrapper that behaves like the driver (uninitialised, lost GPUs, injected errors), and handles.

Handles are real `c_nvmlDevice_t` pointers (one per GPU and per MIG instance, stable for the
life of the machine) and are told apart by address, as the real library does.
"""

from __future__ import annotations

import ctypes
import functools
import inspect

import pynvml as _real

from .fake_libnvml import C_SYMBOLS, FakeLib
from .machine import HANG_CAP_S, SimGpu, SimMachine

ERR = _real.NVMLError
NA = 0xFFFFFFFF  # NVML's "not applicable" for MIG ids outside MIG
_NO_HANDLE = object()  # no call has resolved a handle yet
_KEEP_FUNCTIONS = {"nvmlStructToFriendlyObject", "convertStrBytes", "throwOnVersionMismatch"}


def _constants() -> dict:
    """Everything of the real module but the functions that call into libnvidia-ml."""
    out = {}
    for k, v in vars(_real).items():
        if k.startswith("_"):
            continue
        if inspect.isfunction(v) and v.__module__ == _real.__name__ and k not in _KEEP_FUNCTIONS:
            continue
        out[k] = v
    return out


CONSTANTS = _constants()


# Wrappers marked `@throwOnVersionMismatch` in pynvml: a missing symbol raises
# NVMLLibraryMismatchError (not an NVMLError) from them.
VERSION_CHECKED = frozenset(
    {"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"}
)


def c_symbol(name: str, args: tuple = (), kwargs: dict | None = None) -> str:
    """The C symbol pynvml's wrapper `name` calls with these arguments."""
    sym = C_SYMBOLS.get(name, name)
    return sym(args, kwargs or {}) if callable(sym) else sym


def nvml_api(fn):
    """A pynvml wrapper: the driver must export its C symbol (else FUNCTION_NOT_FOUND, as pynvml
    raises it); then `NvmlBase._gate` applies init, injected errors, hangs and lost GPUs."""
    name = fn.__name__
    sym = C_SYMBOLS.get(name, name)
    if callable(sym):  # the symbol depends on the call's arguments

        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            self._gate(name, args, kwargs, symbol=sym(args, kwargs))
            return fn(self, *args, **kwargs)

        return wrapper

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        self._gate(name, args, kwargs, symbol=sym)
        return fn(self, *args, **kwargs)

    return wrapper


class NvmlBase:
    """Handles and the lookups every fake NVML call shares."""

    def __init__(self, machine: SimMachine) -> None:
        self._m = machine
        self._init = 0
        new = _real.struct_c_nvmlDevice_t
        self._handles = [ctypes.pointer(new()) for _ in machine.gpus]
        self._migs = [[ctypes.pointer(new()) for _ in g.mig] for g in machine.gpus]
        self._by_addr: dict[int | None, tuple[int, int | None]] = {}
        # The handle objects given out here, by id (each entry holds its handle, so the id
        # stays its own): (handle, address, GPU, MIG instance). Callers pass these same objects
        # back nearly always, and checking that one still points where it did is much cheaper
        # than `ctypes.cast`; any other object is looked up by address.
        self._by_id: dict[int, tuple[object, int | None, int, int | None]] = {}
        self._resolved: tuple[object, int] = (_NO_HANDLE, -1)  # see `_gate`
        for i, h in enumerate(self._handles):
            self._by_addr[self._addr(h)] = (i, None)
            self._by_id[id(h)] = (h, self._addr(h), i, None)
            for k, mh in enumerate(self._migs[i]):
                self._by_addr[self._addr(mh)] = (i, k)
                self._by_id[id(mh)] = (mh, self._addr(mh), i, k)
        self._gpm: dict[int | None, tuple[int | None, float]] = {}
        self._energy: dict[int, tuple[float, float]] = {}  # GPU -> (time, mJ) of the last read
        self._event_sets: dict[int | None, dict] = {}
        self._lib = FakeLib(self)  # the C side of this stand-in

    @staticmethod
    def _addr(h) -> int | None:
        """The address `h` holds, as `ctypes.cast(h, c_void_p).value` gives it (None: NULL or
        not a pointer); a ctypes pointer, the usual case, is read without cast's cost."""
        if isinstance(h, ctypes._Pointer):
            return ctypes.addressof(h.contents) if h else None
        try:
            return ctypes.cast(h, ctypes.c_void_p).value
        except (TypeError, ctypes.ArgumentError):
            return None

    def _gpu_of(self, h) -> int | None:
        resolved = self._resolved
        if resolved[0] is h:
            return resolved[1]  # the handle of the call in progress, resolved by `_gate`
        own = self._by_id.get(id(h))
        if own is not None and ctypes.addressof(h.contents) == own[1]:
            return own[2]  # a handle given out here, still pointing where it did
        if not isinstance(h, ctypes._Pointer):
            return None
        hit = self._by_addr.get(self._addr(h))
        return None if hit is None else hit[0]

    def _mig_of(self, h) -> int | None:
        own = self._by_id.get(id(h))
        if own is not None and ctypes.addressof(h.contents) == own[1]:
            return own[3]
        hit = self._by_addr.get(self._addr(h))
        return None if hit is None else hit[1]

    def _index(self, h) -> int:
        gi = self._gpu_of(h)
        if gi is None:
            raise ERR(_real.NVML_ERROR_INVALID_ARGUMENT)
        return gi

    def _sim(self, h) -> SimGpu:
        return self._m.gpus[self._index(h)]

    def _g(self, h) -> dict:
        resolved = self._resolved
        gi = resolved[1] if resolved[0] is h else self._index(h)
        return self._m.state()["gpus"][gi]

    def _gate(self, name: str, args: tuple, kwargs: dict, symbol: str | None = None) -> None:
        """What every call into the driver goes through: count it, refuse it before init or
        when the driver lacks its symbol, block it where a test hangs it, raise an injected
        error, and raise GPU_IS_LOST for a lost GPU. The GPU a call concerns is found from its
        handle (or index, or GPM sample)."""
        m = self._m
        m.call_counts[name] += 1
        if not self._init and name not in ("nvmlInit", "nvmlInitWithFlags"):
            raise ERR(_real.NVML_ERROR_UNINITIALIZED)
        if symbol is not None and not m.driver.exports(symbol):
            if name in VERSION_CHECKED:
                raise _real.NVMLLibraryMismatchError(
                    "Unversioned function called and the pyNVML version does not match the "
                    "NVML lib version. Either use matching pyNVML and NVML lib versions or use "
                    f"a versioned function such as {name}_v2"
                )
            raise ERR(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
        first = args[0] if args else next(iter(kwargs.values()), None)
        own = self._by_id.get(id(first))
        if own is not None and ctypes.addressof(first.contents) == own[1]:
            # The usual case, `_gpu_of` written out: a handle given out here. The call's body
            # asks again: `_resolved` answers it (one assignment, so a call in another thread
            # sees either this pair or its own, and tells them apart by the handle).
            gpu = own[2]
            self._resolved = (first, gpu)
        elif name == "nvmlDeviceGetHandleByIndex":
            gpu = first if isinstance(first, int) else None
        elif name == "nvmlGpmMetricsGet":
            gpu = self._gpm.get(self._addr(first.sample2), (None,))[0]
        elif name == "nvmlGpmSampleFree":
            gpu = self._gpm.get(self._addr(first), (None,))[0]
        else:
            gpu = self._gpu_of(first)
        # Most calls meet no hang, injected error or lost GPU: skip asking for each then.
        if m.hangs:
            release = m.take_hang(name, gpu)
            if release is not None:
                release.wait(HANG_CAP_S)
        if m.errors:
            code = m.take_error(name, gpu)
            if code is not None:
                raise ERR(code)
        if gpu is not None and m.lost_at and m.is_lost(gpu):
            raise ERR(_real.NVML_ERROR_GPU_IS_LOST)

    def _nvmlGetFunctionPointer(self, name):  # noqa: N802 - pynvml's name
        """As pynvml's: the C function of the loaded library, or FUNCTION_NOT_FOUND. The
        simulated library emulates the C calling convention of the symbols whose layout the
        collector must choose itself (process lists, event waits); see `fake_libnvml`."""
        if not self._init:
            raise ERR(_real.NVML_ERROR_UNINITIALIZED)
        try:
            return getattr(self._lib, name)
        except AttributeError:
            raise ERR(_real.NVML_ERROR_FUNCTION_NOT_FOUND) from None

    def _mig_enabled(self, h) -> bool:
        return bool(self._sim(h).mig)

    def _no_mig_handle(self, h) -> None:
        """Whole-GPU queries answer NotSupported on a MIG device handle."""
        if self._mig_of(h) is not None:
            raise ERR(_real.NVML_ERROR_NOT_SUPPORTED)
