"""What one tick hands the screen: the view model (`Update`) and the `Feeder` that makes it,
both in `monitor/view.py` (outside the view: the view reads no machine). Kept importable here
for the modules that name them by this path."""

from __future__ import annotations

from gputop_diag.monitor.view import Feeder, Update

__all__ = ["Feeder", "Update"]
