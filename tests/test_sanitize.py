"""The sanitizer, class by class: what it replaces, in which written forms, what it keeps, and
that the same identifier always gets the same pseudonym."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gputop_diag import sim
from gputop_diag.diagnose.render import to_json
from gputop_diag.monitor.core import Monitor
from gputop_diag.sanitize.rules import expand_nodelist
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.xid.catalog import XID_CATALOG

UUID = "GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d"


@pytest.fixture
def s():
    s = Sanitizer(key=b"test" * 8)
    s.seed_hostname("gpu-node-07")
    s.seed_user("alice")
    s.seed_gpu_uuid(UUID)
    s.allow("NVIDIA H100 80GB HBM3")
    s.allow("570.124.06")
    s.allow("12.570.124.06")
    return s


# (text, what must be gone, what must be left) — one row per written form
CASES = [
    ("host gpu-node-07 and GPU-NODE-07.", ["gpu-node-07", "GPU-NODE-07"], ["host-"]),
    ("its neighbour gpu-node-12 too", ["gpu-node-12"], ["host-"]),
    (
        "gpu-node-07.cluster.example.org",
        ["gpu-node-07", "cluster", "example"],
        ["host-", "domain-"],
    ),
    ("mount storage.acme.internal:/vol", ["storage", "acme"], ["domain-"]),
    ("at 10.1.2.3:29500 and 172.16.0.0/12", ["10.1.2.3", "172.16.0.0"], [":29500", "/12"]),
    ("v6 fe80::1%ib0 and 2001:db8::42/64", ["fe80::1", "2001:db8::42"], ["ip6-", "/64"]),
    ("mac 60:55:CB:4B:C9:27 / 60-55-cb-4b-c9-27", ["60:55", "60-55"], ["mac-"]),
    ("eui 0c:42:a1:03:00:12:34:56", ["0c:42"], ["mac-"]),
    ("guid 0c42:a103:0012:3456 port 0x0c42a10300123456", ["0c42"], ["guid-"]),
    (f"uuid {UUID}", ["8a47641b", "c3eb58fb430d"], ["GPU-"]),
    (f"UUID {UUID.upper()}", ["8A47641B"], ["GPU-"]),
    ("MIG-GPU-5c89852c-1111-2222-3333-005d5ae1dc3f/7/0", ["5c89852c", "/7/0"], ["MIG-"]),
    ("MIG-d9a47cfb-d1f2-d08c-b40e-0812b597ae69", ["d9a47cfb"], ["MIG-"]),
    ("pod 123e4567-e89b-12d3-a456-426614174000", ["123e4567"], ["uuid-"]),
    ("Serial Number : 1562521008218", ["1562521008218"], ["serial-"]),
    ("gpu_serial=1562521008218, board id: 0x4f00", ["1562521008218", "0x4f00"], ["serial-"]),
    ("bus 00000000:3B:00.0", ["3B:00"], ["pci-"]),
    ("sysfs /sys/bus/pci/devices/0000:3b:00.0/remove", ["3b:00"], ["/sys/bus/pci/devices/pci-"]),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python", ["3b:00"], ["Xid (PCI:pci-", "79"]),
    ("lspci 3b:00.0 3D controller", ["3b:00"], ["pci-"]),
    ("PCI:0018:01:00", ["0018:01"], ["pci-"]),
    ("/home/alice/proj/run.py and ~alice/x", ["alice", "/home/", "proj", "run.py"], ["~user-"]),
    ("bare alice, alice_ckpt, Alice, ALICE", ["alice", "Alice", "ALICE"], ["user-", "_ckpt"]),
    ("UserId=dave(1003) uid=1004(erin) groups=1004(erin)", ["dave", "erin"], ["user-"]),
    ("ssh frank@gpu-node-07", ["frank", "gpu-node-07"], ["user-", "@host-"]),
    ("mail carol@example.com", ["carol", "example.com"], ["email-"]),
    (
        "/scratch/proj-x/a /lustre/b /gpfs/c/d /data/e /mnt/f /work/g",
        ["proj-x", "/b", "/c/d"],
        ["/scratch/path-", "/lustre/path-", "/gpfs/path-", "/data/path-", "/mnt/path-"],
    ),
    ("/acme_fs/team/x", ["acme_fs", "team"], ["/path-"]),
    ("/opt/conda/envs/orion/lib/libcudart.so.12", ["orion"], ["/opt/path-", "/libcudart.so.12"]),
    (
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 /etc/slurm/gres.conf /var/log/kern.log",
        [],
        ["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/etc/slurm/gres.conf"],
    ),
    ("/dev/nvidia3 and /dev/nvidiactl", ["/dev/nvidia3"], ["/dev/nvidiaN", "/dev/nvidiactl"]),
    (
        "JobId=123456 job_123457 123458_3 123459.batch slurm-123460.out",
        ["123456", "123457", "123458", "123459", "123460"],
        ["job-", "_3", ".batch", "slurm-"],
    ),
    ("NodeList=node[01-04,07] and gpu-a[1-3]", ["node[01", "gpu-a[1"], ["nodes-"]),
    (
        "Account=acme Partition=h100q --account=orion --partition gpu",
        ["acme", "h100q", "orion", " gpu"],
        ["account-", "partition-"],
    ),
    ("JobName=secret-llm", ["secret-llm"], ["jobname-"]),
    ("AllocNode:Sid=login01:4242 BatchHost=gpu-b3", ["login01", "gpu-b3"], ["host-", ":4242"]),
    ("docker-" + "ab" * 32 + ".scope", ["abab"], ["docker-container-"]),
    ("container 3f4e5d6c7b8a started", ["3f4e5d6c7b8a"], ["container-"]),
    (
        "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012 api_key: sk-abcdefghijklmnopqrstuv",
        ["hf_AbCd", "sk-abc"],
        ["HF_TOKEN=secret-", "secret-"],
    ),
    (
        "MY_VAR=purple OMP_NUM_THREADS=8 CUDA_DEVICE_ORDER=PCI_BUS_ID",
        ["purple"],
        ["MY_VAR=env-", "OMP_NUM_THREADS=8", "CUDA_DEVICE_ORDER=PCI_BUS_ID"],
    ),
    (f"CUDA_VISIBLE_DEVICES=0,{UUID[:12]}", ["8a47641b"], ["CUDA_VISIBLE_DEVICES=0,GPU-"]),
    (
        "https://wandb.ai/acme/orion?x=1 https://docs.nvidia.com/deploy/xid-errors/index.html",
        ["acme", "orion"],
        ["https://wandb.ai/url-", "https://docs.nvidia.com/deploy/xid-errors/index.html"],
    ),
    ("token 4f2a9c1e7b3d5a6f8e0c2b4d6a8f0e1c3b5d7f9a", ["4f2a9c1e"], ["secret-"]),
    ("relative data/acme-set/train.jsonl and ./out", ["acme-set", "./out"], ["path-"]),
    # the forms real machines print (sanitize/forms.py)
    (
        "NCCL INFO cudaDev 0 nvmlDev 0 busId 3b000 commId 0x5f; GPU/3B000 PCI/0-3c000 NIC/3D000",
        ["3b000", "3B000", "3c000", "3D000"],
        ["busId pci-", "GPU/pci-", "PCI/0-pci-", "commId 0x5f"],
    ),
    ("bare 3B:00 and 0:3b:00.0 at 10:30", ["3B:00", "3b:00"], ["pci-", "at 10:30"]),
    (
        "peer 10.20.30.40<43210> ip-10-20-30-41.ec2.internal 010.020.030.042 10-20-30-43 x",
        ["10.20.30", "10-20-30", "020.030"],
        ["ip-", "<43210>", ".ec2.internal"],
    ),
    ("reached by 10.20.30.40. then ip_10.20.30.44 and x_10.1.2.3", ["10.20.30", "10.1.2"], []),
    ("hw 6055cb4bc927 6055CB4BC927 mac 001122334455", ["6055", "0011"], ["mac-"]),
    (
        "Authorization: Bearer abcDEF1234567890xyz and eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0.",
        ["abcDEF", "eyJ"],
        ["Bearer secret-"],
    ),
    (
        "--password hunter2hunter --api-key=k3yk3yk3y -token t0k3nt0k3n AKIAIOSFODNN7EXAMPLE",
        ["hunter2", "k3yk3y", "t0k3n", "AKIAIOSF"],
        ["--password secret-", "--api-key=secret-", "-token secret-"],
    ),
    ("max_tokens=4096 and tokens_per_s: 12.5", [], ["max_tokens=4096", "tokens_per_s: 12.5"]),
    (
        "i-0123456789abcdef0 on pod trainer-7d9f8b6c5d-x2k4p and llm-worker-3",
        ["0123456789abcdef0", "7d9f8b6c5d", "llm-worker"],
        ["cloud-", "pod host-"],
    ),
    (
        "remote peer node-b-17.corp.internal, host gpu17.acme.zone, (trainer-2, 29500)",
        ["node-b-17", "gpu17", "acme", "trainer-2"],
        ["remote peer host-", "(host-"],
    ),
    (
        "/usr/local/src/orion-llm/train.py /etc/orion.yaml "
        "/usr/lib/python3/dist-packages/torch/x.py",
        ["orion"],
        ["/usr/local/src/path-", "/etc/path-", "/usr/lib/python3/dist-packages/torch/x.py"],
    ),
]


@pytest.mark.parametrize("text,gone,kept", CASES, ids=[c[0][:40] for c in CASES])
def test_each_form_is_replaced(s, text, gone, kept):
    out = s.text(text)
    for g in gone:
        assert g not in out, (g, out)
    for k in kept:
        assert k in out, (k, out)
    assert not s.leaks(out), out


ALLOWED = [
    "NVIDIA H100 80GB HBM3 on driver 570.124.06, NVML 12.570.124.06, CUDA 12.8",
    "Xid 79 (GPU_HAS_FALLEN_OFF_THE_BUS) and Xid 13 on GPU 5",
    "connect to localhost:29500 and 127.0.0.1 and ::1",
    "tensor pipes active 66 % of cycles (GPM, median, 15 s); 1/6 s samples; I/O; n/a",
    "nvidia-smi --query-gpu=index,uuid,pci.bus_id,name --format=csv",
    "M ≈ weights + gradients; approx ~16 bytes per parameter; 2·L·H·T·d_head·b",
    "the same GPC/TPC/SM under different jobs; input/sync/comm; power/temperature/memory",
    "sinfo -p <partition> -o '%n %G %t'; squeue --start; 10:00:00 and 2026-01-15T10:00:00+00:00",
    "docs.nvidia.com/deploy/xid-errors and torch.cuda.memory_summary() and python train.py",
]


@pytest.mark.parametrize("text", ALLOWED)
def test_what_names_no_one_is_kept(s, text):
    assert s.text(text) == text


def test_the_catalog_and_the_diagnosis_read_the_same_after_sanitizing():
    """Our own words are no identifier: no Xid entry and no verdict of a scenario that names
    no job changes (a false positive would garble the report)."""
    s = Sanitizer()
    for e in XID_CATALOG.values():
        for text in (e.meaning, e.question, e.step):
            assert s.text(text) == text
    for scenario in ("compute-bound", "capacity", "xid-app", "sync-stall", "mig", "no-gpu"):
        m = Monitor(sim.build(scenario))
        m.run_for(15)
        doc = to_json(m.last.diagnosis)
        s = Sanitizer()
        s.learn_document(doc)
        assert s.document(doc) == doc, scenario


def test_the_same_identifier_gets_the_same_pseudonym_in_every_form(s):
    a = s.text(f"{UUID} on 00000000:3B:00.0 by alice on gpu-node-07")
    b = s.text(f"{UUID.upper()[:4]}{UUID[4:]} on 0000:3b:00 by alice on GPU-NODE-07.example.org")
    tokens = lambda t: re.findall(r"(?:GPU|pci|user|host)-[a-z2-7]{4,}", t)  # noqa: E731
    assert tokens(a) == tokens(b)
    assert s.uuid(UUID) == s.cuda_visible_devices(UUID[:8]) == s.cuda_visible_devices(UUID[:13])


def test_a_name_is_learnt_before_it_is_written():
    """`/home/bob` in one field makes the bare `bob` in an earlier one a pseudonym too."""
    s = Sanitizer()
    s.learn(["error for bob", "see /home/bob/x", "JobId=99123", "on NodeList=gpu-x[1-2]"])
    out = s.text("bob's job 99123 ran on gpu-x2")
    assert "bob" not in out and "99123" not in out and "gpu-x2" not in out
    assert s.counts == {"user": 1, "job": 1, "hostname": 1}  # learning counts nothing


def test_command_lines_keep_the_program_and_the_safe_options():
    s = Sanitizer()
    argv = s.argv(
        [
            "/home/alice/env/bin/python",
            "-u",
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=8",
            "train_secret.py",
            "--config",
            "/lustre/p/c.yaml",
            "--bf16",
            "--lr",
            "3e-4",
            "--run-name=orion",
            "-c",
            "print(1)",
            "--batch-size",
            "32",
        ]
    )
    assert argv[:5] == ["python", "-u", "-m", "torch.distributed.run", "--nproc_per_node=8"]
    assert argv[6] == "--config" and argv[7].startswith("arg-")
    assert argv[8:11] == ["--bf16", "--lr", "3e-4"] and argv[-2:] == ["--batch-size", "32"]
    joined = " ".join(argv)
    for secret in ("alice", "train_secret", "lustre", "orion", "print(1)"):
        assert secret not in joined
    assert s.argv(["python", "-m", "my_private_pkg.train"])[2].startswith("arg-")
    fresh = Sanitizer()
    assert fresh.argv(["./run_alice.sh"]) == ["run_alice.sh"]  # the program's name is kept...
    fresh.seed_user("alice")
    shown = fresh.argv(["./run_alice.sh"])[0]  # ...with a user's name in it replaced
    assert "alice" not in shown and shown.startswith("run_user-")


def test_a_watched_commands_label_is_sanitized_as_a_command_line():
    """A recording of `watch -- CMD` holds the job's label, its command line as one string."""
    s = Sanitizer()
    label = "python3 train.py --data=/tmp/x/alice_data --token s3cr3tT0ken --lr 3e-4"
    doc = {"job": {"target": "command", "label": label, "root_pids": [4242]}}
    s.learn_document(doc)
    out = s.document(doc)["job"]["label"]
    assert out.startswith("python3 arg-") and "--lr 3e-4" in out
    for secret in ("alice_data", "s3cr3tT0ken", "train.py"):
        assert secret not in out
    pid = s.document({"job": {"target": "pid", "label": "pid 4242"}})
    assert pid["job"]["label"] == "pid 4242"  # not a command line: left as it is


def test_cuda_visible_devices_keeps_its_shape():
    s = Sanitizer()
    s.seed_gpu_uuid(UUID)
    out = s.cuda_visible_devices(f"0,{UUID},MIG-d9a47cfb-d1f2-d08c-b40e-0812b597ae69,foo,,2")
    parts = out.split(",")
    assert parts[0] == "0" and parts[-1] == "2" and parts[-2] == ""
    assert (
        parts[1].startswith("GPU-") and parts[2].startswith("MIG-") and parts[3].startswith("env-")
    )


def test_system_accounts_and_common_words_are_not_names():
    s = Sanitizer()
    for name in ("root", "nobody", "ubuntu"):
        s.seed_user(name)
    s.seed_word("partition", "gpu")
    s.seed_word("account", "research")
    assert s.text("root runs on the gpu partition for research") == (
        "root runs on the gpu partition for research"
    )
    assert s.text("Partition=gpu").startswith("Partition=partition-")  # said so: replaced


def test_raw_kernel_log_text_and_device_layout_are_dropped_from_documents():
    s = Sanitizer()
    doc = {
        "xid_events": [{"message": "NVRM: Xid (PCI:0000:3b:00): 79", "pci_bus_id": "0000:3b:00"}],
        "gpus": [{"static": {"minor_number": 3, "device_node": "/dev/nvidia3", "uuid": UUID}}],
    }
    s.learn_document(doc)
    out = s.document(doc)
    assert out["xid_events"][0]["message"] == "" and out["xid_events"][0]["pci_bus_id"].startswith(
        "pci-"
    )
    assert out["gpus"][0]["static"] == {
        "minor_number": None,
        "device_node": None,
        "uuid": s.uuid(UUID),
    }
    assert s.summary()["kernel_log"]["replaced"] == 1 and s.summary()["minor"]["replaced"] == 2
    events = {
        "kernel_events": [
            {
                "detail": "GPU has fallen off the bus on node7",
                "raw": "x",
                "pci": "0000:3b:00",
                "gpu_uuid": UUID,
                "code": 79,
            }
        ]
    }
    s.learn_document(events)
    e = s.document(events)["kernel_events"][0]
    assert e["detail"] == e["raw"] == "" and e["code"] == 79
    assert e["pci"] == out["xid_events"][0]["pci_bus_id"] and e["gpu_uuid"] == s.uuid(UUID)


def test_leaks_finds_originals_and_shapes_but_never_pseudonyms(s):
    clean = s.text(f"alice on gpu-node-07 with {UUID}")
    assert not s.leaks(clean)
    assert set(s.leaks(f"{clean} and alice")) == {"user"}
    assert set(s.leaks("GPU-11111111-2222-3333-4444-555555555555")) == {"gpu_uuid", "uuid"}
    assert set(s.leaks("at 0000:3b:00.0 from 10.0.0.1")) == {"pci", "ipv4"}
    assert not s.leaks("NVIDIA H100 80GB HBM3 570.124.06 12.570.124.06")


def test_nodelists_expand_with_their_padding():
    assert expand_nodelist("node[01-03,07]") == ["node01", "node02", "node03", "node07"]
    assert expand_nodelist("gpu-a[9-10]x") == ["gpu-a9x", "gpu-a10x"]
    assert expand_nodelist("plain") == ["plain"]


def test_input_that_looks_like_our_placeholders_is_harmless():
    s = Sanitizer()
    s.seed_user("alice")
    out = s.text("alice \ue000\ue100\ue001 end")
    assert "alice" not in out and "\ue000" not in out


def test_the_live_views_models_come_back_sanitized_and_of_their_type():
    m = Monitor(sim.build("xid-app"))
    m.run_for(40)
    snap, diag = m.last.snapshot, m.last.diagnosis
    events = tuple(
        dataclasses.replace(x, message=f"NVRM: Xid (PCI:{x.pci_bus_id}): {x.xid}, pid=1")
        for s in m.history.snapshots()
        for x in s.xid_events
    )
    assert events
    s = Sanitizer()
    clean = s.model(snap)
    assert type(clean) is type(snap) and clean.system.hostname.startswith("host-")
    assert all(
        g.static.minor_number is None and g.static.uuid.startswith("GPU-") for g in clean.gpus
    )
    assert clean.gpus[0].static.uuid == s.model(snap).gpus[0].static.uuid  # one key, one name
    assert type(s.model(diag)) is type(diag)
    shown = s.xid_events(events)
    assert [x.xid for x in shown] == [x.xid for x in events]
    assert all(x.message == "" and x.pci_bus_id.startswith("pci-") for x in shown)


def test_only_a_gpus_name_is_allowed_as_a_model():
    s = Sanitizer()
    doc = {
        "gpus": [{"static": {"name": "NVIDIA H100 80GB HBM3"}}],
        "scheduler_jobs": [{"name": "H100-alice-run", "user": "alice"}],
        "processes": [{"name": "H100 alice", "user": "alice"}],
    }
    s.learn_document(doc)
    out = s.document(doc)
    assert out["gpus"][0]["static"]["name"] == "NVIDIA H100 80GB HBM3"
    assert out["scheduler_jobs"][0]["name"].startswith("jobname-")
    # a process name that is no public program is someone's (a title): replaced word by word
    assert out["processes"][0]["name"].startswith("arg-") and "alice" not in str(out)


def test_an_ipv4_mapped_ipv6_address_is_replaced_whole():
    s = Sanitizer()
    out = s.text("peer ::ffff:10.1.2.3 and ::FFFF:192.0.2.7%eth0")
    assert "10.1.2" not in out and ".1.2.3" not in out and "192.0.2" not in out
    assert out.count("ip6-") == 2


def test_a_job_array_task_number_is_not_seeded_as_a_job_id():
    s = Sanitizer()
    assert s.job("48213_12").endswith("_12") and "48213" not in s.job("48213_12")
    out = s.text("Xid 12 on GPU 12, CUDA 12.8, 12 GiB; job 48213")
    assert out.startswith("Xid 12 on GPU 12, CUDA 12.8, 12 GiB; job job-")


def test_library_versions_with_four_parts_survive_but_addresses_do_not():
    s = Sanitizer()
    out = s.text("cuDNN 8.9.7.29, TensorRT 10.0.1.6, nccl==2.21.5.1; peer 10.0.1.6")
    assert "cuDNN 8.9.7.29" in out and "TensorRT 10.0.1.6" in out and "2.21.5.1" in out
    assert out.endswith("peer ip-" + out.rsplit("ip-", 1)[1]) and "peer 10.0.1.6" not in out


def test_a_two_letter_host_name_is_covered_by_the_final_check():
    s = Sanitizer()
    s.seed_hostname("vm")
    assert "vm" not in s.text("ssh vm uptime").split()  # replaced once: now an original
    assert s.leaks("logged in on vm today")


def test_a_rewritten_process_title_is_read_word_by_word():
    """setproctitle and `exec -a` put a title where the program's name was: its words are
    arguments, never the program's name (a run name, a project, a token in it)."""
    s = Sanitizer()
    title = "orion-7b-run --run-name orion-7b-run --token=s3cr3tT0k3n proj-x"
    shown = s.argv([title], name=title[:15])
    assert shown[0].startswith("arg-") and "--token" not in " ".join(shown)
    for secret in ("orion", "s3cr3tT0k3n", "proj-x", "run-name"):
        assert secret not in " ".join(shown)
    assert s.process_name(title[:15]).startswith("arg-")
    exec_a = s.argv(["orion-launcher", "train.py", "--lr", "3e-4"], name="python3")
    assert exec_a[0].startswith("arg-") and exec_a[-2:] == ["--lr", "3e-4"]
    assert s.argv(["orion-7b-run"])[0].startswith("arg-")  # a lone word: a title too
    # the run name given on a command line is learnt: replaced in free text afterwards
    assert "orion-7b-run" not in s.text("wandb: syncing run orion-7b-run")
    # a program's own name and public programs are kept
    assert s.argv(["/usr/bin/python3", "train.py"], name="python3")[0] == "python3"
    assert s.argv(["/opt/tools/my-trainer", "--x"], name="my-trainer")[0] == "my-trainer"
    for name in ("pt_main_thread", "pt_data_worker", "NCCL Progress 0", "cuda-EvtHandlr"):
        assert s.process_name(name) == name


def test_a_name_that_is_also_a_word_is_replaced_only_as_that_name():
    """Jetson's `nvidia` account; job ids of one and two digits."""
    s = Sanitizer()
    s.seed_user("nvidia")
    s.seed_job("42")
    s.seed_job("7")
    text = "nvidia-smi on NVIDIA H100: 42 % busy, limit 7 GiB, 42 GiB of 80"
    assert s.text(text) == text and not s.leaks(text)
    out = s.text("user=nvidia in /home/nvidia/x; job 42 and JobId=7, slurm-7.out, 42.batch")
    assert "nvidia" not in out and " 42" not in out and "=7" not in out and "-7." not in out
    assert s.user("nvidia").startswith("user-") and not s.leaks(s.text(text))


def test_identifiers_are_found_in_any_letter_case():
    s = Sanitizer()
    s.seed_user("alice")
    s.seed_hostname("gpu-node-07")
    s.seed_word("project", "orion-llm")
    out = s.text("ALICE on GPU-NODE-07 runs Orion-LLM; Alice's gpu-node-08")
    assert not re.search(r"(?i)alice|node-0|orion", out), out


def test_text_is_sanitized_before_it_is_cut():
    s = Sanitizer()
    line = "x" * 150 + " token eyJhbGciOiJub25lIn0.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl"
    cut = s.text(line, limit=160)
    assert len(cut) <= 160 and "eyJ" not in cut and cut.endswith("…")
    assert s.text("short", limit=160) == "short"


def test_thousands_of_seeded_names_stay_fast():
    """Every account of /etc/passwd and every node of a big cluster: one pass, not one
    alternation of thousands (`work.WordSet`)."""
    import random
    import string
    import time

    rng = random.Random(5)
    s = Sanitizer()
    for _ in range(5000):
        s.seed_user("".join(rng.choice(string.ascii_lowercase) for _ in range(7)))
    for k in range(2000):
        s.seed_hostname(f"{''.join(rng.choice(string.ascii_lowercase) for _ in range(5))}{k:04d}")
    text = ("GPU 3 busy 98 % for 41200 (python train.py) on NVIDIA H100; " * 1700)[:100_000]
    start = time.process_time()
    s.text(text)
    assert time.process_time() - start < 2.0  # typically 0.2 s


def test_public_source_lines_and_small_ordinals_are_kept():
    """Vocabulary, not identity: NCCL's and PyTorch's own `file:line` in their WARN lines, and
    a CUDA_VISIBLE_DEVICES index closed by the sentence around it; a project's file and a
    planted project name in the same shape are still replaced."""
    s = Sanitizer()
    s.seed_word("project", "orion-llm")
    kept = [
        "node:41:47 [1] transport/net_ib.cc:1293 NCCL WARN NET/IB : Got completion from peer",
        "misc/socket.cc:484 NCCL WARN socketStartConnect: Connect failed",
        "[E torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:616] Watchdog caught",
        "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44",
        "torch/nn/parallel/distributed.py:1211 and transformers/models/llama/modeling_llama.py:9",
        "(CUDA_VISIBLE_DEVICES=7) and CUDA_VISIBLE_DEVICES=0,7; CUDA_VISIBLE_DEVICES=-1.",
    ]
    for text in kept:
        assert s.text(text) == text
    assert s.cuda_visible_devices("0,7)") == "0,7)"
    out = s.text(
        "orion/train.py:12 and transport/orion-llm.cc:3 and transport/net_ib.cc and "
        "torch/Orion-LLM/x.py:3 and ../work/train.py:5"
    )
    assert "orion" not in out.lower() and "net_ib" not in out and "work/" not in out, out
    assert s.cuda_visible_devices("0,8a47641b")[:2] == "0," and "8a47" not in s.text(
        "CUDA_VISIBLE_DEVICES=8a47641b)"
    )
