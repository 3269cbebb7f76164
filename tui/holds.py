"""Figures that repaint when they move materially, and at least every `MAX_HOLD_S`.

Over SSH every repainted figure costs its line's bytes. A busy-time figure that wobbles
between 97 and 98 % every second tells nothing new; one that drops to 60 % does. A `Holds`
keeps each group of figures on screen until one of them moves by its step (5 points of a
percentage, 5 % of watts or MHz, 10 % of a rate), or the group is `MAX_HOLD_S` old, so a
figure on screen is always within a step of the truth and exact within `MAX_HOLD_S`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_HOLD_S = 15.0


@dataclass(frozen=True)
class Step:
    """How far a figure may drift before it is repainted: `points` absolute, or `share` of
    its size (whichever is larger)."""

    points: float = 0.0
    share: float = 0.0

    def moved(self, old: object, new: object) -> bool:
        if not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
            return old != new  # no figure, a state, a name: any change is news
        delta = abs(new - old)
        if delta == 0:
            return False
        return delta >= max(self.points, self.share * max(abs(old), abs(new)))


PERCENT = Step(points=5.0)
WATTS = Step(share=0.05, points=5.0)
MHZ = Step(share=0.03, points=15.0)
CELSIUS = Step(points=3.0)
RATE = Step(share=0.10)
LOAD = Step(share=0.10, points=0.5)
EXACT = Step()  # any change (counts, states)


class Holds:
    """Held figures, by group key."""

    def __init__(self, max_hold_s: float = MAX_HOLD_S) -> None:
        self.max_hold_s = max_hold_s
        self._held: dict[str, tuple[tuple, float]] = {}

    def get(
        self,
        key: str,
        figures: Sequence[object],
        steps: Sequence[Step],
        now: float,
    ) -> tuple:
        """The figures to show for group `key`: the new ones when any moved by its step or
        the group is due, else the ones on screen."""
        new = tuple(figures)
        held = self._held.get(key)
        if held is not None:
            old, at = held
            fresh = 0 <= now - at < self.max_hold_s and len(old) == len(new)
            if fresh and not any(s.moved(a, b) for s, a, b in zip(steps, old, new, strict=True)):
                return old
        self._held[key] = (new, now)
        return new

    def forget(self) -> None:
        """Repaint everything with the next figures (a new GPU selected, a resize)."""
        self._held.clear()
