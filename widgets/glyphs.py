"""Text renderers for bars and histories: fixed scales, plain-glyph fallback for slow links."""

from __future__ import annotations

from collections.abc import Sequence

BLOCKS = " ▁▂▃▄▅▆▇█"
PLAIN = " .:-=+*#%@"


def history(
    values: Sequence[float | None], width: int, plain: bool = False, top: float = 100.0
) -> str:
    """The last `width` values on a fixed 0..top scale (never autoscaled); gaps as spaces."""
    glyphs = PLAIN if plain else BLOCKS
    vals = list(values)[-width:]
    out = []
    for v in vals:
        if v is None:
            out.append(" ")
            continue
        k = round(max(0.0, min(1.0, v / top)) * (len(glyphs) - 1))
        out.append(glyphs[max(1, k)] if v > 0 else glyphs[1] if not plain else ".")
    return " " * (width - len(out)) + "".join(out)


def stacked_bar(parts: Sequence[tuple[float, str]], total: float, width: int) -> str:
    """A bar of `width` cells split by fractions of `total`; each part has its own glyph."""
    if total <= 0:
        return "?" * width
    cells = []
    used = 0
    for amount, glyph in parts:
        n = round(width * max(0.0, amount) / total)
        n = min(n, width - used)
        cells.append(glyph * n)
        used += n
    return "".join(cells) + " " * (width - used)
