"""Snapshots as JSON documents (schema `gputop-diag.snapshot/1`, documented in the README)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

from .model import GpuState, Snapshot

SNAPSHOT_SCHEMA = "gputop-diag.snapshot/1"


def jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


def iso_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


def _gpu(g: GpuState) -> dict[str, Any]:
    d = jsonable(g)
    d["mem_used_pct"] = g.mem_used_pct
    d["power_pct_of_limit"] = g.power_pct_of_limit
    d["sm_clock_pct_of_max"] = g.sm_clock_pct_of_max
    d["static"]["device_node"] = g.static.device_node
    return d


def snapshot_to_json(snap: Snapshot) -> dict[str, Any]:
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
