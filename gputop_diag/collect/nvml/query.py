"""One guarded NVML call: the error policy every field shares.

- `NOT_SUPPORTED` / `FUNCTION_NOT_FOUND` (and pynvml's `NVMLLibraryMismatchError`, which its
  `@throwOnVersionMismatch` wrappers raise instead): the field is `None`, and the (GPU, function)
  pair is remembered so it is not asked again every tick (a device does not gain a feature at run
  time). `Query.first` tries older forms of a call in turn (driver skew, see `compat.py`).
- `NO_PERMISSION` and other per-field failures: `None` this tick; asked again next tick.
- Codes a call names as `absent` (e.g. `NOT_FOUND`: no new samples): `None`, not an error.
- `GPU_IS_LOST`: raises `GpuLost`, so the collector marks the whole GPU lost.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

# nvmlValue_t union member per NVML_VALUE_TYPE_* (DOUBLE, UNSIGNED_INT, UNSIGNED_LONG,
# UNSIGNED_LONG_LONG, SIGNED_LONG_LONG, SIGNED_INT, UNSIGNED_SHORT).
VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


class GpuLost(Exception):
    pass


def text(value: Any) -> str | None:
    """NVML strings arrive as str or bytes depending on the binding's version."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return str(value)


def union_value(value: Any, value_type: int) -> float | int | None:
    """The member of an `nvmlValue_t` union that `value_type` says is set."""
    if not isinstance(value_type, int) or not 0 <= value_type < len(VALUE_FIELDS):
        return None
    return getattr(value, VALUE_FIELDS[value_type], None)


class Query:
    """Calls `nvml.<name>(*args)` under the shared error policy."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.error_class = nvml.NVMLError
        # pynvml raises this (not an NVMLError) when a versioned symbol is missing
        self._mismatch = getattr(nvml, "NVMLLibraryMismatchError", None) or ()
        self._skip_codes = {nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND}
        self._lost_code = nvml.NVML_ERROR_GPU_IS_LOST
        self._funcs: dict[str, Callable[..., Any] | None] = {}
        self.skipped: set[tuple[int | None, str]] = set()
        self.last_error: dict[tuple[int | None, str], str] = {}

    def func(self, name: str) -> Callable[..., Any] | None:
        f = self._funcs.get(name, ...)
        if f is ...:
            f = getattr(self.nvml, name, None)
            self._funcs[name] = f
        return f

    def has(self, gpu: int | None, name: str) -> bool:
        return (gpu, name) not in self.skipped and self.func(name) is not None

    def __call__(
        self,
        gpu: int | None,
        name: str | Callable[..., Any],
        *args: Any,
        key: str | None = None,
        absent: Collection[int] = (),
    ) -> Any:
        """The value, or None. `name` is a pynvml function name (or a callable with pynvml's
        error behaviour, then `key` is required); `key` tells apart calls of one function with
        other arguments; `absent` lists the codes that mean "nothing this time" rather than a
        failure."""
        k = (gpu, key or name)
        if k in self.skipped:
            return None
        if isinstance(name, str):
            f = self._funcs.get(name, ...)
            if f is ...:
                f = self.func(name)
        else:
            f = name
        if f is None:  # an older binding without this function
            self.skipped.add(k)
            return None
        try:
            return f(*args)
        except self._mismatch:  # NVMLLibraryMismatchError: the driver lacks the symbol
            self.skipped.add(k)
            return None
        except self.error_class as e:
            code = getattr(e, "value", None)
            if code == self._lost_code:
                raise GpuLost from e
            if code in self._skip_codes:
                self.skipped.add(k)
            elif code not in absent:
                self.last_error[k] = type(e).__name__
            return None

    def first(
        self, gpu: int | None, forms: Sequence[tuple[str, str, tuple]], absent: Collection[int] = ()
    ) -> Any:
        """The value of the first of `forms` — (key, function name, arguments), newest first —
        that this driver and binding have. A form that is missing (FUNCTION_NOT_FOUND,
        NOT_SUPPORTED) is remembered and skipped from then on, so each tick makes one call."""
        for key, name, args in forms:
            if (gpu, key) in self.skipped:
                continue
            value = self(gpu, name, *args, key=key, absent=absent)
            if value is not None or (gpu, key) not in self.skipped:
                return value
        return None
