"""The side panel: the current bottleneck in one word, its evidence, the checks, the alerts.

Three layouts: docked right in full (wide terminals); a strip of six lines below the pane
(under 100 columns); the strip expanded over the pane (`p` under 100 columns).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll

from ..diagnose import Diagnosis
from ..diagnose.render import confidence_text
from ..widgets import DiffText

SEVERITY_MARK = {"critical": "!! ", "warning": "!  ", "info": "i  "}
REFRESH_FIGURES_S = 30.0  # evidence figures move a little every tick; repaint them this often
MAX_ALERTS = 6


def _scope(d: Diagnosis) -> str:
    parts = []
    if d.scope_gpus:
        parts.append(f"GPUs {','.join(map(str, d.scope_gpus))}")
    if d.scope_job:
        parts.append(f"job {d.scope_job}")
    return "  ".join(parts)


def _confidence(d: Diagnosis) -> str:
    return f"{d.confidence:.0%} confident" if d.has_confidence else confidence_text(d)


def _alert_lines(d: Diagnosis, t: Text, limit: int) -> None:
    for a in d.alerts[:limit]:
        t.append(
            f"{SEVERITY_MARK.get(a.severity, '   ')}{a.text}\n",
            style="bold" if a.severity == "critical" else "",
        )


def render_full(d: Diagnosis | None) -> Text:
    """The whole panel: verdict, evidence, checks, alerts, and why the other classes lost."""
    t = Text()
    t.append("BOTTLENECK\n", style="dim")
    if d is None:
        t.append("waiting for the first samples…\n")
        return t
    for a in d.faults:
        t.append(f"FAULT  {a.text}\n", style="bold reverse")
    if d.faults:
        t.append("\n")
    t.append(f" {d.label.upper()} ", style="bold reverse")
    t.append(f"  {_confidence(d)}\n")
    if d.secondary:
        t.append(f"and also {d.secondary.replace('_', ' ').upper()}\n", style="bold")
    if d.candidate and d.candidate != d.primary:
        t.append(f"(turning to {d.candidate.replace('_', ' ')}?)\n", style="dim")
    if _scope(d):
        t.append(_scope(d) + "\n", style="dim")
    t.append("\nEVIDENCE\n", style="dim")
    for e in d.evidence[:3]:
        t.append(f"• {e.text}\n")
    if not d.evidence:
        t.append("• none yet\n")
    if d.missing_evidence:
        t.append(f"(not available: {'; '.join(d.missing_evidence)})\n", style="dim")
    t.append("\nNEXT CHECKS\n", style="dim")
    for k, c in enumerate(d.checks[:3], 1):
        t.append(f"{k}. {c}\n")
    t.append("\nALERTS\n", style="dim")
    if not d.alerts:
        t.append("none\n")
    _alert_lines(d, t, MAX_ALERTS)
    if len(d.alerts) > MAX_ALERTS:
        t.append(f"(+{len(d.alerts) - MAX_ALERTS} more)\n", style="dim")
    if d.ruled_out:
        t.append("\nWHY NOT\n", style="dim")
        for r in d.ruled_out:
            t.append(f"{r.cls.replace('_', ' ')}: ", style="bold")
            t.append(f"{r.evidence.text}\n")
    t.rstrip()
    return t


def render_strip(d: Diagnosis | None) -> Text:
    """Six lines, one fact each (clipped, never wrapped): the narrow layout."""
    t = Text()
    if d is None:
        t.append("BOTTLENECK: waiting for the first samples…")
        return t
    if d.faults:
        more = f" (+{len(d.faults) - 1} more, p)" if len(d.faults) > 1 else ""
        t.append(f"FAULT {d.faults[0].text}{more}\n", style="bold reverse")
    t.append(f" {d.label.upper()} ", style="bold reverse")
    also = f" + {d.secondary.replace('_', ' ')}" if d.secondary else ""
    t.append(f"{also} {_confidence(d)}  {_scope(d)}  (p: all)\n")
    for e in d.evidence[:3]:
        t.append(f"• {e.text}\n")
    if d.checks:
        t.append(f"next: {d.checks[0]}\n")
    if d.alerts:
        a = d.alerts[0]
        more = f"  (+{len(d.alerts) - 1} more, p)" if len(d.alerts) > 1 else ""
        t.append(
            f"{SEVERITY_MARK.get(a.severity, '   ')}{a.text}{more}",
            style="bold" if a.severity == "critical" else "",
        )
    else:
        t.append("alerts: none", style="dim")
    return t


class SidePanel(VerticalScroll):
    """Repaints at once when the verdict, the alerts or the layout change, else every 30 s:
    over SSH the bytes written are the cost, and a median moving by 1 % is not news."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.strip = False
        self._shown: tuple | None = None

    def compose(self) -> ComposeResult:
        yield DiffText(render_full(None), id="side-text")

    def show(self, d: Diagnosis | None, strip: bool) -> None:
        key = (
            None
            if d is None
            else (
                d.primary,
                d.candidate,
                round(d.confidence, 1),
                tuple(a.text for a in d.alerts),
                d.missing_evidence,
                d.secondary,
            ),
            strip,
        )
        now = d.timestamp if d is not None else 0.0
        if self._shown and self._shown[0] == key and now - self._shown[1] < REFRESH_FIGURES_S:
            return
        self._shown = (key, now)
        self.strip = strip
        self.set_class(strip, "-strip")
        text = self.query_one("#side-text", DiffText)
        text.wrap = not strip  # the strip clips each line; the full panel wraps
        text.update(render_strip(d) if strip else render_full(d))
        severities = {a.severity for a in (d.alerts if d else ())}
        self.set_class("critical" in severities, "-critical")
        self.set_class("warning" in severities and "critical" not in severities, "-warning")
