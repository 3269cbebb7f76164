"""The probe files' reader (collect/probe.py): real files in a private runtime directory, read a
tick at a time as the Monitor reads them — incrementally, across a rotation, with lines still
being written, damaged or binary lines, files that are not ours, symlinks, FIFOs, dead and
reused pids — and the probe states through the Monitor, a recording and a replay."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from gputop_diag import sim
from gputop_diag.collect.job import JobWatch
from gputop_diag.collect.probe import DEAD_GRACE_S, MAX_LINE, ProbeReader
from gputop_diag.model import Snapshot
from gputop_diag.monitor.core import Monitor
from gputop_diag.probe import schema as S
from gputop_diag.recording.store import read_recording
from gputop_diag.recording.writer import write_recording
from gputop_diag.sim import machine as sim_machine

PID, TICKS = 4242, 777
NOBODY = 65534


class Procs:
    """/proc/<pid>/stat of the processes named: pid -> start ticks (field 22)."""

    def __init__(self, **by_pid: int) -> None:
        self.ticks = {int(k.removeprefix("p")): v for k, v in by_pid.items()}

    def read_text(self, path: str) -> str:
        pid = int(path.split("/")[2])
        if pid not in self.ticks:
            raise FileNotFoundError(path)
        rest = ["S", 1] + [0] * 17 + [self.ticks[pid]]
        return f"{pid} (python (x)) " + " ".join(map(str, rest)) + " 0 0\n"


@pytest.fixture
def runtime(tmp_path):
    """A private $XDG_RUNTIME_DIR with the probe directory in it, as the probe makes it."""
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    (d / "gputop-diag").mkdir(mode=0o700)
    return d


def reader(runtime, procs=None, **kw) -> ProbeReader:
    return ProbeReader({"XDG_RUNTIME_DIR": str(runtime)}, procs or Procs(p4242=TICKS), **kw)


def path_of(runtime, pid=PID, ticks=TICKS, suffix=""):
    return runtime / "gputop-diag" / (S.file_name(pid, ticks) + suffix)


def hello(pid=PID, ticks=TICKS, t=100.0, **kw):
    return dict(
        kind="hello",
        t=t,
        schema=S.SCHEMA,
        pid=pid,
        start_ticks=ticks,
        argv=["train.py"],
        python="3.11.9",
        torch="2.7.1",
        cuda=True,
        rank=0,
        world=1,
        measures=dict(t_input=True, t_sync=True, t_comm=False, t_gpu=True, memory=True),
        **kw,
    )


def step(n, t=None, wall=1.0, t_input=0.5, t_sync=0.1, **kw):
    rec = dict(
        kind="step",
        t=100.0 + n if t is None else t,
        step=n,
        wall_s=wall,
        t_input_s=t_input,
        t_sync_s=t_sync,
        sync_count=2,
        t_comm_s=None,
        t_comm_exposed_s=None,
        t_gpu_s=0.3,
        t_host_s=wall - t_input - t_sync,
        measured=["t_input", "t_sync", "t_gpu"],
        mem=dict(
            allocated=2**30, reserved=2**31, peak=3 * 2**29, inactive_split=0, retries=0, ooms=0
        ),
    )
    rec.update(kw)
    return rec


def line(rec) -> bytes:
    return (json.dumps(rec) + "\n").encode()


def append(path, data: bytes | dict) -> None:
    with open(path, "ab") as f:
        f.write(line(data) if isinstance(data, dict) else data)
    os.chmod(path, 0o600)


def only(read):
    assert not read.errors, read.errors
    assert len(read.states) == 1, read.states
    return read.states[0]


# -- following a file ---------------------------------------------------------------------------


def test_reads_incrementally_and_keeps_a_line_still_being_written(runtime):
    p = path_of(runtime)
    append(p, hello())
    append(p, step(1))
    half = line(step(2))
    append(p, half[:20])  # the writer is mid-line
    r = reader(runtime)
    s = only(r.read([PID]))
    assert s.steps.steps == 1 and s.steps.last_step == 1 and s.malformed_lines == 0
    assert (
        s.torch == "2.7.1" and s.cuda and s.can_measure == ("t_input", "t_sync", "t_gpu", "memory")
    )
    size = p.stat().st_size
    append(p, half[20:])  # the line ends: it is read whole, once
    append(p, step(3))
    s = only(r.read([PID]))
    assert (s.steps.steps, s.steps.last_step, s.malformed_lines) == (3, 3, 0)
    assert r._files[(PID, TICKS)].offset == p.stat().st_size > size  # only what was added
    s = only(r.read([PID]))  # nothing new: the same state
    assert s.steps.steps == 3
    assert s.steps.t_input_s == pytest.approx(0.5) and s.steps.measured == (
        "t_input",
        "t_sync",
        "t_gpu",
    )
    assert s.memory.reserved_bytes == 2**31 and s.memory.cached_bytes == 2**30


def test_a_rotated_file_is_read_to_its_end_before_the_new_one(runtime):
    p = path_of(runtime)
    append(p, hello())
    append(p, dict(kind="model", t=100.5, params_bytes=10, grads_bytes=10, optimizer_bytes=60))
    for n in (1, 2):
        append(p, step(n))
    r = reader(runtime)
    assert only(r.read([PID])).steps.last_step == 2
    append(p, step(3))  # written after our last read, before the rotation
    append(p, line(step(4))[:15])  # ...and a line cut by the rotation: damaged
    os.replace(p, str(p) + ".1")
    append(p, hello(t=110.0))
    append(p, step(5))
    s = only(r.read([PID]))
    assert s.steps.steps == 4 and s.steps.last_step == 5  # 1, 2, 3 and 5
    assert s.malformed_lines == 1
    assert s.params_bytes == 10  # the model record of the older generation is kept
    # a reader that starts now reads the older generation first
    s = only(reader(runtime).read([PID]))
    assert s.steps.last_step == 5 and s.params_bytes == 10 and s.steps.steps == 4


def test_a_file_truncated_in_place_is_read_again_from_its_start(runtime):
    p = path_of(runtime)
    for rec in (hello(), step(1), step(2), step(3)):
        append(p, rec)
    r = reader(runtime)
    assert only(r.read([PID])).steps.last_step == 3
    p.write_bytes(line(hello(t=200.0)) + line(step(1, t=201.0)))
    s = only(r.read([PID]))
    assert s.steps.last_step == 1


def test_damaged_binary_and_wrong_shaped_lines_are_counted_never_fatal(runtime):
    p = path_of(runtime)
    append(p, hello())
    bad = [
        b"not json at all\n",
        b"\xff\xfe\x00\x01binary\x00\n",
        b"[1, 2, 3]\n",
        b'{"kind": "step", "t": 101}\n',  # no step number, no wall time
        b'{"kind": "step", "t": 101, "step": 1, "wall_s": NaN, "measured": []}\n',
        b'{"kind": "step", "t": 101, "step": 1, "wall_s": 1, "t_sync_s": -1, "measured": []}\n',
        b'{"kind": "hello", "t": 1, "schema": "gputop-diag.probe/1", "pid": 1, "start_ticks": 2}\n',
        b'{"kind": "sync_sites", "t": 1, "sites": [{"site": 3}]}\n',
        b'{"t": 5}\n',
        b"[" * 5000 + b"]" * 5000 + b"\n",  # nested past the parser's recursion limit
        b"x" * (MAX_LINE + 10) + b"\n",  # longer than any record
    ]
    for b in bad:
        append(p, b)
    append(p, step(1))
    append(p, b'{"kind": "gpu_temperature", "t": 102, "c": 70}\n')  # a later kind: ignored
    append(p, step(2))
    s = only(reader(runtime).read([PID]))
    assert s.malformed_lines == len(bad)
    assert s.steps.steps == 2 and s.steps.last_step == 2


def test_a_line_longer_than_any_record_still_being_written_is_skipped_to_its_end(runtime):
    p = path_of(runtime)
    append(p, hello())
    append(p, b"y" * (MAX_LINE + 100))  # no newline yet
    r = reader(runtime)
    assert only(r.read([PID])).malformed_lines == 1
    append(p, b"yyyy\n")  # its end, then a good record
    append(p, step(1))
    s = only(r.read([PID]))
    assert s.malformed_lines == 1 and s.steps.last_step == 1


def test_sync_sites_notes_and_bye(runtime):
    p = path_of(runtime)
    append(p, hello())
    sites = [
        dict(site="metrics.py:41", call=".cpu", count=3, seconds=0.2),
        dict(site="train.py:42", call=".item", count=10, seconds=1.5),
    ]
    append(p, dict(kind="sync_sites", t=101.0, sites=sites))
    append(p, dict(kind="note", t=101.0, text="probe: CUDA events failed; t_gpu is off"))
    append(p, dict(kind="note", t=102.0, text="probe: CUDA events failed; t_gpu is off"))
    append(p, dict(kind="bye", t=103.0))
    s = only(reader(runtime).read([PID]))
    assert [x.site for x in s.sync_sites] == ["train.py:42", "metrics.py:41"]  # most time first
    assert s.notes == ("probe: CUDA events failed; t_gpu is off",) and s.ended
    assert s.steps is None and s.updated_at == 103.0


# -- whose files --------------------------------------------------------------------------------


def test_no_directory_is_no_probe_and_no_error(tmp_path):
    r = ProbeReader({"XDG_RUNTIME_DIR": str(tmp_path / "none")}, Procs(p4242=TICKS))
    read = r.read([PID])
    assert read.states == () and read.errors == ()


def test_a_directory_of_another_user_or_open_to_others_is_refused(runtime):
    append(path_of(runtime), hello())
    read = reader(runtime, uid=os.getuid() + 1).read([PID])
    assert read.states == () and "belongs to uid" in read.errors[0].message
    os.chmod(runtime / "gputop-diag", 0o777)
    read = reader(runtime).read([PID])
    assert read.states == ()
    assert "others may write there (mode 0777" in read.errors[0].message
    assert read.errors[0].source == "probe"


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_another_users_file_is_refused_and_never_removed(runtime):
    p = path_of(runtime)
    append(p, hello())
    append(p, step(1))
    os.chown(p, NOBODY, NOBODY)
    read = reader(runtime).read([PID])
    assert read.states == ()
    assert "belongs to uid 65534, not to us" in read.errors[0].message
    # its process gone and the file old: still not ours to remove
    os.utime(p, (time.time() - 2 * DEAD_GRACE_S,) * 2)
    reader(runtime, Procs()).read([])
    assert p.exists()


def test_a_symlink_is_refused_never_followed(runtime, tmp_path):
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(line(hello()) + line(step(1)))
    os.symlink(elsewhere, path_of(runtime))
    read = reader(runtime).read([PID])
    assert read.states == () and "symbolic link" in read.errors[0].message
    # a probe directory that is a symlink is refused too
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    runtime2 = tmp_path / "run2"
    runtime2.mkdir(mode=0o700)
    os.symlink(real, runtime2 / "gputop-diag")
    read = reader(runtime2).read([PID])
    assert read.states == () and "symbolic link" in read.errors[0].message


def test_a_fifo_in_place_of_a_file_never_blocks(runtime):
    os.mkfifo(path_of(runtime), 0o600)
    start = time.monotonic()
    read = reader(runtime).read([PID])
    assert time.monotonic() - start < 2
    assert read.states == () and "not a regular file" in read.errors[0].message


# -- pids ---------------------------------------------------------------------------------------


def test_a_reused_pid_never_matches_the_old_file(runtime):
    append(path_of(runtime, ticks=111), hello(ticks=111))  # the pid's previous process
    append(path_of(runtime, ticks=111), step(1))
    r = reader(runtime, Procs(p4242=222))  # the kernel gave the pid to another process
    assert r.read([PID]).states == ()
    append(path_of(runtime, ticks=222), hello(ticks=222))
    s = only(r.read([PID]))
    assert s.start_ticks == 222 and s.steps is None


def test_a_file_that_names_another_process_inside_is_not_believed(runtime):
    append(path_of(runtime), hello(pid=999))
    s = only(reader(runtime).read([PID]))
    assert s.malformed_lines == 1 and s.torch is None


def test_a_dead_processs_files_are_removed_once_still(runtime):
    dead, old = path_of(runtime, pid=5000, ticks=9), time.time() - 2 * DEAD_GRACE_S
    for p in (dead, path_of(runtime, pid=5000, ticks=9, suffix=".1")):
        append(p, hello(pid=5000, ticks=9))
        os.utime(p, (old, old))
    fresh = path_of(runtime, pid=5001, ticks=9)  # just ended: its last records may be unread
    append(fresh, hello(pid=5001, ticks=9))
    reused = path_of(runtime, pid=PID, ticks=1)  # the pid runs, but another process
    append(reused, hello(ticks=1))
    os.utime(reused, (old, old))
    alive = path_of(runtime)
    append(alive, hello())
    os.utime(alive, (old, old))  # a quiet process that runs: kept
    other = runtime / "gputop-diag" / "notes.txt"  # not a probe file: left alone
    other.write_text("x")
    os.utime(other, (old, old))
    stacks = runtime / "gputop-diag" / S.stack_file_name(5000, 9)  # the dead one's stacks
    live_stacks = runtime / "gputop-diag" / S.stack_file_name(PID, TICKS)
    for p in (stacks, live_stacks):
        p.write_text("Current thread 0x1 (most recent call first):\n")
        os.utime(p, (old, old))
    reader(runtime).read([])  # tracking nothing: the directory is still tidied
    left = sorted(os.listdir(runtime / "gputop-diag"))
    assert left == sorted(["notes.txt", fresh.name, alive.name, live_stacks.name])


# -- the Monitor, the simulator and recordings ------------------------------------------------


def test_the_simulator_writes_what_the_schema_says():
    assert sim_machine.PROBE_SCHEMA == S.SCHEMA and sim_machine.PROBE_MAX_BYTES == S.MAX_BYTES
    s = sim.build("input-measured")
    m = Monitor(s)
    t = m.run_for(5)
    folder = os.path.join(s.environ.get("XDG_RUNTIME_DIR") or s.sim.runtime_dir, "gputop-diag")
    names = sorted(os.listdir(folder))
    assert len(names) == 8  # one per rank
    for name in names:
        pid, ticks = S.parse_file_name(name)
        assert S.start_ticks_of(s.procfs.read_text(f"/proc/{pid}/stat")) == ticks
        assert stat.S_IMODE(os.stat(os.path.join(folder, name)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    probes = t.snapshot.probes
    assert {p.pid for p in probes} == {g.pid for g in t.snapshot.gpu_processes}
    assert all(p.malformed_lines == 0 and p.steps.steps >= 3 for p in probes)
    assert all("simulated" in p.notes[0] for p in probes)


def test_a_simulated_machine_never_reads_the_real_probe_directory():
    """The simulator's /proc does not know the real processes: under it the real directory
    would look like dead processes' files, removed. A simulated shell reads its own."""
    s = sim.build("sync-measured")
    real = S.probe_dir()  # this machine's, from the real environment
    reader = Monitor(s)._probes
    assert reader.directory == os.path.join(s.sim.runtime_dir, "gputop-diag") != real
    assert S.probe_dir(s.environ) == reader.directory  # the simulated shell's variable says so
    assert reader.procfs is s.procfs


def test_probes_of_a_watched_job_that_is_on_no_gpu_are_read_and_a_process_that_dies_is_gone():
    s = sim.build("sync-measured", process_count=None)
    m = Monitor(s, job=JobWatch.for_pid(s, 41200))
    t = m.run_for(5)
    assert 41200 in {p.pid for p in t.snapshot.probes}
    assert not any(p.gone for p in t.snapshot.probes)
    s.sim.vanish_process(41216)
    t = m.tick()  # it stepped and never said goodbye: still there, as gone (a killed rank)
    (gone,) = [p for p in t.snapshot.probes if p.pid == 41216]
    assert gone.gone and gone.steps is not None
    assert not any(p.gone for p in t.snapshot.probes if p.pid != 41216)


def test_probe_states_survive_a_recording_and_a_replay_judges_them_alike(tmp_path):
    m = Monitor(sim.build("input-measured"))
    snaps: list[Snapshot] = []
    live = m.run_for(20, lambda t: snaps.append(t.snapshot)).diagnosis
    path = str(tmp_path / "rec.jsonl")
    write_recording(path, snaps)
    _, back = read_recording(path)
    assert back == snaps and all(b.probes for b in back)
    replayed = Monitor(None).replay(back).diagnosis
    assert replayed == live and replayed.primary == "input_pipeline"
    assert "measured" in replayed.evidence[0].text


def test_ranks_with_long_steps_are_compared_over_their_newest_steps_not_30_s():
    from collections import deque

    from gputop_diag.collect.probe import RANK_MIN_STEPS, _aggregate, _Step

    steps, ranked = deque(maxlen=256), deque(maxlen=1000)
    for n in range(60):  # 5 s steps: 30 s hold six of them
        t = 1000.0 + 5 * n
        values = dict.fromkeys(("t_input_s", "t_sync_s", "t_comm_s", "t_gpu_s", "t_host_s"))
        values.update(t_comm_exposed_s=1.0, sync_count=None)
        steps.append(_Step(n, t, 5.0, values, frozenset({"t_comm"})))
        ranked.append((t, 5.0, 1.0, None, None))
    s = _aggregate(steps, ranked)
    assert s.median_steps == RANK_MIN_STEPS and s.own_p50_s == 4.0
