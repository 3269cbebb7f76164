"""The health checks' findings through the one sanitizer, on every surface that carries them
(`Snapshot.health` in recordings and replays, `diagnose`, `health`, the report): identifiers
planted into what the health checks read (the data mount its D-state workers wait on, its
server, a job's environment, the workers' titles) never survive in any form, while the
findings stay readable (ids, severities, classes, flag values, /proc sources, next steps)."""

from __future__ import annotations

import json

import pytest

from gputop_diag import sim
from gputop_diag.model.health import Finding, HealthEvidence
from gputop_diag.sanitize.health import health_text, seed_findings
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.sim.plant import Plant, PlantedProcess
from tests.test_sanitize_planted import Corpus, Gen, planted, run, sanity


def _case(seed: int, scenario: str) -> tuple[Plant, Corpus]:
    """A plant of the health checks' inputs: the data mount (a project's and a person's path,
    a file server by its full name), variables in the job's environment (a non-flag value of a
    variable the checks judge, one they do not), and a rewritten title for every data-loader
    worker."""
    g = Gen(seed)
    c = Corpus()
    project, person, export = g.word(), g.word(), g.word()
    server = f"{g.word(3, 5)}{g.digits(2)}"
    fqdn = f"{server}.{g.word()}.lab"
    c.add("mount path", project, person, export, f"/{project}/{person}")
    c.add("file server", server, fqdn)
    p2p, ifname = g.word(), f"{g.word(3, 4)}{g.digits(1)}"
    c.add("environment value", p2p, ifname)
    title = g.word(6, 8)
    c.add("process title", title)
    machine = sim.build(scenario).sim
    workers = [
        k for k, pid in enumerate(sorted(machine.procs)) if machine.procs[pid].role == "worker"
    ]
    return (
        Plant(
            processes=[PlantedProcess(index=k, name=title) for k in workers],
            health_env={"NCCL_P2P_DISABLE": p2p, "NCCL_SOCKET_IFNAME": ifname},
            health_mount=[f"/{project}/{person}", "nfs4", f"{fqdn}:/export/{export}"],
        ),
        c,
    )


def _commands(scenario: str, rec: str) -> list[list[str]]:
    demo = ["--demo", scenario]
    return [
        [*demo, "record", "--sanitize", "--seconds", "4", "-o", rec],
        ["--replay", rec, "report"],
        ["--replay", rec, "report", "--json"],
        ["--replay", rec, "diagnose", "--sanitize"],
        ["--replay", rec, "diagnose", "--sanitize", "--json"],
        [*demo, "diagnose", "--sanitize", "--seconds", "4"],
        [*demo, "diagnose", "--sanitize", "--seconds", "4", "--json"],
        [*demo, "snapshot", "--sanitize", "--json"],
        ["--replay", rec, "snapshot", "--json"],
        [*demo, "health", "--sanitize", "--no-lspci"],
        [*demo, "health", "--json", "--sanitize", "--no-lspci"],
        [*demo, "report", "--seconds", "4"],
    ]


# What must stay readable in each scenario's sanitized health output.
_READABLE = {
    "dataloader-d-state": ["procs.d_state", "critical", "input_pipeline", "/proc/", "/stat"],
    "launch-blocking": [
        "env.cuda_launch_blocking",
        "CUDA_LAUNCH_BLOCKING=1",
        "synchronization",
        "/environ",
        "unset CUDA_LAUNCH_BLOCKING",
    ],
    "nccl-p2p-disabled": [
        "env.nccl_p2p_disable",
        "warning",
        "communication",
        "/environ",
        "unset NCCL_P2P_DISABLE",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed,scenario",
    [(11, "dataloader-d-state"), (12, "launch-blocking"), (13, "nccl-p2p-disabled")],
)
def test_nothing_planted_in_health_inputs_survives_any_surface(
    seed, scenario, monkeypatch, tmp_path
):
    plant, corpus = _case(seed, scenario)
    rec = str(tmp_path / "run.jsonl")
    with planted(monkeypatch, tmp_path, plant):
        rc, raw_health = run(["--demo", scenario, "health", "--json", "--no-lspci"])
        # the plant reached the findings: a test that could not fail otherwise
        assert corpus.survivors(raw_health), raw_health[:2000]
        for argv in _commands(scenario, rec):
            rc, text = run(argv)
            sanity(argv, rc, text)
            assert corpus.survivors(text) == [], (argv, corpus.survivors(text))
            if argv[-2:] == ["-o", rec]:
                raw = open(rec, encoding="utf-8").read()
                assert corpus.survivors(raw) == [], ("the recording", corpus.survivors(raw))
                assert '"health"' in raw and '"findings"' in raw
            if "health" in argv:
                # the text speaks classes in words (`input pipeline`), the JSON by id
                said = text.replace("_", " ").lower()
                for word in _READABLE[scenario]:
                    assert word.replace("_", " ").lower() in said, (argv, word, text[-3000:])


def test_health_findings_in_a_recording_keep_what_they_are_about(monkeypatch, tmp_path):
    """The recorded findings after `record --sanitize`: the ids, severities and classes as
    they were, /proc sources, next steps, a flag value kept, the rest replaced."""
    plant, corpus = _case(21, "nccl-p2p-disabled")
    rec = str(tmp_path / "run.jsonl")
    with planted(monkeypatch, tmp_path, plant):
        argv = ["--demo", "nccl-p2p-disabled", "record", "--sanitize", "-o", rec, "--seconds", "1"]
        rc, text = run(argv)
        sanity(argv, rc, text)
    lines = [json.loads(x) for x in open(rec, encoding="utf-8") if x.strip()]
    found = [f for x in lines if x.get("health") for f in x["health"]["findings"]]
    p2p = [f for f in found if f["id"] == "env.nccl_p2p_disable"]
    assert p2p and p2p[0]["severity"] == "warning" and p2p[0]["bears_on"] == ["communication"]
    ev = p2p[0]["evidence"][0]
    assert ev["text"].startswith("NCCL_P2P_DISABLE=env-"), ev
    assert ev["source"].startswith("/proc/") and ev["source"].endswith("/environ"), ev
    assert p2p[0]["next_step"].startswith("unset NCCL_P2P_DISABLE")
    assert corpus.survivors(json.dumps(lines)) == []


def test_the_shared_rule_replaces_servers_values_and_titles():
    """The rule itself (what the report and every document use): a mount's server seeded as a
    host name, a non-flag value replaced in any assignment, a flag kept, a title replaced."""
    finding = Finding(
        "procs.d_state",
        "critical",
        "1 process of GPU jobs stuck in uninterruptible I/O wait on /data",
        (
            HealthEvidence(
                "pid 7 (zobeqaxu) in state D waiting in rpc_wait_bit_killable, of GPU job pid 5",
                "/proc/7/stat, /proc/7/wchan",
            ),
            HealthEvidence(
                "pid 7 has /data open (nfs4 from kivo42:/export, fd 3)", "/proc/7/fdinfo"
            ),
            HealthEvidence("NCCL_SOCKET_IFNAME=bimut7 CUDA_LAUNCH_BLOCKING=1", "/proc/7/environ"),
        ),
        "timeout 5 stat -f /data",
        ("input_pipeline",),
        "processes",
    )
    s = Sanitizer()
    seed_findings(s, [finding])
    out = " | ".join(
        health_text(s, t) or ""
        for t in (*(t for e in finding.evidence for t in (e.text, e.source)), finding.next_step)
    )
    for secret in ("zobeqaxu", "kivo42", "bimut7"):
        assert secret not in out, out
    assert "CUDA_LAUNCH_BLOCKING=1" in out and "NCCL_SOCKET_IFNAME=env-" in out
    assert "/proc/7/stat" in out and "timeout 5 stat -f /data" in out
