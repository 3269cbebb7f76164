"""The screens a process table row opens: the process's details (Enter) and the confirmation
before a signal (`T`, `K`, `I`), as nvitop's process screen and htop's kill menu do.

Both draw text that `process_actions.py` builds; they know nothing of the machine.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

from gputop_diag.tui.keybar import KeyBar
from gputop_diag.widgets import ASCII_CLASS, DiffText

REFRESH_S = 1.0  # the details follow the ticks: a process that ends says so


class ProcessDetailScreen(ModalScreen):
    """A process's details; `describe(width)` builds its text (called again every second and
    at a resize). Esc, q or Enter closes it."""

    BINDINGS = [Binding("escape,q,enter", "dismiss", "close", key_display="Esc")]

    DEFAULT_CSS = """
    ProcessDetailScreen {
        align: center middle;
        & > #process-box {
            width: 100%;
            height: 100%;
            padding: 0 1;
            background: $surface;
        }
    }
    """

    def __init__(self, describe: Callable[[int], Text]) -> None:
        super().__init__()
        self.describe = describe

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="process-box"):
            yield DiffText(id="process-detail", wrap=False)
        yield KeyBar(id="process-footer")  # "Esc close": the way back, on every size

    def on_mount(self) -> None:
        self.redraw()
        self.set_interval(REFRESH_S, self.redraw, name="process-detail")

    def on_resize(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        width = max(20, self.app.size.width - 4)
        self.query_one("#process-detail", DiffText).update(self.describe(width))

    @property
    def text(self) -> str:
        return self.query_one("#process-detail", DiffText).plain


class SignalScreen(ModalScreen[bool]):
    """ "Send SIGTERM to pid 41200 (python train.py …)? y sends, any other key cancels"; or,
    when it may not be sent, why not (any key closes). Dismissed with True to send."""

    DEFAULT_CSS = """
    SignalScreen {
        align: center middle;
        & > #signal-box {
            width: 90%;
            max-width: 100;
            height: auto;
            padding: 0 1;
            border: heavy $warning;
            background: $surface;
        }
    }
    SignalScreen > #signal-box.-ascii-border {
        border: ascii $warning;  /* --low-bandwidth: ASCII only */
    }
    """

    def __init__(self, text: Text, allowed: bool) -> None:
        super().__init__()
        self.question = text
        self.allowed = allowed

    def compose(self) -> ComposeResult:
        box = VerticalScroll(id="signal-box")
        box.set_class(self.app.has_class(ASCII_CLASS), "-ascii-border")
        with box:
            yield DiffText(self.question, id="signal-text")

    @property
    def text(self) -> str:
        return self.query_one("#signal-text", DiffText).plain

    def on_key(self, event: events.Key) -> None:
        # The one place a key is read raw: `y` sends, *any* other key cancels (htop's and
        # nvitop's confirmation), which declared bindings cannot say.
        event.stop()
        event.prevent_default()
        self.dismiss(self.allowed and event.key == "y")
