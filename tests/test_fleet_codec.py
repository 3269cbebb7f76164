"""The exporter's series read back by the fleet reader give the classifier the same verdict.

Each simulated tick is rendered by the exporter's collector, parsed as Prometheus parses a
scrape, collected into range-query series (one per label set, as Prometheus stores them) and
assembled by the fleet reader: the node's verdict must match the single-node diagnosis of the
same window. No Prometheus here (tests/test_fleet_prometheus.py runs the real one).
"""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gputop_diag import sim
from gputop_diag.diagnose.classify import judge
from gputop_diag.diagnose.features import extract
from gputop_diag.fleet.judge import judge_fleet
from gputop_diag.fleet.read import assemble
from gputop_diag.model import MIB
from gputop_diag.monitor.core import Monitor
from gputop_diag.prometheus.client import Series
from gputop_diag.prometheus.dcgm_fields import FIELDS
from gputop_diag.prometheus.export import SlurmJobs, TickMetrics, window_of

SECONDS = 30


def scrape_series(
    scenario: str,
    seconds: int = SECONDS,
    instance: str = "node-a:9401",
    via_text: bool = False,
    step: float = 1.0,
    phase_s: float = 0.0,
    **kw,
) -> tuple[list[Series], list, Monitor]:
    """Run `scenario` for `seconds` at 1 s, scrape after each tick; (series, snapshots).
    `via_text`: through the text exposition and prometheus-client's parser, as Prometheus
    reads a scrape (slow), else straight from the collector's samples. `phase_s`: each scrape
    lands up to that many seconds after its point in the job's steps (a seeded draw), as a
    real job's steps, which vary, drift against the scrape interval; 0: every scrape at the
    same point of a simulated job's exact period."""
    sources = sim.build(scenario)
    monitor = Monitor(sources, interval=step)
    metrics = TickMetrics(window=window_of(monitor), **kw)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    store: dict[tuple, tuple[list[float], list[float]]] = {}
    snaps = []
    draw = random.Random(scenario)
    late = 0.0
    for k in range(int(seconds / step) + 1):
        offset = draw.uniform(0.0, phase_s) if phase_s else 0.0
        sources.clock.sleep((step if k else 0.0) + offset - late)
        late = offset
        tick = monitor.tick()
        snaps.append(tick.snapshot)
        metrics.update(tick)
        if via_text:
            fams = text_string_to_metric_families(generate_latest(registry).decode())
        else:
            fams = metrics.collect()
        for fam in fams:
            for s in fam.samples:
                labels = {k2: v for k2, v in s.labels.items() if v != ""}
                labels.update(__name__=s.name, instance=instance, job="gpu")
                key = tuple(sorted(labels.items()))
                times, values = store.setdefault(key, ([], []))
                times.append(tick.snapshot.timestamp)
                values.append(float(s.value))
    series = [Series(dict(k), tuple(t), tuple(v)) for k, (t, v) in store.items()]
    return series, snaps, monitor


def fleet_of(series, snaps, group_by="hpc_job", step=1.0):
    return assemble(
        series,
        {},
        start=snaps[0].timestamp,
        end=snaps[-1].timestamp,
        step=step,
        group_by=group_by,
    )


SCENARIOS = [
    "idle",
    "compute-bound",
    "bandwidth-bound",
    "input-starved",
    "sync-stall",
    "comm-bound",
    "capacity",
    "memory-leak",
    "thermal-throttle",
    "xid-app",
    "mig",
]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_read_back_verdict_matches_the_single_node_diagnosis(scenario):
    series, snaps, _ = scrape_series(scenario)
    data = fleet_of(series, snaps)
    (node,) = data.nodes.values()
    assert len(node.snapshots) == len(snaps)
    fleet = judge_fleet(data).nodes[0].diagnosis
    local = judge(snaps)
    assert fleet.primary == local.primary
    assert fleet.confidence == pytest.approx(local.confidence, abs=0.1)
    assert {a.kind for a in fleet.alerts} == {a.kind for a in local.alerts}


def test_values_keep_dcgm_units_and_come_back_exactly():
    series, snaps, _ = scrape_series("comm-bound", seconds=3, via_text=True)
    by = {}
    for s in series:
        if s.labels.get("gpu") == "0":
            by[s.labels["__name__"]] = s.values[-1]
    g = snaps[-1].gpu(0)
    assert by["DCGM_FI_DEV_GPU_UTIL"] == g.util_gpu_pct
    assert by["DCGM_FI_DEV_FB_USED"] == pytest.approx(g.mem_used_bytes / MIB)  # both: no reserve
    assert by["DCGM_FI_DEV_FB_RESERVED"] == pytest.approx(g.mem_reserved_bytes / MIB)
    assert by["DCGM_FI_DEV_FB_USED"] + by["DCGM_FI_DEV_FB_FREE"] + by[
        "DCGM_FI_DEV_FB_RESERVED"
    ] == pytest.approx(by["DCGM_FI_DEV_FB_TOTAL"])
    assert 0.0 <= by["DCGM_FI_PROF_SM_ACTIVE"] <= 1.0
    assert by["DCGM_FI_PROF_SM_ACTIVE"] == pytest.approx(g.gpm.sm_util_pct / 100)
    assert by["DCGM_FI_PROF_NVLINK_TX_BYTES"] == pytest.approx(g.nvlink_tx_kib_s * 1024)
    assert by["DCGM_FI_PROF_PCIE_TX_BYTES"] == pytest.approx(g.pcie_tx_kbps * 1000)
    assert by["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(g.power_w)
    # ... and the reader puts them back where the collector had them
    data = fleet_of(series, snaps)
    back = next(iter(data.nodes.values())).snapshots[-1].gpu(0)
    assert back.util_gpu_pct == g.util_gpu_pct
    assert abs(back.mem_used_bytes - g.mem_used_bytes) < 2 * MIB
    assert abs(back.mem_total_bytes - g.mem_total_bytes) < 2 * MIB
    assert back.gpm.sm_util_pct == pytest.approx(g.gpm.sm_util_pct)
    assert back.nvlink_tx_kib_s == pytest.approx(g.nvlink_tx_kib_s)
    assert back.pcie_tx_kbps == g.pcie_tx_kbps
    assert back.static.power_limit_w == g.static.power_limit_w
    assert back.static.name == g.static.name
    assert back.static.uuid == g.static.uuid


def test_every_dcgm_field_the_simulator_fills_is_exported():
    series, snaps, _ = scrape_series("comm-bound", seconds=1)
    names = {s.labels["__name__"] for s in series}
    g = snaps[-1].gpu(0)
    for f in FIELDS:
        if f.get(g) is not None:
            assert f.name in names, f.name
    assert "DCGM_FI_DEV_XID_ERRORS" in names


def test_xid_events_come_back_with_their_codes_and_gpus():
    series, snaps, _ = scrape_series("xid-app", seconds=40)
    local = sorted((x.xid, x.gpu_index) for s in snaps for x in s.xid_events)
    assert local, "the scenario raises Xids"
    data = fleet_of(series, snaps)
    node = next(iter(data.nodes.values()))
    back = sorted((x.xid, x.gpu_index) for s in node.snapshots for x in s.xid_events)
    # events of the first tick have no earlier sample to rise from: the window's baseline
    first = [(x.xid, x.gpu_index) for x in snaps[0].xid_events]
    later = sorted((x.xid, x.gpu_index) for s in snaps[1:] for x in s.xid_events)
    assert back == later, (back, local, first)
    fleet = judge_fleet(data).nodes[0].diagnosis
    assert {a.code for a in fleet.alerts if a.kind == "xid"} == {c for c, _ in later}


def test_slurm_job_label_groups_the_node_and_sanitize_drops_it():
    jobs = SlurmJobs(psutil=None, own_job="4242")
    series, snaps, _ = scrape_series("compute-bound", seconds=6, jobs=jobs)
    assert {s.labels.get("hpc_job") for s in series if s.labels.get("gpu")} == {"4242"}
    data = fleet_of(series, snaps)
    assert next(iter(data.nodes.values())).group == "4242"
    series, snaps, _ = scrape_series("compute-bound", seconds=2, jobs=jobs, sanitize=True)
    for s in series:
        assert not {"hpc_job", "Hostname", "UUID", "pci_bus_id"} & set(s.labels), s.labels
    data = fleet_of(series, snaps)
    node = next(iter(data.nodes.values()))
    assert node.key == "node-a:9401" and node.hostname is None and node.group is None


def test_dcgm_labels_flag_names_the_model_as_dcgm_exporter_does():
    series, snaps, _ = scrape_series("idle", seconds=1, dcgm_labels=True)
    gpu = [s for s in series if s.labels["__name__"] == "DCGM_FI_DEV_GPU_UTIL"]
    assert all("modelName" in s.labels and "model_name" not in s.labels for s in gpu)
    node = next(iter(fleet_of(series, snaps).nodes.values()))
    assert node.model == snaps[-1].gpus[0].static.name
    # the exporter's --lint-clean names it model_name (promtool rejects camelCase labels)
    series, snaps, _ = scrape_series("idle", seconds=1, lint_clean=True)
    gpu = [s for s in series if s.labels["__name__"] == "DCGM_FI_DEV_GPU_UTIL"]
    assert all("model_name" in s.labels and "modelName" not in s.labels for s in gpu)
    # the reader takes either
    node = next(iter(fleet_of(series, snaps).nodes.values()))
    assert node.model == snaps[-1].gpus[0].static.name


@pytest.mark.parametrize("spelling", ["hostname", "Hostname"])
def test_the_node_is_read_under_either_spelling_of_its_host_label(spelling):
    """dcgm-exporter renamed `Hostname` to `hostname` (NVIDIA/dcgm-exporter#655): a fleet
    holds both while its exporters are upgraded, and a node is its host name under either."""
    series, snaps, _ = scrape_series("compute-bound", seconds=6)
    renamed = []
    for s in series:
        labels = {k: v for k, v in s.labels.items() if k not in ("hostname", "Hostname")}
        if any(k in s.labels for k in ("hostname", "Hostname")):
            labels[spelling] = "gpu-node-7"
        renamed.append(Series(labels, s.times, s.values))
    assert any(spelling in s.labels for s in renamed)
    data = fleet_of(renamed, snaps)
    (node,) = data.nodes.values()
    assert node.key == node.hostname == "gpu-node-7" and node.host_label == spelling
    assert judge_fleet(data).nodes[0].diagnosis.primary == "compute"


EXPECTED = {s.name: s.expected_class for s in sim.list_scenarios()}


@pytest.mark.parametrize(
    "scenario",
    [
        "compute-bound",
        "input-starved",
        "sync-stall",
        "comm-bound",
        "memory-leak",
        "thermal-throttle",
    ],
)
def test_scraped_every_15_s_the_windows_keep_their_sample_counts(scenario):
    """dcgm-exporter's usual 15-30 s scrape: the classifier is told the tick, its windows keep
    their sample counts over the real times, and a leak's growth per minute is the real one.
    Collective dips are read in busy time: SM activity averages them out over a scrape. A
    leak needs 20 scrapes to show and then 3 windows in a row to turn the verdict (the node's
    panes hold the class before it until then): 330 s at 15 s."""
    span = 330 if scenario == "memory-leak" else 300
    series, snaps, _ = scrape_series(scenario, seconds=span, step=15.0)
    data = fleet_of(series, snaps, step=15.0)
    assert data.tick_s == 15.0
    assert any("keep their sample counts" in w for w in data.warnings)
    node = next(iter(data.nodes.values()))
    assert [s.timestamp for s in node.snapshots] == [s.timestamp for s in snaps]
    d = judge_fleet(data).nodes[0].diagnosis
    assert d.primary == EXPECTED[scenario]
    assert d.window_s == pytest.approx(span)
    if scenario == "comm-bound":
        assert d.evidence[0].text.startswith("GPU busy time dips on 8 GPUs"), d.evidence[0].text
        assert "(225 s)" in d.evidence[0].text
        assert any(e.metric == "nvlink_in_dips" for e in d.evidence)
    if scenario == "memory-leak":
        growth = [e for e in d.evidence if e.metric == "mem_growth_mib_per_min"]
        assert growth, d.evidence
        # the rate fitted on the real timestamps (300 s hold samples enough for it)
        true_rate = extract(snaps).mem_growth_mib_per_min
        assert true_rate is not None
        assert growth[0].value == pytest.approx(true_rate, rel=0.05)


@pytest.mark.parametrize("step", [15.0, 30.0])
def test_comm_bound_is_named_at_15_and_30_s_scrapes(step):
    """dcgm-exporter scrapes every 30 s by default, and NVLink throughput is an average over
    the scrape. A collective's dips are read in busy time (the driver's last second), from the
    scrapes that land in one: a real job's steps drift against the scrape interval, so over
    the window its scrapes land all along its step (`phase_s`: the comm-bound job's 6 s step).
    The default 6-minute window then holds 25 scrapes at 15 s, 13 at 30 s."""
    series, snaps, _ = scrape_series("comm-bound", seconds=360, step=step, phase_s=6.0)
    data = fleet_of(series, snaps, step=step)
    d = judge_fleet(data).nodes[0].diagnosis
    assert d.primary == "communication", [e.text for e in d.evidence]
    assert d.evidence[0].text.startswith("GPU busy time dips on 8 GPUs"), d.evidence[0].text
    assert any(e.metric == "nvlink_in_dips" for e in d.evidence)


def test_a_short_window_says_memory_growth_cannot_be_seen():
    series, snaps, _ = scrape_series("memory-leak", seconds=150, step=15.0)
    data = fleet_of(series, snaps, step=15.0)
    assert any("--window 330s" in w for w in data.warnings), data.warnings


def test_a_leak_seen_in_fewer_than_three_windows_is_not_named_yet():
    """300 s at 15 s: the growth shows only in the last window (20 scrapes' span), so the
    node's panes still hold the class before it, the fleet's row with them, and the fleet
    says which window would show it."""
    series, snaps, _ = scrape_series("memory-leak", seconds=300, step=15.0)
    data = fleet_of(series, snaps, step=15.0)
    assert any("--window 330s" in w for w in data.warnings), data.warnings
    node = next(iter(data.nodes.values()))
    d = judge_fleet(data).nodes[0].diagnosis
    panel = Monitor(None, tick_s=15.0)
    for s in node.snapshots:
        panel.feed(s)
    assert d.primary == panel.diagnosis.primary == "compute"
    assert d.candidate == "capacity" and d.candidate_streak == 1


@pytest.mark.parametrize("scenario", ["input-starved", "sync-stall"])
def test_dcgm_series_alone_see_the_waiting_but_not_its_cause(scenario):
    """What a plain dcgm-exporter leaves in Prometheus: no host, no processes, no threads."""
    series, snaps, _ = scrape_series(scenario, seconds=25)
    dcgm = [s for s in series if s.labels["__name__"].startswith("DCGM_")]
    node = judge_fleet(fleet_of(dcgm, snaps)).nodes[0]
    assert node.diagnosis.primary == "undetermined" and not node.diagnosis.has_confidence
    assert "host CPU and iowait" in node.diagnosis.missing_evidence
    assert any("node-exporter" in m for m in node.missing_series)
    assert any("thread" in m for m in node.missing_series)


def test_mig_instances_come_back_with_dcgm_exporters_labels():
    series, snaps, _ = scrape_series("mig", seconds=20)
    used = [
        s
        for s in series
        if s.labels["__name__"] == "DCGM_FI_DEV_FB_USED" and "GPU_I_ID" in s.labels
    ]
    assert {(s.labels["GPU_I_ID"], s.labels["GPU_I_PROFILE"]) for s in used} == {
        ("1", "3g.40gb"),
        ("5", "2g.20gb"),
        ("13", "1g.10gb"),
    }
    assert all(s.labels["gpu"] == "0" and s.labels["device"] == "nvidia0" for s in used)
    data = fleet_of(series, snaps)
    back = next(iter(data.nodes.values())).snapshots[-1].gpu(0)
    local = snaps[-1].gpu(0)
    assert back.static.mig_mode is True
    assert [(m.gpu_instance_id, m.name) for m in back.mig_instances] == sorted(
        (m.gpu_instance_id, m.name) for m in local.mig_instances
    )
    by_id = {m.gpu_instance_id: m for m in local.mig_instances}
    for m in back.mig_instances:
        assert abs(m.memory_used_bytes - by_id[m.gpu_instance_id].memory_used_bytes) < 2 * MIB
        assert abs(m.memory_total_bytes - by_id[m.gpu_instance_id].memory_total_bytes) < 2 * MIB
    procs = {p.pid: p.gpu_instance_id for p in snaps[-1].gpu_processes}
    assert {p.pid: p.gpu_instance_id for p in
            next(iter(data.nodes.values())).snapshots[-1].gpu_processes} == procs  # fmt: skip


def test_a_full_mig_instance_read_back_is_capacity():
    """A job filling its 1g.10gb instance while the GPU as a whole reads mostly free: the
    instance's own series (GPU_I_ID) are what show it."""
    series, snaps, _ = scrape_series("mig", seconds=20)
    out = []
    for s in series:
        name, gi = s.labels["__name__"], s.labels.get("GPU_I_ID")
        if gi == "13" and name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"):
            total = 9728.0
            vals = tuple(total * (0.985 if name.endswith("USED") else 0.015) for _ in s.values)
            s = Series(s.labels, s.times, vals)
        out.append(s)
    d = judge_fleet(fleet_of(out, snaps)).nodes[0].diagnosis
    assert d.primary == "capacity", (d.primary, [e.text for e in d.evidence])
    assert "MIG 1g.10gb (instance 13)" in d.evidence[0].text
    # ... and without the instance's series the same node is not capacity
    plain = [s for s in series if "GPU_I_ID" not in s.labels]
    assert judge_fleet(fleet_of(plain, snaps)).nodes[0].diagnosis.primary != "capacity"


def test_a_replaying_monitor_told_the_tick_judges_scrapes_as_the_fleet_does():
    """The live view's node pane feeds a node's scrapes through Monitor(None, tick_s=step)."""
    from gputop_diag.monitor.core import Monitor as Replaying

    series, snaps, _ = scrape_series("comm-bound", seconds=300, step=15.0)
    node = next(iter(fleet_of(series, snaps, step=15.0).nodes.values()))
    told, untold = Replaying(None, tick_s=15.0), Replaying(None)
    for s in node.snapshots:
        told.feed(s)
        untold.feed(s)
    assert told.diagnosis.primary == "communication"
    assert untold.diagnosis.primary == "insufficient_data"  # 60 s hold 4 scrapes
