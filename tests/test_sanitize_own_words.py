"""The tool's own words through the sanitizer: what it wrote (a finding's title, its next step,
what it does; a diagnosis's sentence quoting findings; the Xid triage's advice) comes through
`--sanitize` unchanged, while what it read from the machine (an environment value, log text)
is still replaced. Kernel module names (`nvidia-peermem`, `mlx5_core`) are public vocabulary,
never a host's name."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from gputop_diag.cli import main
from gputop_diag.model.health import (
    Finding,
    HealthEvidence,
    HealthFacts,
    HealthReport,
    finding_to_json,
)
from gputop_diag.report.health import health as report_health
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.sanitize.vocabulary import KERNEL_MODULES
from gputop_diag.sim.plant import Plant
from tests.test_sanitize_planted import Gen, planted

# The reviewer's kernel lines: GPUDirect RDMA, a NIC's link, NVLink training, a crash in NCCL,
# a GPU fallen off the bus.
KERNEL_LINES = [
    "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping "
    "further processing",
    "mlx5_core 0000:0c:00.0: mlx5_cmd_out_err:821: Link down",
    "NVRM: knvlinkUpdatePostRxDetectLinkMask_IMPL: Failed to update Rx Detect Link mask!",
    "python[12345]: segfault at 8 ip 00007f3a2b1c0d00 sp 00007ffd1234abcd error 4 in "
    "libnccl.so.2[7f3a2b000000+1000000]",
    "NVRM: GPU 18:00.0: GPU has fallen off the bus.",
]
# The advice the tool writes for those findings (xid/health.py): what must come through.
ADVICE = (
    "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET",
    "NCCL_NET_GDR_LEVEL=LOC",
    "modinfo nvidia-peermem",
)


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _finding(secret: str, step: str) -> Finding:
    return Finding(
        "kernel.nccl_segfault",
        "critical",
        "crash in NCCL: pid 12345 (python) in libnccl.so.2",
        (
            HealthEvidence(
                f"NCCL_SOCKET_IFNAME={secret} in pid 7's environment", "/proc/7/environ"
            ),
            HealthEvidence("a process crashed inside NCCL: NCCL_DEBUG=INFO shows", "what it does"),
        ),
        step,
        ("communication",),
        "kernel_log",
        pids=(12345,),
    )


def test_a_findings_own_words_are_kept_and_what_it_read_is_replaced():
    """One finding on every path that carries findings (a document's, the report's section):
    its title, next step and what it does as written; the value it read replaced."""
    secret = Gen(3).word()
    step = f"rerun the job with {ADVICE[0]}; retry with {ADVICE[1]}"
    f = _finding(secret, step)
    s = Sanitizer()
    doc = {"findings": [finding_to_json(f)]}
    s.learn_document(doc)
    [out] = s.document(doc)["findings"]
    assert out["next_step"] == step and out["title"] == f.title
    assert out["evidence"][1]["text"] == f.evidence[1].text
    assert out["evidence"][0]["text"].startswith("NCCL_SOCKET_IFNAME=env-"), out
    assert secret not in json.dumps(out)
    section = report_health(HealthReport((f,), HealthFacts(0.0, "node7")), Sanitizer())
    [shown] = section["findings"]
    assert shown["next_step"] == step and shown["title"] == f.title
    assert shown["evidence"][0]["text"].startswith("NCCL_SOCKET_IFNAME=env-")
    assert secret not in json.dumps(section)


def test_a_diagnosis_quoting_a_finding_keeps_its_next_step():
    """A diagnosis's alert that quotes a finding (kind `health`): its next step as written."""
    text = f"health: crash in NCCL — pid 7 (python) (journal); next: rerun with {ADVICE[0]}"
    doc = {"alerts": [{"kind": "health", "severity": "critical", "text": text}]}
    s = Sanitizer()
    s.learn_document(doc)
    assert s.document(doc)["alerts"][0]["text"] == text


@pytest.fixture
def recording(monkeypatch, tmp_path) -> str:
    """The planted machine recorded past its kernel lines (logged 1 to 5 s in; the kernel
    log is read with the slow sources, every 10 s)."""
    rec = str(tmp_path / "pl.jsonl")
    with planted(monkeypatch, tmp_path, Plant(kernel_lines=KERNEL_LINES)):
        rc, _, err = _run(["--demo", "comm-bound", "record", "-o", rec, "--seconds", "20"])
    assert rc == 0, err
    return rec


def test_sanitized_health_keeps_every_title_and_next_step(recording):
    """`health --sanitize` of the recording: every finding's title and next step as `health`
    prints them, the tool's advice whole."""
    rc, raw, _ = _run(["--replay", recording, "health", "--json"])
    rc_s, shown, err = _run(["--replay", recording, "--sanitize", "health", "--json"])
    assert rc_s == rc and shown.strip(), err
    before = {f["id"]: f for f in json.loads(raw)["findings"]}
    after = {f["id"]: f for f in json.loads(shown)["findings"]}
    kernel = [i for i in before if i.startswith("kernel.")]
    assert {"kernel.peermem_error", "kernel.nccl_segfault"} <= set(kernel), kernel  # planted
    for i in kernel:
        assert after[i]["next_step"] == before[i]["next_step"], i
    for i in ("kernel.peermem_error", "kernel.nvlink_training", "kernel.nccl_segfault"):
        assert after[i]["title"] == before[i]["title"], i  # no identifier in them
    fell = [i for i in kernel if "0000:18:00" in before[i]["title"]]
    assert fell and all("0000:18:00" not in after[i]["title"] for i in fell)  # a read bus id
    said = json.dumps(after)
    for advice in ADVICE:
        assert advice in said, advice
    assert "=env-" not in said


def test_a_sanitized_replay_keeps_the_advice_in_every_section(recording):
    """`health` and `diagnose` under --sanitize and the report (its diagnosis and its health
    sections alike) keep the tool's advice."""
    for argv in (
        ["--replay", recording, "--sanitize", "health"],
        ["--replay", recording, "diagnose", "--sanitize"],
        ["--replay", recording, "report"],
    ):
        rc, out, err = _run(argv)
        assert out.strip(), (argv, err)
        for advice in ("NCCL_DEBUG=INFO", "NCCL_NET_GDR_LEVEL=LOC"):
            assert advice in out, (argv, advice, out[-3000:])
        assert "=env-" not in out, (argv, out[-3000:])


def test_xid_sanitize_names_a_kernel_module_as_itself(tmp_path):
    log = tmp_path / "k.log"
    log.write_text(
        "Jan 15 10:00:01 node7 kernel: [ 1234.567890] " + KERNEL_LINES[0] + "\n", encoding="utf-8"
    )
    rc, out, err = _run(["--sanitize", "xid", "--log", str(log)])
    assert rc == 0, err
    assert "nvidia-peermem error on the host" in out, out
    assert "modinfo nvidia-peermem" in out and "host-" not in out, out


def test_a_module_named_in_a_hosts_context_is_kept():
    """Where a host's name would stand (`the host  NAME`, `host NAME`, `connected to NAME`)
    every module's name stays, in both spellings; a host's name there is still replaced."""
    s = Sanitizer()
    assert {"nvidia-peermem", "nvidia_peermem", "mlx5_core", "ib_core"} <= KERNEL_MODULES
    for module in sorted(KERNEL_MODULES):
        for text in (f"the host      {module} error", f"host {module} failed"):
            assert s.text(text) == text
    host = f"{Gen(5).word()}-07"
    assert host not in (s.text(f"the host      {host} error") or "")
