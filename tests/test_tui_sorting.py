"""`o` cycles through the columns the table draws at its width, and the table's title says
what decides the order: a sort column not drawn, the selected GPU's processes first."""

from __future__ import annotations

from test_tui_support import FedApp, screen_text, settled

from gputop_diag.tui.panes.memory import columns_for
from gputop_diag.tui.procs import SORTS, SortOrder


def test_o_skips_the_columns_a_narrow_table_does_not_draw():
    narrow = columns_for(80)
    assert "sm" not in narrow and "sm" in columns_for(200)
    seen, order = [], SortOrder()
    for _ in range(len(SORTS)):
        order = order.next(1, narrow)
        seen.append(order.column)
    assert "sm" not in seen and "share" not in seen
    assert set(seen) == {c for c in SORTS if c in narrow}  # every drawn column, in turn
    back = SortOrder("cpu").next(-1, narrow)
    assert back.column in narrow and back.column != "cpu"
    assert [SortOrder().next(1).column] == [list(SORTS)[1]]  # no width given: every column


async def test_the_title_says_a_hidden_sort_column_and_the_selected_gpu_first():
    app = FedApp("compute-bound")
    async with app.run_test(size=(80, 24)) as pilot:
        app.feed(3)
        await settled(pilot, lambda: "sorted by" in screen_text(app))
        assert ", GPU 0 first" in screen_text(app)  # GPU 0 selected, 8 GPUs' processes
        app.controls.sort = SortOrder("sm")  # as a wide terminal left it
        app.repaint_visible()
        await settled(pilot, lambda: "SM% " in screen_text(app))
        assert "not shown at this width" in screen_text(app)
        await pilot.press("o")
        await settled(pilot, lambda: "not shown" not in screen_text(app))
        assert app.controls.sort.column in columns_for(80)


def test_owner_takes_users_place_on_narrow_panes_and_o_reaches_it_where_drawn():
    from gputop_diag.tui.process_table import (
        OWNER_COLUMN_FROM,
        column_widths,
        command_width,
    )

    assert "owner" not in columns_for(200)  # no process runs for a job, pod or container
    narrow, mid, wide = (columns_for(w, owned=True) for w in (80, 128, OWNER_COLUMN_FROM))
    assert "owner" in narrow and "user" not in narrow and "owner" in mid and "user" not in mid
    assert wide.index("owner") == wide.index("user") + 1
    seen, order = set(), SortOrder()
    for _ in range(len(SORTS)):
        order = order.next(1, narrow)
        seen.add(order.column)
    assert "owner" in seen and "user" not in seen
    # the owner in USER's place costs the command 3 cells at 80 columns, no more
    assert command_width(80, columns_for(80)) - command_width(80, narrow) == 3
    # the namespace's pid only where OWNER has a column of its own
    assert column_widths(narrow, ns_pids=True)["pid"] == column_widths(narrow)["pid"]
    assert column_widths(wide, ns_pids=True)["pid"] > column_widths(wide)["pid"]
    assert command_width(OWNER_COLUMN_FROM, wide, ns_pids=True) >= 36
