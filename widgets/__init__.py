"""Reusable renderers and widgets that know nothing of NVML: plain numbers in, cells out."""

from .diff_line import DiffLine, changed_spans
from .diff_text import DiffText
from .glyphs import history, stacked_bar
from .history_line import HistoryLine
from .memory_bar import MemoryBar

__all__ = [
    "DiffLine",
    "DiffText",
    "HistoryLine",
    "MemoryBar",
    "changed_spans",
    "history",
    "stacked_bar",
]
