"""The side panel: the current bottleneck in one word, its evidence, the checks, the alerts."""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..diagnose import Diagnosis
from .panes.base import set_text

SEVERITY_MARK = {"critical": "!!", "warning": "! ", "info": "i "}


def render_diagnosis(d: Diagnosis | None, narrow: bool = False) -> Text:
    t = Text()
    if d is None:
        t.append("BOTTLENECK\n", style="dim")
        t.append("waiting for samples…\n")
        return t
    t.append("BOTTLENECK\n", style="dim")
    t.append(d.label.upper(), style="bold reverse")
    t.append(" ")
    t.append(f" {d.confidence:.0%} confident")
    if d.candidate and d.candidate != d.primary:
        t.append(f"\n(turning to {d.candidate.replace('_', ' ')}?)", style="dim")
    t.append("\n")
    if d.scope_gpus:
        t.append(
            f"GPUs {','.join(map(str, d.scope_gpus))}"
            + (f"  job {d.scope_job}" if d.scope_job else "")
            + "\n",
            style="dim",
        )
    t.append("\nEVIDENCE\n", style="dim")
    for e in d.evidence[:3]:
        t.append(f"• {e.text}\n")
    if d.missing_evidence:
        t.append(f"(not available: {'; '.join(d.missing_evidence)})\n", style="dim")
    t.append("\nNEXT CHECKS\n", style="dim")
    for k, c in enumerate(d.checks[: 2 if narrow else 3], 1):
        t.append(f"{k}. {c}\n")
    t.append("\nALERTS\n", style="dim")
    if not d.alerts:
        t.append("none\n")
    for a in d.alerts[:6]:
        t.append(
            f"{SEVERITY_MARK.get(a.severity, '  ')}{a.text}\n",
            style="bold" if a.severity == "critical" else "",
        )
    if not narrow and d.ruled_out:
        t.append("\nWHY NOT\n", style="dim")
        for r in d.ruled_out[:6]:
            t.append(f"{r.cls.replace('_', ' ')}: ", style="bold")
            t.append(f"{r.evidence.text}\n")
    return t


REFRESH_FIGURES_S = 30.0  # evidence figures move a little every tick; repaint them this often


def _verdict_key(d: Diagnosis | None, narrow: bool) -> tuple:
    if d is None:
        return (None,)
    return (
        d.primary,
        d.candidate,
        round(d.confidence, 1),
        tuple(a.text for a in d.alerts),
        d.missing_evidence,
        narrow,
    )


class SidePanel(VerticalScroll):
    """Repaints at once when the verdict or the alerts change, else every 30 s: over SSH the
    bytes written are the cost, and a median moving by 1 % is not news."""

    def compose(self):
        yield Static(render_diagnosis(None), id="side-text", markup=False)

    def show(self, d: Diagnosis | None, narrow: bool) -> None:
        key = _verdict_key(d, narrow)
        now = d.timestamp if d is not None else 0.0
        last_key, last_t = getattr(self, "_shown", (None, None))
        if key == last_key and last_t is not None and now - last_t < REFRESH_FIGURES_S:
            return
        self._shown = (key, now)
        set_text(self.query_one("#side-text", Static), render_diagnosis(d, narrow))
        for sev in ("critical", "warning"):
            self.set_class(any(a.severity == sev for a in (d.alerts if d else ())), f"-{sev}")
