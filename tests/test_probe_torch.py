"""The probe's hooks on real PyTorch (CPU), in this process: started by hand, stopped after
each test (`_stop` puts every original back), the records read from the file it wrote."""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path

import pytest

import gputop_diag.probe as probe
from gputop_diag.probe import sizes
from gputop_diag.probe.accounts import Accounts
from gputop_diag.probe.schema import probe_dir

# The tests that import torch in this process share one worker (`-n auto --dist loadgroup`).
pytestmark = pytest.mark.xdist_group("torch")
torch = dist = nn = DataLoader = Dataset = None  # imported by `_torch`


@pytest.fixture(scope="module", autouse=True)
def _torch():
    """torch, imported when the first of these tests runs, not when the tests are collected
    (every worker collects every test file; the import costs ~1 CPU-s)."""
    global torch, dist, nn, DataLoader, Dataset
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, Dataset


HERE = Path(__file__).name


def _attributes() -> dict[str, object]:
    """Every attribute the probe patches, as its owner's namespace holds it."""
    loader = sys.modules["torch.utils.data.dataloader"]
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    owners = {
        "Tensor": torch.Tensor,
        "cuda": torch.cuda,
        "Event": torch.cuda.Event,
        "Stream": torch.cuda.Stream,
        "iter": loader._BaseDataLoaderIter,
        "DataLoader": loader.DataLoader,
        "c10d": c10d,
        "dist": dist,
        "Work": c10d.Work,
        "DDP": nn.parallel.DistributedDataParallel,
    }
    names = ["item", "tolist", "cpu", "__bool__", "__float__", "__int__", "synchronize"]
    names += ["__next__", "__iter__", "all_reduce", "barrier", "all_gather_object", "wait"]
    names += ["__init__", "register_comm_hook", "_register_builtin_comm_hook"]
    return {f"{o}.{n}": vars(owner).get(n) for o, owner in owners.items() for n in names}


@pytest.fixture
def started(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    before = _attributes()
    running = probe._start(by_hand=True)
    assert running is not None and running.hooks is not None
    yield running
    probe._stop()
    assert _attributes() == before  # every original back in place


def _records(tmp_path: Path) -> list[dict]:
    (path,) = Path(probe_dir({"XDG_RUNTIME_DIR": str(tmp_path)})).glob("probe-*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _steps(tmp_path: Path) -> list[dict]:
    probe._stop()
    return [r for r in _records(tmp_path) if r["kind"] == "step"]


def test_wrapped_syncs_return_and_raise_exactly_what_torch_does(started, tmp_path):
    class Traced(torch.Tensor):
        """A subclass with its own __torch_function__: `.item()` goes through it, then ours."""

        calls = 0

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
            cls.calls += 1
            return super().__torch_function__(func, types, args, kwargs or {})

    assert torch.Tensor.item.__name__ == "item" and "Python number" in torch.Tensor.item.__doc__
    parameter = nn.Parameter(torch.tensor(2.5))
    traced = torch.tensor(3.0).as_subclass(Traced)
    probe.step()
    assert parameter.item() == 2.5 and type(parameter.item()) is float
    assert traced.item() == 3.0 and Traced.calls >= 1
    assert torch.tensor([1, 2]).tolist() == [1, 2]
    assert bool(torch.tensor(1)) is True and float(torch.tensor(0.5)) == 0.5
    assert int(torch.tensor(7)) == 7 and torch.tensor([4.0]).cpu().tolist() == [4.0]
    with pytest.raises(RuntimeError, match="a Tensor with 2 elements cannot be converted"):
        torch.tensor([1.0, 2.0]).item()
    probe.step()
    (step,) = _steps(tmp_path)
    # item x3 (the subclass's once, though its __torch_function__ calls item again), tolist x2,
    # bool, float, int, cpu; the item that raised is not a sync
    assert step["sync_count"] == 9 and "t_sync" in step["measured"]


def _line(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    (number,) = [n for n, line in enumerate(lines, 1) if line.endswith(f"# {marker}")]
    return number


def test_sync_sites_are_the_users_lines_and_torch_reading_its_cpu_counters_is_not_one(
    started, tmp_path
):
    model = nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    loss = None
    for _ in range(3):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # AdamW reads its step counters with .item(): torch's own, on the CPU
        loss.item()  # site-item
    float(loss.detach())  # site-float
    optimizer.step()
    steps = _steps(tmp_path)
    assert [s["sync_count"] for s in steps] == [1, 1, 2]  # the first step's start was not seen
    (sites,) = [r for r in _records(tmp_path) if r["kind"] == "sync_sites"][-1:]
    found = sorted((s["site"], s["call"], s["count"]) for s in sites["sites"])
    assert found == [
        (f"tests/{HERE}:{_line('site-item')}", ".item", 3),
        (f"tests/{HERE}:{_line('site-float')}", "float()", 1),
    ]


def test_input_time_and_sync_time_do_not_overlap(started, tmp_path):
    class Slow(Dataset):
        def __len__(self) -> int:
            return 6

        def __getitem__(self, index: int) -> torch.Tensor:
            time.sleep(0.02)
            torch.tensor(1.0).item()  # inside the loader's wait: input time, not a sync
            return torch.tensor([float(index)])

    for _batch in DataLoader(Slow(), batch_size=2, num_workers=0):
        torch.tensor(2.0).item()
        probe.step()
    steps = _steps(tmp_path)
    assert [s["step"] for s in steps] == [1, 2, 3]
    for s in steps:
        assert s["t_input_s"] >= 0.04 and s["sync_count"] == 1
        assert s["t_input_s"] + s["t_sync_s"] + s["t_host_s"] == pytest.approx(
            s["wall_s"], abs=1e-5
        )


def test_a_failing_hook_turns_itself_off_and_says_so_once(started, tmp_path, monkeypatch):
    def broken(*args):  # noqa: ANN002, ANN202
        raise ZeroDivisionError("bug in the probe")

    original = torch._C.TensorBase.item
    monkeypatch.setattr(Accounts, "add_site", broken)
    probe.step()
    assert torch.tensor(1.5).item() == 1.5  # the job gets its value, not the probe's error
    assert "item" not in vars(torch.Tensor) and torch.Tensor.item is original
    assert torch.tensor(2.5).item() == 2.5
    probe.step()
    monkeypatch.undo()
    probe._stop()
    records = _records(tmp_path)
    notes = [r["text"] for r in records if r["kind"] == "note"]
    assert len(notes) == 1 and "t_sync" in notes[0] and "ZeroDivisionError" in notes[0]
    (step,) = [r for r in records if r["kind"] == "step"]
    assert step["t_sync_s"] is None and step["sync_count"] is None
    assert "t_sync" not in step["measured"] and "t_input" in step["measured"]


def test_exact_bytes_of_parameters_gradients_and_adamw_state_with_tied_weights():
    embedding = nn.Embedding(10, 6)
    head = nn.Linear(6, 10, bias=True)
    head.weight = embedding.weight  # tied: one tensor, listed once by parameters()
    model = nn.Sequential(embedding, head)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.tensor([1, 2, 3])).sum().backward()
    optimizer.step()
    figures = sizes.model_bytes(optimizer, torch.is_tensor)
    params = (10 * 6 + 10) * 4
    assert (figures["params_bytes"], figures["grads_bytes"]) == (params, params)
    # exp_avg, exp_avg_sq, and one float32 step counter per parameter tensor (2 of them)
    assert figures["optimizer_bytes"] == 2 * params + 2 * 4


def test_views_of_one_storage_are_counted_once():
    flat = torch.zeros(100)
    a, b = nn.Parameter(flat[:40]), nn.Parameter(flat[40:])
    optimizer = torch.optim.SGD([a, b], lr=0.1)
    assert sizes.model_bytes(optimizer, torch.is_tensor)["params_bytes"] == 400


def test_kv_cache_bytes_of_a_transformers_cache(started):
    cache_utils = pytest.importorskip("transformers.cache_utils")
    cache = cache_utils.DynamicCache()
    keys = torch.zeros(1, 2, 5, 8)
    for layer in range(3):
        cache.update(keys.clone(), keys.clone(), layer)
    assert sizes.kv_cache_bytes(torch.is_tensor) == 3 * 2 * keys.numel() * 4
    del cache
    assert sizes.kv_cache_bytes(torch.is_tensor) == 0


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_collectives_blocking_and_async_and_ddp(started, tmp_path, one_rank_group):
    tensor = torch.ones(4)
    probe.step()
    dist.all_reduce(tensor)
    dist.barrier()
    probe.step()
    work = dist.all_reduce(tensor, async_op=True)
    time.sleep(0.05)  # the job overlaps the collective with its own work
    work.wait()
    probe.step()
    nn.parallel.DistributedDataParallel(nn.Linear(2, 2))
    probe.step()
    blocking, overlapped, with_ddp = _steps(tmp_path)
    assert blocking["t_comm_s"] > 0 and blocking["t_comm_exposed_s"] == blocking["t_comm_s"]
    assert overlapped["t_comm_s"] >= 0.05 > overlapped["t_comm_exposed_s"]
    # DDP's all-reduce is timed through its communication hook (test_probe_ddp.py): a model
    # that has not stepped yet leaves the part measured, at zero
    assert with_ddp["t_comm_s"] == 0.0 and "t_comm" in with_ddp["measured"]
    notes = [r["text"] for r in _records(tmp_path) if r["kind"] == "note"]
    assert not any("DistributedDataParallel" in n for n in notes)


def test_torch_compile_runs_as_it_does_without_the_probe(started):
    """Dynamo must neither compile the probe's frames (run after a graph break) nor see a graph
    break of ours: `.cpu()` and `.item()` still trace whole graphs under fullgraph=True."""
    dynamo = pytest.importorskip("torch._dynamo")

    def branchy(x):  # noqa: ANN001, ANN202 - a data-dependent branch: a graph break anyway
        y = (x * 2).cpu()
        if y.sum() > 0:
            return y.sum().item()
        return 0.0

    dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = torch.compile(branchy, backend="eager")
        assert compiled(torch.ones(3)) == 6.0 and compiled(-torch.ones(3)) == 0.0
        with dynamo.config.patch(capture_scalar_outputs=True):
            whole = torch.compile(
                lambda x: (x * 2).cpu().sum().item(), backend="eager", fullgraph=True
            )
            assert whole(torch.ones(3)) == 6.0
    dynamo.reset()
    assert not [str(w.message) for w in caught if "Dynamo" in str(w.message)]
