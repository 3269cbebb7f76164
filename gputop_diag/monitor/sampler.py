"""The Sampler: owns the collectors; the Monitor (`monitor/core.py`) drives it with `collect()` and
keeps the run's one history itself. `sample()` (collect and append to a history of the Sampler's
own) is for code that reads the collectors without a Monitor."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ..collect.host import HostCollector
from ..collect.nvml.collector import NvmlCollector
from ..collect.procs import ProcessCollector
from ..diagnose.history import History
from ..model import CollectorError, Snapshot, SystemInfo
from ..sources import Sources

if TYPE_CHECKING:
    from ..collect.host_head import HostHead

T = TypeVar("T")

CLOSE_WAIT_S = 1.0  # how long close() waits for a tick in flight (a hung NVML call) by default


def _failure(source: str, exc: BaseException) -> CollectorError:
    return CollectorError(
        source=source,
        message=f"the {source} collector failed: {type(exc).__name__}: {exc}",
        next_step="the other collectors keep running; please report this at the project's "
        "issue tracker with the message above",
    )


class Sampler:
    def __init__(
        self,
        sources: Sources,
        interval: float = 1.0,
        window_s: float = 600.0,
        host_head: HostHead | None = None,
    ) -> None:
        """`host_head`: the host's first readings, taken before this was imported by a one-shot
        command (`collect/host_head.py`)."""
        self.sources = sources
        self.interval = interval
        self.history = History(window_s=window_s)
        self._lock = threading.Lock()
        self.hostname = sources.hostname()
        self.nvml = NvmlCollector(sources.nvml, sources.clock, self.hostname, sources.procfs)
        self.host = HostCollector(sources.psutil, sources.procfs, sources.clock, host_head)
        self.procs = ProcessCollector(sources.psutil, sources.procfs, sources.clock)
        self._system: SystemInfo | None = None  # the last system facts NVML gave

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
        try:
            nv = self.nvml.collect()
        except Exception as e:  # noqa: BLE001 - the NVML collector never raises; if it does, the
            # host and process figures still arrive
            errors.append(_failure("nvml", e))
            system = self._system or SystemInfo(hostname=self.hostname)
            gpus, gpu_procs, xids = (), (), ()
        else:
            errors.extend(nv.errors)
            system, gpus, gpu_procs, xids = nv.system, nv.gpus, nv.processes, nv.xid_events
            self._system = system
        host = None
        try:
            host = self.host.collect()
        except Exception as e:  # noqa: BLE001 - one failing source must not stop the rest
            errors.append(_failure("host", e))
        procs: tuple = ()
        try:
            procs = self.procs.collect(p.pid for p in gpu_procs)
        except Exception as e:  # noqa: BLE001
            errors.append(_failure("process", e))
        return Snapshot(
            timestamp=now,
            system=system,
            gpus=gpus,
            host=host,
            gpu_processes=gpu_procs,
            processes=procs,
            xid_events=xids,
            errors=tuple(errors),
        )

    def calling(self, read: Callable[[], T]) -> T:
        """`read()` under the lock a tick's collection holds: NVML calls made beside the tick
        (the health read) are in flight for `close` too, which never shuts NVML down under
        them."""
        with self._lock:
            return read()

    @property
    def busy(self) -> bool:
        """A tick is in flight (possibly stuck in an NVML call)."""
        return self._lock.locked()

    def close(self, timeout: float | None = CLOSE_WAIT_S) -> bool:
        """Shut NVML down once the tick in flight is done, waiting at most `timeout` seconds
        (None: as long as it takes). A GPU that stopped answering can hold an NVML call for
        minutes; then this returns False without calling `nvmlShutdown` (the process is about
        to exit, and the driver cleans up after it). True when NVML was shut down."""
        if not self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return False
        try:
            self.nvml.close()
            return True
        finally:
            self._lock.release()
