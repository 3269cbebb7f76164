"""The process filter under `--sanitize`: the rows show pseudonyms, so what the user types (a
real user name, a word of a command line) is sanitized the same way before it is compared,
and it is never drawn as typed (the tab strip, the table's title, the prompt's error)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_sanitize_planted import build_case, planted
from test_tui import everything_shown
from test_tui_support import FedApp, type_text

from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.tui.filter_screen import FilterScreen, sanitized_filter, shown_filter_text
from gputop_diag.tui.procs import ProcessFilter, parse_filter


def _rows(app) -> int:
    return app.query_one("#mem-procs").row_count


async def _filter(app, pilot, typed: str) -> None:
    await pilot.press("f")
    await pilot.pause()
    assert isinstance(app.screen, FilterScreen)
    await type_text(pilot, typed)
    await pilot.press("enter")
    await pilot.pause()


@pytest.mark.slow
async def test_a_real_user_name_typed_finds_its_pseudonymised_rows(monkeypatch, tmp_path):
    plant, corpus, _ = build_case(31, "compute-bound")
    with planted(monkeypatch, tmp_path, plant):
        app = FedApp("compute-bound", sanitize=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(5)
        await pilot.pause()
        real = app.latest.sampled
        owners = {p.user for p in real.processes if p.user}
        names = {f for x in corpus.secrets if x.what == "user" for f in x.forms}
        user = sorted(owners & names)[0]
        everyone = _rows(app)
        mine = sum(
            1 for gp in real.gpu_processes if getattr(real.process(gp.pid), "user", 0) == user
        )
        assert 0 < mine <= everyone
        for typed in (f"user:{user}", user.upper()):
            await _filter(app, pilot, typed)
            assert _rows(app) == mine, typed  # before: 0 rows, the pseudonyms never match
            shown = everything_shown(app)
            assert user.lower() not in shown.lower(), typed  # the tab strip, the title
            assert corpus.survivors(shown) == []
        pseudonym = app.controls.filter.users or {app.controls.filter.text}
        await pilot.press("escape")
        await pilot.pause()
        assert _rows(app) == everyone
        await _filter(app, pilot, f"user:{next(iter(pseudonym))}")  # copied from the screen
        assert _rows(app) == mine
        await _filter(app, pilot, f"pid:{user}")  # an error that quotes what was typed
        assert isinstance(app.screen, FilterScreen)
        assert user.lower() not in everything_shown(app).lower()


def test_the_filter_is_held_and_described_as_the_rows_are_written():
    s = Sanitizer()
    f = sanitized_filter(parse_filter("gpu:1 user:alice pid:42 Alice train.py"), s)
    pseudonym = s.user("alice")
    assert f.gpus == {1} and f.pids == {42} and f.users == {pseudonym}
    assert f.text == f"{pseudonym} train.py"
    assert sanitized_filter(f, s) == f  # pseudonyms stay as they are
    assert sanitized_filter(parse_filter("user:alice"), None).users == {"alice"}
    given = SimpleNamespace(filter=ProcessFilter(users=frozenset({"alice"})), sanitizer=s)
    assert shown_filter_text(given) == f"user {pseudonym}"  # --user NAME, held as typed
    given.sanitizer = None
    assert shown_filter_text(given) == "user alice"


@pytest.mark.slow
async def test_user_given_on_the_command_line_finds_its_rows_under_sanitize(monkeypatch, tmp_path):
    """`gputop-diag --sanitize --user NAME`: the filter the view starts with is held as the
    rows are written, so it finds NAME's processes and never shows NAME."""
    plant, corpus, _ = build_case(32, "compute-bound")
    user = plant.processes[0].user or plant.user
    with planted(monkeypatch, tmp_path, plant):
        app = FedApp(
            "compute-bound", sanitize=True, process_filter=ProcessFilter(users=frozenset({user}))
        )
    async with app.run_test(size=(120, 40)) as pilot:
        app.feed(5)
        await pilot.pause()
        real = app.latest.sampled
        mine = sum(
            1 for gp in real.gpu_processes if getattr(real.process(gp.pid), "user", 0) == user
        )
        assert mine and _rows(app) == mine
        assert user.lower() not in everything_shown(app).lower()


def test_owner_terms_are_held_as_the_sanitizer_writes_the_owner():
    from gputop_diag.model import Owner

    s = Sanitizer()
    cid = "1e52e506294ca2f9b435a733950440de54f6bd8450629ee170e9b59260b203fa"
    shown = s.model(Owner("container", container_id=cid, slurm_job="424242"))
    f = sanitized_filter(parse_filter(f"job:424242.0 ctr:{cid} pod:ml-research/ gpu:1"), s)
    assert f.jobs == {f"{s.job('424242')}.0"}  # the job's number replaced, its step kept
    assert f.containers == {shown.container_id} != {cid}
    assert f.pods == {f"{s.text('ml-research')}/"} and f.gpus == {1}
    assert sanitized_filter(f, s) == f  # pseudonyms stay as they are
    assert sanitized_filter(parse_filter(f"ctr:{cid}"), None).containers == {cid}


@pytest.mark.parametrize("scenario", ["compute-bound", "comm-bound"])
async def test_job_pod_and_ctr_typed_as_the_node_names_them_find_their_rows(scenario):
    """Under --sanitize the OWNER column shows pseudonyms (`job job-…`, `container-…`,
    `pod host-…`); the ids typed as `squeue`, `docker ps` or `kubectl` print them find their
    rows, and so does a pseudonym copied from the screen (OWNER whole: the panel hidden at
    200 columns). The ids are never drawn."""
    app = FedApp(scenario, sanitize=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.feed(4)
        await pilot.pause()
        await pilot.press("p")
        app.feed(1)
        await pilot.pause()
        real = app.latest.sampled
        everyone = len(real.gpu_processes)
        assert _rows(app) == everyone
        if scenario == "compute-bound":
            cid = real.process(41440).owner.container_id  # bob's notebook
            terms = [("job:424242", "424242", 8), (f"ctr:{cid}", cid[:8], 1)]
        else:
            terms = [
                ("pod:ml-research/llama-ddp-0", "llama-ddp-0", 8),
                ("pod:llama-ddp-0", "ml-research", 8),
            ]
        table = app.query_one("#mem-procs")
        for typed, secret, n in terms:
            await _filter(app, pilot, typed)
            assert _rows(app) == n, typed  # before: 0 rows, the pseudonyms never match
            shown = everything_shown(app)
            assert secret not in shown, typed  # the tab strip, the title, the rows
            owner = str(table.get_row_at(0)[list(table.columns).index("owner")])
            await pilot.press("escape")
            await pilot.pause()
            assert _rows(app) == everyone
            assert owner in everything_shown(app)
            pseudonym = owner.split()[-1]  # `job-…`, `ns-…/host-…`, `container-…`
            key = typed.split(":")[0]
            await _filter(app, pilot, f"{key}:{pseudonym}")
            assert _rows(app) == n, (typed, pseudonym)
            await pilot.press("escape")
            await pilot.pause()


def test_a_short_container_prefix_is_refused_under_sanitize_and_the_example_job_is_no_demo_job():
    import pytest as _pytest

    from gputop_diag.sanitize.sanitizer import Sanitizer
    from gputop_diag.tui.filter_screen import HINT, sanitized_filter
    from gputop_diag.tui.procs import FilterError, parse_filter

    with _pytest.raises(FilterError, match="at least 8 hex digits"):
        sanitized_filter(parse_filter("ctr:1068"), Sanitizer())
    assert parse_filter("ctr:1068").containers  # without --sanitize a prefix of any length
    assert "424242" not in HINT  # the demo's own job id
