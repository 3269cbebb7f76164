"""The in-job probe's text under the sanitizer: the sync call sites (the user's files and
lines) and the notes a probe writes (a failed hook's error: paths, function names, addresses,
tokens), planted in the probe files of the simulated job's ranks (`sim/plant.py`) with the
identifiers of `test_sanitize_planted.build_case`, then read by the Monitor
(`collect/probe.py`) into `diagnose --sanitize`, `report`, `record --sanitize` and the replays
of it, and `watch --sanitize --pid`. No planted form may survive, nor may a command refuse;
the line numbers and the kind of each call (`.item`, `torch.cuda.synchronize`) stay.
"""

from __future__ import annotations

import re

import pytest
from test_sanitize_planted import Corpus, build_case, planted, run, sanity

from gputop_diag.collect import probe as probe_reader
from gputop_diag.sim.plant import Plant

SCENARIO = "sync-measured"  # t_sync measured in every step: the sites are the verdict's evidence
LINES = (88, 41, 102, 7)


def plant_probe(plant: Plant, corpus: Corpus, seed: int) -> list[str]:
    """Call sites and notes with the planted names in them; the calls the sites name."""
    f: dict[str, list[str]] = {}
    for secret in corpus.secrets:
        f.setdefault(secret.what, []).extend(secret.forms)
    user, user2 = f["user"][0], f["user"][3]
    host, fqdn = f["host"][0], f["host"][2]
    project, run_name, jobname = f["project"][0], f["run name"][0], f["job name"][0]
    account, partition = f["account"][0], f["partition"][0]
    ip, ip0 = f["IPv4"][:2]
    tokens = [s.forms[0] for s in corpus.secrets if s.what == "token"]
    bus = [x for x in f["PCI bus id"]]
    home = f"/home/{user}"
    fn = f"{project}_step"  # a function named after the project
    plant.probe_sites = [
        [f"{home}/{project}/train.py:{LINES[0]}", ".item", 0.5],
        [f"{project}/{run_name}/metrics.py:{LINES[1]}", ".cpu", 0.3],
        [
            f"/lustre/{account}/{partition}/{user2}_loop.py:{LINES[2]}",
            "torch.cuda.synchronize",
            0.15,
        ],
        [f"/usr/local/src/{jobname}/{fn}.py:{LINES[3]}", f"{fn}.item", 0.05],
    ]
    plant.probe_notes = [
        f"probe: the sync hook failed (TypeError: {fn}() got an unexpected keyword argument "
        f"'{run_name}' in {home}/{project}/train.py) and is off from here on",
        f"probe: CUDA events or memory statistics failed (RuntimeError: {user.upper()}@{fqdn} "
        f"({ip0}) {bus[0]} {bus[4]} {bus[5]} token={tokens[7]} {tokens[0]} {host}:{ip} "
        f"{jobname} {partition})",
    ]
    # A long note is cut (the reader keeps TEXT_CHARS of it): a token cut to its first 16
    # characters there matches no shape, and no seed.
    pad = "probe: ab " + "x " * ((probe_reader.TEXT_CHARS - 16 - 10) // 2)
    assert len(pad) == probe_reader.TEXT_CHARS - 16
    for k in (seed % 4, (seed + 1) % 4):  # the JWT, hf_, ghp_ and AKIA keys, two a seed
        plant.probe_notes.append(pad + [tokens[0], tokens[2], tokens[3], tokens[4]][k])
    return [".item", ".cpu", "torch.cuda.synchronize"]


def commands(rec: str) -> list[list[str]]:
    demo = ["--demo", SCENARIO]
    watch = [*demo, "watch", "--no-tui", "--sanitize", "--seconds", "20", "--pid", "41200"]
    return [
        [*demo, "diagnose", "--sanitize", "--seconds", "20"],
        [*demo, "report", "--seconds", "20"],
        [*demo, "report", "--seconds", "20", "--json"],
        watch,
        [*watch, "--json"],
        [*demo, "record", "--sanitize", "--seconds", "20", "-o", rec],
        ["--replay", rec, "report"],
        ["--replay", rec, "diagnose", "--json"],
    ]


def where(text: str) -> list[tuple[str, str]]:
    """The (line, call) pairs a sanitized output names: `path-x3kq:88 .item`."""
    return re.findall(r"[\w~/.-]+:(\d+) (\.item|\.cpu|torch\.cuda\.synchronize)\b", text)


@pytest.mark.slow
def test_no_planted_identifier_survives_in_the_probes_text(monkeypatch, tmp_path):
    plant, corpus, _ = build_case(31, SCENARIO)
    calls = plant_probe(plant, corpus, 31)
    rec = str(tmp_path / "run.jsonl")
    sites = [(str(line), call) for line, call in zip(LINES[:3], calls, strict=True)]
    with planted(monkeypatch, tmp_path, plant):
        rc, raw = run(
            ["--demo", SCENARIO, "watch", "--no-tui", "--seconds", "20", "--pid", "41200"]
        )
        assert rc == 0 and plant.probe_sites[1][0] in raw and plant.probe_notes[0] in raw
        for argv in commands(rec):
            rc, text = run(argv)
            sanity(argv, rc, text)
            assert corpus.survivors(text) == [], (argv, corpus.survivors(text))
            if argv[-2:] == ["-o", rec]:
                raw = open(rec, encoding="utf-8").read()
                assert corpus.survivors(raw) == [], ("the recording", corpus.survivors(raw))
            else:  # what the user reads: the lines and the calls stay
                assert where(text)[:3] == sites, (argv, where(text))


def test_a_long_note_loses_the_word_its_cut_falls_in():
    """The reader keeps TEXT_CHARS of a note; a word cut in half there is dropped whole (a
    token's first characters match no rule), a word that ends at the cut is kept."""
    rec = probe_reader._Records(pid=1, start_ticks=1)
    pad = "a " * ((probe_reader.TEXT_CHARS - 20) // 2)
    token = "hf_" + "Q7x" * 11
    assert rec.take({"kind": "note", "t": 1.0, "text": pad + token + " after"})
    (note,) = rec.notes
    assert note == pad.rstrip() + "…" and len(note) <= probe_reader.TEXT_CHARS
    whole = "b" * (probe_reader.TEXT_CHARS - 1 - len(pad))
    assert rec.take({"kind": "note", "t": 2.0, "text": pad + whole + " " + token})
    assert rec.notes[-1] == pad + whole + "…"
    assert rec.take({"kind": "note", "t": 3.0, "text": token * 10})  # one word: nothing left
    assert rec.notes[-1] == pad + whole + "…"
