"""How a comparison's figures and changes read, by the row's unit (one definition each; the
verdict and the table both use them)."""

from __future__ import annotations

from ..diagnose.measured_rules import secs
from ..model import formats


def value(v: float | None, unit: str) -> str:
    """1.20 s, 750 ms, 12.3 /s, 41 %, 43.8 GiB, 290 W, 1980 MHz."""
    if v is None:
        return "n/a"
    if unit == "s":
        return secs(v)
    if unit == "/s":
        return f"{v:,.3g}" if v < 1000 else f"{v:,.0f}"
    if unit == "%":
        return formats.pct(v)
    if unit == "bytes":
        return formats.size(v)
    return f"{v:,.0f} {unit}"


def change(delta: float, unit: str) -> str:
    """A change with its sign: +400 ms, −2.1 GiB, +54 points."""
    sign = "+" if delta > 0 else "\u2212" if delta < 0 else "\u00b1"
    size = abs(delta)
    if unit == "%":
        amount = f"{size:.1f}" if size < 1 else f"{size:.0f}"
        return f"{sign}{amount} point{'s' * (amount != '1')}"
    said = value(size, unit)
    if size and unit not in ("s", "bytes") and said.split()[0].strip("0.,") == "":
        said = f"{size:.2g} {unit}".replace(" /s", "")  # 0.4 W, not 0 W
    return sign + said


def percent(pct: float | None) -> str:
    """A relative change with its sign: +50 %, −33 %, +0.4 %."""
    if pct is None:
        return "n/a"
    sign = "+" if pct > 0 else "\u2212" if pct < 0 else "\u00b1"
    if abs(pct) < 0.1:
        return f"{sign}<0.1 %"
    if abs(pct) >= 1000:  # a part that was next to nothing: as a ratio
        return f"\u00d7{1 + pct / 100:.0f}"
    digits = 1 if abs(pct) < 10 else 0
    return f"{sign}{abs(pct):.{digits}f} %"


def class_words(name: str | None) -> str:
    return "n/a" if not name else name.replace("_", " ")


def share(v: float | None) -> str:
    """A share (0..1) as a whole percentage: 97 %."""
    return "n/a" if v is None else formats.pct(100 * v)
