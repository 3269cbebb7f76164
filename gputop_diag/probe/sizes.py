"""Exact bytes of a model's parameters, gradients and optimizer state, and of live KV caches.

Walks the optimizer's `param_groups` and `state`
(https://pytorch.org/docs/stable/optim.html#torch.optim.Optimizer.state_dict describes both):
every tensor is counted by its storage (`Tensor.untyped_storage()`), once, so tied weights,
views and DDP's gradient buckets are not counted twice. Nothing here allocates or syncs.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import Any

# transformers' cache objects alive now (a `Cache.__init__` wrapper adds them: hooks.py)
LIVE_CACHES: weakref.WeakSet = weakref.WeakSet()
_seen_a_cache = False


def track_cache(cache: Any) -> None:
    global _seen_a_cache
    LIVE_CACHES.add(cache)
    _seen_a_cache = True


def _storage(tensor: Any) -> tuple[tuple, int]:
    """(key, bytes) of the storage behind `tensor`; its own bytes when it has none we can see."""
    try:
        storage = tensor.untyped_storage()
        device = tensor.device
        ptr = storage.data_ptr()
        if ptr:
            return (device.type, device.index, ptr), storage.nbytes()
    except Exception:  # a tensor subclass without a plain storage (DTensor, a fake tensor)
        pass
    return ("tensor", id(tensor)), tensor.numel() * tensor.element_size()


def _tensors(value: Any, is_tensor) -> Iterator[Any]:  # noqa: ANN001
    if is_tensor(value):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, is_tensor)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, is_tensor)


def _sum(tensors: Iterable[Any], seen: set) -> int:
    total = 0
    for tensor in tensors:
        key, nbytes = _storage(tensor)
        if key not in seen:
            seen.add(key)
            total += nbytes
    return total


def model_bytes(optimizer: Any, is_tensor) -> dict[str, int | None]:  # noqa: ANN001
    """The "model" record's figures for one optimizer (`is_tensor` is `torch.is_tensor`)."""
    seen: set = set()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    params_bytes = _sum(params, seen)
    grads_bytes = _sum((p.grad for p in params if p.grad is not None), seen)
    optimizer_bytes = _sum(_tensors(list(optimizer.state.values()), is_tensor), seen)
    return {
        "params_bytes": params_bytes,
        "grads_bytes": grads_bytes,
        "optimizer_bytes": optimizer_bytes,
        "kv_cache_bytes": kv_cache_bytes(is_tensor, seen),
    }


def _cache_tensors(cache: Any, is_tensor) -> Iterator[Any]:  # noqa: ANN001
    """Key and value tensors of a transformers cache: `layers[i].keys/values` (transformers 4.56
    and later), `key_cache`/`value_cache` lists (earlier releases)."""
    for layer in getattr(cache, "layers", None) or ():
        for name in ("keys", "values"):
            yield from _tensors(getattr(layer, name, None), is_tensor)
    for name in ("key_cache", "value_cache"):
        yield from _tensors(getattr(cache, name, None), is_tensor)


def kv_cache_bytes(is_tensor, seen: set | None = None) -> int | None:  # noqa: ANN001
    """Bytes of the KV caches alive now; None while this process has made none we can see."""
    if not _seen_a_cache:
        return None
    caches = list(LIVE_CACHES)
    seen = set() if seen is None else seen
    return sum(_sum(_cache_tensors(cache, is_tensor), seen) for cache in caches)
