"""The live view's pure parts: process rows, filters and sorts, held figures, the panel's
material-change rule and wrapping, sweeping traces, ASCII spelling, where `s` writes."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

import pytest

from gputop_diag import sim
from gputop_diag.diagnose.types import Diagnosis, Evidence
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.report.saving import save_dirs, write_json
from gputop_diag.tui.holds import PERCENT, WATTS, Holds
from gputop_diag.tui.procs import (
    FilterError,
    ProcessFilter,
    ProcRow,
    SortOrder,
    command_text,
    matches,
    nearly_sorted,
    ordered,
    parse_filter,
    process_rows,
)
from gputop_diag.tui.side_panel import (
    BREAK_AFTER,
    age_text,
    gpu_list,
    material,
    render_full,
    render_strip,
    seconds_to_verdict,
    verdict_note,
    wrap_words,
)
from gputop_diag.tui.tabs import tab_runs
from gputop_diag.widgets import sweep_cells, to_ascii


def test_command_shows_the_program_name_then_every_argument():
    cmd = ("/opt/conda/envs/train/bin/python3.11", "-u", "train_ddp.py", "--lr", "3e-4")
    assert command_text(cmd, "python3.11") == "python3.11 -u train_ddp.py --lr 3e-4"
    assert command_text(("python", "/data/x.py"), None) == "python /data/x.py"  # args as given
    assert command_text(None, "pt_main_thread") == "pt_main_thread"
    assert command_text(None, None) == "(not readable)"
    assert command_text(("ray::Trainer.train()",), None) == "ray::Trainer.train()"


def test_filters_parse_and_round_trip():
    f = parse_filter("gpu:0,2 user:alice pid:4242 train")
    assert f == ProcessFilter(frozenset({0, 2}), frozenset({"alice"}), frozenset({4242}), "train")
    assert parse_filter(f.spec()) == f
    assert f.describe() == 'GPU 0,2 · user alice · pid 4242 · "train"'
    assert not parse_filter("").active and parse_filter("  ") == ProcessFilter()
    with pytest.raises(FilterError, match="gpu: takes numbers"):
        parse_filter("gpu:zero")


@pytest.fixture(scope="module")
def compute_rows():
    s = sim.build("compute-bound")
    sampler = Sampler(s, interval=1.0)
    sampler.sample()
    s.clock.sleep(1.0)
    return process_rows(sampler.sample())


def test_process_rows_carry_cpu_rss_and_the_share_of_the_gpu(compute_rows):
    ranks = [r for r in compute_rows if r.user == "alice"]
    assert len(ranks) == 8 and all(r.cpu_pct is not None and r.rss_bytes for r in ranks)
    assert all(0 < r.share_pct <= 100 for r in ranks)
    assert all("train.py" in r.command and not r.command.startswith("/") for r in ranks)


def test_filters_match_gpu_user_pid_and_words(compute_rows):
    assert {r.user for r in compute_rows if matches(r, parse_filter("user:bob"))} == {"bob"}
    assert {r.gpu_index for r in compute_rows if matches(r, parse_filter("gpu:3"))} == {3}
    some = compute_rows[2]
    assert [r.pid for r in compute_rows if matches(r, parse_filter(f"pid:{some.pid}"))] == [
        some.pid
    ]
    assert all(matches(r, parse_filter("TRAIN.py")) for r in compute_rows if r.user == "alice")


def test_order_puts_the_selected_gpu_first_then_sorts(compute_rows):
    out = ordered(compute_rows, SortOrder("gpu_mem"), selected_gpu=5)
    assert out[0].gpu_index == 5
    rest = [r.gpu_mem_bytes for r in out if r.gpu_index != 5]
    assert rest == sorted(rest, reverse=True)
    by_pid = ordered(compute_rows, SortOrder("pid"), None)
    assert [r.pid for r in by_pid] == sorted(r.pid for r in compute_rows)
    reverse = ordered(compute_rows, SortOrder("pid").flipped(), None)
    assert [r.pid for r in reverse] == sorted((r.pid for r in compute_rows), reverse=True)
    assert SortOrder().next().column == "sm" and SortOrder("command").next().column == "gpu_mem"


def test_rows_without_the_figure_sort_last_whichever_the_direction(compute_rows):
    from dataclasses import replace

    blind = [replace(r, cpu_pct=None) if r.user == "bob" else r for r in compute_rows]
    for order in (SortOrder("cpu"), SortOrder("cpu").flipped()):
        assert ordered(blind, order, None)[-1].user == "bob"


def test_holds_repaint_on_a_material_move_or_when_due():
    h = Holds(max_hold_s=15)
    assert h.get("busy", (97.0,), (PERCENT,), 0.0) == (97.0,)
    assert h.get("busy", (99.0,), (PERCENT,), 1.0) == (97.0,)  # 2 points: held
    assert h.get("busy", (60.0,), (PERCENT,), 2.0) == (60.0,)  # a drop: at once
    for t, wobble in enumerate((64.0, 57.0, 63.0, 58.0), 3):  # around 60: held
        assert h.get("busy", (wobble,), (PERCENT,), t) == (60.0,)
    assert h.get("busy", (67.0,), (PERCENT,), 7.0) == (60.0,)  # mean 62.7: not yet
    assert h.get("busy", (70.0,), (PERCENT,), 8.0) == (70.0,)  # mean 65: it moved
    assert h.get("busy", (69.0,), (PERCENT,), 22.9) == (70.0,)
    assert h.get("busy", (69.0,), (PERCENT,), 23.0) == (69.0,)  # due: exact again
    assert h.get("busy", (None,), (PERCENT,), 23.5) == (None,)  # gone: at once
    assert h.get("w", (600.0,), (WATTS,), 0) == (600.0,)
    assert h.get("w", (620.0,), (WATTS,), 1) == (600.0,)  # 3 %: held
    assert h.get("w", (700.0,), (WATTS,), 2) == (700.0,)  # two steps: at once
    assert h.get("state", ("P0",), (PERCENT,), 0) == ("P0",)
    assert h.get("state", ("P2",), (PERCENT,), 1) == ("P2",)  # a state: any change


def ev(metric: str, value: float | None, unit: str = "%") -> Evidence:
    return Evidence(metric, value, None, f"{metric} {value}", unit)


def test_a_material_figure_move():
    assert not material(ev("util", 97), ev("util", 99))
    assert material(ev("util", 97), ev("util", 3))  # the tour: 97 % on the panel, 3 % graphed
    assert material(ev("util", 97), ev("sm", 97))  # another figure
    assert not material(ev("rate", 1000, "MiB/min"), ev("rate", 1050, "MiB/min"))
    assert material(ev("rate", 1000, "MiB/min"), ev("rate", 1200, "MiB/min"))
    assert material(ev("util", None), ev("util", 5))


def test_no_verdict_counts_down_and_has_no_confidence_figure():
    d = Diagnosis(
        "insufficient_data",
        0.0,
        evidence=(Evidence("samples", 2, 5, "only 2 samples so far; 5 show a shape", ""),),
    )
    assert seconds_to_verdict(d, 1.0) == 3 and seconds_to_verdict(d, 2.0) == 6
    assert verdict_note(d, 1.0) == "no verdict yet: ~3 s to one"
    nodriver = Diagnosis(
        "insufficient_data", 0.0, evidence=(Evidence("samples", 9, 5, "no usable driver", ""),)
    )
    assert seconds_to_verdict(nodriver, 1.0) is None
    assert "%" not in verdict_note(nodriver, 1.0)
    assert verdict_note(Diagnosis("compute", 0.85), 1.0) == "85% confident"


def test_a_broken_chain_heads_the_strip_and_other_alerts_follow():
    from gputop_diag.diagnose.types import Alert

    d = Diagnosis(
        "idle",
        0.9,
        evidence=(Evidence("busy", 0, 50, "GPUs idle 100 % of the time", ""),),
        checks=("Is the job running? ps -u $USER",),
        alerts=(
            Alert("power", "warning", "GPU 0 power at its limit", 0),
            Alert("driver_chain", "critical", "driver chain broken: runtime 13.0 too new", None),
        ),
    )
    # the broken chain is the headline (tests/test_side_panel_lead.py); the other alerts follow
    short = render_strip(d, lines=3).plain
    assert short.splitlines()[0].startswith("DRIVER CHAIN driver chain broken")
    assert len(short.splitlines()) == 3
    tall = render_strip(d, lines=6).plain
    assert "next: Is the job" in tall and "power at its limit" in tall.splitlines()[-1]
    assert tall.count("driver chain broken") == 1
    calm = render_strip(Diagnosis("idle", 0.9, evidence=d.evidence, checks=d.checks), lines=3)
    assert "next: Is the job" in calm.plain  # without a critical alert the check stays


def test_panel_wraps_at_spaces_and_after_punctuation_never_mid_word():
    text = (
        "Check clocks and throttling: nvidia-smi --query-gpu=index,utilization.gpu,"
        "utilization.memory,memory.used --format=csv -l 1"
    )
    lines = wrap_words(text, 30, 30)
    assert all(len(line) <= 30 for line in lines)
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")  # nothing lost
    joined = ""
    for line in lines[:-1]:
        joined += line
        at_space = text[len(joined) : len(joined) + 1] == " "
        assert at_space or line[-1] in BREAK_AFTER, line  # a space, or after punctuation
        joined += " " if at_space else ""
    d = Diagnosis("compute", 0.85, checks=(text,), evidence=(ev("math_share", 75.0),))
    full = render_full(d, width=40).plain.split("\n")
    assert all(len(line) <= 40 for line in full)
    check = [line for line in full if line.startswith("1. ")][0]
    follow = full[full.index(check) + 1]
    assert follow.startswith("   ") and not follow.startswith("    ")  # hanging indent


def test_panel_never_ends_a_line_between_a_figure_and_its_unit():
    text = "28 helper processes (PyTorch DataLoader) at 72 % CPU each: 20.0 of 32 cores"
    for room in range(12, 60):
        lines = wrap_words(text, room, room)
        assert " ".join(lines) == text and all(len(line) <= room for line in lines)
        assert not any(line.startswith(("%", "cores")) for line in lines), (room, lines)


def test_small_helpers():
    assert gpu_list([0, 1, 2, 3, 4, 5, 6, 7]) == "0-7"
    assert gpu_list([0, 2, 5, 6, 7]) == "0,2,5-7" and gpu_list([1, 2]) == "1,2"
    assert age_text(3) == "" and age_text(12) == "figures 10 s old"
    assert to_ascii("CUDA ≤ 12.8 — ▶GPU0 •") == "CUDA <= 12.8 - >GPU0 -"
    assert to_ascii("漢") == "?"


def test_sweep_puts_sample_n_in_cell_n_mod_width():
    # samples 0..9 on a 4-cell trace: cells hold 8, 9, 6, 7 (the newest, 9, in cell 1)
    cells = sweep_cells([0, 0, 0, 0, 0, 0, 25, 50, 75, 100], 4, newest=9)
    assert cells[1] == "█" and cells[0] == "▆" and cells[2] == "▂" and cells[3] == "▄"
    assert sweep_cells([100, 100], 5, newest=1) == "██   "  # not reached yet: blank
    # the next sample changes one cell only
    a = sweep_cells([10] * 20, 8, newest=19)
    b = sweep_cells([10] * 20 + [90], 8, newest=20)
    assert sum(x != y for x, y in zip(a, b, strict=True)) == 1


def test_tab_strip_marks_the_current_pane_and_shortens_to_fit():
    titles = [(1, "Memory", "Mem"), (2, "Utilization", "Util"), (3, "Mapping", "Map")]
    long = "".join(t for t, _ in tab_runs(titles, 2, 80))
    assert "[2 Utilization]" in long and " 1 Memory " in long
    short = "".join(t for t, _ in tab_runs(titles, 2, 30))
    assert "[2 Util]" in short and len(short) <= 30
    filtered = "".join(t for t, _ in tab_runs(titles, 1, 80, "user alice"))
    assert "filter: user alice" in filtered


def test_save_falls_back_to_the_state_directory_and_names_files_by_the_wall_clock(tmp_path):
    locked = tmp_path / "locked"  # a file where the directory should be: nobody writes there
    locked.write_text("")
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    dirs = save_dirs(str(locked), env)
    assert dirs[:2] == [str(locked), str(tmp_path / "state" / "gputop-diag")]
    when = datetime(2030, 1, 2, 3, 4, 5)
    saved = write_json({"a": 1}, dirs, now=when)
    assert saved.path == str(
        tmp_path / "state/gputop-diag/gputop-diag-snapshot-20300102-030405.json"
    )
    assert saved.problems and "locked" in saved.problems[0]
    assert json.loads(open(saved.path).read()) == {"a": 1}
    again = write_json({"a": 2}, dirs, now=when)  # two saves in one second: both kept
    assert again.path != saved.path and again.path.endswith("-2.json")
    default = save_dirs(None, {"HOME": str(tmp_path)})
    assert default[0] == str(tmp_path / ".local/state/gputop-diag")  # never the cwd
    assert default[-1] == "/tmp"


def test_save_reports_when_no_directory_takes_it(tmp_path):
    missing = tmp_path / "no" / "such"
    saved = write_json({}, [str(missing)], create_first=False)  # --save-dir: not made
    assert saved.path is None and "No such file" in saved.problems[0]


def _cpu_row(pid: int, cpu: float | None, gpu: int = 0) -> ProcRow:
    return ProcRow(
        key=f"{gpu}:{pid}",
        gpu_index=gpu,
        gpu_label=str(gpu),
        pid=pid,
        user="u",
        command="python",
        gpu_mem_bytes=1 << 30,
        share_pct=1.0,
        sm_pct=None,
        cpu_pct=cpu,
        rss_bytes=None,
    )


def test_nearly_sorted_measures_against_the_exact_order_not_the_neighbour():
    down = SortOrder("cpu")
    assert down.descending
    # each neighbour within the 10-point slack, but 50 sits where 68 belongs
    steps = [_cpu_row(1, 50.0), _cpu_row(2, 59.0), _cpu_row(3, 68.0)]
    assert not nearly_sorted(steps, down, None)
    # a single swap within the slack may stay
    assert nearly_sorted([_cpu_row(1, 59.0), _cpu_row(2, 60.0), _cpu_row(3, 20.0)], down, None)
    assert not nearly_sorted([_cpu_row(1, 49.0), _cpu_row(2, 60.0)], down, None)
    # ascending: the same rows in the order they came are sorted
    assert nearly_sorted(steps, down.flipped(), None)
    # rows without the figure last
    assert nearly_sorted([_cpu_row(1, 5.0), _cpu_row(2, None)], down, None)
    assert not nearly_sorted([_cpu_row(2, None), _cpu_row(1, 5.0)], down, None)
    # the selected GPU's processes first, compared within the exact order of both groups
    mixed = [_cpu_row(1, 10.0, gpu=1), _cpu_row(2, 90.0, gpu=0)]
    assert nearly_sorted(mixed, down, 1)
    assert not nearly_sorted(mixed, down, 0)


def test_nearly_sorted_has_no_slack_for_names_and_pids():
    a, b = _cpu_row(1, 1.0), _cpu_row(2, 1.0)
    b = dataclasses.replace(b, command="zsh")
    assert nearly_sorted([a, b], SortOrder("command"), None)
    assert not nearly_sorted([b, a], SortOrder("command"), None)
    assert nearly_sorted([a, b], SortOrder("pid"), None)
    assert not nearly_sorted([b, a], SortOrder("pid"), None)
