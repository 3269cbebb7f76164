"""Text renderers for bars and histories: fixed scales, plain-glyph fallback for slow links."""

from __future__ import annotations

from collections.abc import Sequence

BLOCKS = " ▁▂▃▄▅▆▇█"
PLAIN = " .:-=+*#%@"


def level(v: float | None, plain: bool = False, top: float = 100.0) -> str:
    """One value as one cell on a fixed 0..top scale: a space for no figure, the lowest bar
    for zero (zero is a figure, not a gap)."""
    glyphs = PLAIN if plain else BLOCKS
    if v is None:
        return " "
    k = round(max(0.0, min(1.0, v / top)) * (len(glyphs) - 1))
    return glyphs[max(1, k)] if v > 0 else glyphs[1] if not plain else "."


def history(
    values: Sequence[float | None], width: int, plain: bool = False, top: float = 100.0
) -> str:
    """The last `width` values on a fixed 0..top scale (never autoscaled); gaps as spaces."""
    vals = list(values)[-width:]
    return " " * (width - len(vals)) + "".join(level(v, plain, top) for v in vals)


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


# --low-bandwidth: ASCII only. Typographic characters get their ASCII spelling; anything else
# outside ASCII becomes "?".
ASCII_SPELLING = str.maketrans(
    {
        "—": "-",
        "–": "-",
        "−": "-",
        "≈": "~",
        "≤": "<=",
        "≥": ">=",
        "×": "x",
        "•": "-",
        "·": ".",
        "…": "...",
        "→": "->",
        "←": "<-",
        "▶": ">",
        "▲": "^",
        "▼": "v",
        "‘": "'",
        "’": "'",
        "“": '"',
        "”": '"',
        "°": " ",
        "µ": "u",
        "\u00a0": " ",
    }
)


def to_ascii(text: str) -> str:
    """`text` in ASCII: typographic characters spelled out, anything else as `?`."""
    if text.isascii():
        return text
    out = text.translate(ASCII_SPELLING)
    return out if out.isascii() else "".join(ch if ch.isascii() else "?" for ch in out)


ASCII_CLASS = "-ascii"
"""A CSS class: DiffLine and DiffText inside a node that carries it draw ASCII only."""


def inside_ascii(node) -> bool:
    """`node` or one above it carries `ASCII_CLASS` (the app does under --low-bandwidth)."""
    return any(n.has_class(ASCII_CLASS) for n in node.ancestors_with_self)
