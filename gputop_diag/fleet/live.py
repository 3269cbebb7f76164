"""The live view's side of the fleet: the whole fleet judged again and again (the Fleet pane),
and one node followed from Prometheus (its panes), both headless and testable.

`FleetWatch.judge()` reads the window ending now and judges every node, as `gputop-diag fleet`
does. `NodeFeed` stands where the live view takes a recording (`Recording`'s reading side:
`header`, `name`, `snapshots()`, `extent()`, `last()`, `warnings`): `snapshots()` yields the
node's window from Prometheus, then each new scrape as it arrives, on one grid aligned to the
step so a point is never read twice.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..model import Snapshot
from ..monitor.run import MIN_INTERVAL_S, Run
from ..prometheus.client import Prometheus, PrometheusError
from ..prometheus.dcgm_fields import JOB_LABEL
from ..recording.store import RecordingHeader
from .judge import STALE_STEPS, FleetVerdict
from .query import detect_step
from .read import FleetData, NoFleetData, read_fleet
from .stream import BATCH_NODES, Progress, stream_fleet

DEFAULT_WINDOW_S = 360.0  # as `gputop-diag fleet --window` (commands/fleet.py)
# Ours: the Fleet pane reads the fleet again every 15 s (dcgm-exporter's usual scrape) or every
# step where scrapes are further apart; one read of 256 nodes takes a few seconds.
FLEET_REFRESH_S = 15.0


@dataclass(frozen=True)
class FleetQuery:
    """What the live view asks Prometheus: the GPU series, the window, the job label."""

    prom: Prometheus
    match: str = ""
    window_s: float = DEFAULT_WINDOW_S
    step_s: float | None = None
    group_by: str = JOB_LABEL


class FleetWatch:
    """The fleet, judged on demand (the Fleet pane's worker calls `judge()` periodically)."""

    def __init__(
        self,
        query: FleetQuery,
        clock: Callable[[], float] = time.time,
        batch_nodes: int = BATCH_NODES,
    ) -> None:
        self.query = query
        self.clock = clock
        self.batch_nodes = batch_nodes
        self.on_batch: Progress | None = None  # the Fleet pane's: each batch as it is judged
        self.step_s: float | None = query.step_s

    def judge(self, on_batch: Progress | None = None) -> FleetVerdict:
        """The fleet read and judged a batch of nodes at a time (`fleet/stream.py`);
        `on_batch(verdicts so far, nodes judged, nodes in all)` after each batch. Raises
        PrometheusError (unreachable, slow, refused) or NoFleetData (no GPU series)."""
        q = self.query
        fv = stream_fleet(
            q.prom,
            window_s=q.window_s,
            step_s=self.step_s,
            match=q.match,
            at=self.clock(),
            group_by=q.group_by,
            batch_nodes=self.batch_nodes,
            on_batch=on_batch or self.on_batch,
        )
        self.step_s = self.step_s or fv.data.step_s
        return fv

    @property
    def refresh_s(self) -> float:
        return max(FLEET_REFRESH_S, self.step_s or 0.0)


def node_matcher(key: str, hostname: str | None, host_label: str = "Hostname") -> str:
    """The label matcher that picks one node's series: its host name (under the label its
    series carry: `hostname`, or `Hostname` before dcgm-exporter's rename), else its
    instance."""
    by_host = hostname and key == hostname
    label, value = (host_label, hostname) if by_host else ("instance", key)
    return f'{label}="{_escape(value)}"'


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


def _and(match: str, matcher: str) -> str:
    inner = match.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1].strip()
    return f"{inner}, {matcher}" if inner else matcher


class NodeFeed:
    """One node's snapshots from Prometheus, shaped as the live view reads a recording."""

    def __init__(
        self,
        query: FleetQuery,
        key: str,
        hostname: str | None = None,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float, threading.Event], bool] | None = None,
        shown_as: str | None = None,
        host_label: str = "Hostname",
    ) -> None:
        self.query = query
        self.key = key
        self.hostname = hostname
        self.match = _and(query.match, node_matcher(key, hostname, host_label))
        self.clock = clock
        self._sleep = sleep or (lambda s, cancel: cancel.wait(s))
        self.name = f"{shown_as or key} (Prometheus)"  # a pseudonym under --sanitize
        self.path = query.prom.url
        self.warnings: list[str] = []
        self.on_warning: Callable[[str], None] = lambda text: None
        self.step_s: float = query.step_s or 0.0
        self.history: list[Snapshot] = []
        self.header = RecordingHeader(interval_s=self.step_s or 1.0, hostname=hostname or key)
        self.cancel = threading.Event()

    @property
    def tick_s(self) -> float:
        """The classifier's tick for this node (as the fleet reader sets it)."""
        from .read import REALTIME_MAX_STEP_S

        return 1.0 if self.step_s <= REALTIME_MAX_STEP_S else self.step_s

    def _aligned(self, t: float) -> float:
        return math.floor(t / self.step_s) * self.step_s

    def _read(self, window_s: float, at: float) -> FleetData:
        q = self.query
        return read_fleet(
            q.prom, window_s=window_s, step_s=self.step_s, match=self.match, at=at,
            group_by=q.group_by,
        )  # fmt: skip

    def _node(self, data: FleetData) -> list[Snapshot]:
        nd = data.nodes.get(self.key) or next(iter(data.nodes.values()), None)
        return [] if nd is None else list(nd.snapshots)

    def load(self) -> list[Snapshot]:
        """The node's window ending now (the step read off the data where not given). Raises
        PrometheusError or NoFleetData."""
        now = self.clock()
        if not self.step_s:
            self.step_s = detect_step(self.query.prom, self.match, self.query.window_s, now)
        data = self._read(self.query.window_s, self._aligned(now))
        self.history = self._node(data)
        if not self.history:
            raise NoFleetData(f"no series of {self.key} in the window")
        first = self.history[0]
        self.header = RecordingHeader(
            interval_s=self.step_s,
            started=first.timestamp,
            gpu_count=len(first.gpus),
            gpu_models=tuple(sorted({g.static.name for g in first.gpus if g.static.name})),
            hostname=self.hostname or self.key,
        )
        self.warnings = list(data.warnings)
        return list(self.history)

    def poll(self) -> list[Snapshot]:
        """The scrapes newer than the last snapshot given (none yet: an empty list)."""
        last = self.history[-1].timestamp if self.history else None
        at = self._aligned(self.clock())
        if last is not None and at <= last:
            return []
        span = 3 * self.step_s if last is None else max(at - last, self.step_s) + self.step_s
        try:
            data = self._read(span, at)
        except NoFleetData:
            return []  # the node stopped reporting: nothing new
        new = [s for s in self._node(data) if last is None or s.timestamp > last + 1e-6]
        self.history += new
        return new

    def snapshots(self) -> Iterator[Snapshot]:
        """The window (read now unless `load()` read it); `follow` gives what comes after.
        Raises PrometheusError or NoFleetData."""
        yield from (list(self.history) or self.load())

    def follow(self, on_new: Callable[[list[Snapshot]], object]) -> Run:
        """The paced loop that polls for new scrapes: its first poll just after the next point
        on the step's grid, then one a step (cancelled by `cancel`)."""
        now = self.clock()
        due = self._aligned(now) + self.step_s - now + 0.5  # just after the next point
        paced = Run(
            self.poll,
            clock=_FeedClock(self.clock, self._sleep),
            interval=max(self.step_s, MIN_INTERVAL_S),
            wait_first=max(0.05, due),
            cancel=self.cancel,
        )
        return paced.subscribe(lambda new: on_new(new) if new else None)

    def extent(
        self, cancel: threading.Event | None = None
    ) -> tuple[int, float | None, float | None]:
        if not self.history:
            return 0, None, None
        return len(self.history), self.history[0].timestamp, self.history[-1].timestamp

    def stale_for(self) -> float | None:
        """Seconds since the node's newest scrape, where it is older than the fleet calls
        stale (its exporter or Prometheus' scrape of it stopped); None while it reports."""
        if not self.history or not self.step_s:
            return None
        age = self.clock() - self.history[-1].timestamp
        return age if age > (STALE_STEPS + 1) * self.step_s else None

    def last(self) -> Snapshot | None:
        return self.history[-1] if self.history else None


__all__ = [
    "FleetQuery",
    "FleetWatch",
    "NodeFeed",
    "NoFleetData",
    "PrometheusError",
    "node_matcher",
]


class _FeedClock:
    """The feed's clock and its wait, as the paced loop takes a clock (tests hand in their
    own)."""

    def __init__(
        self, now: Callable[[], float], sleep: Callable[[float, threading.Event], bool]
    ) -> None:
        self.now = now
        self._sleep = sleep

    def sleep(self, seconds: float, cancel: threading.Event | None = None) -> bool:
        return self._sleep(seconds, cancel if cancel is not None else threading.Event())
