"""CPU per test, per file and per fixture: an opt-in pytest plugin (not loaded by default).

    python -m pytest -q -n auto --dist loadgroup -p tests.cpu_plugin

The suite is CPU-bound on 2 cores, so wall time (`--durations`) says little about what to cut:
a test waiting on a timer costs wall, not CPU. For each test's setup, call and teardown this
records the CPU (user + system) of the worker process and of its children: those it waited for
(`getrusage(RUSAGE_CHILDREN)`, https://docs.python.org/3/library/resource.html#resource.getrusage)
and those still running at the phase's end (a Prometheus, an exporter, a job started by a
module fixture), read with psutil (https://psutil.readthedocs.io/en/latest/#psutil.Process.children)
and counted by their CPU's growth over the phase. Each fixture's own set-up (its dependencies
are set up before it, and counted on their own) and teardown are recorded the same way.

Not counted: a descendant that starts and is orphaned within one phase (reaped by init, never
by this process: the ranks a `watch` subprocess starts and leaves behind when it is killed).
Where that matters, measure the test with the system's counters (/proc/stat) on an idle machine.

Each worker writes its records to `$GPUTOP_CPU_DIR` (default: the session's pytest temporary
base, `cpu/`); the controller (or the single process without xdist) sums them into
`cpu-report.txt` there, sorted by CPU, and prints its path.
"""

import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pytest

_ME = psutil.Process()


def _own() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _live() -> dict[int, tuple[float, int]]:
    """CPU so far of each descendant still running (or not yet waited for), and its parent."""
    out = {}
    for p in _ME.children(recursive=True):
        try:
            t = p.cpu_times()
            out[p.pid] = (t.user + t.system + t.children_user + t.children_system, p.ppid())
        except psutil.Error:
            pass
    return out


class _Meter:
    """CPU over a span: the process's own and waited-for children's, and live descendants'."""

    def __init__(self):
        self.live0 = _live()  # read outside the span: the reading's own cost is not counted
        self.own0 = _own()
        self.wall0 = time.perf_counter()

    def stop(self) -> tuple[float, float, float]:
        wall = time.perf_counter() - self.wall0
        own = _own() - self.own0
        live1 = _live()
        # a descendant alive at both ends: its growth; one that appeared: all of it. One alive
        # at the start and waited for since by this process (RUSAGE_CHILDREN) or by a parent
        # still here (its children's times) is counted there whole: what was already counted of
        # it is taken off. One orphaned and reaped by init is counted nowhere after its start.
        me = _ME.pid
        live = sum(v - self.live0.get(pid, (0.0, 0))[0] for pid, (v, _) in live1.items())
        for pid, (v, parent) in self.live0.items():
            if pid not in live1 and (parent == me or parent in live1):
                live -= v
        return own, live, wall  # live < 0: taken off what RUSAGE_CHILDREN counted again


def _out_dir(config) -> Path:
    env = os.environ.get("GPUTOP_CPU_DIR")
    if env:
        return Path(env)
    worker_input = getattr(config, "workerinput", None)
    if worker_input is not None and "cpu_dir" in worker_input:
        return Path(worker_input["cpu_dir"])
    return config._tmp_path_factory.getbasetemp() / "cpu"


class CpuPlugin:
    def __init__(self, config):
        self.config = config
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.records: list[dict] = []
        self.fixtures: list[dict] = []
        self._fixture_teardown: dict[int, _Meter] = {}

    # the controller tells its workers where to write (a worker's own temporary base differs)
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        node.workerinput["cpu_dir"] = str(_out_dir(self.config))

    def _phase(self, item, when):
        meter = _Meter()
        yield
        own, live, wall = meter.stop()
        self.records.append(
            {"id": item.nodeid, "when": when, "own": own, "live": live, "wall": wall,
             "end": time.time()}
        )  # fmt: skip

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        yield from self._phase(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        yield from self._phase(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item):
        yield from self._phase(item, "teardown")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        meter = _Meter()
        yield
        own, live, wall = meter.stop()
        name = f"{fixturedef.argname} ({fixturedef.scope}, {fixturedef.baseid or '<root>'})"
        self.fixtures.append({"name": name, "when": "setup", "cpu": own + live, "wall": wall})

        # finalizers run last-registered first: this one runs just before the fixture's own
        def start_teardown():
            self._fixture_teardown[id(fixturedef)] = _Meter()

        fixturedef.addfinalizer(start_teardown)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_post_finalizer(self, fixturedef, request):
        yield
        meter = self._fixture_teardown.pop(id(fixturedef), None)
        if meter is None:
            return
        own, live, wall = meter.stop()
        name = f"{fixturedef.argname} ({fixturedef.scope}, {fixturedef.baseid or '<root>'})"
        self.fixtures.append({"name": name, "when": "teardown", "cpu": own + live, "wall": wall})

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        out = _out_dir(self.config)
        out.mkdir(parents=True, exist_ok=True)
        if self.records or self.fixtures:
            path = out / f"records-{self.worker}.json"
            data = {"tests": self.records, "fixtures": self.fixtures, "process": _own()}
            path.write_text(json.dumps(data))
        if self.worker == "main":
            report = out / "cpu-report.txt"
            report.write_text(_report(out))
            tr = self.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                tr.write_line(f"cpu_plugin: {report}")


def _report(out: Path) -> str:
    tests: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    processes = 0.0
    fixtures: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    spans = {}  # worker -> (first start, last end, its last test)
    for path in sorted(out.glob("records-*.json")):
        data = json.loads(path.read_text())
        processes += data.get("process", 0.0)
        if data["tests"]:
            first, last = data["tests"][0], data["tests"][-1]
            worker = path.stem.removeprefix("records-")
            spans[worker] = (first["end"] - first["wall"], last["end"], last["id"])
        for r in data["tests"]:
            t = tests[r["id"]]
            t[r["when"]] += r["own"] + r["live"]
            t["live"] += r["live"]
            t["wall"] += r["wall"]
        for f in data["fixtures"]:
            x = fixtures[f["name"]]
            x[f["when"]] += f["cpu"]
            x["n"] += f["when"] == "setup"
            x["wall"] += f["wall"]
    for t in tests.values():
        t["cpu"] = t["setup"] + t["call"] + t["teardown"]
    files: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for nodeid, t in tests.items():
        f = files[nodeid.split("::")[0]]
        for k in ("cpu", "setup", "call", "teardown", "live", "wall"):
            f[k] += t[k]
        f["n"] += 1
    total = sum(t["cpu"] for t in tests.values())
    lines = [
        f"CPU of {len(tests)} tests: {total:.1f} s (setup + call + teardown, children too)",
        f"CPU of the processes that ran them, whole (imports, collection too): {processes:.1f} s",
    ]
    if spans:  # the tail: a worker done early while another still runs is a core left idle
        t0, t1 = min(a for a, _, _ in spans.values()), max(b for _, b, _ in spans.values())
        lines += [
            "",
            f"per worker ({t1 - t0:.1f} s of tests): first test began, last ended, idle at the end",
        ]
        for worker, (a, b, last) in sorted(spans.items()):
            lines.append(f"{worker:>6}  {a - t0:7.1f}  {b - t0:7.1f}  {t1 - b:7.1f}  {last}")
    lines += ["", "per file: cpu s  (setup / call / teardown; live children)  wall s  tests"]
    for name, f in sorted(files.items(), key=lambda kv: -kv[1]["cpu"]):
        lines.append(
            f"{f['cpu']:8.2f}  ({f['setup']:.2f} / {f['call']:.2f} / {f['teardown']:.2f};"
            f" {f['live']:.2f})  {f['wall']:8.2f}  {int(f['n']):4d}  {name}"
        )
    lines += ["", "per fixture: setup cpu s  teardown cpu s  wall s  times set up"]
    for name, x in sorted(fixtures.items(), key=lambda kv: -(kv[1]["setup"] + kv[1]["teardown"])):
        if x["setup"] + x["teardown"] < 0.05:
            continue
        lines.append(
            f"{x['setup']:8.2f}  {x['teardown']:8.2f}  {x['wall']:8.2f}  {int(x['n']):5d}  {name}"
        )
    lines += ["", "per test: cpu s  (setup / call / teardown; live children)  wall s"]
    for nodeid, t in sorted(tests.items(), key=lambda kv: -kv[1]["cpu"]):
        lines.append(
            f"{t['cpu']:8.3f}  ({t['setup']:.3f} / {t['call']:.3f} / {t['teardown']:.3f};"
            f" {t['live']:.3f})  {t['wall']:8.3f}  {nodeid}"
        )
    return "\n".join(lines) + "\n"


def pytest_configure(config):
    config.pluginmanager.register(CpuPlugin(config), "gputop_cpu_plugin")
