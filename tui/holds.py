"""Figures that repaint when they move materially, and at least every `MAX_HOLD_S`.

Over SSH every repainted figure costs its line's bytes. A busy-time figure that wobbles
between 97 and 98 % every second tells nothing new; one that drops to 60 % does. A `Holds`
keeps each group of figures on screen until one of them moves by its step (5 points of a
percentage, 5 % of watts or MHz, 10 % of a rate) — judged on the mean of the figures since
the last repaint (the last `SMOOTH_TICKS`), so a wobble around the shown value is not a move,
and a jump of two steps repaints at once — or until the group is `MAX_HOLD_S` old. A repaint
shows the newest figures; a figure on screen is exact within `MAX_HOLD_S`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_HOLD_S = 15.0
SMOOTH_TICKS = 3


@dataclass(frozen=True)
class Step:
    """How far a figure may drift before it is repainted: `points` absolute, or `share` of
    its size (whichever is larger)."""

    points: float = 0.0
    share: float = 0.0

    def moved(self, old: object, new: object, factor: float = 1.0) -> bool:
        """Whether `new` is `factor` steps or more from `old`."""
        if not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
            return old != new  # no figure, a state, a name: any change is news
        delta = abs(new - old)
        if delta == 0:
            return False
        return delta >= factor * max(self.points, self.share * max(abs(old), abs(new)))


PERCENT = Step(points=5.0)
WATTS = Step(share=0.05, points=5.0)
MHZ = Step(share=0.03, points=15.0)
CELSIUS = Step(points=3.0)
RATE = Step(share=0.10)
LOAD = Step(share=0.10, points=0.5)
EXACT = Step()  # any change (counts, states)


def _mean(values: list) -> object:
    """The mean of the recent figures, or the newest when they are not all numbers."""
    if all(isinstance(v, (int, float)) for v in values):
        return sum(values) / len(values)
    return values[-1]


class Holds:
    """Held figures, by group key."""

    def __init__(self, max_hold_s: float = MAX_HOLD_S, smooth: int = SMOOTH_TICKS) -> None:
        self.max_hold_s = max_hold_s
        self.smooth = smooth
        self._held: dict[str, tuple[tuple, float]] = {}
        self._recent: dict[str, list[tuple]] = {}
        self._last_at: dict[str, float] = {}  # when each group's figures were last given

    def get(
        self,
        key: str,
        figures: Sequence[object],
        steps: Sequence[Step],
        now: float,
    ) -> tuple:
        """The figures to show for group `key`: the new ones when one of them moved by its
        step (the recent mean) or by two steps (this tick), or the group is due; else the
        ones on screen."""
        new = tuple(figures)
        recent = self._recent.setdefault(key, [])
        if recent and self._last_at.get(key) == now:
            recent[-1] = new  # the same tick drawn again (a resize, a pane switch): one sample
        else:
            recent.append(new)
            del recent[: -self.smooth]
        self._last_at[key] = now
        held = self._held.get(key)
        if held is not None:
            old, at = held
            fresh = 0 <= now - at < self.max_hold_s and len(old) == len(new)
            if fresh and len({len(r) for r in recent}) == 1:
                means = [_mean([r[i] for r in recent]) for i in range(len(new))]
                moved = any(
                    s.moved(a, m) or s.moved(a, b, factor=2.0)
                    for s, a, b, m in zip(steps, old, new, means, strict=True)
                )
                if not moved:
                    return old
        self._held[key] = (new, now)
        recent[:] = [new]  # the mean starts again from what is shown
        return new

    def forget(self) -> None:
        """Repaint everything with the next figures (a new GPU selected, a resize)."""
        self._held.clear()
        self._recent.clear()
        self._last_at.clear()
