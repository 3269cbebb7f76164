"""Pane 5, Driver: the driver -> CUDA chain as far as the driver reports it."""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..feed import Update
from .base import set_text


class DriverPane(VerticalScroll):
    def compose(self):
        yield Static(id="driver-text", markup=False)

    def show(self, u: Update, selected: int, plain: bool) -> None:
        s = u.snapshot.system
        t = Text()
        t.append(
            "kernel driver → CUDA runtime → framework build → application kernel\n\n", style="bold"
        )
        t.append(f"driver version      {s.driver_version or 'n/a'}\n")
        t.append(f"NVML version        {s.nvml_version or 'n/a'}\n")
        t.append(
            f"driver's max CUDA   {s.driver_max_cuda or 'n/a'}  (the upper bound for "
            "any CUDA runtime a job brings)\n\n"
        )
        t.append(
            "A runtime newer than this fails to initialise; compare it with "
            "torch.version.cuda in the job's environment. After a driver upgrade, reboot "
            "or reload the kernel module before testing.",
            style="dim",
        )
        set_text(self.query_one("#driver-text", Static), t)


class JobPane(VerticalScroll):
    def compose(self):
        yield Static("No job is being watched.", id="job-text", markup=False)

    def show(self, u: Update, selected: int, plain: bool) -> None:
        return
