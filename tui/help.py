"""The `?` help screen: every key, and what the panes and the side panel mean."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP = """gputop-diag — what limits this GPU workload right now

Keys
  1-6          Memory, Utilization, Mapping, Xid, Driver, Job panes
  tab / S-tab  next / previous pane
  [ / ]        select the previous / next GPU
  space        pause or resume sampling
  r            sample now
  + / -        longer / shorter refresh interval
  s            write a snapshot JSON and show its path
  p            show or hide the bottleneck panel
  ?            this help;  q  quit

The side panel names the current bottleneck (capacity, bandwidth, compute, input pipeline,
synchronization, communication, scheduler — or idle, balanced, insufficient data), the
figures that decided it, why the other classes are ruled out, and the checks to run next.
GPU "busy time" is NVML's utilization: the share of time any kernel ran, not SM use.

Press escape or ? to close."""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(HELP, markup=False)
