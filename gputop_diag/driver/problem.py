"""One problem of the chain in words: `problem(key, pids, **facts)` fills the templates of
`wording.WORDING[key]` with the facts `judge.py` and `kernels.py` name."""

from __future__ import annotations

from .facts import Problem
from .wording import WORDING, When


def _missing(value: object) -> bool:
    return value is None or value == ""


def problem(key: str, pids: tuple[int, ...] = (), **facts: object) -> Problem:
    """The problem `key` of `WORDING`, its templates filled with `facts`."""
    w = WORDING[key]
    shown = {k: w.missing.get(k, "?") if _missing(v) else v for k, v in facts.items()}
    words = dict(shown)
    for name, part in w.parts.items():
        if isinstance(part, When):
            part = part.then if facts.get(part.fact) else part.otherwise
        words[name] = part.format(**shown)
    return Problem(
        w.layer,
        w.severity,
        w.text.format(**words),
        w.error_text.format(**words),
        w.next_step.format(**words),
        pids,
        w.code or key,
        w.brief.format(**words),
    )
