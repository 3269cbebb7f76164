"""The header line: host, driver, CUDA, GPU count, interval, paused — fitted to the width.

No clock: a clock repaints every second, and over SSH that is the cost that matters.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..widgets import DiffLine


@dataclass(frozen=True)
class HeaderFacts:
    host: str
    driver: str | None = None
    cuda: str | None = None
    gpu_count: int | None = None  # None before the first sample
    selected_gpu: int | None = None
    interval: float = 1.0
    paused: bool = False
    scenario: str | None = None  # the simulator's, for --demo
    saved: str | None = None  # the last snapshot written


def header_runs(f: HeaderFacts, width: int) -> list[tuple[str, str]]:
    """The pieces, long forms first; shortened, then dropped by priority until they fit."""
    n = f.gpu_count
    # (priority: lower stays longer, long form, short form, component)
    pieces: list[tuple[int, str, str, str]] = [(6, " gputop-diag ", "", "header--title")]
    pieces.append((0, f" {f.host}", f" {f.host}", "header--host"))
    if f.scenario:
        pieces.append((4, f"  demo: {f.scenario}", "  demo", "header--demo"))
    if n is not None:
        pieces.append((1, f"  driver {f.driver or 'n/a'}", f"  drv {f.driver or 'n/a'}", ""))
        pieces.append((1, f"  CUDA ≤ {f.cuda or 'n/a'}", f"  CUDA≤{f.cuda or 'n/a'}", ""))
        pieces.append((1, f"  {n} GPU{'s' if n != 1 else ''}", f"  {n} GPU", ""))
        if n and f.selected_gpu is not None:
            pieces.append((3, f"  ▶GPU{f.selected_gpu}", f"  ▶GPU{f.selected_gpu}", ""))
    pieces.append((2, f"  every {f.interval:g} s", f"  {f.interval:g} s", ""))
    if f.paused:
        pieces.append((0, "  ", "  ", ""))
        pieces.append((0, " PAUSED ", " PAUSED ", "header--paused"))
    if f.saved:
        pieces.append((5, f"  saved {f.saved}", "", "header--saved"))

    def length(items) -> int:
        return sum(len(text) for _, text, _ in items)

    chosen = [(p, long, comp) for p, long, _, comp in pieces]
    if length(chosen) > width:
        chosen = [(p, short or long, comp) for p, long, short, comp in pieces]
    while length(chosen) > width and any(p > 0 for p, _, _ in chosen):
        worst = max(p for p, _, _ in chosen)
        k = max(i for i, (p, _, _) in enumerate(chosen) if p == worst)
        del chosen[k]
    return [(text, comp) for _, text, comp in chosen if text]


class HeaderBar(DiffLine):
    COMPONENT_CLASSES = {
        "header--title",
        "header--host",
        "header--demo",
        "header--paused",
        "header--saved",
    }
    DEFAULT_CSS = """
    HeaderBar > .header--title { text-style: bold reverse; }
    HeaderBar > .header--host { text-style: bold; }
    HeaderBar > .header--demo { text-style: bold; }
    HeaderBar > .header--paused { text-style: bold reverse; }
    HeaderBar > .header--saved { color: $text-muted; }
    """

    def show(self, facts: HeaderFacts) -> None:
        self._facts = facts
        self.set_runs(header_runs(facts, self.size.width or self.app.size.width))

    def on_resize(self) -> None:
        facts = getattr(self, "_facts", None)
        if facts is not None:
            self.show(facts)
