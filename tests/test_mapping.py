"""Device mapping: CUDA ordinals over every CUDA_VISIBLE_DEVICES form and both orders, MIG,
Slurm's variables and GRES, bus-id forms, the findings, and `gputop-diag mapping`."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.collect.mapping import collect_mapping, parse_information
from gputop_diag.commands.common import sample_once
from gputop_diag.mapping.checks import (
    ProcView,
    expand_hostlist,
    minor_findings,
    parse_id_list,
    parse_scontrol_gres,
    process_findings,
    slurm_gpus,
    visibility_findings,
)
from gputop_diag.mapping.ordinals import BusId, Device, parse_bus_id, resolve


@pytest.fixture(autouse=True)
def _known_shell(monkeypatch):
    """Under --demo the simulated shell takes CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER,
    GPU_DEVICE_ORDINAL and SLURM_* from the real one: these tests need the scenario's."""
    for k in list(os.environ):
        if k in sim.PASSED_ENV or k.startswith(sim.PASSED_ENV_PREFIX):
            monkeypatch.delenv(k)


DATA = Path(__file__).parent / "data" / "mapping"

U = [f"GPU-{k}{k}aa{k}bcd-0000-1111-2222-33334444555{k}" for k in range(4)]
# 4 GPUs: two H100 (0, 1) and two A100 (2, 3) in PCI order; and one MIG-mode A100 with two
# instances for the MIG cases.
MIXED = [
    Device("gpu0", 0, "NVIDIA H100", U[0]),
    Device("gpu1", 1, "NVIDIA H100", U[1]),
    Device("gpu2", 2, "NVIDIA A100", U[2]),
    Device("gpu3", 3, "NVIDIA A100", U[3]),
]
SAME = [Device(f"gpu{k}", k, "NVIDIA H100", U[k]) for k in range(4)]
MIG_PARENT = "GPU-5e5e5e5e-0000-1111-2222-333344445555"
MIG = [
    Device("gpu0", 0, "NVIDIA A100", U[0]),
    Device("gpu1", 1, "NVIDIA A100", MIG_PARENT, mig_enabled=True),
    Device(
        "gpu1-mig0", 1, "3g.40gb", "MIG-aaaa1111-2222-3333-4444-555566667777", 0, 1, 0, MIG_PARENT
    ),
    Device(
        "gpu1-mig1", 1, "2g.20gb", "MIG-bbbb1111-2222-3333-4444-555566667777", 1, 5, 0, MIG_PARENT
    ),
]

CASES = [
    # devices, CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, visible keys, order known, invalid entry
    (SAME, None, None, ["gpu0", "gpu1", "gpu2", "gpu3"], True, None),
    (SAME, "", None, [], True, None),
    (SAME, "2,0", None, ["gpu2", "gpu0"], True, None),
    (SAME, " 1 , 3 ", "PCI_BUS_ID", ["gpu1", "gpu3"], True, None),
    (SAME, "0,2,-1,1", None, ["gpu0", "gpu2"], True, "-1"),
    (SAME, "0,7,1", None, ["gpu0"], True, "7"),
    (SAME, "0,foo,1", None, ["gpu0"], True, "foo"),
    (SAME, "1,1", None, [], True, "1"),  # a repeated device empties the set
    (SAME, "0,,1", None, ["gpu0"], True, ""),
    (SAME, U[3], None, ["gpu3"], True, None),
    (SAME, U[2][:8] + "," + U[1][:10], None, ["gpu2", "gpu1"], True, None),
    (SAME, U[3].upper(), None, ["gpu3"], True, None),
    (SAME, "GPU-", None, [], True, "GPU-"),  # a prefix of every UUID: not unique
    (SAME, "GPU-ffffffff", None, [], True, "GPU-ffffffff"),
    # mixed models: indices count in CUDA's FASTEST_FIRST order, which only CUDA knows
    (MIXED, None, None, ["gpu0", "gpu1", "gpu2", "gpu3"], False, None),
    (MIXED, None, "FASTEST_FIRST", ["gpu0", "gpu1", "gpu2", "gpu3"], False, None),
    (MIXED, None, "PCI_BUS_ID", ["gpu0", "gpu1", "gpu2", "gpu3"], True, None),
    (MIXED, "2,3", None, ["gpu2", "gpu3"], False, None),
    (MIXED, "2,3", "pci_bus_id", ["gpu2", "gpu3"], True, None),
    (MIXED, f"{U[3]},{U[0]}", None, ["gpu3", "gpu0"], True, None),  # UUIDs: any order
    # MIG
    (MIG, "MIG-bbbb1111-2222-3333-4444-555566667777", None, ["gpu1-mig1"], True, None),
    (MIG, "MIG-aaaa", None, ["gpu1-mig0"], True, None),
    (MIG, f"MIG-{MIG_PARENT}/5/0", None, ["gpu1-mig1"], True, None),
    (MIG, f"MIG-{MIG_PARENT}/7/0", None, [], True, f"MIG-{MIG_PARENT}/7/0"),
    (MIG, MIG_PARENT, None, [], True, MIG_PARENT),  # a MIG-mode GPU by its own UUID
    (MIG, "0", None, ["gpu0"], True, None),
    (MIG, "1", None, [], True, "1"),  # only GPU 0 is numbered: GPU 1 is in MIG mode
]


@pytest.mark.parametrize(("devices", "cvd", "order", "visible", "known", "invalid"), CASES)
def test_cuda_ordinals(devices, cvd, order, visible, known, invalid):
    v = resolve(devices, cvd, order)
    assert list(v.visible) == visible
    assert v.order_known is known
    assert (v.invalid.text if v.invalid else None) == invalid
    if known:
        for k, key in enumerate(visible):
            assert v.ordinal(key) == k and v.cell(key) == str(k)
    else:
        assert v.ordinal(visible[0]) is None and v.cell(visible[0]) == "?"
    hidden = [d.key for d in devices if d.key not in visible]
    assert all(v.cell(k) == "-" for k in hidden)


def test_invalid_entry_reports_what_it_hides():
    v = resolve(SAME, "0,2,-1,1,3", None)
    assert [e.text for e in v.hidden_by_invalid] == ["1", "3"]
    [f] = visibility_findings("this shell", v)
    assert f.kind == "invalid_entry" and f.severity == "warning"
    assert "'-1' is a negative index" in f.text and "hides 1, 3" in f.text


@pytest.mark.parametrize(
    ("cvd", "severity", "said"),
    [
        ("GPU-bogus,1", "warning", "shows 0 devices; '1' after it is never read"),
        ("GPU-bogus", "warning", "shows 0 devices"),  # every device hidden: not meant
        (f"{U[1]},GPU-bogus,{U[2]}", "warning", "hides GPU-"),
        ("-1", "info", "shows 0 devices"),  # the usual way to hide every device on purpose
        ("0,-1", "info", "shows 1 device"),
    ],
)
def test_an_invalid_entry_that_hides_devices_is_a_warning(cvd, severity, said):
    [f] = visibility_findings("this shell", resolve(SAME, cvd, None))
    assert f.kind == "invalid_entry" and f.severity == severity
    assert said in f.text


def test_mig_default_visibility_is_not_numbered():
    v = resolve(MIG, None, None)
    assert v.mig_unknown and not v.order_known
    assert "gpu1" not in v.visible  # a MIG-mode GPU is reached through its instances


def test_order_finding_on_mixed_models_only_under_fastest_first():
    kinds = lambda v: [f.kind for f in visibility_findings("x", v)]  # noqa: E731
    assert kinds(resolve(MIXED, None, None)) == ["order_differs"]
    assert kinds(resolve(MIXED, "0,1", "FASTEST_FIRST")) == ["order_differs"]
    assert kinds(resolve(MIXED, None, "PCI_BUS_ID")) == []
    assert kinds(resolve(MIXED, f"{U[2]}", None)) == []  # a UUID names its device in any order
    assert kinds(resolve(SAME, None, None)) == []


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("00000000:3B:00.0", BusId(0, 0x3B, 0, 0)),  # NVML, nvidia-smi
        ("0000:3B:00.0", BusId(0, 0x3B, 0, 0)),  # NVML busIdLegacy
        ("0000:3b:00.0", BusId(0, 0x3B, 0, 0)),  # procfs, SXid
        ("PCI:0000:3b:00", BusId(0, 0x3B, 0, 0)),  # Xid: no function
        ("PCI:59:0:0", BusId(0, 0x3B, 0, 0)),  # Xorg, decimal
        ("3b:00.0", BusId(0, 0x3B, 0, 0)),  # lspci
        ("0001:DB:00.1", BusId(1, 0xDB, 0, 1)),
        ("not a bus", None),
        ("", None),
    ],
)
def test_bus_id_forms(text, want):
    assert parse_bus_id(text) == want


def test_bus_id_written_forms():
    b = parse_bus_id("PCI:0000:3b:00")
    assert (b.nvml, b.procfs, b.xid, b.xorg) == (
        "00000000:3B:00.0",
        "0000:3b:00.0",
        "PCI:0000:3b:00",
        "PCI:59:0:0",
    )


# -- Slurm --------------------------------------------------------------------------------------
SLURM_CASES = [
    # env, global ids, constrained, global id of cuda:0, of cuda:1
    (
        dict(SLURM_JOB_ID="48213", SLURM_JOB_GPUS="2,5", CUDA_VISIBLE_DEVICES="0,1"),
        (2, 5),
        True,
        2,
        5,
    ),
    (
        dict(SLURM_JOB_ID="48213", SLURM_JOB_GPUS="2,5", CUDA_VISIBLE_DEVICES="2,5"),
        (2, 5),
        False,
        2,
        5,
    ),
    (  # an srun step: the step's GPUs win over the job's
        dict(
            SLURM_JOB_ID="1",
            SLURM_STEP_ID="0",
            SLURM_JOB_GPUS="0-3",
            SLURM_STEP_GPUS="1,3",
            CUDA_VISIBLE_DEVICES="0,1",
            GPU_DEVICE_ORDINAL="0,1",
            SLURM_GPUS_ON_NODE="4",
        ),
        (1, 3),
        True,
        1,
        3,
    ),
    (  # GPUs 0,1 given as 0,1: the same either way
        dict(SLURM_JOB_ID="7", SLURM_JOB_GPUS="0,1", CUDA_VISIBLE_DEVICES="0,1"),
        (0, 1),
        None,
        0,
        1,
    ),
    (dict(SLURM_JOB_ID="7"), None, None, None, None),
    ({}, None, None, None, None),
]


@pytest.mark.parametrize(("env", "glob", "constrained", "c0", "c1"), SLURM_CASES)
def test_slurm_variables(env, glob, constrained, c0, c1):
    s = slurm_gpus(env)
    assert s.global_ids == glob
    assert s.constrained is constrained
    assert s.global_of_local(0) == c0 and s.global_of_local(1) == c1
    assert s.in_job is ("SLURM_JOB_ID" in env)


def test_slurm_numbers():
    assert parse_id_list("0,2-4,7") == (0, 2, 3, 4, 7)
    assert parse_id_list(U[0]) is None and parse_id_list("") is None
    s = slurm_gpus({"SLURM_JOB_ID": "1", "SLURM_GPUS_ON_NODE": "4", "GPU_DEVICE_ORDINAL": "0"})
    assert s.gpus_on_node == 4 and s.device_ordinal == "0"


def test_scontrol_show_job_details():
    text = (DATA / "scontrol_show_job_d.txt").read_text()
    [job] = parse_scontrol_gres(text)
    assert job.job_id == "48190" and job.state == "RUNNING"
    assert job.gpus_on("gpu-node-02") == (0, 1, 2, 3)
    assert job.gpus_on("gpu-node-07") == (4, 5, 6, 7)
    assert job.gpus_on("gpu-node-99") is None


def test_scontrol_oneliner_and_old_gres_idx():
    text = (
        "JobId=9 JobName=a JobState=RUNNING Nodes=n1 CPU_IDs=0-7 Mem=0 GRES=gpu:a100:2(IDX:1,3)\n"
        "JobId=10 JobName=b JobState=RUNNING Nodes=n[2-3] CPU_IDs=0 Mem=0 GRES_IDX=gpu(IDX:0-1)\n"
        "JobId=11 JobName=c JobState=PENDING\n"
    )
    jobs = parse_scontrol_gres(text)
    assert [j.job_id for j in jobs] == ["9", "10", "11"]
    assert jobs[0].gpus_on("n1") == (1, 3)
    assert jobs[1].gpus_on("n3") == (0, 1)
    assert jobs[2].nodes == {}


def test_hostlist():
    assert expand_hostlist("gpu-node-[01-03,07]") == [
        "gpu-node-01",
        "gpu-node-02",
        "gpu-node-03",
        "gpu-node-07",
    ]
    assert expand_hostlist("a,b[1-2]") == ["a", "b1", "b2"]


# -- findings -----------------------------------------------------------------------------------
def test_minor_finding_and_its_public_text():
    [f] = minor_findings([(0, 2), (1, 3), (2, 2)])
    assert f.gpus == (0, 1) and "GPU 0 is /dev/nvidia2" in f.text
    assert "/dev/nvidia2" not in f.public_text
    assert minor_findings([(0, 0), (1, 1)]) == []


def test_process_outside_its_allocation_and_two_jobs_on_one_gpu():
    procs = [
        ProcView(10, "alice", (3,), allowed=(0, 1)),
        ProcView(11, "alice", (0,), allowed=(0, 1)),
        ProcView(12, "bob", (0,)),
        ProcView(13, "carol", (1,), where=((1, 5, None),)),
        ProcView(14, "dave", (1,), where=((1, 1, None),)),  # another MIG instance: no clash
    ]
    found = process_findings(procs, lambda p: p.user)
    outside = [f for f in found if f.kind == "outside_allocation"]
    shared = [f for f in found if f.kind == "shared_gpu"]
    assert len(outside) == 1 and outside[0].pids == (10,) and outside[0].gpus == (3,)
    assert "runs on GPU 3 but was given GPUs 0, 1" in outside[0].text
    assert len(shared) == 1 and shared[0].gpus == (0,) and shared[0].pids == (11, 12)


def test_information_file():
    info = parse_information(
        "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-x\nDevice Minor: \t 3\n"
        "Blacklisted:\t No\n"
    )
    assert info == {
        "Model": "NVIDIA H100 80GB HBM3",
        "GPU UUID": "GPU-x",
        "Device Minor": "3",
        "Blacklisted": "No",
    }


# -- on the simulator ---------------------------------------------------------------------------
def test_mapping_of_the_compute_bound_machine():
    src = sim.build("compute-bound")
    m = collect_mapping(sample_once(src, True), src)
    g0 = m.row("gpu0")
    machine = src.sim
    assert g0.minor == machine.gpus[0].minor and g0.info["Device Minor"] == str(g0.minor)
    assert g0.bus.procfs == machine.gpus[0].proc_bus_id and g0.numa_node == 0
    assert g0.cpu_affinity == "0-15" and m.row("gpu7").numa_node == 1
    assert set(g0.pids) == {p.pid for p in machine.by_gpu[0]}
    kinds = {f.kind for f in m.findings}
    assert kinds == {"minor_not_index", "shared_gpu"}
    ranks = [p for p in m.processes if p.env_readable]
    assert len(ranks) == 8 and all(p.visibility.order_known for p in ranks)
    assert any("not readable" in c for c in m.conclusions)


def test_mapping_of_mig_instances():
    src = sim.build("mig")
    m = collect_mapping(sample_once(src, True), src)
    migs = [r for r in m.rows if r.mig_index is not None]
    assert len(migs) == 3 and all(r.uuid.startswith("MIG-") for r in migs)
    assert all(len(r.pids) == 1 for r in migs)  # one process on each instance
    assert not [f for f in m.findings if f.kind == "shared_gpu"]
    for p in m.processes:
        [key] = p.visibility.visible
        assert m.row(key).pids == (p.pid,)


def test_mapping_command_json(capsys):
    assert main(["--demo", "compute-bound", "mapping", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "gputop-diag.mapping/1"
    assert len(doc["devices"]) == 8
    d0 = doc["devices"][0]
    assert d0["pci_bus_id"] == "00000000:18:00.0" and d0["pci_bus_id_procfs"] == "0000:18:00.0"
    assert d0["device_node"] == f"/dev/nvidia{d0['minor_number']}"
    assert d0["cuda_ordinal"] == 0 and d0["information"]["Device Minor"]
    assert {f["kind"] for f in doc["findings"]} == {"minor_not_index", "shared_gpu"}
    assert doc["confirm"]["query"].startswith("nvidia-smi --query-gpu=index,uuid,pci.bus_id")


def test_mapping_command_sanitized_is_logic_and_conclusion_only(capsys):
    src = sim.build("compute-bound")
    secrets = [g.uuid for g in src.sim.gpus] + [g.proc_bus_id for g in src.sim.gpus]
    secrets += [g.bus_id for g in src.sim.gpus] + ["gpu-node-07", "alice", "bob"]
    for extra in ([], ["--json"]):
        assert main(["--demo", "compute-bound", "mapping", "--sanitize", *extra]) == 0
        out = capsys.readouterr().out
        for s in secrets:
            assert s not in out, s
        assert not re.search(r"/dev/nvidia\d|minor_number|\b0000:", out)
        assert "checked by UUID" in out and "minor" in out
    doc = json.loads(out)
    assert doc["sanitized"] and "devices" not in doc


def test_mapping_command_without_a_driver(capsys):
    assert main(["--demo", "no-gpu", "mapping"]) == 3
    out = capsys.readouterr()
    assert "no GPU to map" in out.out and "this shell:" in out.out


def test_mapping_asks_the_simulated_scontrol_for_a_running_jobs_gres():
    import dataclasses

    src = sim.build("scheduler-wait")
    src = dataclasses.replace(src, environ={**src.environ, "SLURM_JOB_ID": "48190"})
    m = collect_mapping(sample_once(src, True), src)
    [job] = m.jobs
    assert job.job_id == "48190" and job.state == "RUNNING"
    assert job.gpus_on("gpu-node-03") == tuple(range(8))
    assert m.shell_slurm.in_job and m.shell_slurm.global_ids is None
    assert any("scontrol show job -d" in c for c in m.conclusions)
    # a job the controller does not know: said, not raised
    src = dataclasses.replace(src, environ={**src.environ, "SLURM_JOB_ID": "99"})
    m = collect_mapping(sample_once(src, True), src)
    assert m.jobs == () and any("99" in e for e in m.errors)


def test_a_process_outside_what_its_environment_gave_it_on_the_simulator():
    src = sim.build("compute-bound")
    rank = src.sim.by_gpu[3][0]
    rank.environ["CUDA_VISIBLE_DEVICES"] = src.sim.gpus[1].uuid  # it was given GPU 1 only
    m = collect_mapping(sample_once(src, True), src)
    [f] = [f for f in m.findings if f.kind == "outside_allocation"]
    assert f.pids == (rank.pid,) and f.gpus == (3,)
    assert any(f"pid {rank.pid}" in c and "NOT only" in c for c in m.conclusions)


def test_a_job_given_gpus_by_slurm_and_running_elsewhere():
    src = sim.build("compute-bound")
    rank = src.sim.by_gpu[5][0]
    rank.environ.update(SLURM_JOB_ID="48213", SLURM_JOB_GPUS="2,3", CUDA_VISIBLE_DEVICES="0,1")
    m = collect_mapping(sample_once(src, True), src)
    [f] = [f for f in m.findings if f.kind == "outside_allocation"]
    assert f.pids == (rank.pid,) and "given GPUs 2, 3" in f.text
    [c] = [c for c in m.conclusions if c.startswith(f"pid {rank.pid}")]
    assert "cuda:0=GPU 2, cuda:1=GPU 3" in c and "renumbered" in c and "NOT only" in c


def test_mapping_of_a_recording(tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    assert main(["--demo", "compute-bound", "record", "-o", str(rec), "--seconds", "2"]) == 0
    capsys.readouterr()
    assert main(["--replay", str(rec), "mapping", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["shell"] is None and doc["devices"][0]["cuda_ordinal"] is None
    assert doc["devices"][0]["minor_number"] is not None  # NVML's, recorded
    assert any("each runs on the GPUs it was given" in c for c in doc["conclusions"])
