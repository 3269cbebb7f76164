"""Reusable renderers and widgets that know nothing of NVML: plain numbers in, cells out."""

from .cell_table import CellTable
from .cut_grid import CutGrid
from .diff_line import DiffLine, changed_spans
from .diff_text import DiffText
from .glyphs import ASCII_CLASS, BLOCKS, history, level, stacked_bar, to_ascii
from .history_line import HistoryLine
from .memory_bar import MemoryBar
from .parts_line import PartsLine
from .trace import Ruler, Trace, ruler_cells, sweep_cells

__all__ = [
    "ASCII_CLASS",
    "BLOCKS",
    "CellTable",
    "CutGrid",
    "DiffLine",
    "DiffText",
    "HistoryLine",
    "MemoryBar",
    "PartsLine",
    "Ruler",
    "Trace",
    "changed_spans",
    "history",
    "ruler_cells",
    "level",
    "stacked_bar",
    "sweep_cells",
    "to_ascii",
]
