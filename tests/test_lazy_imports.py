"""`snapshot`'s head starts. One reading (the default): the host's first readings
(`collect/host_head.py`), taken before the model loads, are the host collector's own, so its CPU %
and disk rates are averaged over the loading, at least `RATE_MIN_S`. `--rates`: the GPM pair's
first samples (`collect/nvml/head.py`) become the NVML collector's own, so the second reading
waits only for what is left of NVML's 0.1 s. On the simulator, whose clock jumps on `sleep`: the
gaps read are the waits the code asked for. Which modules are loaded when is
`tests/test_startup.py`'s."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gputop_diag import sim
from gputop_diag.collect.host_head import HostHead
from gputop_diag.collect.nvml.head import GPM_MIN_INTERVAL_S, GpmHeadStart
from gputop_diag.commands.common import HEAD_MARGIN_S, RATE_MIN_S, WARMUP_S, sample_once


def _uninitialized(nvml) -> bool:
    """NVML's init references are all given back: a call now fails as uninitialized."""
    try:
        nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as e:
        return e.value == nvml.NVML_ERROR_UNINITIALIZED
    return False


@pytest.mark.parametrize(("loading", "window"), [(0.0, RATE_MIN_S), (0.02, RATE_MIN_S), (0.3, 0.3)])
def test_one_reading_averages_the_hosts_rates_from_the_head_start(loading, window):
    """The one reading comes `RATE_MIN_S` after the host's first readings at the earliest (the
    loading was quicker: it waits the rest), else right away; the disk rates are the counters'
    difference over that window, and nothing of the GPUs or processes needing a second reading
    is made up."""
    feed = sim.build("compute-bound")
    head = HostHead(feed.psutil, feed.clock).begin()
    feed.clock.sleep(loading)  # the model and the collectors loading
    before = feed.psutil.disk_io_counters()
    snap = sample_once(feed, fast=True, host_head=head)
    assert snap.timestamp - head.at == pytest.approx(window, abs=1e-6)
    after = feed.psutil.disk_io_counters()
    # the counters ran on for the wait alone (a byte's rounding)
    assert abs(after.read_bytes - before.read_bytes - 2.0e6 * (window - loading)) <= 1
    assert snap.host.disk_read_bytes_s == pytest.approx(2.0e6, rel=1e-4)
    assert snap.host.disk_write_bytes_s == pytest.approx(1.5e6, rel=1e-4)
    assert all(g.gpm is None and g.nvlink_tx_kib_s is None for g in snap.gpus)
    assert snap.processes and all(p.cpu_pct is None for p in snap.processes)


def test_one_reading_without_a_head_start_has_no_disk_rates():
    """Without the host's first readings, one reading has no window: no disk rate, not 0."""
    snap = sample_once(sim.build("compute-bound"), fast=True)
    assert snap.host.disk_read_bytes_s is None and snap.host.disk_write_bytes_s is None


def test_the_head_start_samples_every_gpm_gpu_and_the_collector_takes_them_over():
    feed = sim.build("compute-bound")
    head = GpmHeadStart(feed.nvml, feed.clock).begin()
    assert sorted(head.samples) == list(range(8)) and head.last_at is not None
    t0 = head.last_at
    snap = sample_once(feed, fast=False, head=head)
    # the second reading: NVML's minimum after the head's samples (the first reading took no
    # simulated time), not the whole warm-up after the first reading
    assert snap.timestamp - t0 == pytest.approx(GPM_MIN_INTERVAL_S + HEAD_MARGIN_S, abs=1e-6)
    assert snap.timestamp - t0 < WARMUP_S
    assert all(g.gpm is not None and g.gpm.sm_util_pct > 0 for g in snap.gpus)
    assert all(g.nvlink_tx_kib_s is not None for g in snap.gpus)  # the other rates, too
    assert all(p.cpu_pct is not None for p in snap.processes)
    assert head.samples == {}  # handed over: freed by the collector, not twice
    assert _uninitialized(feed.nvml)


@pytest.mark.parametrize(
    ("loading", "second_after"),
    [
        # the GPM wait ends 0.05 s into the rest: the other rates still get RATE_MIN_S
        (0.06, RATE_MIN_S),
        # the imports outlast NVML's gap: the first reading closes the head's GPM pair and
        # opens another, and the second reading waits the whole warm-up for it
        (0.3, WARMUP_S),
    ],
)
def test_after_slow_imports_every_rate_still_gets_its_gap(loading, second_after):
    feed = sim.build("compute-bound")
    head = GpmHeadStart(feed.nvml, feed.clock).begin()
    feed.clock.sleep(loading)  # the model and the collectors loading
    first = feed.clock.now()
    snap = sample_once(feed, fast=False, head=head)
    assert snap.timestamp - first == pytest.approx(second_after, abs=1e-6)
    assert all(g.gpm is not None for g in snap.gpus)
    assert all(p.cpu_pct is not None for p in snap.processes)


def test_without_gpm_the_warm_up_is_as_before():
    """A100s (the `mig` scenario's) have no GPM: nothing to take ahead, and the two readings
    are `WARMUP_S` apart, as without a head start."""
    feed = sim.build("mig")
    head = GpmHeadStart(feed.nvml, feed.clock).begin()
    assert head.samples == {} and head.last_at is None
    first = feed.clock.now()
    snap = sample_once(feed, fast=False, head=head)
    assert snap.gpus and all(g.gpm is None for g in snap.gpus)
    assert snap.timestamp - first == pytest.approx(WARMUP_S, abs=1e-6)
    assert _uninitialized(feed.nvml)


@pytest.mark.parametrize("fast", [False, True])
def test_no_driver_the_head_start_fails_quietly_and_gives_nvml_back(fast):
    feed = sim.build("no-gpu")
    head = None if fast else GpmHeadStart(feed.nvml, feed.clock).begin()
    assert head is None or (head.samples == {} and head.last_at is None)
    snap = sample_once(feed, fast=fast, head=head)
    assert [e.source for e in snap.errors if e.gpu_index is None] == ["nvml"]
    assert snap.host is not None


def test_a_head_never_adopted_is_closed_with_the_sampler():
    """NVML fails in the collector after the head's init (a driver going away): the head's
    reference and samples are still given back when the sampler closes."""
    from gputop_diag.monitor.sampler import Sampler

    feed = sim.build("compute-bound")
    head = GpmHeadStart(feed.nvml, feed.clock).begin()
    assert head.samples
    sampler = Sampler(feed)
    sampler.nvml.take_head(head)
    sampler.close()
    assert head.samples == {}
    assert _uninitialized(feed.nvml)


def test_the_live_view_loads_the_report_only_when_one_is_saved():
    """The sanitized report's modules (`report/`) arrive with the first `s` or `S`
    (`tui/saver.py`), not with the live view's start; a fresh interpreter reads `sys.modules`."""
    code = (
        "import json, sys\n"
        "import gputop_diag.tui\n"
        "from gputop_diag.tui.saver import Saver\n"
        "before = sorted(sys.modules)\n"
        "Saver(None, None, None, None)._saves()\n"
        "print(json.dumps([before, sorted(sys.modules)]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = json.loads(r.stdout)
    assert [m for m in before if m.startswith("gputop_diag.report")] == []
    assert "gputop_diag.report.live" in after


def test_the_live_view_starts_without_the_sanitizer_recordings_the_plan_or_the_probe():
    """What only an action needs loads with it: the sanitizer (`--sanitize`, `s`), recordings
    (`--replay`, `S`), the memory plan (a model config found) and the probe's own code (it runs
    inside the job; the view reads only its file format, `probe/schema.py`)."""
    code = "import json, sys\nimport gputop_diag.tui.app\nprint(json.dumps(sorted(sys.modules)))\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(r.stdout)
    assert "gputop_diag.monitor.core" in loaded and "gputop_diag.probe.schema" in loaded
    late = ("gputop_diag.sanitize", "gputop_diag.recording", "gputop_diag.planner.live",
            "gputop_diag.probe.core", "gputop_diag.report")  # fmt: skip
    assert [m for m in loaded if m.startswith(late)] == []


def test_snapshot_takes_its_first_gpm_samples_before_the_model_and_the_collectors_load():
    """`cli.main` begins the head start as soon as the command line says `snapshot` (here NVML
    is the simulator's, given as `pynvml`): what was loaded then is the command line alone."""
    code = (
        "import json, sys\n"
        "from gputop_diag import sim\n"
        "feed = sim.build('compute-bound')\n"
        "sys.modules['pynvml'] = feed.nvml\n"
        "for name in [m for m in sys.modules if m.startswith('gputop_diag')\n"
        "             or m in ('dataclasses', 'psutil')]:\n"
        "    del sys.modules[name]\n"
        "from gputop_diag.collect.nvml import head\n"
        "begin, seen = head.GpmHeadStart.begin, []\n"
        "def spy(self):\n"
        "    seen.append(sorted(sys.modules))\n"
        "    return begin(self)\n"
        "head.GpmHeadStart.begin = spy\n"
        "from gputop_diag.cli import main\n"
        "try:\n"
        "    main(['snapshot', '--json', '--rates'])\n"
        "except BaseException:\n"
        "    pass\n"
        "print(json.dumps(seen), file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    seen = json.loads(r.stderr.strip().splitlines()[-1])
    assert len(seen) == 1  # begun once, by the command line, not again by `snapshot`
    early = [m for m in seen[0] if m in ("dataclasses", "psutil") or m.startswith(
        ("gputop_diag.model", "gputop_diag.monitor", "gputop_diag.sources"))]  # fmt: skip
    assert early == []


def test_a_usage_error_after_the_head_start_gives_nvml_and_the_samples_back(monkeypatch, capsys):
    """`--interval 0.01 snapshot`: the head start has begun when the interval is judged; the
    one line and exit 2, and NVML's reference and the samples are given back (`cli.main`)."""
    from gputop_diag.cli import main

    feed = sim.build("compute-bound")
    monkeypatch.setitem(sys.modules, "pynvml", feed.nvml)  # this machine's NVML
    assert main(["--interval", "0.01", "snapshot"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert _uninitialized(feed.nvml) and feed.nvml._gpm == {}  # no sample left allocated


def test_a_ctrl_c_in_the_head_start_exits_130_and_gives_nvml_back(monkeypatch, capsys):
    """Ctrl-C while the head start samples the GPUs (a slow GPU, a driver without persistence
    mode): 130 as anywhere else in the run, no traceback, and what it took is given back."""
    from gputop_diag.cli import main

    feed = sim.build("compute-bound")
    sample_get, calls = feed.nvml.nvmlGpmSampleGet, []

    def interrupted_at_the_fourth_gpu(device, sample):
        calls.append(device)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return sample_get(device, sample)

    monkeypatch.setattr(feed.nvml, "nvmlGpmSampleGet", interrupted_at_the_fourth_gpu)
    monkeypatch.setitem(sys.modules, "pynvml", feed.nvml)
    try:
        status = main(["snapshot", "--json"])
    except KeyboardInterrupt:  # not let through: it would end pytest's own run
        pytest.fail("the Ctrl-C left main as a traceback")
    assert status == 130
    assert len(calls) == 4 and capsys.readouterr().out == ""
    assert _uninitialized(feed.nvml) and feed.nvml._gpm == {}


def test_one_reading_leaves_this_programs_own_start_out_of_the_hosts_cpu():
    """The window is mostly this program loading: its own CPU (here made up, 10 % of the 32
    simulated CPUs over the 0.05 s window) is taken out of the host's busy share, from each CPU in
    proportion; a head without it (the simulator's own machine) keeps the figure as read."""
    plain = sample_once(sim.build("compute-bound"), fast=True, host_head=None)
    feed = sim.build("compute-bound")
    spent = [1.0]
    head = HostHead(feed.psutil, feed.clock, own_cpu=lambda: spent[0]).begin()
    spent[0] += 0.10 * 32 * RATE_MIN_S  # a tenth of every CPU for the whole window
    snap = sample_once(feed, fast=True, host_head=head)
    assert snap.host.cpu_pct == pytest.approx(plain.host.cpu_pct - 10.0, abs=0.1)
    assert sum(snap.host.per_cpu_pct) / 32 == pytest.approx(snap.host.cpu_pct)
    assert snap.host.iowait_pct == plain.host.iowait_pct  # waiting on I/O is not ours
    feed = sim.build("compute-bound")
    head = HostHead(feed.psutil, feed.clock).begin()
    assert sample_once(feed, fast=True, host_head=head).host.cpu_pct == plain.host.cpu_pct
