"""The Sampler: owns the collectors and the history; the Monitor (`monitor.py`) drives it."""

from __future__ import annotations

import threading

from .collect.host import HostCollector
from .collect.nvml import NvmlCollector
from .collect.procs import ProcessCollector
from .history import History
from .model import CollectorError, Snapshot
from .sources import Sources


def _failure(source: str, exc: BaseException) -> CollectorError:
    return CollectorError(
        source=source,
        message=f"the {source} collector failed: {type(exc).__name__}: {exc}",
        next_step="the other collectors keep running; report this with `gputop-diag report`",
    )


class Sampler:
    def __init__(self, sources: Sources, interval: float = 1.0, window_s: float = 600.0) -> None:
        self.sources = sources
        self.interval = interval
        self.history = History(window_s=window_s)
        self._lock = threading.Lock()
        hostname = sources.hostname()
        self.nvml = NvmlCollector(sources.nvml, sources.clock, hostname)
        self.host = HostCollector(sources.psutil, sources.procfs, sources.clock)
        self.procs = ProcessCollector(sources.psutil, sources.procfs, sources.clock)

    def sample(self) -> Snapshot:
        """Collect one tick at `sources.clock.now()`, append it to the history, return it."""
        with self._lock:
            snap = self._collect()
            self.history.append(snap)
            return snap

    def collect(self) -> Snapshot:
        """Collect one tick without appending it: the Monitor adds the slow-source evidence
        first, then appends it itself (`history.append`)."""
        with self._lock:
            return self._collect()

    def _collect(self) -> Snapshot:
        now = self.sources.clock.now()
        errors: list[CollectorError] = []
        nv = self.nvml.collect()
        errors.extend(nv.errors)
        host = None
        try:
            host = self.host.collect()
        except Exception as e:  # noqa: BLE001 - one failing source must not stop the rest
            errors.append(_failure("host", e))
        procs: tuple = ()
        try:
            procs = self.procs.collect(p.pid for p in nv.processes)
        except Exception as e:  # noqa: BLE001
            errors.append(_failure("process", e))
        return Snapshot(
            timestamp=now,
            system=nv.system,
            gpus=nv.gpus,
            host=host,
            gpu_processes=nv.processes,
            processes=procs,
            xid_events=nv.xid_events,
            errors=tuple(errors),
        )

    def close(self) -> None:
        with self._lock:
            self.nvml.close()
