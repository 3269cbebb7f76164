"""Whose GPU is this: the per-owner summary of `gputop-diag mapping` (text, JSON, sanitized),
two owners on one GPU, a process outside its Slurm job's GRES, and CUDA_VISIBLE_DEVICES
written as GPU UUIDs by Slurm (gres.conf `Flags=env_uuid`)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid
from pathlib import Path

import pytest

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.collect.mapping import _slurm_conclusion, collect_mapping
from gputop_diag.commands.common import sample_once
from gputop_diag.commands.mapping import render_text, to_json
from gputop_diag.mapping.checks import ProcView, process_findings, slurm_gpus
from gputop_diag.mapping.owners import Holder, owner_uses, shown_name
from gputop_diag.model import Owner
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.sources import CommandResult

DOCS = Path(__file__).parent.parent / "docs" / "mapping.md"


@pytest.fixture(autouse=True)
def _known_shell(monkeypatch):
    """Under --demo the simulated shell takes CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER,
    GPU_DEVICE_ORDINAL and SLURM_* from the real one: these tests need the scenario's."""
    for k in list(os.environ):
        if k in sim.PASSED_ENV or k.startswith(sim.PASSED_ENV_PREFIX):
            monkeypatch.delenv(k)


def _mapping(scenario: str, src=None):
    src = src or sim.build(scenario)
    return collect_mapping(sample_once(src, True), src), src


def _gen_uuid() -> str:
    return f"GPU-{uuid.uuid4()}"


# -- the summary -------------------------------------------------------------------------------
def test_comm_bound_ranks_are_one_pod_on_all_eight_gpus():
    m, src = _mapping("comm-bound")
    [pod] = m.owners
    ranks = [p for p in src.sim.procs.values() if p.owner and "pod" in p.owner]
    ns, name = ranks[0].owner["pod"]
    assert pod.kind == "pod" and pod.name == f"pod {ns}/{name}"
    assert [g.nvml_index for g in pod.gpus] == list(range(8)) and pod.gpus_text() == "GPU 0-7"
    assert set(pod.pids) == {p.pid for p in ranks if p.role == "rank"} and len(pod.pids) == 8
    snap_memory = sum(
        gp.used_memory_bytes for gp in sample_once(src, True).gpu_processes if gp.pid in pod.pids
    )
    assert pod.memory_bytes == pytest.approx(snap_memory, rel=0.05) and pod.memory_bytes > 0
    assert not [f for f in m.findings if f.kind == "shared_gpu"]  # one owner: nothing shared
    text = render_text(m)
    assert re.search(rf"pod {ns}/{name} +GPU 0-7  \d+\.\d GiB  8 processes", text)


def test_compute_bound_job_and_the_cotenants_container():
    m, src = _mapping("compute-bound")
    job, ctr = m.owners
    assert (job.kind, job.name, job.gpus_text(), len(job.pids)) == (
        "slurm",
        "Slurm job 424242",
        "GPU 0-7",
        8,
    )
    cid = sim.owners.container_id("bob-notebook")
    assert ctr.kind == "container" and ctr.name == f"docker container {cid[:12]}"
    assert ctr.gpus_text() == "GPU 0" and ctr.users == ("bob",)
    assert ctr.memory_bytes == pytest.approx(3100 * 2**20, rel=0.05)
    [f] = [f for f in m.findings if f.kind == "shared_gpu"]
    assert f.severity == "warning" and f.gpus == (0,)
    assert "Slurm job 424242 (pid" in f.text and f"docker container {cid[:12]}" in f.text
    assert "scontrol show job -d" in f.next_step and "compute_mode" in f.next_step
    assert f.public_text.startswith("2 owners (a Slurm job and a container) share GPU 0")


def test_json_owners_and_their_documented_keys(capsys):
    assert main(["--demo", "compute-bound", "mapping", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    job, ctr = doc["owners"]
    assert job["kind"] == "slurm" and job["owner"]["slurm_job"] == "424242"
    assert [g["nvml_index"] for g in job["gpus"]] == list(range(8))
    assert job["gpus"][3]["cuda_ordinals"] == [3] and job["processes"] == 8
    assert ctr["users"] == ["bob"] and ctr["owner"]["container_runtime"] == "docker"
    assert ctr["memory_bytes"] > 0 and ctr["gpus"][0]["device"] == "gpu0"
    docs = DOCS.read_text()
    section = docs[docs.index("## JSON") :]
    for key in [*job, *job["gpus"][0], "owners"]:
        assert f"`{key}`" in section, key


def test_cuda_ordinals_shown_where_they_differ_from_the_index():
    a, b = _gen_uuid(), _gen_uuid()
    holders = [
        Holder(
            1, "ann", Owner("slurm", slurm_job="77"), None, (("gpu2", 2, None),), 10, {"gpu2": 0}
        ),
        Holder(
            2, "ann", Owner("slurm", slurm_job="77"), None, (("gpu3", 3, None),), 20, {"gpu3": 1}
        ),
        Holder(3, "ann", None, None, (("gpu1", 1, None),), None, {"gpu1": 1}),
    ]
    same, job = owner_uses(holders)
    assert job.name == "Slurm job 77" and job.gpus_text() == "GPU 2-3 (GPU 2=cuda:0, GPU 3=cuda:1)"
    assert job.memory_bytes == 30
    assert same.name == "user ann" and same.gpus_text() == "GPU 1" and same.memory_bytes is None
    assert a != b


# -- two owners on one GPU ---------------------------------------------------------------------
def _view(pid, user, gpu, kind, name):
    return ProcView(pid, user, (gpu,), owner_kind=kind, owner_name=name)


def test_shared_gpu_severity_follows_who_shares_it():
    job = _view(1, "ann", 0, "slurm", "Slurm job 5")
    ctr = _view(2, "ann", 0, "container", "docker container abc")
    own = _view(3, "ann", 0, "user", "user ann")
    other = _view(4, "ben", 1, "user", "user ben")
    other2 = _view(5, "cid", 1, "user", "user cid")

    def shared(*views):
        return [
            f for f in process_findings(views, lambda v: v.owner_name) if f.kind == "shared_gpu"
        ]

    [f] = shared(job, ctr)
    assert f.severity == "warning" and "Slurm hands out GPUs whole" in f.text
    [f] = shared(ctr, own)  # one user's own container and session: information
    assert f.severity == "info" and "hands out" not in f.text
    [f] = shared(other, other2)  # two users: they compete
    assert f.severity == "warning"
    assert shared(job, _view(6, "ann", 0, "slurm", "Slurm job 5")) == []  # one owner
    assert shared(job, other) == []  # different GPUs


# -- a process outside its Slurm job's GRES ------------------------------------------------------
def _with_scontrol(src, idx: str):
    """The simulated machine, with a controller that knows job 424242's GRES on this node."""
    real = src.run_command

    def run(argv, timeout=None):
        if argv[:3] == ["scontrol", "show", "job"] and "424242" in argv:
            return CommandResult(
                0,
                "JobId=424242 JobName=train\n   JobState=RUNNING Reason=None\n"
                f"   Nodes=gpu-node-07 CPU_IDs=0-63 Mem=512000 GRES=gpu:h100:8(IDX:{idx})\n",
            )
        return real(argv, timeout)

    return dataclasses.replace(src, run_command=run)


def test_ranks_outside_the_gres_their_cgroups_job_was_given():
    src = sim.build("compute-bound")
    m, _ = _mapping("", _with_scontrol(src, "0-3"))
    [job] = m.jobs
    assert job.job_id == "424242" and job.gpus_on("gpu-node-07") == (0, 1, 2, 3)
    outside = [f for f in m.findings if f.kind == "outside_allocation"]
    assert sorted(g for f in outside for g in f.gpus) == [4, 5, 6, 7]
    assert all("GRES IDX, from scontrol show job -d" in f.text for f in outside)
    assert {f.severity for f in outside} == {"critical"}


def test_ranks_inside_their_jobs_gres_raise_nothing():
    m, _ = _mapping("", _with_scontrol(sim.build("compute-bound"), "0-7"))
    assert not [f for f in m.findings if f.kind == "outside_allocation"]
    assert not m.errors


# -- Slurm's UUID form of CUDA_VISIBLE_DEVICES ---------------------------------------------------
def test_uuid_entries_pair_with_slurm_job_gpus():
    u2, u3 = _gen_uuid(), _gen_uuid()
    s = slurm_gpus(
        {"SLURM_JOB_ID": "9", "SLURM_JOB_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": f"{u2},{u3}"}
    )
    assert s.uuid_entries == (u2, u3) and s.global_ids == (2, 3)
    assert s.global_of_local(0) == 2 and s.global_of_local(1) == 3 and s.global_of_local(2) is None
    assert s.constrained is None  # UUIDs are not renumbered: nothing to tell
    # inside a constrained job NVML numbers the job's GPUs from 0: compared by UUID
    c = _slurm_conclusion("pid 5", s, (0,), (0, 1))
    assert "cuda:0=GPU 2, cuda:1=GPU 3" in c and "NVML numbers them 0, 1 here" in c
    assert c.endswith("the GPUs Slurm assigned: checked by UUID")
    c = _slurm_conclusion("pid 5", s, (4,), (0, 1))
    assert "NOT only" in c
    short = slurm_gpus({"SLURM_JOB_ID": "9", "SLURM_JOB_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": u2})
    assert short.global_of_local(0) is None  # one UUID for two ids: not paired
    assert "cannot be paired" in _slurm_conclusion("x", short, None, (2,))


def test_uuid_form_on_the_simulator_table_json_and_conclusion():
    src = sim.build("compute-bound")
    g2, g3 = src.sim.gpus[2].uuid, src.sim.gpus[3].uuid
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_GPUS": "2,3", "CUDA_VISIBLE_DEVICES": f"{g2},{g3}"}
    src = dataclasses.replace(src, environ={**src.environ, **env})
    m, _ = _mapping("", src)
    [c] = [c for c in m.conclusions if c.startswith("this shell's job")]
    assert "by UUID (gres.conf Flags=env_uuid)" in c and "cuda:0=GPU 2, cuda:1=GPU 3" in c
    doc = to_json(m)
    assert [d["cuda_ordinal"] for d in doc["devices"][:4]] == [None, None, 0, 1]
    # a rank Slurm gave GPU 1 by UUID that runs on GPU 3
    src2 = sim.build("compute-bound")
    rank = src2.sim.by_gpu[3][0]
    rank.environ.update(
        SLURM_JOB_ID="4242", SLURM_JOB_GPUS="1", CUDA_VISIBLE_DEVICES=src2.sim.gpus[1].uuid
    )
    m, _ = _mapping("", src2)
    [f] = [f for f in m.findings if f.kind == "outside_allocation"]
    assert f.pids == (rank.pid,) and f.gpus == (3,) and "named by UUID" in f.text


# -- sanitized ---------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["comm-bound", "compute-bound"])
def test_sanitized_summary_names_no_owner(scenario, capsys):
    m, src = _mapping(scenario)
    secrets = ["424242", "gpu-node-07", "alice", "bob"]
    for p in src.sim.procs.values():
        o = p.owner or {}
        if "pod" in o:
            secrets += [*o["pod"], sim.owners.pod_uid(*o["pod"])]
            secrets.append(sim.owners.container_id("/".join(o["pod"]))[:12])
        if "docker" in o:
            secrets += [o["docker"], sim.owners.container_id(o["docker"])[:8]]
    for extra in ([], ["--json"]):
        assert main(["--demo", scenario, "mapping", "--sanitize", *extra]) == 0
        out = capsys.readouterr().out
        for s in secrets:
            # whole: a pseudonym drawn from the run's random key may hold the letters of a
            # short name by chance (`container-bobi`), which names no one
            assert not re.search(rf"(?<![0-9A-Za-z]){re.escape(s)}(?![0-9A-Za-z])", out), s
    doc = json.loads(out)
    assert len(doc["owners"]) == len(m.owners)
    assert all("pids" not in o and "owner" not in o and "users" not in o for o in doc["owners"])
    assert doc["owners"][0]["gpus"][0]["nvml_index"] == 0


def test_generated_owner_ids_never_show_sanitized():
    ns, pod, cname = (f"{w}-{uuid.uuid4().hex[:6]}" for w in ("team", "trainer", "notebook"))
    uid, cid, job = str(uuid.uuid4()), uuid.uuid4().hex * 2, str(uuid.uuid4().int % 10**7)
    holders = [
        Holder(1, "ann", Owner("pod", pod_uid=uid, pod_namespace=ns, pod_name=pod), None, (), 1),
        Holder(2, "ann", Owner("container", container_id=cid, container_name=cname), None, (), 1),
        Holder(3, "ann", Owner("slurm", slurm_job=job), None, (), 1),
    ]
    s = Sanitizer()
    s.seed_job(job)
    s.seed_user("ann")
    for u in owner_uses(holders):
        shown = shown_name(u, s.text)
        for secret in (ns, pod, cname, uid, uid[:8], cid[:8], job, "ann"):
            assert secret not in shown, (secret, shown)
        assert shown.split()[0] in ("pod", "Slurm", "a", "container", "docker")


def test_the_shared_gpu_remedy_fits_the_owners_that_share_it():
    """A Slurm job and a container started beside it: Slurm's ConstrainDevices cannot bind the
    container, and there is no pod to give Kubernetes advice about."""
    from gputop_diag import sim
    from gputop_diag.collect.mapping import collect_mapping
    from gputop_diag.commands.common import sample_once

    src = sim.build("compute-bound")
    m = collect_mapping(sample_once(src, True), src)
    (shared,) = [f for f in m.findings if f.kind == "shared_gpu"]
    assert "ConstrainDevices" in shared.next_step and "outside the scheduler" in shared.next_step
    assert "Kubernetes" not in shared.next_step and "nvidia.com/gpu" not in shared.next_step
