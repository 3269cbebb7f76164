"""The fleet's raw batches judged in worker processes (`fleet/workers.py`), over the real
Prometheus TSDB of tests/test_fleet_triage.py: every verdict the same as judged in one process,
a worker that cannot start or stops midway costs nothing but time (the batches left are judged
in the asking process, and the fleet's warnings say so), and Prometheus' own errors reach the
caller as they would from one process.

Skipped where the `prometheus` or `promtool` binary is missing.
"""

from __future__ import annotations

import pickle
import sys
import textwrap
import time

import pytest

from gputop_diag.diagnose import host_figures, memory_figures
from gputop_diag.fleet import workers
from gputop_diag.fleet.judge import to_fleet_json
from gputop_diag.fleet.query import Grid
from gputop_diag.fleet.stream import stream_fleet
from gputop_diag.prometheus.client import Access, Prometheus, PrometheusError
from tests import test_fleet_triage as tsdb

pytestmark = tsdb.pytestmark
WINDOW = tsdb.WINDOW


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    yield from tsdb.triage_prometheus.__wrapped__(tmp_path_factory)


# a worker that answers "ready", takes one batch and exits without answering it
DIES_ON_ITS_FIRST_BATCH = """
import sys
from gputop_diag.fleet.workers import receive, send
inp, out = sys.stdin.buffer, sys.stdout.buffer
receive(inp)
send(out, "ready")
receive(inp)
sys.stderr.write("worker: out of memory\\n")
sys.exit(137)
"""


# a worker whose error pickles but does not unpickle in the parent (unpickling it calls
# int("not a number"), as an exception class whose __init__ takes other arguments would fail)
ANSWERS_AN_ERROR_THAT_DOES_NOT_TRAVEL = """
import sys
from gputop_diag.fleet.workers import receive, send
class Odd(Exception):
    def __reduce__(self):
        return (int, ("not a number",))
inp, out = sys.stdin.buffer, sys.stdout.buffer
receive(inp)
send(out, "ready")
while True:
    receive(inp)
    send(out, ("error", Odd()))
"""
# a worker that writes to its stdout before its first frame (a noisy start-up hook)
TALKS_ON_ITS_STDOUT = """
import sys
sys.stdout.write("Hello from a start-up hook\\n"); sys.stdout.flush()
from gputop_diag.fleet.workers import main
main()
"""


def _worker(each_batch: str) -> list[str]:
    """The command of a worker that takes the context, says it is ready, then runs
    `each_batch` (Python, with `batch` the batch's exporters) for each batch until its stdin
    closes."""
    body = textwrap.indent(textwrap.dedent(each_batch).strip(), " " * 4)
    script = f"""
import os, sys, time
from gputop_diag.fleet.workers import receive, send
inp, out = sys.stdin.buffer, sys.stdout.buffer
receive(inp)
send(out, "ready")
while True:
    try:
        batch = receive(inp)
    except EOFError:
        break
{body}
"""
    return [sys.executable, "-c", script]


# answers each batch with no verdicts and, as its query count, the number its first exporter
# names
ECHOES = _worker('send(out, ("ok", [], int(batch[0])))')
# answers every batch but the exporter "c:9400"'s, on which it hangs
HANGS_ON_ONE_BATCH = _worker("""
    if batch == ["c:9400"]:
        time.sleep(120)
    send(out, ("ok", [], 0))
""")
# stops on the batch of exporter "3" the first time any worker is given it (the file named
# in DIES_ONCE says it was), and answers every other batch as ECHOES does
DIES_ON_BATCH_3_ONCE = _worker("""
    if batch == ["3"] and not os.path.exists(os.environ["DIES_ONCE"]):
        open(os.environ["DIES_ONCE"], "w").close()
        os._exit(5)
    send(out, ("ok", [], int(batch[0])))
""")
# takes its batches and never answers
HANGS = _worker("time.sleep(120)")


def _judged(prom, end, count: int, **kw) -> dict:
    fv = stream_fleet(prom, window_s=WINDOW, at=end, triage=False, batch_nodes=2, workers=count)
    return to_fleet_json(fv, prometheus=None, match=None, group_by="hpc_job") | kw


def test_workers_judge_every_node_as_one_process_does(prometheus):
    prom, end = prometheus
    alone = _judged(prom, end, 1)
    # the diagnosis' memos let go of the judged windows' snapshots (`judge_nodes(drop=True)`)
    assert not len(host_figures._rows) and not len(memory_figures._used_mib)
    shared = _judged(prom, end, 3)
    assert len(alone["nodes"]) >= 10
    assert shared == alone  # the same verdicts, evidence, jobs and query count


def test_with_the_triage_the_busy_nodes_go_to_the_workers_first_and_nothing_changes(prometheus):
    """The workers take the busy nodes' batches after the triage's first pass, the nodes its
    second pass sends to the raw read after it: the same document as one process gives."""
    prom, end = prometheus

    def judged(count: int) -> dict:
        fv = stream_fleet(prom, window_s=WINDOW, at=end, batch_nodes=2, workers=count)
        return to_fleet_json(fv, prometheus=None, match=None, group_by="hpc_job")

    alone = judged(1)
    assert alone["reads"]["raw_because"].get("busy", 0) >= 3  # two batches or more, early
    assert set(alone["reads"]["raw_because"]) - {"busy"}  # and nodes read raw after
    assert judged(2) == alone


def test_the_triage_first_pass_is_asked_while_the_nodes_are_counted(prometheus, monkeypatch):
    """The first pass needs only the grid: it is under way before the count of the nodes
    answers (the count here waits for it: asked only after, it would never come)."""
    import threading

    from gputop_diag.fleet import stream

    prom, end = prometheus
    asked = threading.Event()
    seen = []
    real_ask, real_presence = stream.ask_first, stream.presence

    def ask_first(*a):
        asked.set()
        return real_ask(*a)

    def presence(*a):
        seen.append(asked.wait(10))
        return real_presence(*a)

    monkeypatch.setattr(stream, "ask_first", ask_first)
    monkeypatch.setattr(stream, "presence", presence)
    fv = stream_fleet(prom, window_s=WINDOW, at=end, batch_nodes=2, workers=1)
    assert seen == [True]
    assert fv.data.raw_because  # the triage ran on those answers


def test_batches_for_workers_come_in_whole_rounds_of_even_size():
    from gputop_diag.fleet.stream import FleetPlan

    grid = Grid.for_window(1_800_000_000.0, 360.0, 15.0)
    nodes = [f"n{k}" for k in range(922)]
    members = {n: {f"{n}:9400"} for n in nodes}
    plan = FleetPlan(grid, 15.0, 15.0, {}, [], len(nodes), members=members, batch_nodes=64)
    alone = plan.batches_of(nodes)
    assert [len(b) for b in alone] == [64] * 14 + [26]  # one process: 64 a batch
    for parts, rounds in ((2, 8), (3, 5), (4, 4)):
        shared = plan.batches_of(nodes, parts)
        sizes = [len(b) for b in shared]
        assert len(shared) == parts * rounds and max(sizes) <= 64
        assert max(sizes[:-1]) - min(sizes[:-1]) == 0 and sizes[-1] <= sizes[0]
        assert sorted(i for b in shared for i in b) == sorted(i for b in alone for i in b)
        assert shared[0][0] == "n0:9400" and "n921:9400" in shared[-1]  # natural order kept
    assert [len(b) for b in plan.batches_of(nodes[:150], 2)] == [38, 38, 38, 36]
    # a few nodes are not split into many small batches (each batch is ~36 queries)
    assert [len(b) for b in plan.batches_of(nodes[:18], 2)] == [18]
    assert [len(b) for b in plan.batches_of(nodes[:100], 4)] == [64, 36]


def test_batches_added_while_the_workers_run_come_back_in_the_order_added(monkeypatch):
    monkeypatch.setattr(workers, "COMMAND", ECHOES)
    grid = Grid.for_window(1_800_000_000.0, 360.0, 15.0)
    context = workers.BatchContext(Prometheus("http://127.0.0.1:9"), grid, "", {}, {}, "job")
    pool = workers.Workers(context, 2)
    pool.start()
    pool.open()
    pool.add([["1"], ["2"], ["3"]])
    time.sleep(0.2)  # the workers take those, then wait for more
    pool.add([["4"], ["5"]])
    assert [q for _, q in pool.results()] == [1, 2, 3, 4, 5]
    assert not pool.workers and not any(t.is_alive() for t in pool._threads)


def test_a_batch_whose_worker_stopped_goes_to_a_worker_still_running(monkeypatch, tmp_path):
    """Not to this process: the batch goes first in line, before the end of the batches."""
    monkeypatch.setattr(workers, "COMMAND", DIES_ON_BATCH_3_ONCE)
    monkeypatch.setenv("DIES_ONCE", str(tmp_path / "died"))
    here = []
    monkeypatch.setattr(workers, "judge_batch", lambda ctx, b: here.append(b) or ([], 0))
    grid = Grid.for_window(1_800_000_000.0, 360.0, 15.0)
    context = workers.BatchContext(Prometheus("http://127.0.0.1:9"), grid, "", {}, {}, "job")
    pool = workers.Workers(context, 2)
    pool.start()
    pool.open()
    pool.add([[str(k)] for k in range(1, 7)])
    assert [q for _, q in pool.results()] == [1, 2, 3, 4, 5, 6]
    assert here == [] and (tmp_path / "died").exists()
    assert pool.failed is not None and "a worker process stopped" in pool.failed


def test_an_error_while_the_workers_judge_the_busy_nodes_waits_for_none(prometheus, monkeypatch):
    """An error (a Ctrl-C) while the clear nodes are judged here and the workers hold the
    busy nodes' batches: it comes at once and no worker is left (none is waited for)."""
    from gputop_diag.fleet import stream

    prom, end = prometheus
    monkeypatch.setattr(workers, "COMMAND", HANGS)

    def refused(*a):
        time.sleep(1.0)  # the workers have taken their first batches
        raise PrometheusError("Prometheus at X did not answer", "retry", "timeout")
        yield

    monkeypatch.setattr(stream, "_clear_batches", refused)
    procs = []
    real_start = workers.Workers.start

    def start(self):
        real_start(self)
        procs.extend(w.proc for w in self.workers)

    monkeypatch.setattr(workers.Workers, "start", start)
    t0 = time.monotonic()
    with pytest.raises(PrometheusError):
        stream_fleet(prom, window_s=WINDOW, at=end, batch_nodes=1, workers=2)
    assert time.monotonic() - t0 < 4.0
    assert procs and all(p.poll() is not None for p in procs)


def test_closing_before_the_results_ends_the_workers_waiting_for_batches(monkeypatch):
    """An error between `open` and `results` (the triage's second pass refused): closing
    stops the workers and wakes the threads waiting to feed them."""
    monkeypatch.setattr(workers, "COMMAND", ECHOES)
    grid = Grid.for_window(1_800_000_000.0, 360.0, 15.0)
    context = workers.BatchContext(Prometheus("http://127.0.0.1:9"), grid, "", {}, {}, "job")
    pool = workers.Workers(context, 2)
    pool.start()
    procs = [w.proc for w in pool.workers]
    pool.open()
    pool.add([["1"]])
    pool.close(kill=True)
    for t in pool._threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in pool._threads)
    assert all(p.poll() is not None for p in procs)


def test_batches_come_in_natural_order_as_each_is_judged(prometheus):
    prom, end = prometheus
    seen = []
    stream_fleet(
        prom, window_s=WINDOW, at=end, triage=False, batch_nodes=2, workers=3,
        on_batch=lambda fv, done, total: seen.append([v.node.key for v in fv.nodes]),
    )  # fmt: skip
    assert len(seen) >= 5
    for before, after in zip(seen, seen[1:], strict=False):
        assert after[: len(before)] == before  # each batch adds the next nodes, in order


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["/nonexistent/python"], "worker processes could not start"),
        ([sys.executable, "-c", "import sys; sys.exit(3)"], "exit status 3"),
        ([sys.executable, "-c", DIES_ON_ITS_FIRST_BATCH], "worker: out of memory"),
        ([sys.executable, "-c", ANSWERS_AN_ERROR_THAT_DOES_NOT_TRAVEL], "could not be read"),
        ([sys.executable, "-c", TALKS_ON_ITS_STDOUT], "not a frame of ours"),
    ],
    ids=["cannot-start", "exits-at-once", "dies-midway", "error-not-unpickled", "stdout-noise"],
)
def test_a_worker_that_fails_leaves_its_batches_to_this_process(
    prometheus, monkeypatch, command, said
):
    prom, end = prometheus
    alone = _judged(prom, end, 1)
    monkeypatch.setattr(workers, "COMMAND", command)
    fv = stream_fleet(prom, window_s=WINDOW, at=end, triage=False, batch_nodes=2, workers=2)
    assert any(said in w for w in fv.data.warnings), fv.data.warnings
    got = to_fleet_json(fv, prometheus=None, match=None, group_by="hpc_job")
    assert [w for w in got.pop("warnings") if said not in w] == alone.pop("warnings")
    assert got == alone


def test_a_read_given_up_waits_for_no_batch_in_flight(monkeypatch):
    """The caller stops reading (the live view's Fleet pane cancelled, an error raised): the
    workers are stopped, not waited for, even one that hangs on its batch."""
    monkeypatch.setattr(workers, "COMMAND", HANGS_ON_ONE_BATCH)
    grid = Grid.for_window(1_800_000_000.0, 360.0, 15.0)
    context = workers.BatchContext(Prometheus("http://127.0.0.1:9"), grid, "", {}, {}, "job")
    pool = workers.Workers(context, 2)
    pool.start()
    procs = [w.proc for w in pool.workers]
    answers = pool.judge([["a:9400"], ["b:9400"], ["c:9400"]])
    assert next(answers) == ([], 0) and next(answers) == ([], 0)
    t0 = time.monotonic()
    answers.close()  # the third batch hangs in its worker
    assert time.monotonic() - t0 < 10.0
    assert all(p.poll() is not None for p in procs)  # none left behind


def test_prometheus_errors_in_a_worker_reach_the_caller():
    grid = Grid.for_window(1_800_000_000.0, 360.0, 15.0)
    context = workers.BatchContext(Prometheus("http://127.0.0.1:9"), grid, "", {}, {}, "job")
    pool = workers.Workers(context, 2)
    pool.start()
    with pytest.raises(PrometheusError) as err:
        list(pool.judge([["a:9400"], ["b:9400"], ["c:9400"]]))
    assert err.value.kind == "unreachable" and "cannot reach Prometheus" in err.value.message
    assert pool.failed is None and not pool.workers  # closed, not broken


def test_workers_started_before_the_context_serve_it_and_the_surplus_are_stopped():
    """Started before the triage (no context yet); the triage leaves two raw batches: the
    third worker is stopped at once, the other two judge with the context given later."""
    pool = workers.Workers(None, 3)
    pool.start()
    procs = [w.proc for w in pool.workers]
    pool.keep(2)
    assert len(pool.workers) == 2 and procs[2].poll() is not None
    grid = Grid.for_window(1_800_000_000.0, 360.0, 15.0)
    pool.context = workers.BatchContext(Prometheus("http://127.0.0.1:9"), grid, "", {}, {}, "j")
    with pytest.raises(PrometheusError) as err:  # answered by a worker: nothing listens on 9
        list(pool.judge([["a:9400"], ["b:9400"]]))
    assert err.value.kind == "unreachable" and pool.failed is None
    assert all(p.poll() is not None for p in procs)


def test_the_client_pickles_as_what_it_was_built_from(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    prom = Prometheus(
        "https://user:pw@prom.example:9090/", timeout=7.5,
        access=Access(bearer_token_file=None, insecure_skip_verify=True),
    )  # fmt: skip
    copy = pickle.loads(pickle.dumps(prom))
    assert (copy.url, copy.timeout, copy.headers) == (prom.url, prom.timeout, prom.headers)
    assert copy.context is not None and copy.context is not prom.context
    bearer = Prometheus("http://prom:9090", access=Access(bearer_token_file=str(token)))
    assert pickle.loads(pickle.dumps(bearer)).headers["Authorization"] == "Bearer s3cret"
    e = pickle.loads(pickle.dumps(PrometheusError("said", "next", "timeout")))
    assert (e.message, e.next_step, e.kind) == ("said", "next", "timeout")


def test_default_workers_follow_the_environment_then_the_cpus(monkeypatch):
    monkeypatch.setenv(workers.ENV, "3")
    assert workers.default_workers() == 3
    for bad in ("0", "-2", "many", ""):
        monkeypatch.setenv(workers.ENV, bad)
        assert workers.default_workers() == max(1, min(workers.MAX_WORKERS, workers.cpus()))
