"""Flight Recorder dumps: where a job writes them, reading them safely, and the hang they show.

The real dumps under data/flight_recorder/ come from a 3-rank gloo job on torch 2.13 (CPU) in
which ranks 0 and 1 entered an all_reduce that rank 2 had not entered yet, every rank then
dumping its recorder (`_dump_fr_trace` as pickle, `_dump_fr_trace_json` as JSON, no stack
traces). Making them takes about 12 s on 2 cores, too long for every run: the committed files
are read, and `test_a_real_gloo_job_dumps_what_the_committed_files_hold` (run with
GPUTOP_DIAG_FR_REGENERATE=1, torch installed) makes them afresh and checks the same findings.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from gputop_diag.collect.flight_recorder import (
    MAX_DUMP_BYTES,
    FlightDump,
    FlightEntry,
    FlightHang,
    dump_prefix,
    hang_from_dumps,
    read_dump,
    read_dumps,
)

DATA = Path(__file__).parent / "data" / "flight_recorder"
REAL_PICKLE = str(DATA / "gloo_hang_rank_")
REAL_JSON = str(DATA / "gloo_hang_json_rank_")


# --- dumps as torch writes them -----------------------------------------------------------------


def _raw(seq, state="completed", op="nccl:all_reduce", sizes=((1024,),), pg=("0", "default_pg")):
    """One entry with the keys and value types of torch's pickle dump (FlightRecorderDetail.hpp)."""
    return {
        "record_id": seq,
        "pg_id": 0,
        "process_group": pg,
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": op,
        "time_created_ns": 1_700_000_000_000_000_000 + seq,
        "input_sizes": [list(s) for s in sizes],
        "input_dtypes": ["Float"] * len(sizes),
        "output_sizes": [list(s) for s in sizes],
        "output_dtypes": ["Float"] * len(sizes),
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": state == "completed",
        "timeout_ms": 600000,
        "is_p2p": False,
    }


def _doc(entries, pg_status=None):
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
        "pg_status": pg_status or {},
        "comm_lib_version": "2.21.5",
        "entries": entries,
    }


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _nccl_job(tmp_path: Path, last_seq: dict[int, int], open_from: dict[int, int]) -> str:
    """A 4-rank NCCL job's dumps: rank r recorded seqs up to last_seq[r], those from
    open_from[r] on still open ("started" for the first, "scheduled" after)."""
    prefix = tmp_path / "nccl_trace_rank_"
    for rank, last in last_seq.items():
        entries = []
        for seq in range(max(1, last - 9), last + 1):
            first_open = open_from.get(rank, last + 1)
            state = "completed" if seq < first_open else "started"
            state = "scheduled" if seq > first_open else state
            entries.append(_raw(seq, state, sizes=((4096,), (4096,)) if seq == 41 else ((8,),)))
        _write(Path(f"{prefix}{rank}"), pickle.dumps(_doc(entries)))
    return str(prefix)


# --- where the dumps are ------------------------------------------------------------------------


def test_the_default_prefix_is_in_the_users_cache_folder():
    assert dump_prefix({"HOME": "/home/ann"}) == "/home/ann/.cache/torch/comm_lib_trace_rank_"
    xdg = {"HOME": "/home/ann", "XDG_CACHE_HOME": "/scratch/ann"}
    assert dump_prefix(xdg) == "/scratch/ann/torch/comm_lib_trace_rank_"
    assert dump_prefix({}) == "/tmp/.cache/torch/comm_lib_trace_rank_"


def test_the_file_variables_and_their_order():
    new, old = "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
    assert dump_prefix({old: "/dumps/old_", "HOME": "/h"}) == "/dumps/old_"
    assert dump_prefix({new: "/dumps/fr_", old: "/dumps/old_"}) == "/dumps/fr_"
    assert dump_prefix({new: ""}) is None  # relative to the job's folder, which we do not know


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({}, True),  # on by default in torch 2.13, 2000 entries
        ({"TORCH_FR_BUFFER_SIZE": "2000"}, True),
        ({"TORCH_NCCL_TRACE_BUFFER_SIZE": "100"}, True),
        ({"TORCH_FR_BUFFER_SIZE": "0"}, False),
        ({"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}, False),
        ({"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}, False),
        ({"TORCH_FR_BUFFER_SIZE": " 50"}, True),  # std::stoi skips leading blanks
        ({"TORCH_FR_BUFFER_SIZE": "lots"}, False),  # torch refuses to start
    ],
)
def test_a_buffer_of_size_zero_turns_the_recorder_off(env, enabled):
    assert (dump_prefix({"HOME": "/h", **env}) is not None) is enabled


# --- real dumps of a gloo job -------------------------------------------------------------------


def test_real_gloo_dumps_each_ranks_last_collectives():
    dumps = read_dumps(REAL_PICKLE)
    assert [(d.rank, d.error) for d in dumps] == [(0, None), (1, None), (2, None)]
    rank0 = dumps[0].entries
    assert [(e.seq, e.op, e.state) for e in rank0] == [
        (1, "gloo:all_reduce", "completed"),
        (2, "gloo:all_reduce", "completed"),
        (3, "gloo:broadcast", "completed"),
        (4, "gloo:all_reduce", "scheduled"),
    ]
    assert rank0[0].sizes == ((4, 3),) and rank0[3].sizes == ((8,),)
    assert {e.process_group for d in dumps for e in d.entries} == {"0 (default_pg)"}
    assert all(isinstance(e.created_ns, int) for e in rank0)
    assert [e.seq for e in dumps[2].entries] == [1, 2, 3]


def test_real_gloo_dumps_show_the_hang_and_the_rank_that_never_entered():
    hang = hang_from_dumps(read_dumps(REAL_PICKLE))
    assert hang == FlightHang(4, "gloo:all_reduce", (0, 1), (2,), ((8,),), "0 (default_pg)")


def test_the_json_form_reads_the_same_as_the_pickle():
    pickled, as_json = read_dumps(REAL_PICKLE), read_dumps(REAL_JSON)
    assert [d.error for d in as_json] == [None, None, None]
    assert [d.entries for d in as_json] == [d.entries for d in pickled]
    assert hang_from_dumps(as_json) == hang_from_dumps(pickled)


def test_gloo_entries_complete_through_retired_not_through_their_state(tmp_path):
    """Gloo records no events: torch writes "scheduled" for every entry, done or not; its worker
    retires an entry once the collective has run. NCCL's retired-but-not-completed timed out."""
    raw = pickle.loads((DATA / "gloo_hang_rank_0").read_bytes())
    assert {e["state"] for e in raw["entries"]} == {"scheduled"}
    assert [e["retired"] for e in raw["entries"]] == [True, True, True, False]
    timed_out = dict(_raw(9, "started"), retired=True)
    ran = dict(_raw(9, "scheduled", op="gloo:all_reduce"), retired=True)
    doc = pickle.dumps(_doc([timed_out, ran]))
    entries = read_dump(_write(tmp_path / "t_0", doc)).entries
    assert [e.state for e in entries] == ["started", "completed"]


@pytest.mark.skipif(
    not os.environ.get("GPUTOP_DIAG_FR_REGENERATE"), reason="about 12 s: set it to run"
)
def test_a_real_gloo_job_dumps_what_the_committed_files_hold(tmp_path):
    pytest.importorskip("torch.distributed")
    import subprocess

    script = tmp_path / "job.py"
    script.write_text(_GLOO_JOB)
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, timeout=120)
    for prefix in ("gloo_hang_rank_", "gloo_hang_json_rank_"):
        fresh = read_dumps(str(tmp_path / prefix))
        assert hang_from_dumps(fresh) == hang_from_dumps(read_dumps(REAL_PICKLE))
        assert [[(e.seq, e.op, e.state) for e in d.entries] for d in fresh] == [
            [(e.seq, e.op, e.state) for e in d.entries] for d in read_dumps(REAL_PICKLE)
        ]
    if os.environ.get("GPUTOP_DIAG_FR_REGENERATE") == "write":
        for path in tmp_path.glob("gloo_hang_*"):
            shutil.copy(path, DATA / path.name)


_GLOO_JOB = textwrap.dedent(
    """
    import os, sys, time
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    import torch._C._distributed_c10d as c10d

    def wait_all(store, key, world):
        store.add(key, 1)
        while store.add(key, 0) < world:
            time.sleep(0.01)

    def worker(rank, world, out):
        os.environ.update(TORCH_FR_BUFFER_SIZE="16", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("FR_PORT", "29533"))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        store = dist.distributed_c10d._get_default_store()
        t = torch.ones(4, 3)
        dist.all_reduce(t); dist.all_reduce(t); dist.broadcast(t, 0)
        late = None if rank == 2 else dist.all_reduce(torch.ones(8), async_op=True)
        wait_all(store, "entered", world)
        time.sleep(0.2)
        with open(f"{out}/gloo_hang_rank_{rank}", "wb") as f:
            f.write(c10d._dump_fr_trace(True, False, False))
        with open(f"{out}/gloo_hang_json_rank_{rank}", "wb") as f:
            f.write(c10d._dump_fr_trace_json(True, False))
        wait_all(store, "dumped", world)
        late = late or dist.all_reduce(torch.ones(8), async_op=True)
        late.wait()
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(worker, args=(3, sys.argv[1]), nprocs=3)
    """
)


# --- hand-built dumps: the hang, and none -------------------------------------------------------


def test_rank_2_never_entered_seq_41(tmp_path):
    prefix = _nccl_job(tmp_path, {0: 41, 1: 41, 2: 40, 3: 42}, {0: 41, 1: 41, 3: 41})
    dumps = read_dumps(prefix)
    assert [d.rank for d in dumps] == [0, 1, 2, 3]
    assert dumps[3].entries[-2:] == (
        FlightEntry(41, "nccl:all_reduce", "started", "0 (default_pg)", ((4096,), (4096,)),
                    1_700_000_000_000_000_041),
        FlightEntry(42, "nccl:all_reduce", "scheduled", "0 (default_pg)", ((8,),),
                    1_700_000_000_000_000_042),
    )  # fmt: skip
    hang = hang_from_dumps(dumps)
    assert hang == FlightHang(
        41, "nccl:all_reduce", (0, 1, 3), (2,), ((4096,), (4096,)), "0 (default_pg)"
    )


def test_all_completed_is_no_hang(tmp_path):
    prefix = _nccl_job(tmp_path, {0: 41, 1: 41, 2: 41, 3: 41}, {})
    dumps = read_dumps(prefix)
    assert all(e.state == "completed" for d in dumps for e in d.entries)
    assert hang_from_dumps(dumps) is None
    assert hang_from_dumps(()) is None


def test_a_hang_where_every_rank_is_in_names_no_missing_rank(tmp_path):
    prefix = _nccl_job(tmp_path, {0: 41, 1: 41}, {0: 41, 1: 41})
    assert hang_from_dumps(read_dumps(prefix)) == FlightHang(
        41, "nccl:all_reduce", (0, 1), (), ((4096,), (4096,)), "0 (default_pg)"
    )


def test_sequence_ids_count_per_process_group(tmp_path):
    """seq 7 of a sub-group is not seq 7 of the world: rank 1 is missing from the sub-group's."""
    sub = ("1", "tp")
    world_done = [_raw(s) for s in range(1, 9)]
    r0 = world_done + [_raw(7, "started", "nccl:all_gather", pg=sub)]
    r1 = world_done + [_raw(6, pg=sub)]
    _write(tmp_path / "fr_0", pickle.dumps(_doc(r0)))
    _write(tmp_path / "fr_1", pickle.dumps(_doc(r1)))
    hang = hang_from_dumps(read_dumps(str(tmp_path / "fr_")))
    assert hang == FlightHang(7, "nccl:all_gather", (0,), (1,), ((1024,),), "1 (tp)")


def test_p2p_ops_and_unreadable_dumps_are_left_out_of_the_hang(tmp_path):
    send = dict(_raw(0, "started", "nccl:send 0->1"), is_p2p=True, p2p_seq_id=5)
    _write(tmp_path / "fr_0", pickle.dumps(_doc([_raw(1), send])))
    _write(tmp_path / "fr_1", b"garbage")
    dumps = read_dumps(str(tmp_path / "fr_"))
    assert dumps[0].entries[1].p2p and dumps[0].entries[1].seq == 5
    assert dumps[1].error and "not a Flight Recorder dump" in dumps[1].error
    assert hang_from_dumps(dumps) is None


# --- reading safely -----------------------------------------------------------------------------


class _RunsACommand:
    """What a crafted dump would hold: unpickling it calls os.system."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_a_pickle_that_would_run_a_command_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    evil = pickle.dumps(_doc([_raw(1), _RunsACommand(f"touch {marker}")]))
    assert b"system" in evil
    dump = read_dump(_write(tmp_path / "trace_rank_0", evil))
    assert dump.entries == () and dump.rank == 0
    assert "refused" in dump.error and "system" in dump.error and "nothing was run" in dump.error
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload",
    [
        b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93.",  # STACK_GLOBAL
        b"\x80\x02cbuiltins\nexec\nq\x00X\x04\x00\x00\x00passq\x01\x85q\x02Rq\x03.",
        b"\x80\x02X\x01\x00\x00\x00aQ.",  # a persistent id
        b"\x80\x02(ccollections\nOrderedDict\no.",  # OBJ: a class, even a harmless one
    ],
)
def test_any_named_callable_or_persistent_id_is_refused(tmp_path, payload):
    dump = read_dump(_write(tmp_path / "t_0", payload))
    assert dump.error and "refused" in dump.error and dump.entries == ()


def test_a_truncated_dump_is_reported(tmp_path):
    data = (DATA / "gloo_hang_rank_0").read_bytes()
    for cut in (len(data) // 2, len(data) - 1, 3):
        dump = read_dump(_write(tmp_path / "trace_rank_1", data[:cut]))
        assert dump.error and "truncated" in dump.error and dump.entries == ()
    text = (DATA / "gloo_hang_json_rank_0").read_bytes()
    dump = read_dump(_write(tmp_path / "trace_rank_2", text[: len(text) // 2]))
    assert dump.error and "JSON" in dump.error and "truncated" in dump.error


def test_a_file_larger_than_the_limit_is_refused_unread(tmp_path):
    huge = tmp_path / "trace_rank_0"
    with open(huge, "wb") as f:
        f.truncate(MAX_DUMP_BYTES + 1)  # sparse: no 16 MB written
    dump = read_dump(str(huge))
    assert "refused" in dump.error and str(MAX_DUMP_BYTES) in dump.error
    small = read_dump(str(DATA / "gloo_hang_rank_0"), max_bytes=100)
    assert "refused" in small.error and "more than the limit of 100" in small.error


def test_a_symlink_is_refused(tmp_path):
    link = tmp_path / "trace_rank_0"
    link.symlink_to(DATA / "gloo_hang_rank_0")
    dump = read_dump(str(link))
    assert dump.error and "symbolic link" in dump.error and dump.entries == ()


def test_a_fifo_a_folder_and_a_missing_file_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trace_rank_0"
    os.mkfifo(fifo)
    assert "not a regular file" in read_dump(str(fifo)).error
    (tmp_path / "trace_rank_1").mkdir()
    assert "not a regular file" in read_dump(str(tmp_path / "trace_rank_1")).error
    assert "cannot be opened" in read_dump(str(tmp_path / "trace_rank_9")).error


def test_a_file_of_another_user_is_refused(tmp_path, monkeypatch):
    path = _write(tmp_path / "trace_rank_0", (DATA / "gloo_hang_rank_0").read_bytes())
    owner = os.stat(path).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    dump = read_dump(path)
    assert dump.error and f"owned by uid {owner}" in dump.error


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "empty"),
        (pickle.dumps([1, 2, 3]), "not a Flight Recorder dump"),
        (pickle.dumps({"version": "2.10", "entries": "many"}), "'entries' is not a list"),
        (b"{" * 100_000, "JSON"),  # nesting too deep for the parser
    ],
    ids=["empty", "a-list", "entries-not-a-list", "json-too-deep"],
)
def test_other_bad_documents_are_messages(tmp_path, data, words):
    dump = read_dump(_write(tmp_path / "t_3", data))
    assert dump.error and words in dump.error and dump.rank == 3


def test_odd_field_types_become_none_not_errors(tmp_path):
    entry = dict(_raw(5), collective_seq_id="5", input_sizes=[["a"]], profiling_name=7)
    entry.update(process_group=None, state="weird", time_created_ns=True)
    doc = _doc([entry, "not an entry"])
    (read,) = read_dump(_write(tmp_path / "t_0", pickle.dumps(doc))).entries
    assert read == FlightEntry(None, "?", "unknown", None, (), None)


def test_a_dump_with_no_collectives_has_no_entries(tmp_path):
    doc = {"version": "2.10", "pg_config": {}, "pg_status": {}}  # includeCollectives=False
    dump = read_dump(_write(tmp_path / "t_0", json.dumps(doc).encode()))
    assert dump == FlightDump(0, (), None, str(tmp_path / "t_0"))


def test_read_dumps_is_bounded_and_takes_the_prefix_literally(tmp_path):
    data = (DATA / "gloo_hang_rank_0").read_bytes()
    for rank in range(5):
        _write(tmp_path / f"t[x]_{rank}", data)
    assert len(read_dumps(str(tmp_path / "t[x]_"))) == 5
    assert len(read_dumps(str(tmp_path / "t[x]_"), limit=3)) == 3
    assert read_dumps(str(tmp_path / "nothing_")) == ()
