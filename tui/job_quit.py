"""Quitting while a started job runs (`gputop-diag watch -- CMD`).

`q` asks first: y stops the job (SIGTERM to its process group, SIGKILL after a grace period)
and quits with its exit status; d leaves it running on purpose (it has its own session and
writes to its log file) and quits, and stderr then says so with its pid and log; n or Esc
stays (`q` again keeps the question). While the job is being stopped (in a worker thread: a job
that ignores SIGTERM keeps it for the grace period) the view says so and keeps drawing.

Ctrl-C (`interrupt`) stops the job as a shell stops the one in its foreground: SIGINT to its
process group, SIGTERM the second time, SIGKILL the third; the view keeps drawing and quits with
the job's exit status once it has ended. A terminal that closes (`hung_up`) leaves the job
running and writes a line saying so in its log. The job is acted on through the app's control
seam (`monitor/control.py`, `JobControl`), never from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

if TYPE_CHECKING:
    from textual.timer import Timer

    from gputop_diag.monitor.control import JobControl

STOP, DETACH = "stop", "detach"


def question(label: str, log_path: str | None) -> str:
    where = f"\nIts output goes on to {log_path}." if log_path else ""
    return (
        f"The job is still running: {label[:60]}{where}\n\n"
        "  y  stop the job and quit\n"
        "  d  leave it running and quit\n"
        "  n  stay (also Esc)"
    )


def interrupt_text(sent: str, pid: int, following: str | None) -> str:
    """What the view says after a Ctrl-C passed on to the job."""
    then = f"; Ctrl-C again sends {following}" if following else ""
    return f"{sent} sent to the job (pid {pid}); the view quits when it has ended{then}"


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
        Binding("d", "choose('detach')", "leave it running"),
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
    """`q` and Ctrl-C for an app that watches a job: quit at once unless a job this view started
    still runs; then ask (`q`) or pass the Ctrl-C on to it (`interrupt`)."""

    ENDED_POLL_S = 0.1  # after a Ctrl-C, how often the view looks whether the job has ended

    def __init__(self, app: App, job: JobControl | None, sanitize: bool) -> None:
        self.app = app
        self.job = job
        self.sanitize = sanitize
        self._waiting: Timer | None = None

    def _ours_running(self) -> bool:
        return self.job is not None and self.job.ours_running()

    def _exit_now(self) -> None:
        """Quit: with a started job's exit status once it has ended."""
        self.app.exit(return_code=self.job.exit_code() if self.job is not None else 0)

    def quit(self) -> None:
        app = self.app
        if not self._ours_running():
            self._exit_now()
            return
        if isinstance(app.screen, (StoppingJobScreen, QuitJobScreen)):
            return  # being stopped (quits when done), or asked already: the question stays
        app.push_screen(QuitJobScreen(self._label(), self._log()), self._answer)

    def interrupt(self) -> None:
        """Ctrl-C: passed on to a started job that still runs (`JobControl.interrupt`), the
        view quitting with its exit status once it has ended; otherwise quit at once."""
        if not self._ours_running():
            self._exit_now()
            return
        sent = self.job.interrupt()
        if sent is None:  # ended meanwhile
            self._exit_now()
            return
        if isinstance(self.app.screen, QuitJobScreen):
            self.app.pop_screen()  # answered by the Ctrl-C
        name, pid, following = sent
        self.app.notify(interrupt_text(name, pid, following), severity="warning")
        if self._waiting is None:
            self._waiting = self.app.set_interval(self.ENDED_POLL_S, self._ended_yet)

    def _ended_yet(self) -> None:
        if self.job.alive():
            return
        if self._waiting is not None:
            self._waiting.stop()
        self._exit_now()

    def hung_up(self) -> None:
        """The terminal closed: a started job that runs goes on (its own session); its log
        says that the watcher left. Safe from a signal handler or another thread."""
        if self.job is not None:
            self.job.hung_up()

    def _label(self) -> str:
        return "the job" if self.sanitize else self.job.label

    def _log(self) -> str | None:
        """The log's path as the view shows it: under --sanitize its pseudonym."""
        path = self.job.log_path
        if path is None:
            return None
        sanitizer = getattr(self.app, "sanitizer", None)
        if self.sanitize:
            return sanitizer.path(path) if sanitizer is not None else None
        return path

    def _answer(self, what: str | None) -> None:
        if what == STOP:
            # a job that ignores SIGTERM holds stop() for the grace period: not on this thread
            self.app.push_screen(StoppingJobScreen(self.job.stop_grace_s))
            self.app.run_worker(self._stop, thread=True, group="stop-job", exit_on_error=False)
        elif what == DETACH:
            self.job.detach()
            self.app.exit(return_code=0)

    def _stop(self) -> None:
        code = self.job.stop()
        self.app.call_from_thread(self.app.exit, return_code=code or 0)
