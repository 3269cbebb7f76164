"""`gputop-diag fleet` without a Prometheus: a Prometheus that is down or hangs, usage errors,
and the multi-node findings (correlated dips, the straggler) over simulated nodes."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from gputop_diag import sim
from gputop_diag.commands.fleet import parse_duration, parse_time
from gputop_diag.fleet.judge import correlated_dips, judge_fleet, render_fleet_text, to_fleet_json
from gputop_diag.fleet.query import selector
from gputop_diag.fleet.read import FleetData, NodeData
from gputop_diag.monitor.core import Monitor
from gputop_diag.prometheus.client import Prometheus, PrometheusError

GPUTOP_DIAG = [sys.executable, "-m", "gputop_diag"]  # the installed entry point


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GPUTOP_DIAG, *args], capture_output=True, text=True, timeout=60)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- Prometheus down, slow, or not Prometheus ------------------------------------------------------
def test_prometheus_down_is_exit_4_with_the_next_step():
    t0 = time.monotonic()
    r = run_cli("fleet", "--prometheus", f"http://127.0.0.1:{closed_port()}")
    assert r.returncode == 4
    assert "cannot reach Prometheus" in r.stderr and "next:" in r.stderr
    assert "Traceback" not in r.stderr and time.monotonic() - t0 < 20


@pytest.fixture
def hung_server():
    """A server that accepts connections and never answers (an overloaded Prometheus)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


def test_prometheus_too_slow_is_exit_4_within_the_timeout(hung_server):
    t0 = time.monotonic()
    r = run_cli("fleet", "--prometheus", f"127.0.0.1:{hung_server}", "--timeout", "1")
    assert r.returncode == 4
    assert "did not answer within 1 s" in r.stderr and "--timeout" in r.stderr
    assert time.monotonic() - t0 < 15


def _not_prometheus(path: str) -> tuple[int, str, bytes]:
    """A web server that is not Prometheus: a login page, a 404, its own error page."""
    if path.startswith("/page"):  # a web server's own error page, many lines long
        page = (
            b"<!DOCTYPE html>\n<html>\n<head>\n<title>404 Not Found</title>\n</head>\n"
            b"<body>\n<h1>Not Found</h1>\n<p>The requested URL was not found.</p>\n"
            b"</body>\n</html>\n"
        )
        return 404, "text/html", page
    status = 404 if path.startswith("/missing") else 200
    return status, "text/html", b"<html>a login page</html>"


@pytest.fixture
def web_server(canned_http):
    canned_http.answer = _not_prometheus
    return canned_http.url


def test_a_url_that_is_not_prometheus_is_said_so(web_server):
    with pytest.raises(PrometheusError) as e:
        Prometheus(web_server).query("up")
    assert e.value.kind == "bad_answer" and "Prometheus' JSON" in e.value.message
    with pytest.raises(PrometheusError) as e:
        Prometheus(web_server + "/missing").query("up")
    assert e.value.kind == "http" and "404" in e.value.message


def test_a_web_servers_error_page_is_one_short_line(web_server):
    r = run_cli("fleet", "--prometheus", web_server + "/page")
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and len(r.stderr) < 400, r.stderr
    assert "<" not in r.stderr and "404" in r.stderr and "next: check the URL" in r.stderr


def main_in_process(capsys, *args: str) -> tuple[int, str]:
    """gputop-diag's entry point in this process: (exit code, stderr)."""
    from gputop_diag import cli

    try:
        code = cli.main(list(args))
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    return code, capsys.readouterr().err


def test_credentials_in_the_url_become_basic_auth_and_stay_out_of_messages():
    p = Prometheus("https://alice:s3cret@prom.example:9090/")
    assert p.url == "https://prom.example:9090"
    assert p.headers["Authorization"] == "Basic YWxpY2U6czNjcmV0"
    p = Prometheus(f"http://bob:pw@127.0.0.1:{closed_port()}")
    with pytest.raises(PrometheusError) as e:
        p.query("up")
    assert "pw" not in e.value.message and "bob" not in e.value.message


def test_usage_errors_are_exit_2(capsys):
    for args in (
        ("--window", "five"),
        ("--window", "0s"),
        ("--step", "10m", "--window", "5m"),
        ("--at", "yesterday"),
        ("--timeout", "0"),
        ("--workers", "0"),
        ("--workers", "two"),
    ):
        code, err = main_in_process(capsys, "fleet", "--prometheus", "http://127.0.0.1:9", *args)
        assert code == 2, (args, err)
        assert "Traceback" not in err
    code, err = main_in_process(capsys, "fleet", "--prometheus", "ftp://somewhere")
    assert code == 2 and "expected a URL" in err
    code, err = main_in_process(capsys, "fleet")
    assert code == 2 and "--prometheus" in err


def test_durations_times_and_selectors():
    assert parse_duration("5m", "w") == 300
    assert parse_duration("90", "w") == 90
    assert parse_duration("1.5h", "w") == 5400
    assert parse_time("1768471200") == 1768471200
    assert parse_time("2026-01-15T10:00:00Z") == 1768471200
    assert selector("X", "") == '{__name__="X"}'
    assert selector("X", '{cluster="a"}') == '{__name__="X", cluster="a"}'
    assert selector("X", 'Hostname=~"gpu-.*"') == '{__name__="X", Hostname=~"gpu-.*"}'


# -- multi-node findings -----------------------------------------------------------------------
def test_correlated_dips():
    busy = [90.0, 90, 40, 90, 90, 40, 90, 90, 40, 90]
    other = [90.0, 40, 90, 90, 40, 90, 90, 40, 90, 90]
    share, n = correlated_dips([busy, busy, busy])
    assert n == 10 and share == pytest.approx(0.3)
    share, _ = correlated_dips([busy, other])
    assert share == 0.0
    assert correlated_dips([busy]) == (0.0, 0)


def node(key: str, scenario: str, group: str | None, seconds: int = 20, seed=None) -> NodeData:
    sources = sim.build(scenario, seed=seed)
    monitor = Monitor(sources)
    snaps = []
    monitor.run_for(seconds, lambda t: snaps.append(t.snapshot))
    return NodeData(key, "gpu-node-07", (key,), group=group, snapshots=snaps,
                    last_seen=snaps[-1].timestamp, sources=("dcgm", "profiling"))  # fmt: skip


def fleet_of(*nodes: NodeData) -> FleetData:
    end = max(s.timestamp for n in nodes for s in n.snapshots)
    start = min(s.timestamp for n in nodes for s in n.snapshots)
    return FleetData(start, end, 1.0, 1.0, {n.key: n for n in nodes})


def test_a_job_of_equals_has_no_straggler():
    fv = judge_fleet(fleet_of(*(node(f"n{i}", "comm-bound", "j1") for i in range(3))))
    (job,) = fv.jobs
    assert job.classes == {"communication": 3}
    assert not [f for f in job.findings if f.kind == "straggler"]
    # the same timeline on every node: the dips line up across nodes too
    dips = [f for f in job.findings if f.kind == "correlated_dips"]
    assert dips and dips[0].value >= 10


def test_the_odd_node_out_of_a_waiting_job_is_the_straggler():
    nodes = [node("a", "comm-bound", "j"), node("b", "comm-bound", "j", seed=7)]
    nodes.append(node("slow", "input-starved", "j"))
    nodes.append(node("alone", "compute-bound", None))  # no job: not part of it
    fv = judge_fleet(fleet_of(*nodes))
    (job,) = fv.jobs
    (finding,) = [f for f in job.findings if f.kind == "straggler"]
    assert finding.node == "slow" and "input pipeline" in finding.text
    doc = to_fleet_json(fv, prometheus="http://p:9090", match="", group_by="hpc_job")
    assert doc["schema"] == "gputop-diag.fleet/1"
    assert {n["node"]: n["primary"] for n in doc["nodes"]} == {
        "a": "communication",
        "b": "communication",
        "slow": "input_pipeline",
        "alone": "compute",
    }
    kinds = {f["kind"]: f for f in doc["jobs"][0]["findings"]}
    assert kinds["straggler"]["node"] == "slow"
    text = render_fleet_text(fv)
    assert "slow holds the job back" in text and "By class:" in text


def test_the_text_is_laid_out_for_the_terminal_and_whole_in_a_file(monkeypatch):
    """The evidence column is cut to the terminal's width (COLUMNS too), never to a fixed 100
    columns; sent to a file or a pipe, every line is whole."""
    from gputop_diag.commands.fleet import text_width

    nodes = [node(k, "memory-leak", None) for k in ("a", "b")]
    fv = judge_fleet(fleet_of(*nodes))
    whole = render_fleet_text(fv, width=10_000)
    evidence = max(len(line) for line in whole.splitlines() if line.startswith("a "))
    assert evidence > 100  # a leak's evidence, with its time until full
    monkeypatch.delenv("COLUMNS", raising=False)
    assert text_width() >= evidence  # the test's stdout is captured: not a terminal
    monkeypatch.setenv("COLUMNS", "150")
    assert text_width() == 150
    cut = render_fleet_text(fv, width=text_width())
    assert all(len(line) <= 150 for line in cut.splitlines() if line.startswith("a "))
    assert any(line.endswith("…") for line in cut.splitlines() if line.startswith("a "))
    monkeypatch.setenv("COLUMNS", "20")
    assert text_width() == 60


def test_two_different_nodes_in_a_small_job_are_not_a_straggler():
    nodes = [node("a", "comm-bound", "j"), node("b", "input-starved", "j")]
    nodes.append(node("c", "compute-bound", "j"))
    (job,) = judge_fleet(fleet_of(*nodes)).jobs
    assert not [f for f in job.findings if f.kind == "straggler"]


def test_a_node_that_stopped_reporting_is_marked_stale():
    a = node("a", "compute-bound", None)
    b = node("b", "compute-bound", None, seconds=10)
    data = fleet_of(a, b)
    fv = judge_fleet(data)
    stale = {v.node.key: v.stale_s for v in fv.nodes}
    assert stale["a"] is None and stale["b"] == pytest.approx(10, abs=1)
    assert "STALE" in render_fleet_text(fv)


@pytest.mark.parametrize("true", [1, 2, 5, 10, 15, 20, 30, 60])
def test_scrape_interval_from_sample_counts_in_closed_ranges(true):
    """A range [t - W, t] holds W/step or W/step + 1 samples; the finest span's estimate,
    as detect_step takes it, is the scrape interval either way."""
    from gputop_diag.fleet.query import _step_of, step_spans

    for extra in (0, 1):
        got = [_step_of(w, w // true + extra) for w in step_spans(300.0) if w // true + extra]
        assert min(got) == true


def test_timeouts_are_sent_in_a_form_prometheus_parses():
    from gputop_diag.prometheus.client import api_duration

    # Prometheus' API refuses "2.5s" (model.ParseDuration takes whole units only)
    assert api_duration(10) == "10s" and api_duration(2.5) == "2500ms"
    assert api_duration(0.0004) == "1ms" and api_duration(0.25) == "250ms"


def test_each_refusal_gets_its_own_next_step():
    from gputop_diag.prometheus.client import refusal_hint

    said = 'invalid parameter "timeout": cannot parse "2.5s" to a valid duration'
    assert "--timeout" in refusal_hint(said) and "--match" not in refusal_hint(said)
    said = (
        "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the "
        "query resolution (?step=XX)"
    )
    assert "--step" in refusal_hint(said)
    assert "--match" in refusal_hint('1:17: parse error: unexpected "}" in label matching')


def test_nodes_sort_in_natural_order():
    from dataclasses import replace

    from gputop_diag.fleet.judge import natural_key
    from gputop_diag.tui.fleet_table import FleetRow, sort_rows

    names = ["gpu10", "gpu2", "GPU3", "10.0.0.10:9400", "10.0.0.9:9400", "gpu1"]
    assert sorted(names, key=natural_key) == [
        "10.0.0.9:9400", "10.0.0.10:9400", "gpu1", "gpu2", "GPU3", "gpu10",
    ]  # fmt: skip
    row = FleetRow("k", None, "n", "compute", "compute", "-", "-", 3, "-", "8", "")
    rows = [replace(row, key=n, node=n) for n in ("gpu10", "gpu2", "gpu1")]
    for by in ("node", "alerts", "class"):
        assert [r.node for r in sort_rows(rows, by)] == ["gpu1", "gpu2", "gpu10"], by


def test_a_query_pool_hands_back_results_and_errors_and_drops_what_has_not_started():
    from gputop_diag.fleet.query import QueryPool

    gate = threading.Event()
    pool = QueryPool(threads=2)
    ok = pool.submit(lambda x: x * 2, 21)
    bad = pool.submit(lambda: 1 / 0)
    assert ok.result(timeout=5) == 42
    with pytest.raises(ZeroDivisionError):
        bad.result(timeout=5)
    started = threading.Semaphore(0)

    def hold() -> bool:
        started.release()
        return gate.wait(5)

    held = [pool.submit(hold) for _ in range(2)]
    assert started.acquire(timeout=5) and started.acquire(timeout=5)  # both threads busy
    queued = pool.submit(lambda: "never")
    pool.close()
    assert queued.cancelled()
    gate.set()
    assert all(f.result(timeout=5) is True for f in held)
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)
