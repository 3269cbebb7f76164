"""Reusable renderers and widgets that know nothing of NVML: plain numbers in, cells out."""

from gputop_diag.widgets.cell_table import CellTable
from gputop_diag.widgets.cut_grid import CutGrid
from gputop_diag.widgets.diff_line import DiffLine, changed_spans
from gputop_diag.widgets.diff_text import DiffText
from gputop_diag.widgets.glyphs import ASCII_CLASS, BLOCKS, history, level, stacked_bar, to_ascii
from gputop_diag.widgets.history_line import HistoryLine
from gputop_diag.widgets.memory_bar import MemoryBar
from gputop_diag.widgets.parts_line import PartsLine
from gputop_diag.widgets.trace import Ruler, Trace, ruler_cells, sweep_cells

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
