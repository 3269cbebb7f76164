"""`gputop-diag exporter`: what it serves, that promtool accepts it, how it starts and stops."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gputop_diag import sim
from gputop_diag.commands.exporter import parse_listen
from gputop_diag.monitor.core import Monitor
from gputop_diag.prometheus.export import SlurmJobs, TickMetrics, window_of
from gputop_diag.prometheus.serve import start_server

PROMTOOL = shutil.which("promtool")
GPUTOP_DIAG = [sys.executable, "-m", "gputop_diag"]  # the installed entry point


def exposition(scenario: str, seconds: float = 5, faults: str = "", driver=None, **kw) -> str:
    """What a scrape of the exporter serves after `seconds` of ticks (`TickMetrics.exposition`,
    the text the server writes)."""
    sources = sim.build(scenario, faults=faults, driver=driver)
    monitor = Monitor(sources)
    metrics = TickMetrics(window=window_of(monitor), source=f"simulator:{scenario}", **kw)
    tick = monitor.run_for(seconds, metrics.update)
    assert tick is not None
    return metrics.exposition().decode()


def samples(text: str) -> dict[str, list]:
    """Samples by name, as the exposition names them. (prometheus-client's parser renames the
    samples of a counter NAME whose TYPE line has no _total, dcgm-exporter's kind, NAME_total:
    they are keyed by NAME here, as Prometheus stores them.)"""
    exact = {
        line.split()[2]
        for line in text.splitlines()
        if line.startswith("# TYPE ") and line.endswith(" counter")
    }
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = fam.name if fam.name in exact and s.name == fam.name + "_total" else s.name
            out.setdefault(name, []).append(s)
    return out


def types(text: str) -> dict[str, str]:
    """Each family's TYPE line."""
    return {
        line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")
    }


def helps(text: str) -> dict[str, str]:
    return {
        line.split(" ", 3)[2]: line.split(" ", 3)[3]
        for line in text.splitlines()
        if line.startswith("# HELP ")
    }


def promtool(text: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: prometheus)")
@pytest.mark.parametrize("scenario", ["input-starved", "xid-app", "mig", "idle"])
def test_promtool_accepts_the_exposition(scenario):
    text = exposition(
        scenario, seconds=20, jobs=SlurmJobs(psutil=None, own_job="77"), lint_clean=True
    )
    p = promtool(text)
    assert p.returncode == 0, p.stdout + p.stderr


# What promtool's lint says of dcgm-exporter's own output, and so of ours by default: its model
# label is camelCase, its counters lack _total, one counter's name holds "counter".
DCGM_EXPORTERS_OWN_LINT = (
    "label names should be written in 'snake_case' not 'camelCase'",
    'counter metrics should have "_total" suffix',
    "metric name should not include type 'counter'",
)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: prometheus)")
def test_dcgm_labels_are_what_promtool_lints_and_why_they_are_optional():
    """The default parses (exit 3: lint only, not 1) and promtool finds in it nothing but what
    it finds in dcgm-exporter's own output; --lint-clean is clean."""
    text = exposition("comm-bound", seconds=3, faults="vgpu:licensed")
    p = promtool(text)
    assert p.returncode == 3, p.stdout + p.stderr
    problems = {line for line in (p.stdout + p.stderr).splitlines() if line.strip()}
    assert problems
    counters = {n for n, t in types(text).items() if t == "counter" and n.startswith("DCGM_")}
    for line in problems:
        name, _, what = line.partition(" ")
        assert what in DCGM_EXPORTERS_OWN_LINT, line
        if "counter" in what:
            assert name in counters, line
        else:
            assert name.startswith("DCGM_") or name.startswith("gputop_diag_"), line
    assert promtool(exposition("idle", seconds=1, lint_clean=True)).returncode == 0


def test_dcgm_types_names_and_labels():
    text = exposition("comm-bound", seconds=3, jobs=SlurmJobs(psutil=None, own_job="9"))
    got = samples(text)
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    # DCGM's counters keep their names and their type, as dcgm-exporter serves them
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter" in text
    assert "\nDCGM_FI_DEV_ECC_DBE_VOL_TOTAL{" in text
    assert "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter" in text
    assert "gputop_diag_pcie_replays" not in text  # (only under --lint-clean)
    util = got["DCGM_FI_DEV_GPU_UTIL"]
    assert len(util) == 8
    labels = util[0].labels
    assert set(labels) == {
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "hostname",
        "DCGM_FI_DRIVER_VERSION",
        "hpc_job",
    }
    assert labels["device"] == f"nvidia{labels['gpu']}"
    assert labels["DCGM_FI_DRIVER_VERSION"] == "570.124.06"  # the scenario's driver
    assert labels["UUID"].startswith("GPU-") and labels["hpc_job"] == "9"
    assert all(0 <= s.value <= 1 for s in got["DCGM_FI_PROF_SM_ACTIVE"])
    assert all(s.value > 1e6 for s in got["DCGM_FI_PROF_NVLINK_TX_BYTES"])  # bytes per second


def test_verdict_input_pressure_and_dataloader_cpu():
    got = samples(exposition("input-starved", seconds=20))
    (verdict,) = got["gputop_diag_bottleneck"]
    assert verdict.labels["class"] == "input_pipeline" and 0.5 < verdict.value <= 1
    figures = {s.labels["figure"] for s in got["gputop_diag_input_pressure"]}
    assert "dataloader_worker_cpu" in figures and "iowait" in figures
    assert all(s.value > 100 for s in got["gputop_diag_dataloader_cpu_percent"])
    workers = [s for s in got["gputop_diag_process_child_cpu_percent"]]
    assert workers and all(s.labels["name"] == "pt_data_worker" for s in workers)
    got = samples(exposition("compute-bound", seconds=20))
    assert "gputop_diag_input_pressure" not in got
    assert got["gputop_diag_bottleneck"][0].labels["class"] == "compute"


def test_a_lost_gpu_stops_its_dcgm_series_and_says_so():
    got = samples(exposition("compute-bound", seconds=4, faults="lose:3@2"))
    lost = {s.labels["gpu"]: s.value for s in got["gputop_diag_gpu_lost"]}
    assert lost["3"] == 1 and lost["0"] == 0
    assert "3" not in {s.labels["gpu"] for s in got["DCGM_FI_DEV_GPU_UTIL"]}
    assert "gpu_lost" in {s.labels["kind"] for s in got["gputop_diag_alerts"]}


def test_xids_are_counted_by_code_and_the_last_is_dcgms_gauge():
    got = samples(exposition("xid-app", seconds=37))
    xids = {
        (s.labels["gpu"], s.labels["xid"]): s.value for s in got["gputop_diag_xid_events_total"]
    }
    assert xids == {("5", "13"): 1, ("5", "43"): 1}
    last = {s.labels["gpu"]: s.value for s in got["DCGM_FI_DEV_XID_ERRORS"]}
    assert last["5"] == 43 and last["0"] == 0


def test_sanitize_drops_identifying_labels_and_the_host_name():
    text = exposition("input-starved", seconds=3, sanitize=True)
    assert "gpu-node-07" not in text and "GPU-" not in text and "00000000:" not in text
    assert "hostname=" not in text and "UUID=" not in text and "pci_bus_id=" not in text
    assert "Hostname=" not in exposition("idle", seconds=1, sanitize=True, host_label="Hostname")
    # the runtimes' thread names stay (the classifier reads them), a script's own does not
    assert 'name="pt_data_worker"' in text and 'name="pt_main_thread"' in text
    metrics = TickMetrics(sanitize=True)
    assert metrics._name("alice_train.py") == "other"
    assert metrics._name("pt_data_worker") == "pt_data_worker"
    assert TickMetrics()._name("alice_train.py") == "alice_train.py"


def test_parse_listen():
    assert parse_listen(":9401") == ("0.0.0.0", 9401)
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen("[::1]:9401") == ("::1", 9401)
    for bad in ("9401", "host:", "host:99999", "host:x"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def _start(*args: str) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen(
        [*GPUTOP_DIAG, *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    line = p.stderr.readline()
    if "serving http://" not in line:
        p.kill()
        raise AssertionError(line + p.stderr.read())
    return p, int(line.split("serving http://")[1].split("/")[0].rsplit(":", 1)[1])


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _last_tick(text: str) -> float:
    return samples(text)["gputop_diag_last_tick_timestamp_seconds"][0].value


def test_exporter_serves_at_the_wall_clocks_pace_and_stops_on_sigterm():
    p, port = _start("--demo", "compute-bound", "exporter", "--listen", "127.0.0.1:0")
    try:
        first = _scrape(port)
        assert 'source="simulator:compute-bound"' in first
        time.sleep(2.2)
        second = _scrape(port)
        # a demo's simulated time moves with the wall clock, a tick a second
        assert 1.5 <= _last_tick(second) - _last_tick(first) <= 3.5
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=5) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_usage_errors_and_a_busy_port_are_exit_2():
    r = subprocess.run(
        [*GPUTOP_DIAG, "--demo", "idle", "exporter", "--listen", "nonsense"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2 and "ADDR:PORT" in r.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run(
            [
                *GPUTOP_DIAG,
                "--demo",
                "idle",
                "exporter",
                "--listen",
                f"127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert r.returncode == 2 and "cannot listen" in r.stderr and "--listen" in r.stderr


def test_no_driver_is_exit_3_with_the_reason():
    r = subprocess.run(
        [*GPUTOP_DIAG, "--demo", "no-gpu", "exporter", "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ},
    )
    assert r.returncode == 3 and "next:" in r.stderr and "Traceback" not in r.stderr


def test_exporter_and_fleet_never_import_textual():
    code = (
        "import sys\n"
        "import gputop_diag.commands.exporter, gputop_diag.commands.fleet\n"
        "import gputop_diag.prometheus.export, gputop_diag.fleet.judge, gputop_diag.fleet.read\n"
        "assert 'textual' not in sys.modules, 'textual imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_exporter_stops_promptly_on_sigterm_and_sigint(sig):
    p, port = _start("--demo", "comm-bound", "exporter", "--listen", "127.0.0.1:0")
    try:
        assert "DCGM_FI_DEV_GPU_UTIL" in _scrape(port)
        p.send_signal(sig)
        # a service manager waits for it: under a second (no half-second server poll)
        assert p.wait(timeout=1.0) == 0
        assert "Traceback" not in p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# dcgm-exporter's etc/default-counters.csv, its 25 counters: name, Prometheus type, help
# (https://github.com/NVIDIA/dcgm-exporter/blob/d5e5f510a1b6b393f39a43293ccd9dc985defc79/etc/default-counters.csv)
DEFAULT_COUNTERS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
    ),
)
# dcgm-exporter's labels on a GPU's series (internal/pkg/rendermetrics/render_metrics.go, after
# NVIDIA/dcgm-exporter#655), with DCGM_FI_DRIVER_VERSION, the "label" row of the same file
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname"}


def test_every_default_counter_of_dcgm_exporter_with_its_name_type_help_and_labels():
    text = exposition("comm-bound", seconds=3, faults="vgpu:licensed", jobs=NO_JOB)
    got, typed, helped = samples(text), types(text), helps(text)
    assert len(DEFAULT_COUNTERS) == 25
    for name, kind, help_ in DEFAULT_COUNTERS:
        assert typed.get(name) == kind, name
        assert helped.get(name) == help_, name
        assert len(got.get(name, ())) == 8, name  # one per GPU, under its exact name
        for s in got[name]:
            assert DCGM_LABELS | {"DCGM_FI_DRIVER_VERSION"} <= set(s.labels), name
            assert s.labels["hostname"] == "gpu-node-07" and s.labels["modelName"]


NO_JOB = SlurmJobs(psutil=None, own_job=None)


def run_metrics(scenario: str, seconds: float, faults: str = "", driver=None, **kw):
    """(metrics, the sources, the last tick) after `seconds` of ticks."""
    sources = sim.build(scenario, faults=faults, driver=driver)
    monitor = Monitor(sources)
    metrics = TickMetrics(window=window_of(monitor), jobs=NO_JOB, **kw)
    tick = monitor.run_for(seconds, metrics.update)
    return metrics, sources, tick


def by_gpu(text: str, name: str) -> dict[str, float]:
    return {s.labels["gpu"]: s.value for s in samples(text).get(name, ())}


def test_the_new_counters_are_nvmls_own_readings():
    sources = sim.build("comm-bound")
    sources.sim.pcie_replays = {2: 17}  # a link that retried
    monitor = Monitor(sources)
    metrics = TickMetrics(window=window_of(monitor), jobs=NO_JOB)
    tick = monitor.run_for(3, metrics.update)
    text = metrics.exposition().decode()
    nvml, g = sources.nvml, tick.snapshot.gpus[0]
    energy = by_gpu(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    # NVML's reading of this tick, in its unit (mJ), and no later than a reading taken now
    assert energy["0"] == g.energy_mj
    assert energy["0"] <= nvml.nvmlDeviceGetTotalEnergyConsumption(
        nvml.nvmlDeviceGetHandleByIndex(0)
    )
    monitor.run_for(2, metrics.update)
    later = by_gpu(metrics.exposition().decode(), "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    # a counter: 2 s more at ~600 W is ~1.2e6 mJ more
    assert 0.5e6 < later["0"] - energy["0"] < 2e6
    replays = by_gpu(text, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")
    assert replays["2"] == 17 and replays["0"] == 0
    gr = by_gpu(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")["0"]
    assert gr == pytest.approx(g.gpm.graphics_util_pct / 100) and 0 < gr <= 1
    nvl = by_gpu(text, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")["0"]
    assert nvl == pytest.approx((g.nvlink_tx_kib_s + g.nvlink_rx_kib_s) * 1024 / 1e6)
    assert nvl > 1000  # MB/s of an all-reduce's traffic


def test_the_vgpu_license_status_is_0_on_bare_metal_and_read_on_a_vgpu():
    """dcgm-exporter serves 0 on a GPU that is no vGPU (NVIDIA/dcgm-exporter#317: an A30 on bare
    metal); a vGPU guest's is read; where NVML cannot say whether it is a vGPU, none is served."""
    bare = by_gpu(exposition("idle", seconds=1), "DCGM_FI_DEV_VGPU_LICENSE_STATUS")
    assert len(bare) == 8 and set(bare.values()) == {0.0}
    unknown = exposition(
        "idle", seconds=1, faults="nvmlDeviceGetVirtualizationMode=FUNCTION_NOT_FOUND"
    )
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS{" not in unknown
    for state, value in (("licensed", 1.0), ("unlicensed", 0.0)):
        text = exposition("idle", seconds=1, faults=f"vgpu:{state}")
        assert set(by_gpu(text, "DCGM_FI_DEV_VGPU_LICENSE_STATUS").values()) == {value}, state


def test_a_driver_or_gpu_without_a_reading_drops_that_series_only():
    """No GPM before R525 (no GR engine active), no licensable features _v4 before R470 (no
    license status on a vGPU), energy NOT_SUPPORTED or FUNCTION_NOT_FOUND: the series is absent,
    every other is there, and nothing is retried every tick."""
    base = samples(exposition("comm-bound", seconds=2))
    for driver, faults, gone in (
        ("R470", "", {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE"}),
        (
            "R418",
            "vgpu:licensed",
            {
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                "DCGM_FI_PROF_SM_ACTIVE",
                "DCGM_FI_DEV_VGPU_LICENSE_STATUS",  # a vGPU whose license _v4 cannot read
            },
        ),
        (None, "nvmlDeviceGetTotalEnergyConsumption=NOT_SUPPORTED", set()),
        (None, "nvmlDeviceGetTotalEnergyConsumption=FUNCTION_NOT_FOUND", set()),
        (None, "nvmlDeviceGetPcieReplayCounter=FUNCTION_NOT_FOUND", set()),
    ):
        metrics, sources, _ = run_metrics("comm-bound", 2, faults, driver)
        got = samples(metrics.exposition().decode())
        missing = set(base) - set(got)
        if "Energy" in faults:
            gone = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}
            assert sources.sim.call_counts["nvmlDeviceGetTotalEnergyConsumption"] == 8  # once a GPU
        if "Replay" in faults:
            gone = {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER"}
        older = _GPM_ONLY | _OLDER_DRIVERS if driver else set()
        assert gone <= missing and not missing - gone - older, (driver, faults, missing)
        # R418's vGPU: the symbol is missing; every other GPU here is no vGPU: 0, as dcgm-exporter
        assert ("DCGM_FI_DEV_VGPU_LICENSE_STATUS" in got) == (driver != "R418"), driver
        assert len(got["DCGM_FI_DEV_GPU_UTIL"]) == 8


# What older drivers lack besides: memory's `reserved` (R510), row remapping (R460)
_OLDER_DRIVERS = {
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
}
# The other series that come from GPM (absent with it)
_GPM_ONLY = {
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
}


def test_lint_clean_and_the_old_host_label():
    text = exposition("comm-bound", seconds=1, lint_clean=True)
    labels = samples(text)["DCGM_FI_DEV_GPU_UTIL"][0].labels
    assert "model_name" in labels and "modelName" not in labels
    assert types(text)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "untyped"
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" not in samples(text)
    assert samples(text)["gputop_diag_pcie_replays_total"]
    text = exposition("comm-bound", seconds=1, host_label="Hostname")
    for s in samples(text)["DCGM_FI_DEV_GPU_UTIL"] + samples(text)["gputop_diag_bottleneck"]:
        assert s.labels["Hostname"] == "gpu-node-07" and "hostname" not in s.labels
    with pytest.raises(ValueError):
        TickMetrics(host_label="HOSTNAME")


def test_the_server_answers_in_the_text_format_gzipped_when_asked():
    metrics, _, _ = run_metrics("idle", 1)
    server, _ = start_server(0, "127.0.0.1", metrics)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        # what Prometheus asks for: OpenMetrics first; it gets the text format
        accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
        req = urllib.request.Request(url, headers={"Accept": accept, "Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert r.headers["Content-Encoding"] == "gzip"
            body = gzip.decompress(r.read()).decode()
        assert body == metrics.exposition().decode()
        assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in body
        assert "# EOF" not in body
        with urllib.request.urlopen(url, timeout=5) as r:
            assert r.read().decode() == body
    finally:
        # shutdown() first: a socket closed under serve_forever() leaves its loop spinning on
        # the dead descriptor (a core's worth of CPU for the rest of the worker's life)
        server.shutdown()
        server.server_close()


# docs/fleet.md's query-time rewrite across dcgm-exporter's rename of Hostname to hostname
ACROSS_THE_RENAME = 'label_replace(DCGM_FI_DEV_GPU_UTIL, "hostname", "$1", "Hostname", "(.+)")'


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: prometheus)")
def test_the_documented_label_replace_reads_both_spellings(tmp_path):
    """`promtool test rules`: a node scraped before the rename (Hostname) and one after
    (hostname) each come out under hostname."""
    doc = (Path(__file__).parent.parent / "docs" / "fleet.md").read_text(encoding="utf-8")
    assert ACROSS_THE_RENAME in doc
    expr = f"avg by (hostname) ({ACROSS_THE_RENAME})"
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"DCGM_FI_DEV_GPU_UTIL{{{labels}}}", "values": values}
                    for labels, values in (
                        ('gpu="0",Hostname="old-node"', "40x2"),
                        ('gpu="1",Hostname="old-node"', "60x2"),
                        ('gpu="0",hostname="new-node"', "90x2"),
                    )
                ],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "1m",
                        "exp_samples": [
                            {"labels": '{hostname="old-node"}', "value": 50},
                            {"labels": '{hostname="new-node"}', "value": 90},
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "rename_test.yml"
    path.write_text(json.dumps(test), encoding="utf-8")  # JSON is YAML
    p = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stdout + p.stderr
