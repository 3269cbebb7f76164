"""Pane 5, Driver: the driver -> CUDA chain as far as the driver reports it."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult

from ...widgets import DiffText
from ..feed import Update
from .base import Pane, View


class DriverPane(Pane):
    def compose(self) -> ComposeResult:
        yield DiffText(id="driver-text")

    def show(self, u: Update, view: View) -> None:
        snap = u.snapshot
        s = snap.system
        t = Text()
        t.append("kernel driver → CUDA runtime → framework build → application kernel\n\n")
        t.append("driver version      ", style="dim")
        t.append(f"{s.driver_version or 'n/a'}\n", style="bold")
        t.append("NVML version        ", style="dim")
        t.append(f"{s.nvml_version or 'n/a'}\n", style="bold")
        t.append("driver's max CUDA   ", style="dim")
        t.append(f"{s.driver_max_cuda or 'n/a'}", style="bold")
        t.append("  the newest CUDA runtime this driver can run\n\n")
        if not snap.nvml_available:
            t.append(
                "NVML did not answer, so the chain stops at the kernel driver: see the banner "
                "for why and what to do.\n\n",
                style="bold",
            )
        t.append(
            "A job's CUDA runtime newer than the driver's max fails to initialise (\"CUDA "
            "driver version is insufficient\"); compare with torch.version.cuda in the job's "
            "environment. After a driver upgrade, reboot or reload the kernel module before "
            "testing. Debug from the host layer upward.",
            style="dim",
        )
        self.query_one("#driver-text", DiffText).update(t)
