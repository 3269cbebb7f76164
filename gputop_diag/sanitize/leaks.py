"""The final check, fail closed: what in finished output still looks like an identifier, an
original the table has replaced somewhere or a shape that must never be shared (`rules.py`,
`LEAK_SHAPES`). Callers leave out what does not pass, and say so with `leak_note`."""

from __future__ import annotations

from collections import Counter
from typing import Any

from . import rules as R
from .rules import CLASSES
from .table import PseudonymTable
from .work import ALLOWED_L, ALLOWED_R, boundary_re


def leaks(s: PseudonymTable, text: str) -> Counter[str]:
    """What in `text` still looks like an identifier, per class: an original `s` has replaced
    somewhere, or a shape that must never be shared. Empty: safe to share."""
    allowed = boundary_re(s.allowed, left=ALLOWED_L, right=ALLOWED_R)
    t = allowed.sub(" ", text) if allowed is not None else text
    found: Counter[str] = Counter()
    for cls, rx, quick in R.LEAK_SHAPES:
        if not quick.search(t):
            continue
        for m in rx.finditer(t):
            if R.shape_ok(cls, m.group(0), t[max(0, m.start() - 40) : m.start()]):
                found[cls] += 1
    exact, folded, cls_of, ours = s.originals()
    if ours is not None:  # our own pseudonyms hold letters that may spell a short name
        t = ours.sub(" ", t)
    for rx, hay, fold in ((exact, t, False), (folded, t, True)):
        if rx is not None:
            for m in rx.finditer(hay):
                found[cls_of[(m.group(0).lower() if fold else m.group(0), fold)]] += 1
    return found


def strings_of(doc: Any) -> list[str]:
    """Every string in a JSON document, keys included (numbers name no one)."""
    out: list[str] = []
    stack = [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            out.extend(k for k in v if isinstance(k, str))
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


def leak_note(found: Counter[str]) -> str:
    """Words for what a leak check found; never the leaked text itself."""
    return ", ".join(f"{n} × {CLASSES[c].label}" for c, n in found.items())
