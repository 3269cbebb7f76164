"""The filter prompt (`f`, `\\`, F4): which GPUs and processes to show.

`gpu:0,2 user:alice pid:4242 train` — words without a `key:` match the command line, the user
or the pid. Enter applies, Esc leaves the filter as it was, an empty line clears it.

Under `--sanitize` the rows show pseudonyms, so what is typed is sanitized the same way before
it is compared (`sanitized_filter`): `user:alice` and `alice` find alice's processes (shown as
`user-…`), a pseudonym copied from the screen finds its rows, and the filter is kept and shown
only in that form (the tab strip, the table's title, the prompt when it opens again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from gputop_diag.tui.procs import FilterError, ProcessFilter, parse_filter

if TYPE_CHECKING:
    from gputop_diag.sanitize.sanitizer import Sanitizer

HINT = (
    "gpu:0,2  user:alice  pid:4242  or words of the command line.\n"
    "Enter applies, an empty line shows everything, Esc cancels."
)


def sanitized_filter(f: ProcessFilter, sanitizer: Sanitizer | None) -> ProcessFilter:
    """`f` as the rows under --sanitize are written: a user's name becomes the pseudonym of
    the USER column, each word of the text what the sanitizer makes of it (a seeded name its
    pseudonym; a pseudonym, a program's name, a number as they are). GPUs and pids are no one's
    identifiers: kept. Without a sanitizer, `f` itself."""
    if sanitizer is None or not (f.users or f.text):
        return f
    users = frozenset(u if sanitizer.is_pseudonym(u) else sanitizer.user(u) or u for u in f.users)
    text = " ".join(sanitizer.text(w) or w for w in f.text.split())
    return ProcessFilter(f.gpus, users, f.pids, text)


def shown_filter_text(view: Any) -> str:
    """What a pane says the filter is (`GPU 0 · user user-b7xa · "train"`): `view.filter`
    described, through the session's sanitizer under --sanitize (a filter given on the command
    line, `--user NAME`, is held as typed)."""
    text = view.filter.describe()
    sanitizer = getattr(view, "sanitizer", None)
    if sanitizer is None or not text:
        return text
    return sanitizer.text(text) or ""


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

    @property
    def sanitizer(self) -> Sanitizer | None:
        return getattr(self.app, "sanitizer", None)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        try:
            self.dismiss(sanitized_filter(parse_filter(event.value), self.sanitizer))
        except FilterError as e:
            said = str(e)  # it quotes what was typed
            if self.sanitizer is not None:  # what was typed stays on screen: as its pseudonyms
                said = self.sanitizer.text(said) or ""
                event.input.value = self.sanitizer.text(event.value) or ""
            hint = self.query_one("#filter-hint", Static)
            hint.update(f"{said}\n{HINT}")
            hint.add_class("-error")

    def action_cancel(self) -> None:
        self.dismiss(None)
