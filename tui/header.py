"""The header line: host, driver, CUDA, GPU count, interval, paused — fitted to the width.

A replay shows REPLAY, the file, the position in it, the speed, and END once it is over.

No clock: a clock repaints every second, and over SSH that is the cost that matters.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gputop_diag.monitor.view import first_host  # noqa: F401 - the host before the first tick
from gputop_diag.widgets import DiffLine


@dataclass(frozen=True)
class ReplayFacts:
    name: str  # the recording's file name
    position_s: float | None = None  # recorded seconds since its start, None before a frame
    total_s: float | None = None  # its length, once known
    speed: float = 1.0
    ended: bool = False


def clock_text(seconds: float) -> str:
    """`1:05`, `12:00`, `1:02:03`."""
    s = max(0, int(seconds))
    h, m, s = s // 3600, s // 60 % 60, s % 60
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def speed_text(speed: float) -> str:
    return f"{speed:g}x"


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
    replay: ReplayFacts | None = None  # set while playing a recording
    plain: bool = False  # --low-bandwidth: ASCII only


def header_runs(f: HeaderFacts, width: int) -> list[tuple[str, str]]:
    """The pieces, long forms first; shortened, then dropped by priority until they fit."""
    n = f.gpu_count
    # (priority: lower stays longer, long form, short form, component)
    pieces: list[tuple[int, str, str, str]] = [(6, " gputop-diag ", "", "header--title")]
    pieces.append((0, f" {f.host}", f" {f.host}", "header--host"))
    if f.scenario:
        pieces.append((4, f"  demo: {f.scenario}", "  demo", "header--demo"))
    r = f.replay
    if r is not None:  # before the driver facts: they give way first
        pieces.append((0, "  ", "  ", ""))
        pieces.append((0, " REPLAY ", " REPLAY ", "header--replay"))
        pieces.append((5, f" {r.name}", "", "header--file"))
        if r.position_s is not None:
            total = "" if r.total_s is None else f"/{clock_text(r.total_s)}"
            pieces.append((1, f"  {clock_text(r.position_s)}{total}", "", ""))
        pieces.append((0, f"  {speed_text(r.speed)}", f" {speed_text(r.speed)}", ""))
        if r.ended:
            pieces.append((0, "  ", "  ", ""))
            pieces.append((0, " END ", " END ", "header--paused"))
    le, mark = ("<=", ">") if f.plain else ("≤", "▶")
    if n is not None:
        pieces.append((1, f"  driver {f.driver or 'n/a'}", f"  drv {f.driver or 'n/a'}", ""))
        pieces.append((1, f"  CUDA {le} {f.cuda or 'n/a'}", f"  CUDA{le}{f.cuda or 'n/a'}", ""))
        pieces.append((1, f"  {n} GPU{'s' if n != 1 else ''}", f"  {n} GPU", ""))
        if n and f.selected_gpu is not None:
            pieces.append((3, f"  {mark}GPU{f.selected_gpu}", f"  {mark}GPU{f.selected_gpu}", ""))
    if r is None:
        pieces.append((2, f"  every {f.interval:g} s", f"  {f.interval:g} s", ""))
    if f.paused and not (r is not None and r.ended):
        pieces.append((0, "  ", "  ", ""))
        pieces.append((0, " PAUSED ", " PAUSED ", "header--paused"))
    if f.saved:
        # the first piece to give way: never the program's name for a file name
        pieces.append((7, f"  saved {os.path.basename(f.saved)}", "", "header--saved"))

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
        "header--replay",
        "header--file",
    }
    DEFAULT_CSS = """
    HeaderBar > .header--title { text-style: bold reverse; }
    HeaderBar > .header--host { text-style: bold; }
    HeaderBar > .header--demo { text-style: bold; }
    HeaderBar > .header--paused { text-style: bold reverse; }
    HeaderBar > .header--saved { color: $text-muted; }
    HeaderBar > .header--replay { text-style: bold reverse; }
    HeaderBar > .header--file { text-style: bold; }
    """

    def show(self, facts: HeaderFacts) -> None:
        self._facts = facts
        self.set_runs(header_runs(facts, self.size.width or self.app.size.width))

    def on_resize(self) -> None:
        facts = getattr(self, "_facts", None)
        if facts is not None:
            self.show(facts)
