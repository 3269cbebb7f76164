"""The live terminal view (Textual). Imported only by the bare `gputop-diag` command."""

from .app import GpuTopApp, run_app

__all__ = ["GpuTopApp", "run_app"]
