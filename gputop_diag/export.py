"""Snapshots as JSON documents (schema `gputop-diag.snapshot/1`, documented in the README)."""

from __future__ import annotations

import copy
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
    d = Redactor().snapshot_doc(doc)
    d["sanitized"] = True
    return d


class Redactor:
    """Replaces what identifies a machine or a person with pseudonyms that stay the same across
    every document it redacts (all the lines of one recording): host name, GPU and MIG UUIDs,
    serials, PCI bus ids, user names (user0, user1, … in order of appearance), command lines,
    home paths and addresses inside free text.

    It reads the snapshot's JSON shape: `snapshot_to_json` documents and recording lines
    (`recording.py`), which add the slow sources (`scheduler_jobs`, `kernel_ooms`).
    """

    def __init__(self) -> None:
        self.users: dict[str, str] = {}
        self.hostnames: list[str] = []
        self._scrub = _scrubber(self.hostnames, self.users)

    def user(self, name: str | None) -> str | None:
        return self.users.setdefault(name, f"user{len(self.users)}") if name else name

    def scrub(self, text: str) -> str:
        return self._scrub(text)

    def snapshot_doc(self, doc: dict[str, Any]) -> dict[str, Any]:
        """A redacted deep copy of `doc`."""
        d = copy.deepcopy(doc)
        host = (doc.get("system") or {}).get("hostname")
        if host and host != HOST_PSEUDONYM and host not in self.hostnames:
            self.hostnames.append(host)
        d["system"]["hostname"] = HOST_PSEUDONYM
        for g in d.get("gpus") or ():
            st = g["static"]
            st["uuid"] = f"GPU-{g['index']}" if st.get("uuid") else None
            st["serial"] = None
            st["pci_bus_id"] = None
            for m in g.get("mig_instances") or ():
                m["uuid"] = f"MIG-{m['parent_index']}-{m['mig_index']}" if m.get("uuid") else None
        processes = d.get("processes") or ()
        for p in processes:
            p["user"] = self.user(p.get("user"))
        jobs = d.get("scheduler_jobs") or ()
        for j in jobs:
            j["user"] = self.user(j.get("user"))
        for p in processes:
            if p.get("cmdline"):
                p["cmdline"] = [p["cmdline"][0].rsplit("/", 1)[-1], "…"]
            cvd = p.get("cuda_visible_devices")
            if cvd and not all(e.strip().isdigit() for e in cvd.split(",")):
                p["cuda_visible_devices"] = "(redacted)"
            if p.get("name"):
                p["name"] = self.scrub(p["name"])
            for t in [*(p.get("busiest_threads") or ()), *(p.get("children") or ())]:
                if t.get("name"):
                    t["name"] = self.scrub(t["name"])
        for x in d.get("xid_events") or ():
            x["pci_bus_id"] = None
            x["message"] = ""
            x["process_name"] = None
        for e in d.get("errors") or ():
            e["message"] = self.scrub(e["message"])
            e["next_step"] = self.scrub(e["next_step"])
        for j in jobs:
            if j.get("name"):
                j["name"] = self.scrub(j["name"])
        for k in d.get("kernel_ooms") or ():
            k["process_name"] = self.scrub(k["process_name"])
        return d


HOST_PSEUDONYM = "host0"
_UUID = re.compile(r"\b(?:GPU|MIG)-[0-9a-fA-F-]{8,}(?:/\d+/\d+)?")
_BUS = re.compile(r"\b[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?\b")
_HOME = re.compile(r"/home/[^/\s]+|/Users/[^/\s]+|/root\b")
_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")


def _scrubber(hostnames: list[str], users: dict[str, str]):
    """Replace identifiers inside free text (exception messages, kernel text); reads the live
    `hostnames` and `users` it is given."""

    def scrub(text: str) -> str:
        if not text:
            return text
        for hostname in hostnames:
            text = text.replace(hostname, HOST_PSEUDONYM)
        text = _UUID.sub("GPU-<uuid>", text)
        text = _HOME.sub("~", text)
        text = _IPV4.sub("<ip>", text)
        text = _BUS.sub("<bus>", text)
        for real, alias in users.items():
            text = re.sub(rf"\b{re.escape(real)}\b", alias, text)
        return text

    return scrub
