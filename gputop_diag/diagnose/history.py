"""A ring buffer of snapshots and the window statistics the views and the classifier read."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..model import GpuState, HostState, Snapshot

# The Monitor's windows (`monitor/core.py`), here so that what replays them (the fleet's node
# judgement) need not load the Monitor and its collectors.
WINDOW_S = 60.0  # what classify() reads: the last minute
HISTORY_S = 600.0  # what the history keeps (the views draw from it)

GpuField = str | Callable[[GpuState], float | None]
HostField = str | Callable[[HostState], float | None]


def _getter(f):
    return f if callable(f) else (lambda obj: getattr(obj, f))


class History:
    """The last `window_s` seconds of snapshots, newest last. Owned by the Monitor."""

    def __init__(self, window_s: float = 600.0, max_len: int = 100_000) -> None:
        self.window_s = window_s
        self._snaps: deque[Snapshot] = deque(maxlen=max_len)

    def append(self, snap: Snapshot) -> None:
        self._snaps.append(snap)
        cutoff = snap.timestamp - self.window_s
        while self._snaps and self._snaps[0].timestamp < cutoff:
            self._snaps.popleft()

    def __len__(self) -> int:
        return len(self._snaps)

    @property
    def latest(self) -> Snapshot | None:
        return self._snaps[-1] if self._snaps else None

    def snapshots(self, seconds: float | None = None) -> tuple[Snapshot, ...]:
        """The snapshots of the last `seconds` (all of them when None), oldest first."""
        if not self._snaps:
            return ()
        if seconds is None:
            return tuple(self._snaps)
        cutoff = self._snaps[-1].timestamp - seconds
        out: list[Snapshot] = []
        for s in reversed(self._snaps):
            if s.timestamp < cutoff:
                break
            out.append(s)
        out.reverse()
        return tuple(out)

    def gpu_series(
        self, index: int, fld: GpuField, seconds: float | None = None
    ) -> list[float | None]:
        get = _getter(fld)
        out: list[float | None] = []
        for s in self.snapshots(seconds):
            g = s.gpu(index)
            out.append(None if g is None or g.lost else get(g))
        return out

    def host_series(self, fld: HostField, seconds: float | None = None) -> list[float | None]:
        get = _getter(fld)
        return [None if s.host is None else get(s.host) for s in self.snapshots(seconds)]
