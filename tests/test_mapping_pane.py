"""The Mapping pane: the core's ordinals, UUIDs that stay distinct when cut, the layout hidden
under --sanitize."""

from __future__ import annotations

import os

import pytest
from test_tui_support import FedApp, screen_text
from textual.widgets import DataTable

from gputop_diag import sim
from gputop_diag.tui.panes.mapping import abbreviate_uuid, layout


@pytest.fixture(autouse=True)
def _known_shell(monkeypatch):
    """Under --demo the simulated shell takes CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER,
    GPU_DEVICE_ORDINAL and SLURM_* from the real one: these tests need the scenario's."""
    for k in list(os.environ):
        if k in sim.PASSED_ENV or k.startswith(sim.PASSED_ENV_PREFIX):
            monkeypatch.delenv(k)


# Eight GPUs of one HGX board: UUIDs that share their first 19 characters.
H100 = [f"GPU-01000100-0000-0000-0000-0000000{k:05x}" for k in (0x1A, 0x2B, 0x3C, 0x4D, 0x5E)]


@pytest.mark.parametrize("width", [14, 16, 20, 30, 39])
def test_cut_uuids_stay_distinct(width):
    cut = [abbreviate_uuid(u, width, H100) for u in H100]
    assert len(set(cut)) == len(H100)
    assert all(len(c) <= width for c in cut)
    assert all(c.startswith("GPU-") and "…" in c for c in cut)


def test_full_uuid_when_it_fits():
    assert abbreviate_uuid(H100[0], 40, H100) == H100[0]


def test_uuids_that_differ_near_the_start_keep_their_head():
    same_tail = [f"GPU-{c}aaa0000-0000-0000-0000-000000000001" for c in "abc"]
    cut = [abbreviate_uuid(u, 14, same_tail) for u in same_tail]
    assert len(set(cut)) == 3 and all(len(c) == 14 for c in cut)


def test_layout_widths():
    assert layout(160)[-1] == 40  # a wide pane shows whole UUIDs
    assert layout(74)[-1] == 14  # the 120-column layout: a tail that tells them apart
    assert layout(74)[4] < layout(160)[4]  # the short bus id form


async def test_pane_at_120_columns_rows_do_not_look_alike():
    app = FedApp("compute-bound")
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(2)
        await pilot.pause()
        await pilot.press("3")
        await pilot.pause()
        table = app.query_one("#map-table", DataTable)
        uuids = [str(table.get_cell(k, "uuid")) for k in table.rows]
        assert len(uuids) == 8 and len(set(uuids)) == 8
        screen = screen_text(app)
        for u in uuids:
            assert u in screen  # not cut off by the pane's edge
        g = app.sim_sources.sim.gpus[1]
        row = [str(c) for c in table.get_row("gpu1")]
        assert row[2] == str(g.minor) and row[3] == f"/dev/nvidia{g.minor}"
        assert row[4] == g.proc_bus_id[5:]
        assert "2 owners share GPU 0: Slurm job 424242" in screen
        assert "owners: Slurm job 424242: GPU 0-7" in screen  # whose GPU is this


async def test_pane_under_sanitize_hides_the_layout():
    app = FedApp("compute-bound", sanitize=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(2)
        await pilot.pause()
        await pilot.press("3")
        await pilot.pause()
        table = app.query_one("#map-table", DataTable)
        for k in table.rows:
            row = [str(c) for c in table.get_row(k)]
            assert row[2] == "·" and row[3] == "·"
        screen = screen_text(app)
        for g in app.sim_sources.sim.gpus:
            assert g.uuid not in screen and g.proc_bus_id[5:] not in screen
            assert f"/dev/nvidia{g.minor}" not in screen
        assert "checked by UUID" in screen and "Sanitized" in screen


async def test_mig_rows():
    app = FedApp("mig")
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(2)
        await pilot.pause()
        await pilot.press("3")
        await pilot.pause()
        table = app.query_one("#map-table", DataTable)
        keys = [k.value for k in table.rows]
        assert keys == ["gpu0", "gpu0-mig0", "gpu0-mig1", "gpu0-mig2"]
        assert str(table.get_cell("gpu0-mig0", "uuid")).startswith("MIG-")
        assert str(table.get_cell("gpu0-mig0", "cuda")) == "?"


def test_plain_glyphs_for_low_bandwidth():
    cut = [abbreviate_uuid(u, 14, H100, "~") for u in H100]
    assert all(c.isascii() and "~" in c and len(c) <= 14 for c in cut) and len(set(cut)) == 5


async def test_pane_under_sanitize_judges_the_real_uuids_and_shows_only_pseudonyms():
    """The mapping is worked out on the sampled snapshot (a UUID prefix in this shell's
    CUDA_VISIBLE_DEVICES matches its GPU, as `gputop-diag mapping` says) and only the text
    drawn goes through the sanitizer: no UUID, no prefix of one, no Slurm job id on screen."""
    app = FedApp("compute-bound", sanitize=True)
    first = app.sim_sources.sim.gpus[0].uuid
    prefix = first[:12]  # "GPU-" and 8 hex digits: one GPU's, not the others'
    app.sim_sources.environ.update({"CUDA_VISIBLE_DEVICES": f"{prefix},1", "SLURM_JOB_ID": "4242"})
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(2)
        await pilot.pause()
        await pilot.press("3")
        await pilot.pause()
        screen = screen_text(app)
        assert "matches no GPU UUID" not in screen
        assert "entry '1' is not a GPU UUID" in screen  # the finding the command gives too
        assert prefix not in screen and prefix[4:] not in screen and "4242" not in screen
        assert "CUDA_VISIBLE_DEVICES=GPU-" in screen  # its shape kept, as a pseudonym
