"""The filter prompt (`f`, `\\`, F4): which GPUs and processes to show.

`gpu:0,2 user:alice pid:4242 job:31337 pod:NAME ctr:ID train` — words without a `key:` match
the command line, the user, the owner or the pid. Enter applies, Esc leaves the filter as it
was, an empty line clears it.

Under `--sanitize` the rows show pseudonyms, so what is typed is sanitized the same way before
it is compared (`sanitized_filter`): `user:alice` and `alice` find alice's processes (shown as
`user-…`), `job:424242` its job's (`job-…`), a pseudonym copied from the screen finds its rows,
and the filter is kept and shown only in that form (the tab strip, the table's title, the
prompt when it opens again). A container's id, whole or its start (`ctr:8e1f0d2c`), becomes
the container's pseudonym; the start of a pod's uid names nothing there: a pod is found by its
names, its whole uid or its pseudonym.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from gputop_diag.tui.process_owner import MIN_ID_PREFIX
from gputop_diag.tui.procs import FilterError, ProcessFilter, parse_filter

if TYPE_CHECKING:
    from gputop_diag.sanitize.sanitizer import Sanitizer

HINT = (
    "gpu:0,2  user:alice  pid:4242  job:31337  pod:NS/NAME  ctr:ID\n"
    "or words of the command line. Enter applies, an empty line shows everything, Esc cancels."
)


def sanitized_filter(f: ProcessFilter, sanitizer: Sanitizer | None) -> ProcessFilter:
    """`f` as the rows under --sanitize are written: a user's name becomes the pseudonym of
    the USER column, each word of the text what the sanitizer makes of it (a seeded name its
    pseudonym; a pseudonym, a program's name, a number as they are). GPUs and pids are no one's
    identifiers: kept. An owner's term as the sanitizer writes that field: a job id through
    `job`, a pod's or container's name, namespace or id as free text (a seeded name becomes
    its pseudonym, a whole id the pseudonym of its shape). Without a sanitizer, `f` itself."""
    if sanitizer is None or not (f.users or f.text or f.owned_by):
        return f
    short = sorted(c for c in f.containers if re.fullmatch(r"[0-9a-fA-F]{1,7}", c))
    if short:  # too short a start of an id to become the container's pseudonym
        raise FilterError(
            f"ctr: under --sanitize takes at least {MIN_ID_PREFIX} hex digits of a "
            f"container's id: {short[0]!r}"
        )

    def kept(value: str, rule) -> str:
        return value if sanitizer.is_pseudonym(value) else rule(value) or value

    def owner(value: str) -> str:  # NAMESPACE/NAME: each part as its field is written
        return "/".join(kept(part, sanitizer.text) if part else part for part in value.split("/"))

    def job(value: str) -> str:  # 424242.0: the job's number replaced, the step kept
        number, dot, step = value.partition(".")
        return kept(number, sanitizer.job) + dot + step

    return replace(
        f,
        users=frozenset(kept(u, sanitizer.user) for u in f.users),
        text=" ".join(sanitizer.text(w) or w for w in f.text.split()),
        jobs=frozenset(job(j) for j in f.jobs),
        pods=frozenset(owner(p) for p in f.pods),
        containers=frozenset(owner(c) for c in f.containers),
    )


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
            yield Input(value=self.current.spec(), placeholder="gpu:0 user:alice job:31337")
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
