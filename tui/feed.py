"""What one tick hands the screen: the Monitor's frozen tick, as the screen shows it.

The Monitor (`monitor/core.py`) owns the run's state — history, interval, pause, the run's Xid
events — and each `tick(series=True)` returns a frozen `Tick` with the histories the panes draw
already cut under its lock. A `Feeder` turns that Tick into an `Update`: under `--sanitize` it
passes the snapshot, the diagnosis and the Xid events through the session's one `Sanitizer`
(one key for the whole session: an identifier keeps its pseudonym from tick to tick), so every
pane draws pseudonyms; the Monitor's history keeps what was sampled (the `s` report sanitizes it
again, under the same key). The collector thread, a replay and a Prometheus feed all go through
a Feeder, so every tick reaches the screen the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gputop_diag.collect.identity import read_machine_names
from gputop_diag.collect.kernlog.scan import XidScan
from gputop_diag.diagnose.types import Diagnosis
from gputop_diag.model import Snapshot, XidEvent
from gputop_diag.monitor.core import Monitor, Tick
from gputop_diag.monitor.series import GpuSeries, Series
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.xid.types import XidTriage


@dataclass(frozen=True)
class Update:
    snapshot: Snapshot
    diagnosis: Diagnosis | None = None
    gpus: dict[int, GpuSeries] = field(default_factory=dict)
    host_cpu: tuple[float | None, ...] = ()
    host_iowait: tuple[float | None, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()  # every event seen so far, newest first
    ticks: int = 0  # snapshots seen so far
    sampled: Snapshot | None = None  # under --sanitize: the snapshot as sampled (None: as shown)
    xid_triage: XidTriage | None = None  # the Monitor's triage (the Xid pane draws it)
    xid_scan: XidScan | None = None  # the kernel log before the run, once read
    replaying: bool = False  # a recording (or a Prometheus feed): no kernel log of its own
    job_window: tuple[Snapshot, ...] = ()  # the watched job's ticks, as sampled (the Job pane)


class Feeder:
    """The live view's side of a `Monitor`: each tick (sampled, or a snapshot fed in) becomes
    an `Update`, sanitized when the session is."""

    def __init__(self, monitor: Monitor, sanitizer: Sanitizer | None = None) -> None:
        self.monitor = monitor
        self.sanitizer = sanitizer  # --sanitize: what the screen shows is pseudonyms
        self._seeded_pids: set[int] = set()
        self._xids: tuple[tuple[XidEvent, ...], tuple[XidEvent, ...]] = ((), ())
        if sanitizer is not None and monitor.sources is not None:
            sanitizer.seed_machine(
                read_machine_names(monitor.sources)
            )  # the machine's names, this shell

    def tick(self) -> Update:
        """Sample once through the Monitor; the update."""
        return self.update(self.monitor.tick(series=True))

    def add(self, snap: Snapshot) -> Update:
        """A snapshot made elsewhere (a replay, a Prometheus feed) through the Monitor."""
        return self.update(self.monitor.feed(snap, series=True))

    def update(self, t: Tick) -> Update:
        snap, diagnosis, xids = t.snapshot, t.diagnosis, t.xid_events
        if self.sanitizer is not None:
            snap, diagnosis = self._sanitized(snap, diagnosis)
            xids = self._sanitized_xids(xids)
        s = t.series or Series()
        sampled = t.snapshot if snap is not t.snapshot else None
        return Update(
            snap,
            diagnosis,
            s.gpus,
            s.host_cpu,
            s.host_iowait,
            xids,
            t.count,
            sampled,
            t.xid_triage,
            t.xid_scan,
            self.monitor.replaying,
            s.job_window,
        )

    def with_xid_history(self, u: Update) -> Update:
        """`u` with the Monitor's triage and kernel-log scan as they stand now (the read of
        the log before the run ended after `u`'s tick)."""
        return replace(u, xid_triage=self.monitor.xid_triage, xid_scan=self.monitor.xid_scan)

    def _sanitized_xids(self, xids: tuple[XidEvent, ...]) -> tuple[XidEvent, ...]:
        raw, shown = self._xids
        if xids is not raw:  # sanitized again only when an event arrived
            shown = self.sanitizer.xid_events(xids) if xids else ()
            self._xids = (xids, shown)
        return shown

    def _sanitized(
        self, snap: Snapshot, diagnosis: Diagnosis | None
    ) -> tuple[Snapshot, Diagnosis | None]:
        """`snap` and `diagnosis` with every identifier replaced by the session's pseudonym;
        the working directory of each new GPU process seeds its project's name first."""
        s = self.sanitizer
        sources = self.monitor.sources
        if sources is not None:
            for p in snap.gpu_processes:
                if p.pid in self._seeded_pids:
                    continue
                self._seeded_pids.add(p.pid)
                try:
                    s.seed_cwd(sources.psutil.Process(p.pid).cwd())
                except Exception:  # noqa: BLE001 - gone, another user's: nothing to seed
                    continue
        return s.model(snap), None if diagnosis is None else s.model(diagnosis)
