"""The `?` help screen: every key (read from the app's bindings), and what the view means."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

ABOUT = """
The side panel names the current bottleneck (capacity, bandwidth, compute, input pipeline,
synchronization, communication, scheduler — or idle, balanced, insufficient data), the
figures that decided it, the checks to run next, the active alerts and why the other
classes were ruled out. Under 100 columns it is a strip below the pane; p shows all of it.

GPU "busy time" is NVML's utilization: the share of time any kernel ran, not SM use. The
histories use a fixed 0-100 % scale, so a line's height means the same on every row.

Press escape or ? to close."""

REPLAY_ABOUT = """
REPLAY: a recording (gputop-diag record) played at its recorded pace times the
speed in the header, through the same diagnosis as a live run; nothing is
sampled. > and < change the speed (0.25x to 16x), space pauses, . shows one more
tick; at the end the last frame stays.
"""


def keys_text(app) -> Text:
    t = Text("gputop-diag — what limits this GPU workload right now\n\n", style="bold")
    t.append("Keys\n", style="bold")
    for b in app.BINDINGS:
        if not isinstance(b, Binding) or app.check_action(*_action(b.action)) is False:
            continue
        keys = ", ".join(
            app.get_key_display(Binding(k, b.action, key_display=b.key_display))
            for k in b.key.split(",")[:1]
        )
        t.append(f"  {keys:<10}", style="bold")
        t.append(f" {b.tooltip or b.description}\n")
    if getattr(app, "replay", None) is not None:
        t.append(REPLAY_ABOUT)
    t.append(ABOUT)
    return t


def _action(action: str) -> tuple[str, tuple]:
    name, _, rest = action.partition("(")
    params = tuple(int(p) for p in rest.rstrip(")").split(",") if p.strip().lstrip("-").isdigit())
    return name, params


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(keys_text(self.app), markup=False)
