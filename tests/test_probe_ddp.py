"""The probe's view of a distributed job, in one process: DistributedDataParallel's all-reduce timed
through its communication hook whatever hook the job registers (probe/ddp.py), the collectives
numbered, the "progress" record of a step that runs long, and the stacks on a signal
(probe/stacks.py) only while the job has not claimed it."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from gputop_diag import probe
from gputop_diag.probe import core
from gputop_diag.probe.ddp import BUCKET_OP
from gputop_diag.probe.schema import probe_dir
from gputop_diag.probe.stacks import STACK_SIGNAL, Stacks

# The tests that import torch in this process share one worker (`-n auto --dist loadgroup`).
pytestmark = pytest.mark.xdist_group("torch")
torch = dist = nn = default_hooks = None  # imported by `_torch`


@pytest.fixture(scope="module", autouse=True)
def _torch():
    """torch, imported when the first of these tests runs, not when the tests are collected
    (every worker collects every test file; the import costs ~1 CPU-s)."""
    global torch, dist, nn, default_hooks
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


@pytest.fixture
def started(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    running = probe._start(by_hand=True)
    assert running is not None and running.hooks is not None
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield running
    dist.destroy_process_group()
    probe._stop()


@pytest.fixture
def plain():
    """The weights after three steps without the probe (asked for before `started`)."""
    return _train(_model(), 3)


def _records(tmp_path: Path) -> list[dict]:
    running = probe._probe
    if running is not None and running.file is not None:
        running.file.flush()
    (path,) = Path(probe_dir({"XDG_RUNTIME_DIR": str(tmp_path)})).glob("probe-*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _train(model: nn.Module, steps: int) -> list[torch.Tensor]:
    torch.manual_seed(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).square().mean().backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def test_ddp_buckets_are_timed_counted_once_and_the_training_is_unchanged(plain, started, tmp_path):
    probed = _train(nn.parallel.DistributedDataParallel(_model()), 3)
    assert all(torch.equal(a, b) for a, b in zip(plain, probed, strict=True))
    records = _records(tmp_path)
    steps = [r for r in records if r["kind"] == "step"]
    assert len(steps) == 2  # the first boundary's start was not seen
    assert all("t_comm" in s["measured"] and s["t_comm_s"] > 0 for s in steps)
    assert all(0 <= s["t_comm_exposed_s"] <= s["wall_s"] for s in steps)
    seqs = [s["coll_seq"] for s in steps]
    assert seqs[1] - seqs[0] == 1  # one bucket a step, not its all_reduce again
    assert started.acc.coll_op == BUCKET_OP
    assert started.acc.coll_done == started.acc.coll_entered  # every bucket finished
    assert not [r for r in records if r["kind"] == "note"]


def test_a_hook_the_job_registers_after_ours_runs_inside_the_timer(started, tmp_path):
    calls = []

    def my_hook(state, bucket):  # noqa: ANN001, ANN202
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)

    model = nn.parallel.DistributedDataParallel(_model())
    model.register_comm_hook(None, my_hook)
    _train(model, 3)
    assert calls == [0, 0, 0]  # the job's hook, once a bucket
    assert model._get_ddp_logging_data().get("comm_hook") == my_hook.__qualname__
    with pytest.raises(RuntimeError):  # a second hook: DDP's own refusal, as without the probe
        model.register_comm_hook(None, my_hook)
    steps = [r for r in _records(tmp_path) if r["kind"] == "step"]
    assert all(s["t_comm_s"] > 0 for s in steps)


def test_a_built_in_hook_becomes_its_python_twin_and_gives_the_same_weights(
    plain, started, tmp_path
):
    model = nn.parallel.DistributedDataParallel(_model())
    model._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
    assert all(torch.equal(a, b) for a, b in zip(plain, _train(model, 3), strict=True))
    steps = [r for r in _records(tmp_path) if r["kind"] == "step"]
    assert all("t_comm" in s["measured"] for s in steps)


def test_a_slow_step_writes_progress_with_the_collective_it_is_in(started, tmp_path, monkeypatch):
    monkeypatch.setattr(core, "PROGRESS_AFTER_S", 0.2)
    monkeypatch.setattr(core, "PROGRESS_EVERY_S", 0.2)
    probe.step()
    probe.step()
    time.sleep(0.8)  # a step that runs long, in no collective
    seq = started.acc.enter("all_reduce", 64, time.perf_counter())  # entered, never finished
    time.sleep(0.8)
    started.file.flush()
    progress = [r for r in _records(tmp_path) if r["kind"] == "progress"]
    assert progress, "no progress record while the step ran long"
    idle = [p for p in progress if p["in_s"] is None]
    inside = [p for p in progress if p["in_s"] is not None]
    assert idle and inside
    assert all(p["step"] == 2 and p["stalled_s"] >= 0.2 for p in progress)
    last = inside[-1]
    assert (last["entered"], last["done"], last["op"], last["bytes"]) == (
        seq,
        seq - 1,
        "all_reduce",
        64,
    )
    assert last["thread"] == threading.get_ident()
    assert last["stack_signal"] == int(STACK_SIGNAL)


def test_the_stacks_are_written_on_the_signal_with_the_stepping_threads_frames(tmp_path):
    stacks = Stacks()
    assert stacks.register(str(tmp_path), os.getpid(), 1) == int(STACK_SIGNAL)
    try:
        os.kill(os.getpid(), STACK_SIGNAL)
        time.sleep(0.1)
        (path,) = tmp_path.glob("stack-*.txt")
        text = path.read_text()
        assert "Current thread" in text
        assert "test_the_stacks_are_written_on_the_signal" in text
        assert stacks.still_ours()
    finally:
        stacks.abandon_after_fork()  # gives the signal back (as in a forked child)
    assert signal.getsignal(STACK_SIGNAL) == signal.SIG_DFL


def test_a_signal_the_job_claimed_is_never_taken_nor_taken_back(tmp_path):
    seen = []
    previous = signal.signal(STACK_SIGNAL, lambda *a: seen.append("before"))
    try:
        assert Stacks().register(str(tmp_path), os.getpid(), 2) is None  # claimed before
        signal.signal(STACK_SIGNAL, signal.SIG_DFL)
        stacks = Stacks()
        assert stacks.register(str(tmp_path), os.getpid(), 3) is not None
        signal.signal(STACK_SIGNAL, lambda *a: seen.append("after"))  # claimed since
        assert not stacks.still_ours()  # the progress records then say: no stacks
        os.kill(os.getpid(), STACK_SIGNAL)
        time.sleep(0.1)
        assert seen == ["after"]  # the job's handler, untouched by ours
    finally:
        signal.signal(STACK_SIGNAL, previous)


def test_no_stacks_when_the_user_turns_them_off(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTOP_DIAG_PROBE_NO_STACKS", "1")
    assert Stacks().register(str(tmp_path), os.getpid(), 4) is None
    assert signal.getsignal(STACK_SIGNAL) == signal.SIG_DFL


def test_the_hook_can_be_turned_off_and_ddp_is_left_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUTOP_DIAG_PROBE_NO_DDP_HOOK", "1")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    running = probe._start(by_hand=True)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = nn.parallel.DistributedDataParallel(_model())
        assert not model._comm_hooks  # no hook of ours: DDP's C++ all-reduce
        _train(model, 3)
        steps = [r for r in _records(tmp_path) if r["kind"] == "step"]
        assert steps and all("t_comm" not in s["measured"] for s in steps)
        notes = [r["text"] for r in _records(tmp_path) if r["kind"] == "note"]
        assert any("GPUTOP_DIAG_PROBE_NO_DDP_HOOK" in n for n in notes)
        model.register_comm_hook(None, default_hooks.allreduce_hook)  # the job's own: untouched
        assert model._comm_hooks[-1][0] is default_hooks.allreduce_hook
        assert running.acc.coll_entered == 0
    finally:
        dist.destroy_process_group()
        probe._stop()


def test_a_model_on_nccl_gets_no_hook_and_says_why(started, tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(dist, "get_backend", lambda group=None: "nccl")  # as on a GPU node
        model = nn.parallel.DistributedDataParallel(_model())
    assert not model._comm_hooks  # a hook would time nothing there, and cost
    _train(model, 3)
    steps = [r for r in _records(tmp_path) if r["kind"] == "step"]
    assert steps and all(s["t_comm_s"] is None for s in steps)
    notes = [r["text"] for r in _records(tmp_path) if r["kind"] == "note"]
    assert any("collectives run on the GPU (NCCL)" in n for n in notes)


def test_a_failed_ranks_error_reads_without_torchs_source_locations():
    from gputop_diag.probe.core import _exit_text

    text = _exit_text(
        RuntimeError(
            "Got the following error when running the callback: RuntimeError: [/__w/pytorch/"
            "pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
            "[127.0.0.1]:17334: Connection reset by peer\nmore lines"
        )
    )
    assert text == (
        "RuntimeError: Got the following error when running the callback: RuntimeError: "
        "Read error [127.0.0.1]:17334: Connection reset by peer"
    )
    assert _exit_text(ValueError("x " * 400)).endswith("…")
