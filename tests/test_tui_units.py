"""The live view's pure parts: process rows, filters and sorts, held figures, the panel's
material-change rule and wrapping, sweeping traces, ASCII spelling, where `s` writes."""

from __future__ import annotations

import dataclasses
import json
import re
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


def test_a_tick_drawn_again_counts_once_in_what_is_held():
    """A resize or a pane switch draws the same tick again: what a group shows afterwards is
    what it shows when each tick is drawn once."""
    once, again = Holds(max_hold_s=15), Holds(max_hold_s=15)
    for t, busy in [(0.0, 60.0), (1.0, 66.0), (2.0, 61.0)]:
        shown = once.get("busy", (busy,), (PERCENT,), t)
        for _ in range(3 if t == 1.0 else 1):
            assert again.get("busy", (busy,), (PERCENT,), t) == shown, t
        # 66 once: a mean of 63 with the 60 before it, not a move; three times, it was
        assert shown == (60.0,)


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


# -- the owner: its column's text, the filter's job:, pod: and ctr: terms, the sort -----------


@pytest.fixture(scope="module")
def pod_rows():
    s = sim.build("comm-bound")
    sampler = Sampler(s, interval=1.0)
    sampler.sample()
    s.clock.sleep(1.0)
    return process_rows(sampler.sample())


def _pids(rows, spec: str) -> set[int]:
    return {r.pid for r in rows if matches(r, parse_filter(spec))}


def test_owner_terms_parse_round_trip_and_say_what_they_take():
    f = parse_filter("job:424242,77.batch pod:ml-research/llama-ddp-0 ctr:8e1f0d2c gpu:1 train")
    assert f.jobs == {"424242", "77.batch"} and f.pods == {"ml-research/llama-ddp-0"}
    assert f.containers == {"8e1f0d2c"} and f.gpus == {1} and f.text == "train"
    assert f.active and f.owned_by and parse_filter(f.spec()) == f
    assert f.describe() == (
        'GPU 1 · job 424242,77.batch · pod ml-research/llama-ddp-0 · ctr 8e1f0d2c · "train"'
    )
    assert parse_filter("container:web slurm:5 pods:x").spec() == "job:5 pod:x ctr:web"
    for bad, says in (
        ("job:alice", "job: takes job ids (424242, 424242.0): 'alice'"),
        ("job:", "job: takes job ids"),
        ("pod:a/b/c", "pod: takes a pod's namespace/name, name or uid: 'a/b/c'"),
        ("ctr:#1", "ctr: takes a container's id or name: '#1'"),
    ):
        with pytest.raises(FilterError, match=re.escape(says)):
            parse_filter(bad)
    assert parse_filter("job:job-7j4k").jobs == {"job-7j4k"}  # a pseudonym from the screen


def test_owner_terms_select_their_rows(compute_rows, pod_rows):
    alice = {r.pid for r in compute_rows if r.user == "alice"}
    bob = {r.pid for r in compute_rows if r.user == "bob"}
    assert len(alice) == 8 and len(bob) == 1
    assert _pids(compute_rows, "job:424242") == alice
    assert _pids(compute_rows, "job:424242.0") == alice  # its step 0
    assert _pids(compute_rows, "job:424242.batch") == set()
    assert _pids(compute_rows, "job:42424") == set()  # a job id is whole, not a prefix
    assert _pids(compute_rows, "job:1,424242") == alice  # any of its values
    assert _pids(compute_rows, "ctr:1e52e506") == bob  # an id's start, as docker takes it
    assert _pids(compute_rows, "ctr:1E52") == bob
    assert _pids(compute_rows, "ctr:ffff") == set()
    assert _pids(compute_rows, "job:424242 ctr:1e52") == set()  # both terms must hold
    assert _pids(compute_rows, "424242") == alice  # a word finds the owner's text too
    ranks = {r.pid for r in pod_rows}
    assert len(ranks) == 8
    for spec in ("pod:llama-ddp-0", "pod:ml-research/llama-ddp-0", "pod:ML-Research/",
                 "pod:87e7667e", "ctr:1068460c"):  # fmt: skip
        assert _pids(pod_rows, spec) == ranks, spec
    for spec in ("pod:llama", "pod:other/llama-ddp-0", "pod:default/", "job:424242"):
        assert _pids(pod_rows, spec) == set(), spec


def test_owner_text_fits_its_column_and_shows_a_pseudonym_whole():
    from gputop_diag.model import Owner
    from gputop_diag.tui.process_owner import owner_short, owner_text

    pod = Owner("pod", pod_uid="87e7667e-425e", pod_namespace="ml-research", pod_name="llama-0")
    assert owner_text(pod) == "pod ml-research/llama-0"
    assert owner_short(pod, 15) == "pod llama-0"  # `pod NAME` where NS/NAME does not fit
    assert owner_short(pod, 10) == "llama-0"  # then the name alone
    long = Owner("pod", pod_namespace="ns", pod_name="a-very-long-name")
    assert owner_short(long, 12) == "a-very-long+"
    ctr = Owner("container", container_id="1e52e506294ca2f9b435a733950440de")
    assert owner_text(ctr) == "ctr 1e52e506"
    box = Owner("container", container_id="container-aixa")
    assert owner_text(box) == "ctr container-aixa"  # the `ctr ` an unsanitized id has
    assert owner_short(box, 18) == "ctr container-aixa"
    assert owner_short(box, 12) == "container-aixa"  # a pseudonym is never cut
    assert owner_short(Owner("slurm", slurm_job="job-7j4k"), 6) == "job-7j4k"
    assert owner_text(Owner("pod", pod_uid="uuid-6a22")) == "pod uuid-6a22"
    assert owner_text(Owner("slurm", slurm_job="424242")) == "job 424242"
    assert owner_text(Owner("unit", unit="triton.service")) is None
    assert owner_text(Owner("user")) is None and owner_text(None) is None


def test_owner_lines_list_the_whole_owner():
    from gputop_diag.model import Owner
    from gputop_diag.tui.process_owner import owner_lines

    pod = Owner(
        "pod", pod_uid="87e7667e-425e-41e6-ac19-78365cfe9e8b", pod_namespace="ml-research",
        pod_name="llama-ddp-0", qos="burstable", container_id="1068460c" * 8,
        container_runtime="containerd", container_name="trainer", ns_pid=7,
    )  # fmt: skip
    text = "\n".join(owner_lines(pod, 41216))
    for fact in ("Kubernetes pod", "ml-research/llama-ddp-0", "burstable", "containerd",
                 "87e7667e-425e-41e6-ac19-78365cfe9e8b", "1068460c" * 8, "name trainer",
                 "7: its pid in its own PID namespace (41216 on the host)"):  # fmt: skip
        assert fact in text, fact
    job = "\n".join(owner_lines(Owner("slurm", slurm_job="424242", slurm_step="batch"), 41200))
    assert "Slurm job" in job and "job 424242  step batch" in job and "namespace" not in job
    assert "unit       triton.service" in owner_lines(Owner("unit", unit="triton.service"), 9)
    assert "not read" in owner_lines(None, 9)[0]


def test_sorting_by_owner_groups_jobs_pods_and_containers_numbers_as_numbers(compute_rows):
    from dataclasses import replace

    from gputop_diag.model import Owner

    up = [r.pid for r in ordered(compute_rows, SortOrder("owner"), None)]
    bob = next(r.pid for r in compute_rows if r.user == "bob")
    assert up[0] == bob  # `ctr 1e52e506` before `job 424242`
    down = [r.pid for r in ordered(compute_rows, SortOrder("owner").flipped(), None)]
    assert down[-1] == bob
    assert SortOrder("owner").label(plain=True) == "OWNER ^"
    rows = [
        replace(compute_rows[1], pid=1, owner=Owner("slurm", slurm_job="424242")),
        replace(compute_rows[2], pid=2, owner=None),  # no owner: last either way
        replace(compute_rows[3], pid=3, owner=Owner("slurm", slurm_job="99")),
    ]
    assert [r.pid for r in ordered(rows, SortOrder("owner"), None)] == [3, 1, 2]
    assert [r.pid for r in ordered(rows, SortOrder("owner").flipped(), None)] == [1, 3, 2]
    assert nearly_sorted([rows[2], rows[0], rows[1]], SortOrder("owner"), None)
    assert not nearly_sorted(rows, SortOrder("owner"), None)


def test_pod_term_takes_a_systemd_uid_and_at_least_8_hex_digits():
    from gputop_diag.model import Owner
    from gputop_diag.tui.process_owner import owner_matches, owner_values

    pod = Owner("pod", pod_uid="87e7667e-425e-41e6-ac19-78365cfe9e8b")
    typed = owner_values("87e7667e_425e_41e6_ac19_78365cfe9e8b", "pod")
    assert owner_matches(pod, pods=typed)
    assert owner_matches(pod, pods={"87e7667e"})
    assert not owner_matches(pod, pods={"8"}) and not owner_matches(pod, pods={"87e7"})


def test_the_narrow_owner_column_widens_for_a_pseudonym_and_never_cuts_it():
    from gputop_diag.tui.process_table import NARROW_OWNER, column_widths, command_width

    columns = ("gpu", "pid", "owner", "gpu_mem", "cpu", "command")
    assert column_widths(columns)["owner"] == NARROW_OWNER
    assert column_widths(columns, owner_width=len("container-aixa"))["owner"] == 14
    assert command_width(80, columns, owner_width=14) == command_width(80, columns) - 2
