"""The health findings as the classifier's evidence (docs/diagnosis.md, "Node and job health"):
each health demo's finding named by `diagnose`, the fabric manager as a broken driver chain, a
finding that never flips the verdict, ok and info findings that add nothing, and snapshots
without health (older recordings) judged exactly as before."""

from __future__ import annotations

import contextlib
import functools
import io
import json
from dataclasses import replace

import pytest

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.diagnose.classify import classify
from gputop_diag.diagnose.features import extract
from gputop_diag.diagnose.health_evidence import classes_of, with_health
from gputop_diag.diagnose.lead import lead_of
from gputop_diag.model.health import Finding, HealthEvidence, HealthFacts, HealthReport
from gputop_diag.monitor.core import Monitor


@functools.cache
def monitored(scenario: str, seconds: int = 30):
    """(window, diagnosis) of a scenario through the Monitor, as `diagnose` runs it."""
    m = Monitor(sim.build(scenario))
    m.run_for(seconds)
    return tuple(m.history.snapshots()), m.last.diagnosis


def without_health(window):
    return [replace(s, health=None) for s in window]


def with_findings(window, *findings: Finding):
    report = HealthReport(tuple(findings), HealthFacts(timestamp=window[-1].timestamp, hostname=""))
    return [replace(s, health=report) for s in window]


def health_metrics(d) -> list[str]:
    return [e.metric for e in d.evidence if e.metric.startswith("health.")]


def health_alerts(d):
    return [a for a in d.alerts if a.kind == "health"]


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(list(argv))
    return rc, out.getvalue()


BLOCKING = Finding(
    "env.cuda_launch_blocking",
    "warning",
    "CUDA_LAUNCH_BLOCKING=1 in a GPU job's environment",
    (
        HealthEvidence(
            "CUDA_LAUNCH_BLOCKING=1 in pid 41200's environment (GPU 0)", "/proc/41200/environ"
        ),
    ),
    "unset CUDA_LAUNCH_BLOCKING",
    ("synchronization",),
    "environment",
    (0,),
    (41200,),
)


# -- each demo scenario names its finding --------------------------------------------------------
def test_launch_blocking_names_the_variable_the_pid_and_where_it_was_read():
    window, d = monitored("launch-blocking")
    before = classify(without_health(window))
    assert d.primary == before.primary == "synchronization"
    first = d.evidence[0]
    assert first.metric == "health.env.cuda_launch_blocking"
    assert first.text.startswith("synchronization: CUDA_LAUNCH_BLOCKING=1 in pid 41200's")
    assert "/proc/41200/environ" in first.text and "every kernel launch waits" in first.text
    assert d.checks[0].endswith(
        BLOCKING.next_step + "  # in the job's launch script, then "
        "restart the job (it is for debugging only)"
    )
    assert d.confidence > before.confidence  # a named cause
    assert not health_alerts(d)  # evidence, not also an alert
    rc, text = run_cli("--demo", "launch-blocking", "diagnose")
    assert rc == 0 and "CUDA_LAUNCH_BLOCKING=1 in pid 41200's environment" in text


def test_dataloader_d_state_names_the_stuck_workers_and_the_mount():
    window, d = monitored("dataloader-d-state")
    assert d.primary == "input_pipeline"
    text = d.evidence[0].text
    assert d.evidence[0].metric == "health.procs.d_state"
    assert "in state D" in text and "pt_data_worker" in text and "/data" in text
    assert "nfs4" in text and "/proc/" in text
    assert d.checks[0].endswith(
        "timeout 5 stat -f /data >/dev/null && echo answers || echo '/data does not answer'"
    )


def test_fabric_manager_down_headlines_the_broken_driver_chain():
    window, d = monitored("fabric-manager-down")
    lead = lead_of(d)
    assert lead is not None and lead.label == "DRIVER CHAIN"
    assert "fabric manager" in lead.alert.text and "802" in lead.alert.text
    assert not health_alerts(d)  # the fabric manager's findings go through the chain only
    # without the health read there is no layer to break: no chain alert
    bare = classify(without_health(window))
    assert not [a for a in bare.alerts if a.kind == "driver_chain"]
    rc, text = run_cli("--demo", "fabric-manager-down", "diagnose")
    assert rc == 0 and text.startswith("DRIVER CHAIN: driver chain broken at the fabric manager")


@pytest.mark.parametrize(
    ("scenario", "metric", "words"),
    [
        ("nccl-p2p-disabled", "health.env.nccl_p2p_disable", "NCCL_P2P_DISABLE=1 in pid"),
        ("ib-port-down", "health.ib.port_down", "mlx5_5 port 1: DOWN"),
        ("acs-enabled", "health.pcie.acs", "ACSCtl SrcValid+"),
    ],
)
def test_communication_findings_name_their_cause(scenario, metric, words):
    window, d = monitored(scenario)
    assert d.primary == classify(without_health(window)).primary == "communication"
    assert metric in health_metrics(d)
    assert words in next(e.text for e in d.evidence if e.metric == metric)


@pytest.mark.parametrize(
    ("scenario", "words", "step"),
    [
        ("pcie-downtrained", "GPU 5's PCIe link trained below its maximum", "LnkSta"),
        ("gpu-missing-from-nvml", "missing from NVML", "RmInitAdapter"),
    ],
)
def test_findings_the_figures_do_not_support_are_alerts_with_their_next_step(scenario, words, step):
    window, d = monitored(scenario)
    before = classify(without_health(window))
    assert d.primary == before.primary and d.confidence == before.confidence
    assert d.evidence == before.evidence and d.checks == before.checks
    (alert,) = [a for a in health_alerts(d) if words in a.text]
    assert alert.text.startswith("health: ") and "next: " in alert.text and step in alert.text
    rc, out = run_cli("--demo", scenario, "diagnose", "--json")
    assert rc == 0 and any(words in a["text"] for a in json.loads(out)["alerts"])


def test_the_gpu_count_is_a_critical_alert_never_a_vote():
    window, d = monitored("gpu-missing-from-nvml")
    (alert,) = health_alerts(d)
    assert alert.severity == "critical" and "0000:db:00.0" in alert.text
    assert not health_metrics(d)


def test_diagnose_json_carries_the_named_cause():
    rc, out = run_cli("--demo", "launch-blocking", "diagnose", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["evidence"][0]["metric"] == "health.env.cuda_launch_blocking"
    assert "pid 41200" in doc["evidence"][0]["text"] and "CUDA_LAUNCH_BLOCKING" in doc["checks"][0]


def test_the_cause_goes_through_the_sanitizer_like_the_rest():
    rc, out = run_cli("--demo", "launch-blocking", "diagnose", "--sanitize")
    assert rc == 0 and "CUDA_LAUNCH_BLOCKING=1 in pid 41200's environment" in out
    assert "gpu-node-07" not in out


def test_the_server_of_a_stuck_mount_is_a_pseudonym_under_sanitize():
    rc, out = run_cli("--demo", "dataloader-d-state", "diagnose", "--sanitize")
    assert rc == 0 and "in state D" in out and "fs01" not in out


# -- what a finding may not do --------------------------------------------------------------------
def test_a_finding_on_a_class_the_figures_do_not_support_does_not_change_the_verdict():
    window, d = monitored("compute-bound")
    before = classify(without_health(window))
    after = classify(with_findings(window, BLOCKING))
    assert after.primary == before.primary == "compute"
    assert after.confidence == before.confidence and after.evidence == before.evidence
    assert after.checks == before.checks
    (alert,) = health_alerts(after)
    assert alert.severity == "warning" and "next: unset CUDA_LAUNCH_BLOCKING" in alert.text


def test_ok_and_info_findings_add_nothing():
    window, _ = monitored("compute-bound")
    quiet = [
        replace(BLOCKING, severity=s, id=i)
        for s in ("ok", "info")
        for i in ("env.cuda_launch_blocking", "pcie.aer", "nvml.gsp_firmware", "pci.gpu_count")
    ]
    assert classify(with_findings(window, *quiet)) == classify(without_health(window))
    sync_window, _ = monitored("launch-blocking")
    assert classify(with_findings(sync_window, *quiet)) == classify(without_health(sync_window))


def test_driver_layer_and_failed_reads_are_info_alerts_never_evidence():
    window, _ = monitored("launch-blocking")
    persistence = Finding(
        "nvml.persistence_mode",
        "warning",
        "persistence mode off",
        (HealthEvidence("off on GPU 0", "nvmlDeviceGetPersistenceMode"),),
        "sudo nvidia-smi -pm 1",
        ("synchronization",),
        "persistence",
        layer="driver",
    )
    d = classify(with_findings(window, persistence))
    assert not health_metrics(d)
    assert [a.severity for a in health_alerts(d)] == ["info"]


def test_communication_findings_count_only_for_a_job_on_more_than_one_gpu_or_node():
    nccl = replace(BLOCKING, id="env.nccl_p2p_disable", bears_on=("communication",))
    assert classes_of(nccl, spanning=True) == ("communication",)
    assert classes_of(nccl, spanning=False) == ()
    # a downtrained link still bears on the transfers of a single-GPU job
    link = replace(
        BLOCKING, id="pcie.link_downtrained", bears_on=("input_pipeline", "communication")
    )
    assert classes_of(link, spanning=False) == ("input_pipeline",)


def test_a_snapshot_without_health_classifies_exactly_as_before():
    for scenario in ("launch-blocking", "dataloader-d-state", "compute-bound"):
        window, _ = monitored(scenario)
        bare = without_health(window)
        d = classify(bare)
        assert not health_metrics(d) and not health_alerts(d)
        assert with_health(d, extract(bare), bare[-1]) is d
    window, _ = monitored("launch-blocking")
    assert classify(without_health(window)).confidence == 0.85  # the figures' own confidence


def test_an_environment_value_that_is_not_a_flag_is_not_quoted():
    window, _ = monitored("compute-bound")
    planted = replace(
        BLOCKING,
        id="env.nccl_p2p_disable",
        bears_on=("communication",),
        evidence=(
            HealthEvidence(
                "NCCL_P2P_DISABLE=/home/alice/orion in pid 41200's environment",
                "/proc/41200/environ",
            ),
        ),
    )
    (alert,) = health_alerts(classify(with_findings(window, planted)))
    assert "NCCL_P2P_DISABLE set in pid 41200's environment" in alert.text
    assert "alice" not in alert.text
