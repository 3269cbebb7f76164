"""Figures read once per snapshot, not at every window the snapshot stays in.

A Monitor's window slides one snapshot a tick (the host window holds HOST_RECENT_S of them,
the memory growth the whole window), and the fleet's reader judges three windows ending a step
apart: without a memo each snapshot's processes and GPUs would be walked again at every tick.
A snapshot is frozen, so what is read from it never changes. Keyed by the snapshot's identity
(the entry holds the snapshot, so its id cannot be reused while remembered); bounded, the
oldest first. An OrderedDict: a plain dict's oldest key, after many deletions at its front, is
found by walking the deleted slots.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from ..model import Snapshot

T = TypeVar("T")

# Ours: 1,024 snapshots hold the windows of several Monitors at 1 s ticks.
MOST = 1024


class SnapshotMemo(Generic[T]):
    """`memo(snapshot)`: `read(snapshot)`, read once while the snapshot is remembered."""

    def __init__(self, read: Callable[[Snapshot], T], most: int = MOST) -> None:
        self.read = read
        self.most = most
        self._held: OrderedDict[int, tuple[Snapshot, T]] = OrderedDict()

    def __call__(self, s: Snapshot) -> T:
        got = self._held.get(id(s))
        if got is not None and got[0] is s:
            return got[1]
        value = self.read(s)
        while len(self._held) >= self.most:
            try:
                self._held.popitem(last=False)
            except KeyError:  # another thread emptied it first
                break
        self._held[id(s)] = (s, value)
        return value

    def __len__(self) -> int:
        return len(self._held)

    def held(self) -> list[Snapshot]:
        """The snapshots remembered, oldest first."""
        return [s for s, _ in self._held.values()]

    def forget(self) -> None:
        """Let go of the snapshots remembered (a reader that judged a window and drops it:
        `fleet.judge.judge_nodes(drop=True)`)."""
        self._held.clear()
