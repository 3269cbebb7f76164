"""Snapshots as JSON documents (schema `gputop-diag.snapshot/1`, documented in the README)."""

from __future__ import annotations

import dataclasses
import re
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


def redact_snapshot_json(doc: dict[str, Any]) -> dict[str, Any]:
    """The snapshot document with what identifies a machine or a person replaced by pseudonyms:
    host name, GPU and MIG UUIDs, serials, PCI bus ids, user names and command lines."""
    import copy

    d = copy.deepcopy(doc)
    d["system"]["hostname"] = "host0"
    for g in d["gpus"]:
        st = g["static"]
        st["uuid"] = f"GPU-{g['index']}" if st.get("uuid") else None
        st["serial"] = None
        st["pci_bus_id"] = None
        for m in g.get("mig_instances", []):
            m["uuid"] = f"MIG-{m['parent_index']}-{m['mig_index']}" if m.get("uuid") else None
    users: dict[str, str] = {}
    for p in d["processes"]:
        if p.get("user"):
            p["user"] = users.setdefault(p["user"], f"user{len(users)}")
        if p.get("cmdline"):
            p["cmdline"] = [p["cmdline"][0].rsplit("/", 1)[-1], "…"]
        cvd = p.get("cuda_visible_devices")
        if cvd and not all(e.strip().isdigit() for e in cvd.split(",")):
            p["cuda_visible_devices"] = "(redacted)"
    for x in d["xid_events"]:
        x["pci_bus_id"] = None
        x["message"] = ""
        x["process_name"] = None
    scrub = _scrubber(doc["system"]["hostname"], users)
    for e in d["errors"]:
        e["message"] = scrub(e["message"])
        e["next_step"] = scrub(e["next_step"])
    for p in d["processes"]:
        if p.get("name"):
            p["name"] = scrub(p["name"])
    d["sanitized"] = True
    return d


_UUID = re.compile(r"\b(?:GPU|MIG)-[0-9a-fA-F-]{8,}(?:/\d+/\d+)?")
_BUS = re.compile(r"\b[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?\b")
_HOME = re.compile(r"/home/[^/\s]+|/Users/[^/\s]+|/root\b")
_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")


def _scrubber(hostname: str, users: dict[str, str]):
    """Replace identifiers inside free text (exception messages, kernel text)."""

    def scrub(text: str) -> str:
        if not text:
            return text
        if hostname:
            text = text.replace(hostname, "host0")
        text = _UUID.sub("GPU-<uuid>", text)
        text = _HOME.sub("~", text)
        text = _IPV4.sub("<ip>", text)
        text = _BUS.sub("<bus>", text)
        for real, alias in users.items():
            text = re.sub(rf"\b{re.escape(real)}\b", alias, text)
        return text

    return scrub
