"""A DataTable whose `update_cell` repaints the cell, not the whole table.

`DataTable.update_cell` asks for a repaint of the whole widget, and Textual then writes every
visible row to the terminal: a CPU figure moving in one row of a process table costs the whole
table over SSH. `CellTable` repaints only the updated cell's region (Textual still writes that
row from the table's left edge to the cell's end).
"""

from __future__ import annotations

from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import CellType, ColumnKey, RowKey


class CellTable(DataTable):
    _cell_only = False

    def update_cell(
        self,
        row_key: RowKey | str,
        column_key: ColumnKey | str,
        value: CellType,
        *,
        update_width: bool = False,
    ) -> None:
        if update_width:
            super().update_cell(row_key, column_key, value, update_width=True)
            return
        self._cell_only = True
        try:
            super().update_cell(row_key, column_key, value)
        finally:
            self._cell_only = False
        row = self.get_row_index(row_key)
        column = self.get_column_index(column_key)
        self.refresh_coordinate(Coordinate(row, column))

    def refresh(self, *regions, **kwargs):
        if self._cell_only and not regions and not kwargs:
            return self  # update_cell's whole-table repaint: the cell is refreshed instead
        return super().refresh(*regions, **kwargs)
