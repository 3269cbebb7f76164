"""Snapshots as JSON: the model's codec (`jsonable` / `from_jsonable`, exact both ways) and the
`snapshot --json` document (schema `gputop-diag.snapshot/1`, documented in the README), raw or
sanitized (`sanitize/sanitizer.py` makes either safe to share)."""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Callable
from datetime import datetime, timezone
from functools import cache
from typing import Any

from . import GpuState, Snapshot

if typing.TYPE_CHECKING:
    from .health import HealthReport

# `model.health` (a dozen dataclasses) is imported when a report is read, not at start: a
# HealthReport to write exists only once that module is loaded.
_HEALTH = "gputop_diag.model.health"

SNAPSHOT_SCHEMA = "gputop-diag.snapshot/1"


def jsonable(obj: Any) -> Any:
    """A model object as JSON values: a dataclass is an object of all its fields by name,
    a tuple an array. `from_jsonable` reads it back exactly."""
    health = sys.modules.get(_HEALTH)
    if health is not None and isinstance(obj, health.HealthReport):
        return health.health_to_json(obj)  # its recorded form: the findings, not the raw facts
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: jsonable(getattr(obj, name)) for name in field_names(type(obj))}
    if isinstance(obj, (tuple, list)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    return obj


@cache
def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


class _Bad(ValueError):
    """A value of the wrong shape; `path` says where (`gpus[3].static.uuid`)."""

    def __init__(self, what: str, path: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.path = path

    def under(self, prefix: str) -> _Bad:
        if not self.path or self.path.startswith("["):
            return _Bad(self.what, prefix + self.path)
        return _Bad(self.what, f"{prefix}.{self.path}")


def from_jsonable(hint: Any, data: Any) -> Any:
    """`data` (JSON values, as `jsonable` makes them) as an object of type `hint` (a model
    dataclass, or a type hint of one): tuples come back as tuples, None apart from (), ints as
    ints; a field missing from `data` takes its default. Raises ValueError naming the first
    value of the wrong shape (`expected a number, found a string at gpus[3].power_w`)."""
    try:
        return _decoder(hint)(data)
    except _Bad as e:
        where = f" at {e.path}" if e.path else ""
        raise ValueError(f"{e.what}{where}") from None


def _kind(data: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "true/false"}.get(
        type(data), "null" if data is None else "a number"
    )


def _health_decoder(d: Any) -> HealthReport:
    from .health import health_from_json

    try:
        return health_from_json(d)
    except ValueError as e:
        raise _Bad(str(e)) from None


@cache
def _decoder(hint: Any) -> Callable[[Any], Any]:
    """A function that decodes JSON values of type `hint` (built once per type)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"no decoder for {hint}")
        inner = _decoder(rest[0])
        return lambda d: None if d is None else inner(d)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _decoder(args[0])

            def many(d):
                if not isinstance(d, list):
                    raise _Bad(f"expected an array, found {_kind(d)}")
                out = []
                for i, v in enumerate(d):
                    try:
                        out.append(item(v))
                    except _Bad as e:
                        raise e.under(f"[{i}]") from None
                return tuple(out)

            return many
        items = [_decoder(a) for a in args]

        def fixed(d):
            if not isinstance(d, list) or len(d) != len(items):
                raise _Bad(f"expected an array of {len(items)}, found {_kind(d)} of other length")
            return tuple(f(v) for f, v in zip(items, d, strict=True))

        return fixed
    if origin is dict:
        value = _decoder(args[1])

        def mapping(d):
            if not isinstance(d, dict):
                raise _Bad(f"expected an object, found {_kind(d)}")
            out = {}
            for k, v in d.items():
                try:
                    out[k] = value(v)
                except _Bad as e:
                    raise e.under(f"[{k!r}]") from None
            return out

        return mapping
    from .health import HealthReport

    if hint is HealthReport:
        return _health_decoder
    if dataclasses.is_dataclass(hint):
        return _dataclass_decoder(hint)
    if hint in _SCALARS:
        return _SCALARS[hint]
    if hint is Any:
        return lambda d: d
    raise TypeError(f"no decoder for {hint}")


# The scalar checks, one function each (a recording holds millions of scalars).
def _float(d: Any) -> Any:
    if isinstance(d, (int, float)) and not isinstance(d, bool):
        return d
    raise _Bad(f"expected a number, found {_kind(d)}")


def _int(d: Any) -> Any:
    if type(d) is int:
        return d
    raise _Bad(f"expected an integer, found {_kind(d)}")


def _bool(d: Any) -> Any:
    if isinstance(d, bool):
        return d
    raise _Bad(f"expected true/false, found {_kind(d)}")


def _str(d: Any) -> Any:
    if isinstance(d, str):
        return d
    raise _Bad(f"expected a string, found {_kind(d)}")


_SCALARS: dict[Any, Callable[[Any], Any]] = {float: _float, int: _int, bool: _bool, str: _str}


def _dataclass_decoder(cls: type) -> Callable[[Any], Any]:
    from .health import HealthReport  # the name `Snapshot.health`'s hint reads

    hints = typing.get_type_hints(cls, localns={"HealthReport": HealthReport})
    fields = [(f.name, _decoder(hints[f.name])) for f in dataclasses.fields(cls)]
    required = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }

    def build(d):
        if not isinstance(d, dict):
            raise _Bad(f"expected an object ({cls.__name__}), found {_kind(d)}")
        kwargs = {}
        for name, dec in fields:
            if name in d:  # a field added after the recording was made takes its default
                try:
                    kwargs[name] = dec(d[name])
                except _Bad as e:
                    raise e.under(name) from None
            elif name in required:
                raise _Bad(f"{cls.__name__} lacks its field {name!r}")
        return cls(**kwargs)

    return build


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


def _gpu(g: GpuState) -> dict[str, Any]:
    d = jsonable(g)
    d["mem_used_pct"] = g.mem_used_pct
    # v1 only (drivers before R510): the reserve is unknown and `used` includes it
    d["mem_used_includes_reserved"] = (
        None if g.mem_used_bytes is None else g.mem_reserved_bytes is None
    )
    d["power_pct_of_limit"] = g.power_pct_of_limit
    d["sm_clock_pct_of_max"] = g.sm_clock_pct_of_max
    d["static"]["device_node"] = g.static.device_node
    return d


def _seconds_key(key: str) -> bool:
    """A key that holds seconds: `wall_s`, `seconds`, a part of the step (`t_transfer`)."""
    return key.endswith("_s") or key == "seconds" or key.startswith("t_")


def rounded(doc: Any, digits: int = 3, _seconds: bool = False) -> Any:
    """`doc` with every float rounded to `digits` decimals (timestamps keep milliseconds): what a
    person reads, without 89.09400000000001. Seconds (`_seconds_key`) under
    0.1 keep three significant digits: a 0.08 ms copy is 8e-05, not 0.0. Recordings keep full
    precision, so a replay judges the very figures the live run judged."""
    if isinstance(doc, float):
        if _seconds and doc and abs(doc) < 0.1:
            return float(f"{doc:.3g}")
        return round(doc, digits)
    if isinstance(doc, dict):
        return {
            k: rounded(v, digits, isinstance(k, str) and _seconds_key(k)) for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [rounded(v, digits, _seconds) for v in doc]
    return doc


def snapshot_to_json(snap: Snapshot) -> dict[str, Any]:
    return rounded(_snapshot_doc(snap))


def _snapshot_doc(snap: Snapshot) -> dict[str, Any]:
    system = jsonable(snap.system)
    system["driver_max_cuda"] = snap.system.driver_max_cuda
    return {
        "schema": SNAPSHOT_SCHEMA,
        "timestamp": snap.timestamp,
        "time": iso_time(snap.timestamp),
        "system": system,
        "gpus": [_gpu(g) for g in snap.gpus],
        "host": jsonable(snap.host),
        "gpu_processes": jsonable(snap.gpu_processes),
        "processes": jsonable(snap.processes),
        "xid_events": jsonable(snap.xid_events),
        "errors": jsonable(snap.errors),
    }
