"""The live terminal view (Textual). Imported only by the bare `gputop-diag` command."""

from gputop_diag.tui.app import GpuTopApp, run_app
from gputop_diag.tui.messages import CollectorFailed, SnapshotReady

__all__ = ["CollectorFailed", "GpuTopApp", "SnapshotReady", "run_app"]
