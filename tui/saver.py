"""The live view's `s` (the sanitized report, built in a worker thread) and `S` (the last
snapshot as JSON), and the toast that says where it went. What they write and where is
`report/live.py`'s (`LiveSaves`): this module writes no file itself. Under `--sanitize` the
toast is on the screen too: a directory it names (a home directory names its user, a save
directory a project) is the session's pseudonym, the file's own name (a time stamp) as it is."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.css.query import NoMatches
from textual.timer import Timer

from gputop_diag.monitor.core import Monitor, TickStuck
from gputop_diag.monitor.view import Sources, Update
from gputop_diag.tui.messages import ReportWritten

if TYPE_CHECKING:  # the report's modules load with the first `s` or `S`, not with the view
    from gputop_diag.recording.store import Recording
    from gputop_diag.report.live import LiveSaves
    from gputop_diag.report.saving import Saved

SAVED_SHOWN_S = 30.0  # the toast says the full path; the header keeps the name this long
TOAST_CHROME = 4  # columns of a toast that hold no text: its left border, its padding, one spare
TOO_WIDE = "(the name above is wider than this screen: it is the newest file in that directory)"


def path_lines(path: str, width: int) -> list[str]:
    """`path` as lines of at most `width` columns, broken only after a `/`, the file name on a
    line of its own whenever the path needs more than one (a person copies the name whole). A
    name wider than `width` is still one line: the toast folds it, and `_said` says where it
    is."""
    if len(path) <= width:
        return [path]
    directory, name = path[: path.rfind("/") + 1], path[path.rfind("/") + 1 :]
    lines: list[str] = []
    line = ""
    for part in directory.split("/")[:-1]:
        piece = part + "/"
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = ""
        line += piece  # a single directory wider than `width` stays one piece too
    if line:
        lines.append(line)
    return [*lines, name]


@dataclass
class Saver:
    """Saves for one app: `save_dir` (`--save-dir`; None: the state directory, then `/tmp`, as
    `report.saving.save_dirs` orders them), the session's `key` under --sanitize; `last_saved`
    is the path the header shows."""

    app: App
    sources: Sources | None
    replay: Recording | None
    key: bytes | None
    save_dir: str | None = None
    on_saved: Callable[[], None] = lambda: None  # the header shows `last_saved`
    last_saved: str | None = None
    _forget_timer: Timer | None = field(default=None, init=False, repr=False)

    def _saves(self) -> LiveSaves:
        """What writes the files (the key as it is now: a node of the fleet sets its own)."""
        from gputop_diag.report.live import LiveSaves

        return LiveSaves(self.sources, self.replay, self.key, self.save_dir)

    def save_report(self, latest: Update | None, monitor: Monitor) -> None:
        """`s`: the sanitized report of what the view holds, written in a worker thread."""
        if latest is None:
            self.app.notify("nothing sampled yet", severity="warning")
            return
        self.app.notify("writing the sanitized report…", timeout=3)
        config = self._model_config()  # read here: the worker thread queries no widget
        self.app.run_worker(
            lambda: self._write_report(monitor, config),
            thread=True,
            exit_on_error=False,
            group="report",
            name="report",
        )

    def _model_config(self) -> Any:
        """The Memory pane's model config (`--model-config`, or found from the job's command
        line), for the report's memory plan."""
        from gputop_diag.tui.panes.memory import MemoryPane

        try:
            return self.app.query_one(MemoryPane).model_config
        except NoMatches:
            return None

    def _write_report(self, monitor: Monitor, config: Any = None) -> None:
        try:
            saved, left_out = self._saves().report(monitor, config)
        except TickStuck as e:
            self.app.post_message(ReportWritten(None, str(e)))
            return
        except Exception as e:  # noqa: BLE001 - said in a toast, never a traceback
            self.app.post_message(ReportWritten(None, f"{type(e).__name__}: {e}"))
            return
        self.app.post_message(ReportWritten(saved, None, left_out))

    def _shown(self, text: str) -> str:
        """`text` (a message naming directories) as the screen may show it."""
        return self._saves().shown(text)

    def report_written(self, message: ReportWritten) -> None:
        saved = message.saved
        if saved is None:
            error = self._shown(message.error or "")
            self.app.notify(f"could not build the report: {error}", severity="error", markup=False)
            return
        left = ", ".join(x["section"] for x in message.left_out)
        note = f"left out as not safe to share: {left}\n" if left else ""
        self._said("sanitized report", saved, f"{note}read it once before you share it")

    def save_snapshot(self, latest: Update | None) -> None:
        """`S`: the last snapshot as JSON, with the Xid history the Xid pane shows."""
        if latest is None:
            self.app.notify("nothing sampled yet", severity="warning")
            return
        from gputop_diag.report.live import NotSafe

        try:
            saved = self._saves().snapshot(latest)
        except NotSafe as e:
            self.app.notify(
                f"snapshot not written: it could not be sanitized with confidence ({e} left)",
                severity="error",
                timeout=15,
            )
            return
        self._said("snapshot", saved)

    def _forget_later(self) -> None:
        """The header names the last file for `SAVED_SHOWN_S`, then gives its room back."""
        if self._forget_timer is not None:
            self._forget_timer.stop()
        self._forget_timer = self.app.set_timer(SAVED_SHOWN_S, self._forget)

    def _forget(self) -> None:
        self._forget_timer = None
        self.last_saved = None
        self.on_saved()

    def _where(self, path: str) -> str:
        """Where a file went, as the toast names it: absolute, the home directory as `~` (a
        path a shell reads back, short enough for a line of 80 columns)."""
        where = self._saves().shown_path(path)
        home = os.path.expanduser("~")
        if self.key is None and home not in ("", "/", "~") and where.startswith(home + "/"):
            return "~" + where[len(home) :]
        return where

    def _said(self, what: str, saved: Saved, note: str = "") -> None:
        """A toast saying where `what` went (and where it could not go), or why nowhere. The
        path is a line of its own, never split (a person copies it); the text is never markup
        (a directory may hold `[`)."""
        notify = functools.partial(self.app.notify, markup=False)
        problems = [self._shown(p) for p in saved.problems]
        try:
            if saved.path is None:
                notify(
                    f"could not write the {what} anywhere: " + "; ".join(problems),
                    severity="error",
                    timeout=15,
                )
                return
            self.last_saved = saved.path
            self._forget_later()
            width = max(self.app.size.width - TOAST_CHROME, 20)
            lines = path_lines(self._where(saved.path), width)
            if len(lines[-1]) > width:
                lines.append(TOO_WIDE)  # the toast folds the name: it says where it is
            also = "".join(f"\nand {os.path.basename(p)}" for p in saved.also)
            said = f"{what} written to\n" + "\n".join(lines) + also
            if problems:
                notify(
                    f"{said}\n(not to {'; '.join(problems)})" + (f"\n{note}" if note else ""),
                    severity="warning",
                    timeout=15,
                )
            else:
                notify(said + (f"\n{note}" if note else ""), timeout=10)
            self.on_saved()
        except NoMatches:  # written while the app closes
            pass
