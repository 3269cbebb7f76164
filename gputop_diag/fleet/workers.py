"""The nodes read raw, judged in worker processes: one per CPU, up to `MAX_WORKERS`.

A raw batch (`stream.read_batches`) costs the reader its own CPU: the answers' JSON, the
columns, each node's snapshots and its judgement, about 15 ms a node in all, which one Python
process does one node at a time. The batches are independent, so each worker process takes
one batch after another: it reads the batch's series from Prometheus, builds the nodes'
snapshots and judges them exactly as one process does (`judge_batch`: `judge_nodes(data,
drop=True)`), and sends back only the verdicts (no snapshots). What a verdict rests on is
unchanged; only where it is computed.

A worker is a fresh interpreter running this module (`python -m gputop_diag.fleet.workers`),
not a `multiprocessing` child: those re-run the asking program's main script where it has no
`if __name__ == "__main__"` guard, and `fork` would copy the live view's threads half-held.
The parent and a worker speak in pickled frames over the worker's stdin and stdout (a 4-byte
length, then the pickle): the batch context once, then a batch at a time, each answered with
its verdicts or the error it raised. The workers start as soon as the fleet's nodes are
known and import the judge meanwhile (about 0.15 s); they are given the busy nodes' batches
as soon as the triage's first pass names them, and the other raw nodes' after its second
pass, while the parent asks that pass and judges the triage's clear nodes.
Where a worker cannot start or stops, the batches left are judged in this process and the
fleet's warnings say why.
"""

from __future__ import annotations

import gc
import os
import pickle
import queue
import struct
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported by the functions that use them: a worker's first lines run
    # before any of ours (`main`), so nothing printed while they import reaches its frames
    from ..prometheus.client import Prometheus
    from .judge import NodeVerdict
    from .query import Column, Grid

# Ours: past four processes the reads queue at Prometheus (its query engine answers the
# batches' range queries a few at a time) and each worker's memory (one batch's answers and
# snapshots, about 60 MB) adds up for little.
MAX_WORKERS = 4
ENV = "GPUTOP_DIAG_FLEET_WORKERS"  # the default where --workers is not given
_HEADER = struct.Struct("!I")
# Ours: the largest frame either side sends is the context (node-exporter's columns for the
# whole fleet: a few MB at 2,048 nodes). A larger length is no frame of ours (a stray write
# to the worker's stdout read as a header): the worker is dropped, not waited for.
MAX_FRAME = 256 << 20
COMMAND = [sys.executable, "-m", "gputop_diag.fleet.workers"]  # a worker process


def cpus() -> int:
    """The CPUs this process may run on (its affinity, where the system says)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers() -> int:
    """`GPUTOP_DIAG_FLEET_WORKERS` where set to a whole number >= 1, else one per CPU, up to
    MAX_WORKERS."""
    given = os.environ.get(ENV, "").strip()
    if given.isdigit() and int(given) >= 1:
        return int(given)
    return max(1, min(MAX_WORKERS, cpus()))


@dataclass
class BatchContext:
    """What every batch's read needs, sent once to each worker."""

    prom: Prometheus
    grid: Grid
    match: str
    keys: dict[tuple[str, str], str]
    node_exporter: dict[str, list[Column]]
    group_by: str


def judge_batch(context: BatchContext, instances: list[str]) -> tuple[list[NodeVerdict], int]:
    """One batch of exporters read and its nodes judged: (verdicts without snapshots, queries
    made)."""
    from .judge import judge_nodes
    from .query import fetch
    from .read import assemble_columns

    columns, _, queries = fetch(
        context.prom, context.grid, context.match, instances, node_exporter=False
    )
    if not columns:
        return [], queries  # the batch's exporters stopped between the plan and the read
    data = assemble_columns(
        columns, context.node_exporter, context.grid, context.group_by, keys=context.keys
    )
    del columns
    return judge_nodes(data, drop=True), queries


class NotAFrame(EOFError):
    """What came is no frame of ours (a stray write to the worker's stdout)."""


def send(out: IO[bytes], obj: Any, body: bytes | None = None) -> None:
    """One frame: `obj` pickled (or `body`, pickled already)."""
    if body is None:
        body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEADER.pack(len(body)) + body)
    out.flush()


def receive(inp: IO[bytes]) -> Any:
    """The next frame's object; EOFError where the other side closed."""
    head = inp.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("closed")
    size = _HEADER.unpack(head)[0]
    if size > MAX_FRAME:
        raise NotAFrame(f"{head!r}…: not a frame of ours ({size} bytes announced)")
    body = inp.read(size)
    if len(body) < size:
        raise EOFError("cut short")
    return pickle.loads(body)


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """A worker's loop: the context, then batches until the parent closes stdin."""
    # Many small objects and no cycles among them (as `stream.stream_fleet`): the cyclic
    # collector would walk the growing heap again and again for nothing.
    gc.disable()
    context = receive(inp)
    send(out, "ready")
    while True:
        try:
            instances = receive(inp)
        except EOFError:
            return
        try:
            send(out, ("ok", *judge_batch(context, instances)))
        except Exception as e:  # PrometheusError and the rest: raised again in the parent
            send(out, ("error", _portable(e)))


def _portable(e: Exception) -> Exception:
    """`e` where it survives pickling both ways (PrometheusError does), else a RuntimeError
    that says what it was."""
    try:
        pickle.loads(pickle.dumps(e, protocol=pickle.HIGHEST_PROTOCOL))
        return e
    except Exception:  # noqa: BLE001 - whatever an exception's pickling raises
        return RuntimeError(f"{type(e).__name__}: {e}")


class WorkerFailed(Exception):
    """A worker could not start, or stopped: the batches left are judged in this process."""


class _Worker:
    """A worker process, started at once; its context (`body`, pickled once for all of them
    and given before the first batch) is sent by the first `ask`, from the thread that feeds
    it, so that starting the workers never waits for one to have imported the judge and read
    its pipe."""

    def __init__(self) -> None:
        self.body = b""
        self.stderr = tempfile.TemporaryFile()
        env = dict(os.environ)
        root = Path(__file__).resolve().parents[2]  # where `gputop_diag` is importable
        if root.name not in ("site-packages", "dist-packages"):  # a source tree: say where;
            # an installed one is found as it is (on PYTHONPATH it would come before the
            # standard library, and a backport installed there would shadow it)
            parts = (str(root), env.get("PYTHONPATH"))
            env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
        self.proc = subprocess.Popen(
            COMMAND,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.inp, self.out = self.proc.stdout, self.proc.stdin

    def why(self) -> str:
        """The last line the worker wrote to stderr, where it wrote one."""
        try:
            self.stderr.seek(0)
            lines = self.stderr.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            lines = []
        if lines:
            return lines[-1]
        try:
            return f"exit status {self.proc.wait(timeout=2)}"  # its stdout closed: it is ending
        except subprocess.TimeoutExpired:
            return "its pipe closed"

    def ask(self, instances: list[str] | None) -> Any:
        """Send a batch (None: the context, answered "ready") and wait for its answer."""
        try:
            if instances is None:
                send(self.out, None, self.body)
            else:
                send(self.out, instances)
            return receive(self.inp)
        except NotAFrame as e:
            self.proc.kill()  # alive, and out of step with us for good
            raise WorkerFailed(f"a worker process wrote to its stdout ({e})") from None
        except (EOFError, OSError, pickle.UnpicklingError) as e:
            raise WorkerFailed(f"a worker process stopped ({self.why() or e})") from None
        except Exception as e:  # noqa: BLE001 - a frame that does not unpickle
            raise WorkerFailed(f"a worker process answered what could not be read ({e})") from None

    def close(self, kill: bool = False) -> None:
        """Close its pipes (an idle worker then ends); `kill`: stop it first (a batch in
        flight, or a worker that hangs, is not waited for)."""
        if kill:
            try:
                self.proc.kill()
            except OSError:
                pass
        for f in (self.out, self.inp):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


class Workers:
    """`count` worker processes for one fleet read: `start()` as soon as raw batches are
    likely (the context may be given later, the processes import the judge meanwhile); then
    `open()` once the context is given, `add(batches)` as the raw batches become known (the
    workers take them at once), and `results()` yields each batch's (verdicts, queries) in the
    order they were added; `judge(batches)` is the three at once. `close()` at the end.
    `failed` says why batches were judged in this process instead."""

    def __init__(self, context: BatchContext | None, count: int) -> None:
        self.context = context
        self.count = count
        self.workers: list[_Worker] = []
        self.failures: list[str] = []  # why each worker that stopped stopped
        self.batches: list[list[str]] = []  # every batch added, by its index
        self._todo: deque[int] = deque()  # the batches no worker has taken, by index
        self._ready = threading.Condition()  # guards _todo, _adding, _in_flight and _stopped
        self._stopped = False
        # batches a worker holds: one may come back (its worker stopped), so no worker ends
        # while any is out
        self._in_flight = 0
        self._done: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._opened = False
        self._adding = True

    @property
    def failed(self) -> str | None:
        """What the fleet's warnings say of the workers that failed (None: none did)."""
        if not self.failures:
            return None
        if len(self.failures) == 1:
            return f"{self.failures[0]}; its batches judged by the other workers or here"
        return (
            f"{len(self.failures)} worker processes stopped (the last: {self.failures[-1]}); "
            "their batches judged by the other workers or here"
        )

    def start(self) -> None:
        if self.count < 2:
            return
        try:
            for _ in range(self.count):
                self.workers.append(_Worker())
        except (OSError, ValueError, TypeError) as e:
            self.failures = [f"worker processes could not start ({e})"]
            self.close(kill=True)

    def keep(self, count: int) -> None:
        """Close the workers past `count` (the triage left fewer raw batches than started
        them): unused, they are stopped, not waited for."""
        for w in self.workers[count:]:
            w.close(kill=True)
        self.workers = self.workers[:count]

    def _give_context(self) -> None:
        """The context, pickled once, for each worker's first `ask`."""
        if self.context is None:
            raise ValueError("no batch context given")
        if not self.workers:
            return
        try:
            body = pickle.dumps(self.context, protocol=pickle.HIGHEST_PROTOCOL)
        except (TypeError, ValueError, AttributeError, pickle.PicklingError) as e:
            self.failures.append(f"the batches' context could not be sent to the workers ({e})")
            self.close(kill=True)
            return
        for w in self.workers:
            w.body = body

    @property
    def opened(self) -> bool:
        return self._opened

    def open(self) -> None:
        """The context given, each worker fed from its own thread: it takes the next batch
        added as soon as it is free, until `done_adding`."""
        if self._opened:
            return
        self._opened = True
        self._give_context()
        self._threads = [
            threading.Thread(target=self._feed, args=(w,), daemon=True) for w in self.workers
        ]
        for t in self._threads:
            t.start()

    def _feed(self, w: _Worker) -> None:
        k = None
        try:
            if w.ask(None) != "ready":
                raise WorkerFailed("a worker process answered out of turn")
            while (k := self._take()) is not None:
                self._done.put((k, w.ask(self.batches[k])))
                k = None
                self._returned()
        except WorkerFailed as e:
            if k is not None:
                with self._ready:  # first in line: judged by a worker still running, or here
                    self._todo.appendleft(k)
                    self._in_flight -= 1
                    self._ready.notify_all()
            self._done.put((None, ("failed", str(e))))
        finally:
            self._done.put((None, ("finished",)))

    def add(self, batches: list[list[str]]) -> None:
        """More batches, taken by the workers at once (`open` first)."""
        with self._ready:
            for b in batches:
                self.batches.append(b)
                self._todo.append(len(self.batches) - 1)
            self._ready.notify_all()

    def _take(self) -> int | None:
        """The next batch for a free worker; None once none is left and none will come, or
        once the read is given up."""
        with self._ready:
            self._ready.wait_for(
                lambda: self._todo or not (self._adding or self._in_flight) or self._stopped
            )
            if self._stopped or not self._todo:
                return None
            self._in_flight += 1
            return self._todo.popleft()

    def _returned(self) -> None:
        """A batch's answer is in: one fewer out (a worker waiting for the end may end)."""
        with self._ready:
            self._in_flight -= 1
            self._ready.notify_all()

    def done_adding(self) -> None:
        """No batch comes after those added: each worker ends once the queue is empty."""
        with self._ready:
            self._adding = False
            self._ready.notify_all()

    def judge(self, batches: list[list[str]]) -> Iterator[tuple[list[NodeVerdict], int]]:
        """Each batch's verdicts and queries, in the batches' order (the Fleet pane's rows
        come in natural order). An error a batch raised (Prometheus' own) is raised here."""
        self.open()
        self.add(batches)
        yield from self.results()

    def results(self) -> Iterator[tuple[list[NodeVerdict], int]]:
        """Each added batch's verdicts and queries, in the order added (no more are added
        once this begins); an error a batch raised (Prometheus' own) is raised here."""
        self.open()
        self.done_adding()
        running = len(self._threads)
        answers: dict[int, tuple] = {}
        after = 0  # the next batch to hand over
        complete = False
        try:
            while True:
                while after in answers:
                    answer = answers.pop(after)
                    after += 1
                    if answer[0] == "error":
                        raise answer[1]
                    yield answer[1], answer[2]
                if not running:
                    break
                k, answer = self._done.get()
                if k is not None:
                    answers[k] = answer
                elif answer[0] == "finished":
                    running -= 1
                else:
                    self.failures.append(answer[1])
            # no workers, or what a stopped one left: judged here, in order
            for k in range(after, len(self.batches)):
                answer = answers.pop(k, None)
                if answer is None:
                    assert self.context is not None  # given before `open`
                    yield judge_batch(self.context, self.batches[k])
                elif answer[0] == "error":
                    raise answer[1]
                else:
                    yield answer[1], answer[2]
            complete = True
        finally:
            self.close(kill=not complete)  # an error or a cancel waits for no batch in flight
            for t in self._threads:
                t.join(timeout=5)

    def close(self, kill: bool = False) -> None:
        with self._ready:  # a feeder waiting for a batch wakes and ends
            self._stopped = True
            self._ready.notify_all()
        for w in self.workers:
            w.close(kill)
        self.workers = []


def main() -> None:
    """A worker: frames on the stdout it was given; anything else printed goes to stderr,
    from before the judge is imported (the context's unpickling imports it)."""
    frames = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from . import judge  # noqa: F401 - imported here, after the swap, not by the first batch

    serve(sys.stdin.buffer, frames)


if __name__ == "__main__":
    main()
