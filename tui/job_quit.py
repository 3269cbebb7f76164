"""Quitting while a started job runs (`gputop-diag watch -- CMD`): ask first.

y stops the job (SIGTERM to its process group, SIGKILL after a grace period) and quits; d — or
q again — leaves it running (it has its own session and writes to its log file) and quits; n or
Esc stays. While the job is being stopped (in a worker thread: a job that ignores SIGTERM keeps
it for the grace period) the view says so and keeps drawing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

if TYPE_CHECKING:
    from ..collect.job import JobWatch

STOP, DETACH = "stop", "detach"


def question(label: str, log_path: str | None) -> str:
    where = f"\nIts output goes on to {log_path}." if log_path else ""
    return (
        f"The job is still running: {label[:60]}{where}\n\n"
        "  y  stop the job and quit\n"
        "  d  leave it running and quit (also q)\n"
        "  n  stay (also Esc)"
    )


class QuitJobScreen(ModalScreen[str | None]):
    DEFAULT_CSS = """
    QuitJobScreen {
        align: center middle;
    }
    #quit-job-box {
        width: 64;
        max-width: 100%;
        height: auto;
        border: solid $warning;
        padding: 0 1;
        background: $surface;
    }
    """
    BINDINGS = [
        Binding("y", "choose('stop')", "stop the job"),
        Binding("d,q", "choose('detach')", "leave it running"),
        Binding("n,escape", "choose('')", "stay"),
    ]

    def __init__(self, label: str, log_path: str | None) -> None:
        super().__init__()
        self.label, self.log_path = label, log_path

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-job-box"):
            yield Static("Quit", classes="pane-title", markup=False)
            yield Static(question(self.label, self.log_path), id="quit-job-text", markup=False)

    def action_choose(self, what: str) -> None:
        self.dismiss(what or None)


def stopping_text(grace_s: float) -> str:
    return f"stopping the job (SIGTERM; SIGKILL in {grace_s:g} s)…"


class StoppingJobScreen(ModalScreen[None]):
    """Shown while the job is being stopped; no keys (the app quits when it has stopped)."""

    DEFAULT_CSS = QuitJobScreen.DEFAULT_CSS.replace("QuitJobScreen", "StoppingJobScreen")

    def __init__(self, grace_s: float) -> None:
        super().__init__()
        self.grace_s = grace_s

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-job-box"):
            yield Static("Quit", classes="pane-title", markup=False)
            yield Static(stopping_text(self.grace_s), id="quit-job-text", markup=False)


class JobQuit:
    """`q` for an app that watches a job: quit at once unless a job this view started still
    runs; then ask, and stop it (in a worker thread) or leave it running."""

    def __init__(self, app: App, watch: JobWatch | None, sanitize: bool) -> None:
        self.app = app
        self.watch = watch
        self.sanitize = sanitize

    def quit(self) -> None:
        app, w = self.app, self.watch
        if w is None or not w.started or w.detached or not w.running:
            if w is not None and w.started:
                w._reap()
                app.exit(return_code=w.exit_code or 0)
                return
            app.exit()
            return
        if isinstance(app.screen, StoppingJobScreen):  # being stopped: quits when done
            return
        if isinstance(app.screen, QuitJobScreen):  # asked already: a second quit leaves it
            self._answer(DETACH)
            return
        log = w.tail.path if w.tail is not None and not self.sanitize else None
        label = "the job" if self.sanitize else w.label
        app.push_screen(QuitJobScreen(label, log), self._answer)

    def _answer(self, what: str | None) -> None:
        w = self.watch
        if what == STOP:
            # a job that ignores SIGTERM holds stop() for the grace period: not on this thread
            self.app.push_screen(StoppingJobScreen(w.stop_grace_s))
            self.app.run_worker(self._stop, thread=True, group="stop-job", exit_on_error=False)
        elif what == DETACH:
            w.detach()
            self.app.exit(return_code=0)

    def _stop(self) -> None:
        code = self.watch.stop()
        self.app.call_from_thread(self.app.exit, return_code=code or 0)
