"""The live terminal view (Textual). Imported only by the bare `gputop-diag` command."""

from gputop_diag.tui.without_tls import import_asyncio_without_tls

import_asyncio_without_tls()  # before Textual loads asyncio: the live view has no use for TLS

from gputop_diag.tui.app import GpuTopApp, run_app  # noqa: E402
from gputop_diag.tui.messages import CollectorFailed, SnapshotReady  # noqa: E402

__all__ = ["CollectorFailed", "GpuTopApp", "SnapshotReady", "run_app"]
