"""The filter prompt (`f`, `\\`, F4): which GPUs and processes to show.

`gpu:0,2 user:alice pid:4242 train` — words without a `key:` match the command line, the user
or the pid. Enter applies, Esc leaves the filter as it was, an empty line clears it.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from .procs import FilterError, ProcessFilter, parse_filter

HINT = (
    "gpu:0,2  user:alice  pid:4242  or words of the command line.\n"
    "Enter applies, an empty line shows everything, Esc cancels."
)


class FilterScreen(ModalScreen[ProcessFilter | None]):
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, current: ProcessFilter) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="filter-box"):
            yield Static("Filter the GPUs and processes shown", classes="pane-title", markup=False)
            yield Input(value=self.current.spec(), placeholder="gpu:0 user:alice train.py")
            yield Static(HINT, id="filter-hint", markup=False)

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(parse_filter(event.value))
        except FilterError as e:
            hint = self.query_one("#filter-hint", Static)
            hint.update(f"{e}\n{HINT}")
            hint.add_class("-error")

    def action_cancel(self) -> None:
        self.dismiss(None)
