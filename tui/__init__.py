"""The live terminal view (Textual). Imported only by the bare `gputop-diag` command."""

from .app import GpuTopApp, run_app
from .messages import CollectorFailed, SnapshotReady

__all__ = ["CollectorFailed", "GpuTopApp", "SnapshotReady", "run_app"]
