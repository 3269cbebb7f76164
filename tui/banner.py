"""The banner: what failed (a missing driver, a lost GPU, a collector), why, and what to do."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from gputop_diag.model import CollectorError
from gputop_diag.tui.panes.base import hang_text
from gputop_diag.widgets import DiffText

BANNER_MAX_ERRORS = 3


class Banner(DiffText):
    """Hidden while everything works. Severity as a class: `-critical` when NVML (the driver
    or a GPU) is involved or sampling itself failed, `-warning` for the other sources."""

    _shown: tuple | None = None
    _drawn: tuple | None = None  # what the banner shows now, and at which width

    def on_resize(self) -> None:
        if self._shown is not None:
            self._drawn = None
            self.show(*self._shown)

    def show(self, errors: Sequence[CollectorError], failure: tuple[str, str] | None) -> None:
        self._shown = (errors, failure)
        # each tick repeats the last one's errors (a Slurm out of reach says so for a minute):
        # the same errors at the same width are the same banner, wrapped once
        drawn = (tuple(errors), failure, self.size.width or self.app.size.width - 2)
        if drawn == self._drawn:
            return
        self._drawn = drawn
        lines = [failure] if failure is not None else []
        for e in errors:
            where = ""
            if e.gpu_index is not None and f"GPU {e.gpu_index}" not in e.message:
                where = f"GPU {e.gpu_index}: "
            lines.append((f"{where}{e.message}", e.next_step))
        if not lines:
            self.display = False
            return
        shown = lines[:BANNER_MAX_ERRORS]
        text = "\n".join(f"! {what}\n  next: {step}" for what, step in shown)
        if len(lines) > len(shown):
            text += f"\n  (+{len(lines) - len(shown)} more: S writes them all to the snapshot)"
        critical = failure is not None or any(e.source == "nvml" for e in errors)
        self.set_class(critical, "-critical")
        self.set_class(not critical, "-warning")
        # wrapped here, continuation lines under the text (after `! ` and `next: `)
        width = self.size.width or self.app.size.width - 2
        self.update(hang_text(Text(text), width))
        self.display = True
