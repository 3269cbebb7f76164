"""The history's memory: a tick's parts that equal the previous tick's are the previous tick's.

Most of a Snapshot repeats from one tick to the next (a process's threads, its CUDA libraries,
the driver chain, the health findings read every 30 s), yet the collectors build new, equal
objects each tick: 600 ticks held 600 copies. `shared(new, old)` is `new` with each part that
equals `old`'s part replaced by `old`'s object, so the history holds one copy of what does not
change. The values are exactly `new`'s: a float is taken from `old` only when it is the same float
(its sign included: -0.0 == 0.0), and a part whose type differs is kept as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache
from math import copysign
from operator import attrgetter
from typing import Any


@cache
def _fields(cls: type) -> tuple[tuple[str, ...], Callable[[Any], tuple]] | None:
    """A frozen dataclass's field names and a reader of their values, as a tuple (None for
    anything else: its parts are not shared)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        return None
    names = tuple(f.name for f in dataclasses.fields(cls))
    if len(names) == 1:  # attrgetter of one name gives the value itself, not a tuple
        one = attrgetter(names[0])
        return names, lambda obj: (one(obj),)
    return names, attrgetter(*names) if names else (lambda obj: ())


def _same_float(a: float, b: float) -> bool:
    return a == b and copysign(1.0, a) == copysign(1.0, b)


def _part(a: Any, b: Any) -> Any:
    """`shared(a, b)`, with the leaves (most of a snapshot's parts) decided here, without the
    call: a tick shares some 600 parts."""
    if a is b:
        return b
    t = type(a)
    if t is not type(b):
        return a
    if t is str or t is int or t is bool:
        return b if a == b else a
    if t is float:
        return b if a == b and copysign(1.0, a) == copysign(1.0, b) else a
    return shared(a, b)


def shared(new: Any, old: Any) -> Any:
    """`new`, with every part equal to the same part of `old` taken from `old` (`old` itself when
    all of `new` equals it). Equal to `new` in every value."""
    if new is old:
        return old
    t = type(new)
    if t is not type(old):
        return new
    if t is str or t is int or t is bool:
        return old if new == old else new
    if t is float:
        return old if _same_float(new, old) else new
    if t is tuple:
        return _shared_tuple(new, old)
    if t is dict:
        return _shared_dict(new, old)
    fields = _fields(t)
    if fields is None:
        return new
    names, values = fields
    parts = []
    alike = same = True  # every part is old's / new's
    for a, b in zip(values(new), values(old), strict=True):
        if a is b:
            v = b
        else:
            ta = type(a)  # the leaves (most of a snapshot's parts) here, without a call
            if ta is not type(b):
                v = a
            elif ta is str or ta is int or ta is bool:
                v = b if a == b else a
            elif ta is float:
                v = b if a == b and copysign(1.0, a) == copysign(1.0, b) else a
            else:
                v = shared(a, b)
            if v is not b:
                alike = False
            if v is not a:
                same = False
        parts.append(v)
    if alike:
        return old
    if same:
        return new
    copy = object.__new__(t)  # `new` with its shared parts: no __init__ (its checks ran)
    for name, v in zip(names, parts, strict=True):
        object.__setattr__(copy, name, v)
    return copy


def _shared_tuple(new: tuple, old: tuple) -> tuple:
    if len(new) == len(old):
        out = [_part(a, b) for a, b in zip(new, old, strict=True)]
    else:  # items come and go (a process started): share the ones that were there
        try:
            held = {item: item for item in old}
            out = [shared(item, held.get(item)) for item in new]  # exact: -0.0 is not 0.0
        except TypeError:  # an unhashable item: nothing shared
            return new
    if all(a is b for a, b in zip(out, old, strict=False)) and len(new) == len(old):
        return old
    if all(a is b for a, b in zip(out, new, strict=True)):
        return new
    return tuple(out)


def _shared_dict(new: dict, old: dict) -> dict:
    out = {k: shared(v, old[k]) if k in old else v for k, v in new.items()}
    if len(new) == len(old) and all(k in old and v is old[k] for k, v in out.items()):
        return old
    if all(v is new[k] for k, v in out.items()):
        return new
    return out
