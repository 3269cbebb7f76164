"""The live view over Prometheus (`gputop-diag --prometheus URL`): the Fleet pane and a node's
panes, driven by Textual's pilot against a small Prometheus stand-in over HTTP.

The stand-in serves what `gputop-diag exporter` serves for simulated nodes (each scenario's
series rendered by the exporter's own collector, moved to end now), answering the HTTP API's
range and instant queries for the selectors the fleet reader sends; node-exporter's PromQL is
refused as a Prometheus without node-exporter's series would leave it empty. The real
Prometheus runs in tests/test_fleet_prometheus.py and tests/test_fleet_tls.py.
"""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest
from test_fleet_codec import scrape_series

from gputop_diag.fleet.judge import to_fleet_json
from gputop_diag.fleet.live import FleetQuery, FleetWatch, NodeFeed, node_matcher
from gputop_diag.prometheus.client import Prometheus
from gputop_diag.tui.fleet_app import FleetApp, FleetViewState, NodeApp
from gputop_diag.tui.fleet_table import FleetTable, fleet_rows, sort_rows

STEP = 1.0
NODES = {"node-a": "comm-bound", "node-b": "input-starved", "node-c": "compute-bound"}
EXPECTED = {"node-a": "communication", "node-b": "input_pipeline", "node-c": "compute"}
LOOKBACK_S = [300.0]  # Prometheus' lookback; a test shortens it to see a node stop
_MATCHER = re.compile(r'(\w+)\s*(=~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


class FakePrometheus(http.server.ThreadingHTTPServer):
    """Prometheus' query API over a fixed set of series (lookback: the last sample within
    5 minutes, as Prometheus does)."""

    def __init__(self, series: list) -> None:
        self.series = series
        self.queries: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def select(self, sel: str) -> list:
        out = []
        matchers = [(k, op, re.sub(r"\\(.)", r"\1", v)) for k, op, v in _MATCHER.findall(sel)]
        for s in self.series:
            ok = True
            for k, op, v in matchers:
                have = s.labels.get(k, "")
                if op == "=" and have != v or op == "!=" and have == v:
                    ok = False
                elif op == "=~" and not re.fullmatch(v, have):
                    ok = False
            if ok:
                out.append(s)
        return out


def _at(s, t: float) -> float | None:
    best = None
    for ts, v in zip(s.times, s.values, strict=True):
        if ts <= t + 1e-9 and t - ts <= LOOKBACK_S[0]:
            best = v
    return best


class _Handler(http.server.BaseHTTPRequestHandler):
    server: FakePrometheus

    def log_message(self, *args) -> None:
        pass

    def _answer(self, code: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        q = form["query"][0]
        self.server.queries.append(q)
        if q.startswith("{") and self.path.endswith("/query_range"):
            start, end, step = (float(form[k][0]) for k in ("start", "end", "step"))
            n = int(round((end - start) / step)) + 1
            result = []
            for s in self.server.select(q):
                values = []
                for k in range(n):
                    t = start + k * step
                    v = _at(s, t)
                    if v is not None:
                        values.append([t, repr(v)])
                if values:
                    result.append({"metric": s.labels, "values": values})
            self._answer(200, {"status": "success", "data": {"resultType": "matrix",
                                                              "result": result}})  # fmt: skip
            return
        m = re.fullmatch(r"count by \(([\w, ]+)\) \((\{.*\})\)", q)
        if m and self.path.endswith("/query_range"):  # the fleet's nodes, counted per step
            by = [b.strip() for b in m.group(1).split(",")]
            start, end, step = (float(form[k][0]) for k in ("start", "end", "step"))
            counts: dict[tuple, dict[float, int]] = {}
            for s in self.server.select(m.group(2)):
                group = tuple((b, s.labels[b]) for b in by if s.labels.get(b))
                for k in range(int(round((end - start) / step)) + 1):
                    t = start + k * step
                    if _at(s, t) is not None:
                        at = counts.setdefault(group, {})
                        at[t] = at.get(t, 0) + 1
            result = [
                {"metric": dict(g), "values": [[t, str(n)] for t, n in sorted(c.items())]}
                for g, c in counts.items()
            ]
            self._answer(200, {"status": "success", "data": {"resultType": "matrix",
                                                              "result": result}})  # fmt: skip
            return
        m = re.fullmatch(r"last_over_time\((\{.*\})\[(\d+)s\]\)", q)
        if m and self.path.endswith("/query"):  # a static figure's newest sample
            at, w = float(form["time"][0]), float(m.group(2))
            result = []
            for s in self.server.select(m.group(1)):
                got = [(t, v) for t, v in zip(s.times, s.values, strict=True) if at - w < t <= at]
                if got:
                    labels = {k: v for k, v in s.labels.items() if k != "__name__"}
                    result.append({"metric": labels, "value": [at, repr(got[-1][1])]})
            self._answer(200, {"status": "success", "data": {"resultType": "vector",
                                                              "result": result}})  # fmt: skip
            return
        m = re.fullmatch(r"max\(count_over_time\((\{.*\})\[(\d+)s\]\)\)", q)
        if m and self.path.endswith("/query"):
            at, w = float(form["time"][0]), float(m.group(2))
            counts = [
                sum(1 for t in s.times if at - w < t <= at) for s in self.server.select(m.group(1))
            ]
            result = [{"metric": {}, "value": [at, str(max(counts))]}] if counts else []
            self._answer(200, {"status": "success", "data": {"resultType": "vector",
                                                              "result": result}})  # fmt: skip
            return
        m = re.fullmatch(r"max\(timestamp\((\{.*\})\)\)", q)
        if m and self.path.endswith("/query"):  # the newest sample within the lookback
            at = float(form["time"][0])
            seen = [
                t
                for s in self.server.select(m.group(1))
                for t in s.times
                if t <= at + 1e-9 and at - t <= LOOKBACK_S[0]
            ]
            result = [{"metric": {}, "value": [at, repr(max(seen))]}] if seen else []
            self._answer(200, {"status": "success", "data": {"resultType": "vector",
                                                              "result": result}})  # fmt: skip
            return
        self._answer(400, {"status": "error", "error": "not served by the stand-in"})


@pytest.fixture(scope="module")
def prometheus():
    """Three simulated nodes (a Slurm job of two), 40 s at one scrape a second, ending now."""
    from gputop_diag.prometheus.client import Series
    from gputop_diag.prometheus.export import SlurmJobs

    series = []
    for host, scenario in NODES.items():
        job = SlurmJobs(None, own_job="77") if host != "node-c" else None
        got, _, _ = scrape_series(scenario, seconds=40, instance=f"{host}:9401", jobs=job)
        shift = time.time() - max(max(s.times) for s in got)
        for s in got:
            labels = dict(s.labels)
            for spelling in ("hostname", "Hostname"):  # served as an older dcgm-exporter
                if labels.pop(spelling, None) is not None:
                    labels["Hostname"] = host
            series.append(Series(labels, tuple(t + shift for t in s.times), s.values))
    server = FakePrometheus(series)
    server.end = max(max(s.times) for s in series)  # the newest scrape the stand-in holds
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def query(url: str, **kw) -> FleetQuery:
    return FleetQuery(Prometheus(url, timeout=10), window_s=30.0, **kw)


def watch_at_end(prometheus, q: FleetQuery | None = None) -> FleetWatch:
    """The fleet judged at the stand-in's newest scrape, however late in the module a test runs
    (a loaded machine ran some of them more than the 30 s window after the series ended)."""
    return FleetWatch(q or query(prometheus.url), clock=lambda: prometheus.end)


async def settle(pilot, done, tries: int = 200) -> None:
    for _ in range(tries):
        await pilot.pause(0.05)
        if done():
            return
    raise AssertionError("the view did not settle")


def test_rows_sort_by_alerts_class_and_node(prometheus):
    fv = watch_at_end(prometheus).judge()
    rows = fleet_rows(fv)
    assert {r.key: r.primary for r in rows} == EXPECTED
    assert [r.node for r in sort_rows(rows, "node")] == ["node-a", "node-b", "node-c"]
    by_class = [r.primary for r in sort_rows(rows, "class")]
    assert by_class == ["compute", "input_pipeline", "communication"]  # the classes' order
    from gputop_diag.fleet.sanitize import FleetNames

    names = FleetNames()
    shown = {r.key: r.node for r in fleet_rows(fv, names=names)}
    assert all(v.startswith("host-") for v in shown.values()) and len(set(shown.values())) == 3
    # a node leaving keeps every other node's pseudonym (keyed by identity, not position)
    fv.nodes = [v for v in fv.nodes if v.node.key != "node-a"]
    assert {r.key: r.node for r in fleet_rows(fv, names=names)} == {
        k: v for k, v in shown.items() if k != "node-a"
    }


async def test_fleet_pane_lists_the_nodes_sorts_and_opens_one(prometheus):
    app = FleetApp(watch_at_end(prometheus))
    async with app.run_test(size=(160, 30)) as pilot:
        table = app.query_one(FleetTable)
        await settle(pilot, lambda: table.row_count == 3)
        assert {r.key: r.primary for r in table.rows_shown} == EXPECTED
        head = str(app.query_one("#fleet-head").render())
        assert "Fleet: 3 nodes" in head and "sort: alerts" in head
        await pilot.press("n")
        assert [r.key for r in table.rows_shown] == ["node-a", "node-b", "node-c"]
        assert "sort: node" in str(app.query_one("#fleet-head").render())
        await pilot.press("c")
        assert [r.primary for r in table.rows_shown][0] == "compute"
        await pilot.press("n")  # the cursor stays on its node through a sort
        kept = table.current_key()
        await pilot.press("c", "n")
        assert table.current_key() == kept
        table.move_cursor(row=0)
        await pilot.press("down", "enter")
    assert app.open_node == ("node-b", "node-b", "node-b")
    assert app.state.cursor_key == "node-b" and app.state.sort == "node"


async def test_a_prometheus_that_is_down_is_said_with_the_next_step():
    app = FleetApp(FleetWatch(query("http://127.0.0.1:9")))  # nothing listens on port 9
    async with app.run_test(size=(120, 24)) as pilot:
        box = app.query_one("#fleet-problem")
        await settle(pilot, lambda: box.display)
        text = str(box.render())
        assert "cannot reach Prometheus" in text and "next:" in text
        assert app.query_one(FleetTable).row_count == 0


async def test_node_panes_are_fed_from_prometheus_and_judge_the_node(prometheus):
    q = query(prometheus.url)
    feed = NodeFeed(q, "node-a", "node-a")
    app = NodeApp(feed)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot, lambda: app.latest is not None and len(feed.history) >= 25)
        await settle(pilot, lambda: app.latest.diagnosis.primary == "communication")
        assert app.latest.snapshot.system.hostname == "node-a"
        assert len(app.latest.snapshot.gpus) == 8
        assert any('Hostname="node-a"' in x for x in prometheus.queries)
        # the window is fed once, then only new scrapes
        assert len(app.feeder.monitor.history) == len(feed.history)
        await pilot.press("q")
    assert feed.cancel.is_set()


def test_the_fleet_read_a_node_at_a_time_is_the_fleet_read_at_once(prometheus):
    """Streamed (a batch of one node: each judged and its window let go before the next is
    read), the fleet's verdict is the one read whole; each batch is handed over as read."""
    whole = FleetWatch(query(prometheus.url), clock=lambda: prometheus.end).judge()
    seen = []
    watch = FleetWatch(query(prometheus.url), clock=lambda: prometheus.end, batch_nodes=1)
    streamed = watch.judge(on_batch=lambda fv, done, total: seen.append((done, total, fv)))
    assert [(d, t) for d, t, _ in seen] == [(1, 3), (2, 3)]
    assert [v.node.key for v in seen[1][2].nodes] == ["node-a", "node-b"]
    assert not seen[1][2].jobs  # the jobs are judged once every node is
    doc = {"prometheus": None, "match": None, "group_by": "hpc_job"}
    a, b = to_fleet_json(whole, **doc), to_fleet_json(streamed, **doc)
    assert b.pop("queries") > a.pop("queries")
    assert a == b
    assert [(j.job, j.nodes) for j in streamed.jobs] == [("77", ("node-a", "node-b"))]
    assert all(not v.node.snapshots and v.samples for v in streamed.nodes)


def test_node_matcher_picks_the_hostname_or_the_instance():
    assert node_matcher("gpu01", "gpu01") == 'Hostname="gpu01"'
    assert node_matcher("10.0.0.1:9401", "gpu01") == 'instance="10.0.0.1:9401"'
    assert node_matcher("10.0.0.1:9401", None) == 'instance="10.0.0.1:9401"'


def test_the_feed_follows_new_scrapes_once_each(prometheus):
    """The window first, then polls on the step's grid: each new scrape given once."""
    end = max(max(s.times) for s in prometheus.series)
    now = [end - 10.0]  # the stand-in holds ten more seconds of scrapes "to come"
    feed = NodeFeed(query(prometheus.url, step_s=STEP), "node-c", "node-c", clock=lambda: now[0])
    history = feed.load()
    assert len(history) >= 20 and history[-1].timestamp <= now[0]
    assert feed.poll() == []  # nothing newer yet
    now[0] += 5.0
    new = feed.poll()
    assert len(new) == 5 and new[0].timestamp > history[-1].timestamp
    assert feed.poll() == []  # the same moment: nothing twice
    times = [s.timestamp for s in feed.history]
    assert times == sorted(set(times))
    assert feed.extent() == (len(times), times[0], times[-1])


def test_without_a_terminal_the_fleet_is_printed_once(prometheus):
    r = subprocess.run(
        [sys.executable, "-m", "gputop_diag", "--prometheus", prometheus.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "Fleet: 3 nodes" in r.stdout
    for node, cls in EXPECTED.items():
        assert re.search(rf"^{node}\s+{cls.replace('_', ' ')}", r.stdout, re.M), r.stdout


def test_prometheus_with_demo_or_replay_is_a_usage_error():
    r = subprocess.run(
        [sys.executable, "-m", "gputop_diag", "--prometheus", "http://x:9090", "--demo"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and "--prometheus" in r.stderr


def test_fleet_view_state_survives_a_node_visit():
    state = FleetViewState(sort="class", cursor_key="node-b")
    app = FleetApp(FleetWatch(query("http://127.0.0.1:9")), state)
    assert app.state.sort == "class" and app.state.cursor_key == "node-b"


def test_series_younger_than_the_window_keep_their_scrape_interval(prometheus):
    """40 s of one-a-second scrapes in a 5-minute window: the step is 1 s, not 300/40."""
    watch = watch_at_end(prometheus, FleetQuery(Prometheus(prometheus.url), window_s=300.0))
    fv = watch.judge()
    assert watch.step_s == 1.0 and fv.data.step_s == 1.0
    assert {v.node.key: v.diagnosis.primary for v in fv.nodes} == EXPECTED


async def test_sanitized_fleet_pane_shows_pseudonyms_only(prometheus):
    app = FleetApp(watch_at_end(prometheus), sanitize=True)
    async with app.run_test(size=(160, 30)) as pilot:
        table = app.query_one(FleetTable)
        await settle(pilot, lambda: table.row_count == 3)
        screen = "\n".join(
            str(app.query_one(w).render()) for w in ("#fleet-head", "#fleet-jobs")
        ) + "".join(str(table.get_row_at(i)) for i in range(table.row_count))
        for host in NODES:
            assert host not in screen
        assert prometheus.url not in screen and "host-" in screen
        await pilot.press("enter")
    key, hostname, shown = app.open_node
    assert key in NODES and shown.startswith("host-") and shown != key
    assert NodeFeed(query(prometheus.url), key, hostname, shown_as=shown).name == (
        f"{shown} (Prometheus)"
    )


def _identities(prometheus) -> set[str]:
    """Every identifying label value the stand-in serves: host names, instances, job labels,
    GPU UUIDs and bus ids."""
    out = set()
    for s in prometheus.series:
        for k in ("Hostname", "hostname", "instance", "hpc_job", "UUID", "pci_bus_id"):
            if s.labels.get(k):
                out.add(s.labels[k])
    return out


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("fmt", ["json", "text"])
def test_fleet_sanitize_leaves_no_name_address_or_url(prometheus, where, fmt):
    cmd = [sys.executable, "-m", "gputop_diag"]
    opts = ["--prometheus", prometheus.url] + (["--json"] if fmt == "json" else [])
    argv = (
        [*cmd, "--sanitize", "fleet", *opts]
        if where == "before"
        else [*cmd, "fleet", *opts, "--sanitize"]
    )
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    names = _identities(prometheus)
    assert {"node-a", "node-a:9401", "77"} <= names and any(n.startswith("GPU-") for n in names)
    for name in names:
        if name.isdigit():  # a job id: where a job's label stands (a figure may be 77 too)
            shape = rf'"{name}"|^\s+{name}:|job {name}\b'
        else:
            shape = rf"(?<![\w.-]){re.escape(name)}(?![\w-])"
        assert not re.search(shape, r.stdout, re.M), name
    assert prometheus.url not in r.stdout and "127.0.0.1" not in r.stdout
    if fmt == "json":
        doc = json.loads(r.stdout)
        assert doc["prometheus"] is None and doc["sanitized"] is True
        assert len({n["node"] for n in doc["nodes"]}) == 3
        assert all(n["node"].startswith("host-") for n in doc["nodes"])
        assert all(i.startswith("host-") for n in doc["nodes"] for i in n["instances"])
        assert doc["jobs"] and doc["jobs"][0]["job"].startswith("job-")
    else:
        assert "Fleet: 3 nodes" in r.stdout and "host-" in r.stdout


async def test_sanitized_node_panes_name_no_host_address_or_key(prometheus):
    from test_tui_support import screen_text

    from gputop_diag.fleet.sanitize import FleetNames
    from gputop_diag.tui.keys import PANES

    q = query(prometheus.url, step_s=STEP)  # the stand-in's series age as the tests run
    names = FleetNames()
    fv = watch_at_end(prometheus, q).judge()
    names.learn([v.node for v in fv.nodes])
    nd = next(v.node for v in fv.nodes if v.node.key == "node-a")
    shown = names.node(nd)
    feed = NodeFeed(q, "node-a", "node-a", shown_as=shown)
    app = NodeApp(feed, sanitize=True, names=names)
    secret = [n for n in _identities(prometheus) if not n.isdigit()] + [prometheus.url]
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot, lambda: app.latest is not None or app._failure is not None)
        assert app._failure is None, app._failure.message
        for k in app._pane_order():
            app.action_pane(PANES.index(k))
            await pilot.pause(0.05)
            screen = screen_text(app)
            for name in secret:
                assert name not in screen, (k, name)
        assert shown in screen_text(app)  # the header says the row's pseudonym
        # a node gone from Prometheus: the message names its pseudonym, not its key
        gone = NodeFeed(q, "node-z", "node-z")
        app.node_feed = gone
        app.follow()
        await settle(pilot, lambda: app._failure is not None)
        assert "node-z" not in screen_text(app) and "node-z" not in app._failure.message
        await pilot.press("q")


def _stale_fleet(prometheus):
    from dataclasses import replace

    fv = watch_at_end(prometheus).judge()
    fv.nodes = [replace(v, stale_s=200.0) if v.node.key == "node-c" else v for v in fv.nodes]
    return fv


def test_a_stale_node_says_stale_in_its_class_and_sorts_first(prometheus):
    from gputop_diag.fleet.judge import render_fleet_text

    fv = _stale_fleet(prometheus)
    rows = fleet_rows(fv)
    for by in ("alerts", "class"):
        first = sort_rows(rows, by)[0]
        assert (first.key, first.label, first.confidence) == ("node-c", "STALE", "-"), by
    assert "no scrape for 200 s" in first.evidence
    table = [ln for ln in render_fleet_text(fv, width=80).splitlines() if ln.startswith("node")]
    assert re.match(r"node-c\s+STALE\s+-\s", table[0]), table


async def test_a_stale_node_is_seen_at_40_columns(prometheus):
    from test_tui_support import screen_text

    fv = _stale_fleet(prometheus)

    class Fixed(FleetWatch):
        def judge(self):
            return fv

    app = FleetApp(Fixed(query(prometheus.url)))
    async with app.run_test(size=(40, 12)) as pilot:
        await settle(pilot, lambda: app.query_one(FleetTable).row_count == 3)
        assert "STALE" in screen_text(app)


async def test_a_node_that_stopped_reporting_says_how_old_its_last_scrape_is(prometheus):
    from test_tui_support import screen_text

    t0 = max(max(s.times) for s in prometheus.series)
    LOOKBACK_S[0] = 2.0  # the node's series end at t0, seen 20 s later
    try:
        feed = NodeFeed(query(prometheus.url), "node-a", "node-a", clock=lambda: t0 + 20)
        app = NodeApp(feed)
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(pilot, lambda: app.latest is not None)
            await settle(pilot, lambda: "STALE" in screen_text(app), tries=60)
            assert re.search(r"last scrape of this node is [12]\d s old", screen_text(app))
            await pilot.press("q")
    finally:
        LOOKBACK_S[0] = 300.0


@pytest.mark.parametrize(
    ("opts", "least"),
    [(["--window", "1s"], "2"), (["--window", "30s", "--step", "20s"], "40")],
)
def test_a_window_of_under_two_scrapes_is_a_usage_error(prometheus, opts, least):
    t0 = max(max(s.times) for s in prometheus.series)  # judged where the series are
    opts = [*opts, "--at", f"{t0:.3f}"]
    r = subprocess.run(
        [sys.executable, "-m", "gputop_diag", "fleet", "--prometheus", prometheus.url, *opts],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    # the scrape interval read off the data (one sample a second), or --step
    m = re.search(r"give at least --window (\d+)s$", r.stderr.strip())
    assert m and r.stdout == "", r.stderr
    assert m.group(1) == least


async def test_a_node_offers_only_what_prometheus_describes(prometheus):
    from test_tui_support import screen_text

    from gputop_diag.tui.keys import PANES

    feed = NodeFeed(query(prometheus.url, step_s=STEP), "node-b", "node-b")
    app = NodeApp(feed)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot, lambda: app.latest is not None)
        assert "mapping" not in app._pane_order() and "driver" not in app._pane_order()
        for k in ("3", "5"):  # Mapping and Driver: this machine's, not the node's
            await pilot.press(k)
            assert app.query_one("#panes").current == "memory"
        lines = screen_text(app).splitlines()
        tabs = next(ln for ln in lines if "Memory" in ln)  # the tab strip
        assert "Utilization" in tabs and "Mapping" not in tabs and "Driver" not in tabs
        for word in ("> faster", "< slower", ". step"):  # the footer
            assert word not in lines[-1], word
        await pilot.press("tab")
        assert app.query_one("#panes").current == "utilization"
        app.action_pane(PANES.index("driver"))
        assert app.query_one("#panes").current == "utilization"
        await pilot.press("q")


async def test_a_node_told_apart_by_instance_shows_its_rows_pseudonym(prometheus):
    from test_tui_support import screen_text

    from gputop_diag.fleet.sanitize import FleetNames

    names = FleetNames()
    shown = names.node_of("node-b:9401", "node-b")  # several exporters on one host
    feed = NodeFeed(query(prometheus.url, step_s=STEP), "node-b:9401", "node-b")
    app = NodeApp(feed, names=names)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot, lambda: app.latest is not None or app._failure is not None)
        assert app._failure is None, app._failure.message
        assert app.latest.snapshot.system.hostname == shown
        screen = screen_text(app)
        assert shown in screen.splitlines()[0] and "node-b" not in screen
        assert names.s.hostname("node-b") not in screen  # not the shared host's pseudonym
        await pilot.press("q")


@pytest.fixture(scope="module")
def flipping():
    """One node compute-bound for a minute whose input pipeline falls behind in the last
    seconds of its series (66 s at one scrape a second, ending on a whole second)."""
    from gputop_diag.prometheus.client import Series

    got, _, _ = scrape_series("compute-then-input", seconds=65, instance="node-f:9401")
    last = max(max(s.times) for s in got)
    shift = float(int(time.time())) - last
    series = []
    for s in got:
        labels = dict(s.labels)
        for spelling in ("hostname", "Hostname"):
            if labels.pop(spelling, None) is not None:
                labels["Hostname"] = "node-f"
        series.append(Series(labels, tuple(t + shift for t in s.times), s.values))
    server = FakePrometheus(series)
    server.end = last + shift
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


async def test_a_rows_class_is_what_its_nodes_side_panel_shows(flipping):
    """The window ends seconds after the node's class changed: judged as a whole it shows the
    new class, while the node's panes (fed the window scrape by scrape) hold compute until a
    new class has won three ticks in a row. The Fleet row names what the side panel names."""
    q = FleetQuery(Prometheus(flipping.url, timeout=10), window_s=90.0, step_s=STEP)
    fv = watch_at_end(flipping, q).judge()
    (row,) = fleet_rows(fv)
    feed = NodeFeed(q, row.key, row.hostname, clock=lambda: flipping.end)
    app = NodeApp(feed)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(pilot, lambda: app.latest is not None and feed.history)
        await settle(pilot, lambda: app.latest.ticks == len(feed.history))
        shown = app.latest.diagnosis
        side = app.query_one("#side-text").plain
        await pilot.press("q")
    # the row's scrapes (the verdict keeps each one's time, not its snapshot) are the panes'
    assert [s.timestamp for s in feed.history] == [t for t, _ in fv.nodes[0].activity]
    assert shown.primary == "compute" and shown.candidate != "compute"  # held
    assert row.primary == shown.primary and "COMPUTE" in side
    assert fv.nodes[0].diagnosis.confidence == shown.confidence
