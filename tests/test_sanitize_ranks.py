"""A distributed job's ranks under --sanitize: the ranks stay; each rank's node, pid and the
paths in its stack become pseudonyms in watch's summary (text and JSON), whatever the names
are. The identifiers are made at random for each run (node-<random> hosts, random users and
projects in the stacks' paths, random pids): a rule that works only for a fixed list of names
fails here sooner or later. The builders (`rank_probes`, `rank_snapshot`) are the ones the
Job pane's and the report's tests use."""

from __future__ import annotations

import json
import random
import re
import string
from dataclasses import dataclass

from gputop_diag.commands.common import seeded_sanitizer
from gputop_diag.diagnose.measured_render import measured_json
from gputop_diag.diagnose.ranks import judge_ranks
from gputop_diag.diagnose.ranks_render import ranks_json, ranks_lines
from gputop_diag.diagnose.watch_summary import ProbesSeen, quiet, summary_json, summary_text
from gputop_diag.model import (
    GpuProcess,
    GpuState,
    GpuStatic,
    JobProcess,
    JobState,
    ProbeProgress,
    ProbeState,
    ProbeSteps,
    Snapshot,
    SystemInfo,
)
from gputop_diag.model.codec import jsonable
from gputop_diag.monitor.core import Monitor

MEASURED = ("t_input", "t_sync", "t_comm", "t_host")


@dataclass(frozen=True)
class Names:
    """One run's made-up identifiers: a node, a pid, a user and a project per rank."""

    nodes: tuple[str, ...]
    pids: tuple[int, ...]
    users: tuple[str, ...]
    projects: tuple[str, ...]
    seed: int

    def paths(self, rank: int) -> tuple[str, str]:
        home = f"/home/{self.users[rank]}/{self.projects[rank]}"
        return f"{home}/train.py", f"{home}/data/loader_{self.users[rank]}.py"

    def secrets(self) -> list[str]:
        """What must never show under --sanitize (the pids apart: see `pids`)."""
        out = [*self.nodes, *self.users, *self.projects]
        for rank in range(len(self.nodes)):
            out += self.paths(rank)
        return out


def made_up_names(n: int = 4, seed: int | None = None) -> Names:
    """Random identifiers for `n` ranks (`seed`: to repeat a failing run)."""
    seed = random.SystemRandom().randrange(2**32) if seed is None else seed
    rng = random.Random(seed)

    def word(k: int, alphabet: str = string.ascii_lowercase) -> str:
        return rng.choice(string.ascii_lowercase) + "".join(rng.choices(alphabet, k=k - 1))

    alnum = string.ascii_lowercase + string.digits
    pids = rng.sample(range(100_000, 4_000_000), n)
    return Names(
        nodes=tuple(f"node-{word(rng.randint(5, 9), alnum)}" for _ in range(n)),
        pids=tuple(pids),
        users=tuple(word(rng.randint(6, 10)) for _ in range(n)),
        projects=tuple(word(rng.randint(5, 9)) for _ in range(n)),
        seed=seed,
    )


def _steps(at: float, slow: bool, steps: int) -> ProbeSteps:
    own, wait = (0.090, 0.010) if slow else (0.060, 0.040)
    return ProbeSteps(
        steps=steps,
        last_step=100 + steps,
        last_at=at - 0.2,
        wall_s=0.1,
        t_input_s=0.010,
        t_sync_s=0.001,
        sync_count=1.0,
        t_comm_s=0.045,
        t_comm_exposed_s=wait,
        t_host_s=0.1 - 0.011 - wait,
        measured=MEASURED,
        wall_p50_s=0.1,
        wall_p95_s=0.12,
        own_p50_s=own,
        wait_p50_s=wait,
        input_p50_s=0.010,
        sync_p50_s=0.001,
        coll_seq=122,
    )


def _stack(names: Names, rank: int, frame: str) -> str:
    train, loader = names.paths(rank)
    return "\n".join(
        [
            f'File "{loader}", line 88 in {frame}',
            f'File "{train}", line 120 in train_step',
            f'File "{train}", line 201 in main',
            f'File "{train}", line 230 in <module>',
        ]
    )


def rank_probes(
    names: Names,
    at: float,
    *,
    straggler: int | None = 2,
    stalled: int | None = None,
    steps: int = 40,
) -> tuple[ProbeState, ...]:
    """One probe per rank at time `at`: rank `straggler` works 30 ms more a step and waits
    least; with `stalled`, that rank took no step for 40 s while the others wait in the
    all_reduce it never entered (each with its stack)."""
    out = []
    for rank, (node, pid) in enumerate(zip(names.nodes, names.pids, strict=True)):
        progress = stack = None
        if stalled is not None:
            missing = rank == stalled
            progress = ProbeProgress(
                at=at,
                step=101 + steps,
                stalled_s=40.0,
                entered=122 if missing else 123,
                done=122,
                op=None if missing else "all_reduce",
                nbytes=None if missing else 17408,
                in_s=None if missing else 39.0,
            )
            stack = _stack(names, rank, "read_shard" if missing else "wait")
        out.append(
            ProbeState(
                pid=pid,
                start_ticks=1000 + rank,
                torch="2.4.0",
                cuda=True,
                rank=rank,
                world=len(names.nodes),
                local_rank=rank,
                node=node,
                steps=_steps(at, rank == straggler, steps),
                updated_at=at,
                progress=progress,
                stack_signal=10,
                stack=stack,
                stack_at=at if stack else None,
            )
        )
    return tuple(out)


def rank_snapshot(names: Names, at: float, probes: tuple[ProbeState, ...]) -> Snapshot:
    """A tick of a watched job whose processes are the ranks, each on its own GPU."""
    procs = tuple(
        JobProcess(pid, 1, 0, "python", ("python", names.paths(0)[0]), 99.0, 2**30, 8)
        for pid in names.pids
    )
    job = JobState(target="command", label="torchrun train.py", root_pids=names.pids[:1],
                   processes=procs)  # fmt: skip
    return Snapshot(
        timestamp=at,
        system=SystemInfo("h"),
        gpus=tuple(GpuState(index=i, static=GpuStatic(i)) for i in range(len(names.pids))),
        gpu_processes=tuple(
            GpuProcess(pid, i, "compute", 4 * 2**30) for i, pid in enumerate(names.pids)
        ),
        job=job,
        probes=probes,
    )


def _hang_window(names: Names) -> list[Snapshot]:
    """Ten ticks: the straggler at first, then rank 1 stalls (the hang)."""
    snaps = []
    for k in range(10):
        at = 5000.0 + k
        probes = rank_probes(names, at) if k < 5 else rank_probes(names, at, stalled=1)
        snaps.append(rank_snapshot(names, at, probes))
    return snaps


def _shown(text: str, names: Names) -> list[str]:
    """The made-up identifiers `text` still holds (letter case aside)."""
    low = text.lower()
    return [x for x in names.secrets() if x.lower() in low]


def _pids_in(text: str, names: Names) -> list[int]:
    return [pid for pid in names.pids if re.search(rf"(?<!\d){pid}(?!\d)", text)]


def _watch_summary(names: Names, snaps: list[Snapshot]):
    """What `watch --sanitize` prints at the end, built as commands/watch.py builds it: the
    probes seen, the ranks judged, everything through one seeded sanitizer."""
    monitor = Monitor(None, interval=1.0)
    seen = ProbesSeen()
    for snap in snaps:
        t = monitor.feed(snap)
        seen.update(snap)
    s = seeded_sanitizer(None, snaps)
    job = s.model(quiet(snaps[-1].job))
    diag = s.model(t.diagnosis)
    probes = [s.model(p) for p in seen.probes()]
    raw = seen.ranks()
    ranks = s.model(raw)
    text = summary_text(job, [], snaps, diag, "seconds", 0, probes, [], [], ranks)
    doc = summary_json(job, [], snaps, diag, "seconds")
    doc["measured"] = measured_json(probes, [])
    doc["ranks"] = ranks_json(ranks)
    return s, raw, ranks, text, doc


def test_no_made_up_node_pid_or_path_in_watchs_sanitized_summary():
    names = made_up_names()
    s, raw, ranks, text, doc = _watch_summary(names, _hang_window(names))
    why = f"(seed {names.seed})"
    assert raw.hang is not None and raw.hang.missing == (1,), why
    blob = json.dumps(doc)
    assert not _shown(text, names) and not _shown(blob, names), why
    assert not s.leaks(text) and not s.leaks(blob), why
    # the rank table's pids are pseudonyms (the process tree and memory lines are not given
    # here: they list this machine's processes, whose pids every surface prints as numbers)
    table = "\n".join(ranks_lines(ranks))
    assert not _pids_in(table, names) and not _pids_in(json.dumps(doc["ranks"]), names), why
    assert all(str(r.pid).startswith("pid-") for r in ranks.rows), why
    # the ranks stay, in order, with their figures and the hang's verdict
    assert [r.rank for r in ranks.rows] == [0, 1, 2, 3]
    assert [row["rank"] for row in doc["ranks"]["rows"]] == [0, 1, 2, 3]
    assert ranks.hang.missing == (1,) and ranks.hang.waiting == (0, 2, 3)
    assert "hang: rank 1 took no step for 40 s" in text and "stack of rank 1" in text
    assert "line 88 in read_shard" in text  # the frame stays, its path a pseudonym
    assert all(r.node.startswith("host-") for r in ranks.rows), why


def test_the_straggler_names_its_node_by_pseudonym_only():
    names = made_up_names()
    snaps = [rank_snapshot(names, 7000.0 + k, rank_probes(names, 7000.0 + k)) for k in range(3)]
    s, raw, ranks, text, doc = _watch_summary(names, snaps)
    why = f"(seed {names.seed})"
    assert raw.straggler is not None and raw.straggler.rank == 2, why
    assert ranks.straggler.rank == 2 and ranks.straggler.node.startswith("host-"), why
    assert f"straggler: rank 2 on {ranks.straggler.node}" in text
    assert str(ranks.straggler.pid).startswith("pid-")
    assert not _shown(text + json.dumps(doc), names), why
    assert not _pids_in("\n".join(ranks_lines(ranks)) + json.dumps(doc["ranks"]), names), why


def test_one_pid_one_pseudonym_across_the_table_and_the_straggler():
    names = made_up_names()
    at = 9000.0
    s = seeded_sanitizer(None, [rank_snapshot(names, at, rank_probes(names, at))])
    view = s.model(judge_ranks(rank_probes(names, at)))
    again = s.model(judge_ranks(rank_probes(names, at)))
    assert view == again  # one key: the same pseudonyms tick after tick
    assert view.straggler.pid == view.row(2).pid and view.straggler.node == view.row(2).node
    assert len({r.pid for r in view.rows}) == 4 and len({r.node for r in view.rows}) == 4
    assert s.summary()["pid"]["distinct"] == 4


def test_a_probe_states_node_is_seeded_as_a_host_name():
    """A node no other source names (another machine's): its probe state seeds it, so it is
    replaced in free text too (a verdict, an exception)."""
    names = made_up_names()
    at = 9500.0
    s = seeded_sanitizer(None, [rank_snapshot(names, at, rank_probes(names, at))])
    node = names.nodes[3]
    assert node not in (s.text(f"rank 3 on {node} failed, see {node.upper()}.log") or "")
    shown = s.model(rank_probes(names, at)[3])
    assert shown.node.startswith("host-") and shown.pid == names.pids[3]  # a ProbeState: pids
    # stay numbers (its snapshot is read back by the same decoder)
    assert jsonable(shown)["rank"] == 3
