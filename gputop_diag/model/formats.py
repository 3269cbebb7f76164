"""How figures read on every surface (text, panes, report): bytes, percentages, durations.

One definition each; a surface chooses the form, never its own copy of the arithmetic."""

from __future__ import annotations

from . import GIB, MIB


def gib(b: float | None, none: str = "n/a") -> str:
    """Bytes as GiB with one decimal, no unit (a column headed "GiB"): 12.3."""
    return none if b is None else f"{b / GIB:.1f}"


def gib_unit(b: float | None, none: str = "n/a") -> str:
    """Bytes as GiB with its unit: 12.3 GiB."""
    return none if b is None else f"{b / GIB:.1f} GiB"


def gib_number(b: float | None) -> float | None:
    """Bytes as GiB rounded to one decimal, for a JSON document."""
    return None if b is None else round(b / GIB, 1)


def size(b: float | None, none: str = "n/a") -> str:
    """Bytes in the unit that reads best: 512 MiB below a GiB, 1.5 GiB from there."""
    if b is None:
        return none
    return f"{b / MIB:.0f} MiB" if b < GIB else f"{b / GIB:.1f} GiB"


def pct(v: float | None, unit: bool = True, none: str = "n/a") -> str:
    """A percentage, whole: 42 % (or 42 where the column says %)."""
    if v is None:
        return none
    return f"{v:.0f} %" if unit else f"{v:.0f}"


def span(s: float | None, none: str = "n/a") -> str:
    """A duration in the largest unit that fits: 1.5 h, 12 min, 40 s."""
    if s is None:
        return none
    s = float(s)
    if abs(s) >= 3600:
        return f"{s / 3600:.1f} h"
    if abs(s) >= 60:
        return f"{s / 60:.0f} min"
    return f"{s:.0f} s"


def clock(s: float | None, none: str = "?") -> str:
    """A duration as a clock reads, rounded to the second as the diagnosis rounds its "for 5 s":
    4:05, 1:02:03, 2d 3h."""
    if s is None:
        return none
    s = round(max(0, s))
    h, r = divmod(s, 3600)
    m, sec = divmod(r, 60)
    if h >= 24:
        return f"{h // 24}d {h % 24}h"
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def clip_words(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, cut only between words and marked `…`: a word
    is kept whole or left out, so an identifier is never cut in half (half a host name or a
    token matches no pattern of the sanitizer that reads it later)."""
    if len(text) <= limit:
        return text
    head = text[: max(0, limit - 1)]
    cut = max(head.rfind(" "), head.rfind("\t"))
    return (head[:cut].rstrip() if cut > 0 else "") + "…"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun, singular for one, thousands separated: "1 sample", "2 samples",
    "1,201 snapshots"."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"
