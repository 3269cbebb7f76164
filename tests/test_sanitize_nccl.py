"""NCCL's own line prefix under --sanitize: `HOST:PID:TID [DEV] NCCL INFO|WARN|TRACE` and
`HOST:PID:TID NCCL CALL` (NCCL's src/debug.cc, `ncclDebugLog`), in every line of a multi-node
job, name each rank's host, a peer the sanitizer was never seeded with. The host becomes its
pseudonym in every spelling (short, FQDN, an address, any letter case, with and without the
device, after a timestamp or a launcher's tag), the one the rank table gives its node; the pid
and thread id stay numbers, as pids in free text do; the rest of the line (peers, addresses,
bus ids, NET/IB's interfaces) goes through the other rules.

The identifiers are generated (a fixed seed, hundreds of lines), not listed; every surface
that carries a job's output lines is read: the free text, `watch --sanitize`'s summary (text
and JSON: the job's failure lines reach it through the diagnosis's alerts), the report (both
forms) and a sanitized recording (the job's output tail)."""

from __future__ import annotations

import json
import random
import re
import string
from dataclasses import dataclass, field

from test_sanitize_ranks import made_up_names, rank_probes, rank_snapshot

from gputop_diag.commands.common import seeded_sanitizer
from gputop_diag.diagnose.ranks import judge_ranks
from gputop_diag.diagnose.watch_summary import quiet, summary_json, summary_text
from gputop_diag.model import JobState, OutputEvent
from gputop_diag.monitor.core import Monitor
from gputop_diag.recording.writer import write_recording
from gputop_diag.report.build import ReportSource, make_report
from gputop_diag.sanitize.sanitizer import Sanitizer

SEED = 20250611
_ALNUM = string.ascii_lowercase + string.digits


@dataclass
class Made:
    """The identifiers one generated line carries (each must be gone once sanitized)."""

    words: list[str] = field(default_factory=list)  # host names, domains, addresses
    pids: list[int] = field(default_factory=list)  # the prefix's pid and thread id (kept)


def _label(rng: random.Random) -> str:
    """A host's first label: letters, digits, hyphens; at least one digit (so that no word of
    NCCL's own text contains it by chance)."""
    n = rng.randint(5, 12)
    body = rng.choice(string.ascii_lowercase) + "".join(rng.choices(_ALNUM + "-", k=n - 2))
    return body.strip("-") + str(rng.randint(0, 99))


def _ip(rng: random.Random) -> str:
    return f"{rng.choice([10, 172, 192, 100])}.{rng.randint(0, 255)}.{rng.randint(0, 255)}." + str(
        rng.randint(1, 254)
    )


def _host(rng: random.Random, made: Made) -> str:
    """A host in one of its spellings: short, FQDN, an address; any letter case."""
    kind = rng.choice(["short", "short", "fqdn", "ip"])
    if kind == "ip":
        name = _ip(rng)
        made.words.append(name)
        return name
    name = _label(rng)
    made.words.append(name)
    if kind == "fqdn":
        domain = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 8)))
        tld = rng.choice(["com", "org", "internal", "cluster", "zone", "edu"])
        name = f"{name}.{domain}7.{tld}"
        made.words.append(f"{domain}7")
    case = rng.choice([str.lower, str.upper, str.title, lambda x: x])
    return case(name)


def _bus(rng: random.Random) -> tuple[str, list[str]]:
    """NCCL's bus-id forms (`busId 3b000`, `GPU/3B000`, `GPU/0-3b000`) and the bus ids that
    must not survive in them."""
    bus = rng.choice([0x18, 0x3B, 0x5D, 0x86, 0xAF, 0xDB, 0x1B, 0x9A])
    low = f"{bus:02x}000"
    forms = [f"busId {low}", f"GPU/{low.upper()}", f"GPU/0-{low}", f"nvmlDev 0 busId {low}"]
    return rng.choice(forms), [low]


def _body(rng: random.Random, made: Made) -> str:
    peer, ip, port = _host(rng, made), _ip(rng), rng.randint(1024, 65535)
    made.words.append(ip)
    bus, ids = _bus(rng)
    made.words.extend(ids)
    v6 = f"fe80::{rng.randrange(16**4):x}:{rng.randrange(16**4):x}:{rng.randrange(16**4):x}"
    made.words.append(v6)
    return rng.choice(
        [
            f"NET/IB : Using [0]mlx5_{rng.randint(0, 7)}:1/IB ; OOB eth0:{ip}<0>",
            f"NET/Socket : Using [0]eth0:{ip}<0> [1]ib0:{v6}%ib0<0>",
            f"Bootstrap : Using eth0:{ip}<0>",
            f"Channel 00/0 : 0[1] -> 1[2] via P2P/IPC {bus}",
            f"comm 0x55d5 rank 3 nranks 16 cudaDev 3 {bus} commId 0x9b2c - Init COMPLETE",
            f"misc/socket.cc:484 NCCL WARN Net : Connection closed by remote peer {peer}<{port}>",
            f"Call to connect returned Connection refused, peer {ip}<{port}>, retrying",
            f"NET/IB : Got completion from peer {ip}<{port}> with status=12 localGid ::ffff:{ip}",
            f"Connected all rings, {bus}",
        ]
    )


def nccl_line(rng: random.Random, made: Made) -> str:
    """One line as NCCL prints it, its prefix in one of NCCL's forms, behind what a launcher
    or NCCL_DEBUG_TIMESTAMP_FORMAT may put before it."""
    host = _host(rng, made)
    pid, tid = rng.randint(300, 4_000_000), rng.randint(300, 4_000_000)
    made.pids += [pid, tid]
    dev = rng.randint(0, 7)
    level = rng.choice(
        [
            f"[{dev}] NCCL INFO",
            f"[{dev}] transport/net_ib.cc:{rng.randint(1, 2000)} NCCL WARN",
            f"[{dev}] misc/socket.cc:{rng.randint(1, 900)} (socketProgress) NCCL WARN",
            f"[{dev}] {rng.random() * 1e4:.6f} ncclProxyProgress:{rng.randint(1, 900)} NCCL TRACE",
            "NCCL CALL",
            "NCCL INFO",  # without the device
            "NCCL WARN",
        ]
    )
    before = rng.choice(
        ["", "", "[2025-06-11 10:11:12] ", f"[default{dev}]:", f"[1,{dev}]<stdout>:", f"{dev}: "]
    )
    return f"{before}{host}:{pid}:{tid} {level} {_body(rng, made)}"


def generated(n: int, seed: int = SEED) -> list[tuple[str, Made]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        made = Made()
        out.append((nccl_line(rng, made), made))
    return out


_PREFIX = re.compile(
    r"^(?:\[[^\]]*\] |\[default\d\]:|\[1,\d\]<stdout>:|\d: )?"
    r"(?:host-\w+(?:\.domain-\w+)?|ip-\w+):(?P<pid>\d+):(?P<tid>\d+) (?:\[\d\] |NCCL )"
)


def survivors(text: str, made: Made) -> list[str]:
    low = text.lower()
    return [w for w in made.words if w.lower() in low]


def test_every_generated_nccl_prefix_is_pseudonymised():
    lines = generated(600)
    for job in range(0, len(lines), 30):  # a job of up to 30 peers, a sanitizer of its own
        s = Sanitizer()  # seeded with nothing: every host is a peer's
        outs = []
        for line, made in lines[job : job + 30]:
            out = s.text(line)
            prefix = _PREFIX.match(out)
            assert prefix, (line, out)
            assert [int(prefix["pid"]), int(prefix["tid"])] == made.pids, (line, out)
            assert not survivors(out, made), (line, out, survivors(out, made))
            assert re.search(r"NCCL (?:INFO|WARN|TRACE|CALL)", out), out  # NCCL's words stay
            outs.append(out)
        assert not s.leaks("\n".join(outs)), outs


def test_one_host_one_pseudonym_in_every_spelling_and_the_rank_tables_node():
    rng = random.Random(SEED + 1)
    names = made_up_names(seed=SEED)
    at = 9000.0
    s = seeded_sanitizer(None, [rank_snapshot(names, at, rank_probes(names, at))])
    view = s.model(judge_ranks(rank_probes(names, at)))
    for _ in range(50):
        host = _label(rng)
        pid = rng.randint(300, 4_000_000)
        spellings = [host, host.upper(), host.title(), f"{host}.acme7.internal"]
        shown = {
            s.text(f"{h}:{pid}:{pid + 3} [0] NCCL INFO x").split(":")[0].split(".")[0]
            for h in spellings
        }
        assert len(shown) == 1 and shown.pop().startswith("host-"), (host, spellings)
    for rank, node in enumerate(names.nodes):  # a rank's own line: its node, its pid
        pid = names.pids[rank]
        out = s.text(f"{node}:{pid}:{pid + 9} [{rank}] NCCL INFO x")
        assert out.startswith(f"{view.row(rank).node}:{pid}:{pid + 9} "), (out, view)


def test_what_is_not_an_nccl_prefix_is_left_alone():
    s = Sanitizer()
    for text in (
        "10:23:45 [0] NCCL INFO started",  # a time
        "2025-06-11T10:23:45 [0] loss 1.0",  # a date and time
        "epoch 3:100:200 done",  # no device, no NCCL after it
        "ratio 16:9:4 [0] of the frames",
        "node:41:47 [1] NCCL INFO a host named by a word names no one",
    ):
        assert s.text(text) == text, text


def _job_snapshots(lines: list[str]):
    """Five ticks of a 4-rank job whose output is `lines`, its NCCL WARN lines its failure
    lines (each quoted by the diagnosis's alerts)."""
    names = made_up_names(seed=SEED + 2)
    snaps = []
    for k in range(5):
        at = 5000.0 + k
        snap = rank_snapshot(names, at, rank_probes(names, at))
        events = tuple(
            OutputEvent("nccl_error", line, i + 1, at)
            for i, line in enumerate(lines)
            if "NCCL WARN" in line
        )
        job = JobState(
            target="command",
            label="torchrun train.py",
            root_pids=names.pids[:1],
            processes=snap.job.processes,
            output_tail=tuple(lines),
            output_lines=len(lines),
            output_events=events[-3:],
        )
        snaps.append(
            snap.__class__(**{**{f: getattr(snap, f) for f in snap.__slots__}, "job": job})
        )
    return snaps


def _made_union(made: list[Made]) -> Made:
    out = Made()
    for m in made:
        out.words += m.words
        out.pids += m.pids
    return out


def test_nccl_lines_on_every_surface_name_no_generated_host(tmp_path):
    pairs = [(line, made) for line, made in generated(40, SEED + 3) if "NCCL WARN" in line]
    pairs += [(line, made) for line, made in generated(12, SEED + 4)]
    lines = [line for line, _ in pairs]
    made = _made_union([m for _, m in pairs])
    snaps = _job_snapshots(lines)
    monitor = Monitor(None, interval=1.0)
    for snap in snaps:
        t = monitor.feed(snap)
    # watch --sanitize: the summary as commands/watch.py builds it
    s = seeded_sanitizer(None, snaps)
    job, diag = s.model(quiet(snaps[-1].job)), s.model(t.diagnosis)
    text = summary_text(job, [], snaps, diag, "seconds", 0, [], [], [], None)
    doc = json.dumps(summary_json(job, [], snaps, diag, "seconds"))
    quoted = [a.text for a in diag.alerts if a.text.startswith("job output line")]
    assert quoted and all(_PREFIX.match(q.split(": ", 1)[1]) for q in quoted), quoted
    for where, out in (("watch text", text), ("watch --json", doc)):
        assert not survivors(out, made), (where, survivors(out, made))
        assert not s.leaks(out), where
    # the report, both forms
    report = make_report(snaps, t.diagnosis, source=ReportSource("recording"))
    md, js = report.markdown, json.dumps(report.doc)
    assert "NCCL WARN" in md and re.search(
        r"(?:host|ip)-[\w.-]+:\d+:\d+ ", md
    )  # the lines reached it
    for where, out in (("report markdown", md), ("report json", js)):
        assert not survivors(out, made), (where, survivors(out, made))
    # a sanitized recording: the job's output tail, every line
    path = str(tmp_path / "r.jsonl")
    assert write_recording(path, snaps, sanitize=True) == len(snaps)
    raw = open(path, encoding="utf-8").read()
    assert not survivors(raw, made), survivors(raw, made)
    tail = json.loads(raw.splitlines()[-1])["job"]["output_tail"]
    assert len(tail) == len(lines) and all(_PREFIX.match(x) for x in tail), tail[:3]
