"""The fleet under --sanitize: every node, instance address and job label a pseudonym.

One `FleetNames` (over one `Sanitizer`, one key) per command or live session, so a node keeps
its pseudonym while nodes join and leave: a node's pseudonym is a keyed hash of its identity
(its Hostname label, or its `instance` where host names repeat), never its position in a list.
A node named by its host name gets the pseudonym its snapshots' host name gets (`host-k3qz`),
so the Fleet pane's row and the node's own header say the same name.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import replace

from ..sanitize.sanitizer import Sanitizer
from .judge import FleetVerdict, JobVerdict
from .read import FleetData, NodeData

_HOST_OF_INSTANCE = re.compile(r"^\[?([^\]]+?)\]?(?::\d+)?$")


class FleetNames:
    """Pseudonyms for a fleet's identities, stable for the life of this object."""

    def __init__(self, key: bytes | None = None) -> None:
        # the session's key: the node's own panes sanitize under it too (same pseudonyms)
        self.key = key if key is not None else secrets.token_bytes(32)
        self.s = Sanitizer(self.key)
        self._known: dict[str, str] = {}  # original -> pseudonym, for free text
        self._pattern: re.Pattern[str] | None = None

    # -- identities -------------------------------------------------------------------------
    def learn(self, nodes: list[NodeData]) -> None:
        """Seed every node's names before any text is written (a name may show in another
        node's finding first)."""
        for nd in nodes:
            if nd.hostname:
                self.s.seed_hostname(nd.hostname)
            for inst in nd.instances:
                m = _HOST_OF_INSTANCE.match(inst)
                if m:
                    self.s.seed_hostname(m.group(1))
            self.node(nd)

    def node(self, nd: NodeData) -> str:
        return self.node_of(nd.key, nd.hostname)

    def node_of(self, key: str, hostname: str | None) -> str:
        """The node's pseudonym: its host name's (as the snapshots' header shows it) where the
        node is named by host name, else a pseudonym of its instance address."""
        if hostname and key == hostname:
            shown = self.s.hostname(key) or key
        else:
            shown = self.instance(key)
        self._remember(key, shown)
        return shown

    def instance(self, address: str) -> str:
        shown = self.s.pseudonym("hostname", address, f"instance\0{address.lower()}")
        self._remember(address, shown)
        return shown

    def hostname(self, name: str | None) -> str | None:
        if not name:
            return name
        shown = self.s.hostname(name) or name
        self._remember(name, shown)
        return shown

    def group(self, value: str | None) -> str | None:
        """A multi-node job's label value (a Slurm job id or another label's value)."""
        if not value:
            return value
        shown = self.s.pseudonym("job", value, value.strip())
        self._remember(value, shown)
        return shown

    def _remember(self, original: str, shown: str) -> None:
        if original and self._known.get(original) != shown:
            self._known[original] = shown
            self._pattern = None

    def text(self, t: str | None) -> str:
        """Free text with every known identity replaced, then every other identifier shape."""
        if not t:
            return t or ""
        if self._known:
            if self._pattern is None:
                alts = sorted(self._known, key=len, reverse=True)
                self._pattern = re.compile(
                    r"(?<![\w.-])(?:" + "|".join(map(re.escape, alts)) + r")(?![\w-]|\.\w)"
                )
            t = self._pattern.sub(lambda m: self._known[m.group(0)], t)
        return self.s.text(t) or ""

    # -- a whole verdict --------------------------------------------------------------------
    def verdict(self, fv: FleetVerdict) -> FleetVerdict:
        """A copy of `fv` that names no one: node keys, host names, instances and job labels
        pseudonyms, every text through the sanitizer. The snapshots stay as read: they count
        GPUs and samples and are never printed."""
        self.learn([v.node for v in fv.nodes])
        for ranks in fv.data.ranks.values():  # the host names the ranks' probes give
            for r in (r for r in ranks if r.host):
                self.s.seed_hostname(r.host)
                self.hostname(r.host)
        nodes = [
            replace(
                v,
                node=replace(
                    v.node,
                    key=self.node(v.node),
                    hostname=self.hostname(v.node.hostname),
                    instances=tuple(self.instance(i) for i in v.node.instances),
                    group=self.group(v.node.group),
                ),
                diagnosis=self.s.model(v.diagnosis),
            )
            for v in fv.nodes
        ]
        jobs = [
            JobVerdict(
                job=self.group(j.job) or "",
                nodes=tuple(self._known.get(n, self.text(n)) for n in j.nodes),
                classes=j.classes,
                findings=tuple(
                    replace(
                        f,
                        text=self.text(f.text),
                        node=None if f.node is None else self._known.get(f.node, self.text(f.node)),
                    )
                    for f in j.findings
                ),
            )
            for j in fv.jobs
        ]
        data = replace(
            fv.data,
            nodes={v.node.key: v.node for v in nodes},
            ranks={},  # read by the judgement only, already made
            warnings=[self.text(w) for w in fv.data.warnings],
        )
        return FleetVerdict(data, nodes, jobs)


__all__ = ["FleetData", "FleetNames"]
