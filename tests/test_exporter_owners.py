"""Whose GPU it is, in dcgm-exporter's labels: `exporter -k` (pod, namespace, container on every
per-GPU series), `--owner-info` (one info series per GPU, joined at query time) and
`--hpc-job-mapping-dir` (dcgm-exporter's mapping files, read from real files), each off by
default; under --sanitize only pseudonyms reach a label."""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import subprocess

import pytest
from test_exporter import PROMTOOL, promtool, samples

from gputop_diag import sim
from gputop_diag.model import Owner
from gputop_diag.monitor.core import Monitor, Tick
from gputop_diag.prometheus.export import SlurmJobs, TickMetrics, window_of
from gputop_diag.prometheus.owners import HpcJobMapping, holder

OWNER_LABELS = {"pod", "namespace", "container"}
NO_JOB = SlurmJobs(psutil=None, own_job=None)  # not the environment of whoever runs the tests


def exposition(scenario: str, seconds: float = 3, plant=None, **kw) -> str:
    """A scrape after `seconds` of ticks; `plant(tick) -> tick` changes each tick first."""
    sources = sim.build(scenario)
    monitor = Monitor(sources)
    kw.setdefault("jobs", NO_JOB)
    metrics = TickMetrics(window=window_of(monitor), **kw)
    monitor.run_for(seconds, (lambda t: metrics.update(plant(t))) if plant else metrics.update)
    return metrics.exposition().decode()


def per_gpu(text: str) -> list:
    """Every sample of a per-GPU series (those carrying the GPU's `gpu` and `device`)."""
    return [s for v in samples(text).values() for s in v if "device" in s.labels]


def test_kubernetes_labels_every_gpu_series_with_its_pod_and_only_when_asked():
    plain = exposition("comm-bound")
    labelled = exposition("comm-bound", kubernetes=True)
    assert not OWNER_LABELS & {k for s in per_gpu(plain) for k in s.labels}
    assert "gputop_diag_gpu_owner_info" not in samples(plain)
    got = per_gpu(labelled)
    assert len(got) == len(per_gpu(plain))  # the same series, three labels more
    assert {(s.labels["pod"], s.labels["namespace"]) for s in got} == {
        ("llama-ddp-0", "ml-research")
    }
    # the node's own series (verdict, host) are the node's, not a GPU's: no pod there
    (verdict,) = samples(labelled)["gputop_diag_bottleneck"]
    assert not OWNER_LABELS & verdict.labels.keys()


def test_a_shared_gpu_goes_to_the_owner_holding_most_of_its_memory():
    """compute-bound: GPU 0 holds a Slurm rank (59 GB) and a Docker notebook (3 GB)."""
    m = Monitor(sim.build("compute-bound"))
    m.run_for(2)
    snap = m.last.snapshot
    owners = holder(snap)
    assert owners[0].kind == "slurm" and owners[0].slurm_job == "424242"
    assert {o.kind for o in owners.values()} == {"slurm"}
    # the notebook takes GPU 0 once it holds more of it
    notebook = next(p.pid for p in snap.processes if p.owner and p.owner.kind == "container")
    grown = tuple(
        dataclasses.replace(gp, used_memory_bytes=70 << 30) if gp.pid == notebook else gp
        for gp in snap.gpu_processes
    )
    owners = holder(dataclasses.replace(snap, gpu_processes=grown))
    assert owners[0].kind == "container" and owners[1].kind == "slurm"


def _one_gpu(procs: list[tuple[int, Owner, int]]):
    """A compute-bound snapshot whose GPU 0 holds only `procs` (pid, owner, GiB)."""
    m = Monitor(sim.build("compute-bound"))
    m.run_for(1)
    snap = m.last.snapshot
    gp0 = next(gp for gp in snap.gpu_processes if gp.gpu_index == 0)
    p0 = next(p for p in snap.processes if p.pid == gp0.pid)
    return dataclasses.replace(
        snap,
        processes=tuple(dataclasses.replace(p0, pid=pid, owner=o) for pid, o, _ in procs),
        gpu_processes=tuple(
            dataclasses.replace(gp0, pid=pid, used_memory_bytes=gib << 30) for pid, _, gib in procs
        ),
    )


def test_the_processes_of_one_pod_or_one_job_add_up_as_one_owner():
    uid = "87e7667e-425e-41e6-ac19-78365cfe9e8b"
    pod = Owner(kind="pod", pod_uid=uid, pod_namespace="ml", pod_name="train-0")
    ctr = Owner(kind="container", container_id="1e52e506" * 8, container_name="nb")
    snap = _one_gpu(
        [
            (101, dataclasses.replace(pod, ns_pid=1), 30),
            (102, dataclasses.replace(pod, ns_pid=7), 30),
            (103, ctr, 40),
        ]
    )
    got = holder(snap)[0]
    assert got.kind == "pod" and got.pod_uid == uid  # 60 GiB of one pod, not 30 and 30
    job5 = Owner(kind="slurm", slurm_job="5")
    snap = _one_gpu(
        [
            (201, dataclasses.replace(job5, slurm_step="0"), 20),
            (202, dataclasses.replace(job5, slurm_step="1"), 20),
            (203, Owner(kind="slurm", slurm_job="6", slurm_step="0"), 30),
        ]
    )
    assert holder(snap)[0].slurm_job == "5"


def test_the_slurm_owner_is_the_gpus_hpc_job_once_attribution_is_asked():
    plain = {s.labels["hpc_job"] for s in per_gpu(exposition("compute-bound"))}
    asked = {s.labels["hpc_job"] for s in per_gpu(exposition("compute-bound", kubernetes=True))}
    assert plain == {""} and asked == {"424242"}


def test_owner_info_is_one_series_per_gpu_and_leaves_the_gpu_series_alone():
    plain = exposition("comm-bound")
    text = exposition("comm-bound", owner_info=True)
    got = samples(text)
    info = got["gputop_diag_gpu_owner_info"]
    assert len(info) == 8 and {s.value for s in info} == {1.0}
    assert set(info[0].labels) == {"gpu", "UUID", *OWNER_LABELS, "hpc_job"}
    assert {s.labels["pod"] for s in info} == {"llama-ddp-0"}
    assert not OWNER_LABELS & {k for s in per_gpu(text) for k in s.labels}
    assert len(per_gpu(text)) == len(per_gpu(plain))


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: prometheus)")
def test_the_documented_join_gives_each_gpu_series_its_owner(tmp_path):
    """`promtool test rules` evaluates docs/fleet.md's PromQL over this exposition's series."""
    text = exposition("comm-bound", owner_info=True)
    got = samples(text)
    series = [*got["DCGM_FI_DEV_GPU_UTIL"], *got["gputop_diag_gpu_owner_info"]]

    def name(s) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        return f"{s.name}{{{inner}}}"

    lines = [
        "rule_files: []",
        "evaluation_interval: 1m",
        "tests:",
        "  - interval: 1m",
        "    input_series:",
    ]
    # whole numbers, summed: the join is what is checked, and an average's last bit depends on
    # how Prometheus adds (98.87500000000001 against 98.875 once); the docs' example averages
    lines += [f"      - series: '{name(s)}'\n        values: '{round(s.value)}x2'" for s in series]
    expr = (
        "sum by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL * on(gpu, UUID) "
        "group_left(pod, namespace, container) gputop_diag_gpu_owner_info)"
    )
    util = got["DCGM_FI_DEV_GPU_UTIL"]
    total = sum(round(s.value) for s in util)
    lines += [
        "    promql_expr_test:",
        f"      - expr: '{expr}'",
        "        eval_time: 1m",
        "        exp_samples:",
        '          - labels: \'{namespace="ml-research", pod="llama-ddp-0"}\'',
        f"            value: {total:g}",
    ]
    path = tmp_path / "join_test.yml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    p = subprocess.run(
        [PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stdout + p.stderr


def write(d, name: str, data: bytes | str) -> None:
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def test_the_hpc_job_mapping_directory_names_each_gpus_jobs(tmp_path):
    for i in range(8):
        write(tmp_path, str(i), "5001\n" if i < 4 else "  6002 \n\n")  # blank lines hold none
    write(tmp_path, "3", "5001\n5003\n")  # two jobs on GPU 3: its series are copied per job
    write(tmp_path, "README", "job ids by GPU index\n")  # no GPU's name: skipped
    (tmp_path / "9").mkdir()
    said: list[str] = []
    mapping = HpcJobMapping(str(tmp_path), say=said.append)
    assert mapping.read() == {
        **{str(i): ("5001",) for i in range(3)},
        "3": ("5001", "5003"),
        **{str(i): ("6002",) for i in range(4, 8)},
    }
    plain = per_gpu(exposition("compute-bound"))
    got = per_gpu(exposition("compute-bound", hpc_jobs=mapping))
    jobs = {(s.labels["gpu"], s.labels["hpc_job"]) for s in got if s.name.endswith("GPU_UTIL")}
    assert jobs == {
        *{(str(i), "5001") for i in range(4)},
        ("3", "5003"),
        *{(str(i), "6002") for i in range(4, 8)},
    }
    gpu3 = [s for s in plain if s.labels["gpu"] == "3"]
    assert len(got) == len(plain) + len(gpu3)
    assert said == []
    # a job ends: the epilog empties its files, and the next tick says so
    for i in range(4):
        write(tmp_path, str(i), "")
    assert set(mapping.read()) == {str(i) for i in range(4, 8)}


def test_a_mig_instance_takes_its_own_mapping_file(tmp_path):
    write(tmp_path, "0", "7001\n")
    write(tmp_path, "0.5", "7005\n")
    got = samples(exposition("mig", hpc_jobs=HpcJobMapping(str(tmp_path), say=print)))
    by_instance = {
        s.labels.get("GPU_I_ID", ""): s.labels["hpc_job"] for s in got["DCGM_FI_DEV_FB_USED"]
    }
    assert by_instance[""] == "7001" and by_instance["5"] == "7005"
    assert by_instance["1"] == "7001"  # no file of its own: its GPU's


def test_a_garbled_or_unreadable_mapping_is_said_once_and_never_raised(tmp_path):
    write(tmp_path, "0", "5001\n")
    write(tmp_path, "1", b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe")  # a binary
    write(tmp_path, "2", "5001 5002 and a sentence\n")
    write(tmp_path, "3", "1\n" * 4000)  # far larger than a list of job ids
    os.symlink(tmp_path / "gone", tmp_path / "4")  # unreadable whoever runs the tests
    said: list[str] = []
    mapping = HpcJobMapping(str(tmp_path), say=said.append)
    text = exposition("compute-bound", seconds=4, hpc_jobs=mapping)
    jobs = {s.labels["gpu"]: s.labels["hpc_job"] for s in samples(text)["DCGM_FI_DEV_GPU_UTIL"]}
    assert jobs["0"] == "5001"
    assert {jobs[g] for g in "1234"} == {"424242"}  # the owner's Slurm job, as without a file
    assert len(said) == 4, said  # once each, over several ticks
    assert all("its GPU carries no job" in m for m in said)
    assert any("not text" in m for m in said) and any("4096 bytes" in m for m in said)
    missing = HpcJobMapping(str(tmp_path / "nowhere"), say=said.append)
    exposition("idle", seconds=3, hpc_jobs=missing)
    assert len(said) == 5 and "nowhere" in said[-1] and "prolog" in said[-1]


def test_the_command_takes_the_directory_from_dcgm_exporters_variable(tmp_path, monkeypatch):
    import argparse

    from gputop_diag.commands import exporter

    monkeypatch.setenv("DCGM_HPC_JOB_MAPPING_DIR", str(tmp_path))
    p = argparse.ArgumentParser()
    exporter.add_arguments(p)
    args = p.parse_args(["-k", "--owner-info"])
    assert args.hpc_job_mapping_dir == str(tmp_path) and args.kubernetes and args.owner_info
    monkeypatch.delenv("DCGM_HPC_JOB_MAPPING_DIR")
    p = argparse.ArgumentParser()
    exporter.add_arguments(p)
    args = p.parse_args([])
    assert args.hpc_job_mapping_dir is None and not args.kubernetes and not args.owner_info


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: prometheus)")
@pytest.mark.parametrize(
    "scenario,option",
    [
        (sc, opt)
        for sc in ("comm-bound", "compute-bound", "mig")
        for opt in ("kubernetes", "owner_info", "hpc_jobs", "sanitized")
    ],
)
def test_promtool_accepts_every_attribution(scenario, option, tmp_path):
    write(tmp_path, "0", "5001\n5002\n")
    write(tmp_path, "0.1", "5003\n")
    kw = {
        "kubernetes": {"kubernetes": True},
        "owner_info": {"owner_info": True},
        "hpc_jobs": {"hpc_jobs": HpcJobMapping(str(tmp_path))},
        "sanitized": {"kubernetes": True, "owner_info": True, "sanitize": True},
    }[option]
    p = promtool(exposition(scenario, lint_clean=True, **kw))
    assert p.returncode == 0, p.stdout + p.stderr


# -- --sanitize ----------------------------------------------------------------------------------


def generated_owners() -> tuple[dict[int, Owner], set[str]]:
    """A pod on GPUs 0-3, a Docker container on 4-5, a Slurm job on 6-7: every id made now."""
    pod = Owner(
        kind="pod",
        pod_uid=f"{secrets.token_hex(4)}-4a1b-4c2d-8e3f-{secrets.token_hex(6)}",
        pod_namespace=f"team-{secrets.token_hex(3)}",
        pod_name=f"finetune-{secrets.token_hex(3)}-0",
        container_id=secrets.token_hex(32),
        container_runtime="containerd",
        container_name=f"trainer-{secrets.token_hex(3)}",
    )
    box = Owner(
        kind="container",
        container_id=secrets.token_hex(32),
        container_runtime="docker",
        container_name=f"nb_{secrets.token_hex(3)}",
    )
    job = Owner(kind="slurm", slurm_job=str(secrets.randbelow(10**6) + 10**6), slurm_step="0")
    owners = {**dict.fromkeys(range(4), pod), 4: box, 5: box, 6: job, 7: job}
    ids = {pod.pod_uid, pod.pod_namespace, pod.pod_name, pod.container_id, pod.container_name}
    ids |= {box.container_id, box.container_name, job.slurm_job}
    return owners, {i for i in ids if i}


def planter(owners: dict[int, Owner]):
    def plant(tick: Tick) -> Tick:
        snap = tick.snapshot
        gpu_of = {gp.pid: gp.gpu_index for gp in snap.gpu_processes}
        procs = tuple(
            dataclasses.replace(p, owner=owners.get(gpu_of.get(p.pid, -1), p.owner))
            for p in snap.processes
        )
        return dataclasses.replace(tick, snapshot=dataclasses.replace(snap, processes=procs))

    return plant


def label_values(text: str) -> set[str]:
    return {v for vs in samples(text).values() for s in vs for v in s.labels.values()}


def test_no_generated_owner_id_reaches_a_label_under_sanitize():
    owners, ids = generated_owners()
    kw = {"kubernetes": True, "owner_info": True, "plant": planter(owners)}
    raw = exposition("comm-bound", **kw)
    assert ids <= label_values(raw) | {o.pod_uid for o in owners.values()} | {
        o.container_id for o in owners.values()
    }  # planted: unsanitized, the names and the job are served
    text = exposition("comm-bound", sanitize=True, **kw)
    assert not [i for i in ids if i in text]
    assert not [i[:12] for i in ids if len(i) >= 12 and i[:12] in text]  # nor a short id
    info = samples(text)["gputop_diag_gpu_owner_info"]
    jobs = {s.labels["gpu"]: s.labels["hpc_job"] for s in info}
    assert jobs["6"].startswith("job-") and jobs["6"] == jobs["7"]  # a pseudonym, one per job


def test_owner_labels_are_pseudonyms_under_sanitize():
    owners, ids = generated_owners()
    text = exposition("comm-bound", sanitize=True, kubernetes=True, plant=planter(owners))
    assert not [i for i in ids if i in text]  # no raw owner id reaches a label
    got = {s.labels["gpu"]: s.labels for s in samples(text)["DCGM_FI_DEV_GPU_UTIL"]}
    s = got["0"]
    assert s["pod"] and s["namespace"] and s["container"]
    shown = [lb[k] for lb in got.values() for k in ("pod", "namespace", "container") if lb[k]]
    assert all(re.fullmatch(r"[a-z]+-[a-z0-9]{4}", v) for v in shown), shown  # `ns-pw2z`
    assert not [v for v in shown for i in ids if i in v or v in i]
    assert len({s["pod"], s["namespace"], s["container"]}) == 3
    assert got["3"]["pod"] == s["pod"] and got["4"]["pod"] == ""
    assert got["4"]["container"] not in ("", s["container"])


def test_without_an_option_sanitize_still_drops_the_job():
    text = exposition("compute-bound", sanitize=True)
    assert "hpc_job=" not in text and "pod=" not in text


def test_sanitize_help_says_which_options_keep_the_job_as_a_pseudonym():
    import argparse

    from gputop_diag.commands.exporter import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    said = " ".join(next(a for a in p._actions if "--sanitize" in a.option_strings).help.split())
    assert "unless -k, --owner-info or --hpc-job-mapping-dir" in said
    assert "pseudonyms" in said and "restarts" in said
