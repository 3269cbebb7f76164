"""Pane 6, Job: the job being watched. Hidden (and key 6 inert) until a job is set."""

from __future__ import annotations

from textual.app import ComposeResult

from ...widgets import DiffText
from ..feed import Update
from .base import Pane, View


class JobPane(Pane):
    def compose(self) -> ComposeResult:
        yield DiffText(id="job-text")

    def show(self, u: Update, view: View) -> None:
        job = getattr(self.app, "job", None)
        self.query_one("#job-text", DiffText).update(f"watching {job}" if job else "")
