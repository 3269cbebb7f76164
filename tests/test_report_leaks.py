"""The leak corpus: every identifier class the report must hide, in every form we could find,
planted where a user's machine puts them (command lines, environment values, kernel-log text,
collector messages, the device rows of the mapping, Slurm's answers), then grepped for in the
Markdown report, the JSON report, `snapshot --sanitize --json`, a sanitized diagnosis and a
sanitized recording. Also: one pseudonym per identifier across sections, a new set of
pseudonyms in every report, the private map (mode 0600, reverses every pseudonym)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat

import pytest

from gputop_diag import sim
from gputop_diag.diagnose.render import to_json
from gputop_diag.model import (
    ChildInfo,
    CollectorError,
    MigInstance,
    OomKill,
    SchedulerEvidence,
    ThreadInfo,
    XidEvent,
)
from gputop_diag.monitor.core import Monitor
from gputop_diag.recording.writer import write_recording
from gputop_diag.report.build import ReportSource, make_report
from gputop_diag.report.private_map import write_private_map
from gputop_diag.sanitize.rules import PSEUDONYM_PREFIXES
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.sanitize.snapshot import sanitized_snapshot_json

# -- the corpus --------------------------------------------------------------------------------

HOST = "gpu-node07"
FQDN = "gpu-node07.cluster.example.org"
SIBLING = "gpu-node12"
LOGIN = "login01.hpc.example.edu"
IPV4, CIDR = "10.1.20.31", "172.16.4.0"
IPV6, IPV6_LL = "2001:db8:85a3::8a2e:370:7334", "fe80::9a03:9bff:fe4b:c927"
MAC, MAC_DASH = "60:55:cb:4b:c9:27", "60-55-CB-4B-C9-28"
EUI64 = "0c:42:a1:03:00:12:34:56"
IPOIB = "80:00:00:48:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:12:34:57"
GUID_SYSFS, GUID_HEX = "0c42:a103:0012:3456", "0x0c42a10300123458"
GPU_UUID = "GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7"
MIG_LEGACY = "MIG-GPU-5c89852c-a3f1-4b2e-9d0f-005d5ae1dc3f/7/0"
MIG_NEW = "MIG-d9a47cfb-d1f2-d08c-b40e-0812b597ae69"
SERIAL = "1562521008218"
BUS_NVML, BUS_SYSFS, BUS_XID, BUS_SHORT = (
    "00000000:3B:00.0",
    "0000:3b:00.0",
    "0000:3b:00",
    "3b:00.0",
)
C64 = "4f2a9c1e7b3d5a6f8e0c2b4d6a8f0e1c3b5d7f9a1c3e5b7d9f0a2c4e6b8d0f1a"
C64B = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d"
C12 = "3f4e5d6c7b8a"
WANDB = "7c1d0e5f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"

# (what, forms that must not appear)
SECRETS: dict[str, list[str]] = {
    "host names": [HOST, FQDN, SIBLING, "gpu-node-07", "login01", "node03", "gpu-a2"],
    "domains": ["cluster.example.org", "hpc.example.edu", "example.org"],
    "node lists": ["gpu-a[1-3]", "node[01-04,07]"],
    "IPv4": [IPV4, CIDR],
    "IPv6": [IPV6, IPV6_LL, "9a03:9bff:fe4b:c927"],
    "MACs": [MAC, MAC_DASH.lower(), EUI64, IPOIB],
    "IB GUIDs": [GUID_SYSFS, GUID_HEX, "0c42a10300123456"],
    "GPU UUIDs": [GPU_UUID.lower(), "b850f46d", "c4453e44d3f7"],
    "MIG UUIDs": ["5c89852c-a3f1", "d9a47cfb-d1f2", "0812b597ae69"],
    "serials": [SERIAL],
    "PCI bus ids": [BUS_NVML.lower(), BUS_SYSFS, BUS_XID, "3b:00"],
    "users": ["alice", "bob", "carolw", "dave9", "erinq", "frankz", "gina"],
    "e-mail": ["alice.smith"],
    "paths": [
        "/home/",
        "/Users/",
        "proj-orion",
        "astro/sim-data",
        "genome",
        "teamx",
        "~dave9",
        "medical-notes",
        "/root/",
    ],
    "job ids": [str(n) for n in range(7781234, 7781241)],
    "job names": ["orion-pretrain"],
    "accounts and partitions": ["astro-lab", "orion-q", "bio-grant42"],
    "containers": [C64, C64B, C12],
    "tokens": [WANDB, HF, "purple-elephant", "s3cr3t-pass"],
    "command-line arguments": ["train_orion.py", "orion-secret-run", "orion-7b.yaml"],
    "URL paths": ["acme-lab", "wandb.ai/acme"],
    "device nodes": ["/dev/nvidia3"],
}

LOG = (
    f"PermissionError reading /home/carolw/.config/orion.yaml on {FQDN} ({IPV4}, "
    f"{CIDR}/22, {IPV6}, {IPV6_LL}%ib0) for {GPU_UUID} at {BUS_NVML} alias {BUS_SYSFS} and "
    f"lspci {BUS_SHORT}; peer {SIBLING} and GPU-NODE07; UserId=dave9(1003) GroupId=dave9(1003) "
    f"ssh erinq@{HOST}; mail alice.smith@example.org; hw {MAC} {MAC_DASH} {EUI64} {IPOIB} "
    f"node_guid {GUID_SYSFS} port {GUID_HEX}; {MIG_LEGACY} {MIG_NEW}; Serial Number : {SERIAL}; "
    "JobId=7781234 SLURM_JOB_ID=7781235 array 7781236_4 step 7781237.batch cgroup job_7781238 "
    "log slurm-7781239.out; NodeList=gpu-a[1-3] also node[01-04,07] then node03 and gpu-a2; "
    "Account=astro-lab Partition=orion-q SLURM_JOB_ACCOUNT=bio-grant42; "
    f"docker-{C64}.scope cri-containerd-{C64B}.scope container {C12}; "
    f"WANDB_API_KEY={WANDB} HF_TOKEN={HF} DATASET_ROOT=/data/medical-notes "
    "MY_SECRET_PHRASE=purple-elephant password=s3cr3t-pass; /scratch/proj-orion/ds "
    "/lustre/astro/sim-data/x.h5 /gpfs/bio/genome/ref.fa /mnt/nfs/teamx/shared ~dave9/notes "
    "/Users/carolw/x /root/private https://wandb.ai/acme-lab/orion/runs/abc123 /dev/nvidia3 "
    f"AllocNode:Sid={LOGIN}:4242"
)
XID_LINES = (
    f"[31609.615231] NVRM: Xid (PCI:{BUS_XID}): 13, pid=41200, name=python, Graphics Exception "
    f"on {HOST}",
    f"NVRM: GPU at PCI:{BUS_XID}: {GPU_UUID}",
    f"NVRM: GPU Board Serial Number: {SERIAL}",
)
CMDLINE = (
    "/home/alice/venv/bin/python",
    "/home/alice/orion/train_orion.py",
    "--data",
    "/lustre/astro/sim-data",
    "--run-name",
    "orion-secret-run",
    "--hf-token",
    HF,
    "--local-rank=0",
    "--config",
    "configs/orion-7b.yaml",
    f"--master={IPV4}:29500",
)
ENVIRON = {
    "USER": "frankz",
    "HOME": "/home/frankz",
    "HOSTNAME": FQDN,
    "SLURM_JOB_ID": "7781240",
    "SLURM_JOB_NODELIST": "gpu-a[1-3]",
    "SLURM_JOB_ACCOUNT": "astro-lab",
    "SLURM_JOB_PARTITION": "orion-q",
    "SLURM_JOB_GPUS": "0,1",
    "CUDA_VISIBLE_DEVICES": f"{GPU_UUID},{MIG_NEW}",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "WANDB_API_KEY": WANDB,
}


def plant(snap):
    """`snap` with the corpus planted in every field a machine fills in."""
    gpus = list(snap.gpus)
    g0 = gpus[0]
    gpus[0] = dataclasses.replace(
        g0,
        static=dataclasses.replace(
            g0.static, uuid=GPU_UUID, serial=SERIAL, pci_bus_id=BUS_NVML, minor_number=3
        ),
        mig_instances=(MigInstance(0, 0, uuid=MIG_NEW, name="NVIDIA H100 80GB HBM3 MIG 1g.10gb"),),
    )
    procs = list(snap.processes)
    p0 = procs[0]
    procs[0] = dataclasses.replace(
        p0,
        cmdline=CMDLINE,
        user="alice",
        # a UUID prefix, as CUDA accepts it: the mapping must still resolve it to GPU 0
        cuda_visible_devices=GPU_UUID[:12],
        environ_readable=True,
        busiest_threads=(ThreadInfo(p0.pid, "pt_main_thread", 90.0),),
        children=(ChildInfo(p0.pid + 1, f"worker@{HOST}", 10.0),),
    )
    return dataclasses.replace(
        snap,
        system=dataclasses.replace(snap.system, hostname=HOST),
        gpus=tuple(gpus),
        processes=tuple(procs),
        xid_events=(
            XidEvent(
                snap.timestamp, 13, 0, "kernel-log", BUS_XID, 41200, "python", "\n".join(XID_LINES)
            ),
        ),
        errors=(CollectorError("kernel-log", LOG, f"ask carolw on {LOGIN} ({IPV4})"),),
        scheduler_jobs=(
            SchedulerEvidence(
                "7781240", "PENDING", "Resources", 7200.0, name="orion-pretrain", user="gina"
            ),
        ),
        kernel_ooms=(OomKill(snap.timestamp, 41328, "pt_data_worker"),),
    )


@pytest.fixture(scope="module")
def planted():
    """(snapshots, diagnosis, sources) of a compute-bound run with the corpus planted."""
    sources = sim.build("compute-bound")
    raw = []
    Monitor(sources).run_for(20, lambda t: raw.append(t.snapshot))
    snaps = [plant(s) for s in raw]
    monitor = Monitor(None)
    for s in snaps:
        monitor.feed(s)
    return snaps, monitor.last.diagnosis, sources


def leaked(text: str) -> list[str]:
    """The corpus forms found in `text`, as words (a pseudonym such as `GPU-a2xq` holds the
    letters of `gpu-a2` without naming it); user names case-sensitively, the rest not."""
    out = []
    for what, forms in SECRETS.items():
        for form in forms:
            if contains_word(text, form, case=what == "users"):
                out.append(f"{what}: {form}")
    return out


def contains_word(text: str, form: str, case: bool = False) -> bool:
    """`form` in `text`, not as part of a longer name (its letter or digit ends may not touch
    another letter or digit)."""
    left = r"(?<![A-Za-z0-9])" if form[0].isalnum() else ""
    right = r"(?![A-Za-z0-9])" if form[-1].isalnum() else ""
    return re.search(left + re.escape(form) + right, text, 0 if case else re.I) is not None


def report(planted, key=None):
    snaps, diag, sources = planted
    return make_report(
        snaps,
        diag,
        source=ReportSource("live"),
        environ=ENVIRON,
        sources=sources,
        sanitizer=Sanitizer(key),
    )


def test_the_corpus_is_planted_where_the_report_reads(planted):
    raw = json.dumps([dataclasses.asdict(s) for s in planted[0][-1:]]) + json.dumps(ENVIRON)
    missing = [f for forms in SECRETS.values() for f in forms if f.lower() not in raw.lower()]
    # the expanded node names and the domain are derived, not planted
    assert set(missing) <= {"gpu-node-07", "example.org", "0c42a10300123456"}, missing


def test_no_identifier_reaches_the_report(planted):
    r = report(planted)
    assert not r.left_out, r.left_out
    md, js = r.markdown, json.dumps(r.doc, ensure_ascii=False)
    assert leaked(md) == [] and leaked(js) == []
    assert "Xid 13" in md and "NVIDIA H100 80GB HBM3" in md  # what must survive does
    # the mapping logic survives: the UUID prefix in CUDA_VISIBLE_DEVICES still resolves to
    # GPU 0 (planted in MIG mode: CUDA shows no device for its own UUID, and the report says so)
    mapping = r.doc["mapping"]
    assert any(
        c["checked_by"] == "UUID" and c["verdict"] == "outside" and c["gpus"] == [0]
        for c in mapping["checks"]
    )
    assert "names a GPU in MIG mode" in md and "leaves no CUDA device visible" in md
    assert mapping["this_shell"]["CUDA_VISIBLE_DEVICES"].startswith("GPU-")
    # every class was counted in the summary
    classes = r.doc["redactions"]["classes"]
    for cls in ("hostname", "user", "gpu_uuid", "pci", "path", "job", "arg"):
        assert classes[cls]["replaced"] > 0, cls


def test_no_identifier_reaches_the_other_sanitized_outputs(planted, tmp_path):
    snaps, diag, _ = planted
    s = Sanitizer()
    doc = sanitized_snapshot_json(snaps[-1], s)
    text = json.dumps(doc, ensure_ascii=False)
    assert leaked(text) == [] and not s.leaks(text)
    assert doc["gpus"][0]["static"]["minor_number"] is None
    assert doc["gpus"][0]["static"]["device_node"] is None
    assert doc["xid_events"][0]["message"] == ""
    s.learn_document([dataclasses.asdict(x) for x in snaps[-1:]])
    d = json.dumps(to_json(s.model(diag)), ensure_ascii=False)
    assert leaked(d) == []
    path = str(tmp_path / "r.jsonl")
    write_recording(path, snaps, sanitize=True)
    assert leaked(open(path, encoding="utf-8").read()) == []


def test_one_identifier_one_pseudonym_across_sections(planted):
    r = report(planted)
    reverse = r.sanitizer.private_map()["pseudonyms"]
    by_original: dict[tuple[str, str], set[str]] = {}
    for p, e in reverse.items():
        for form in e["forms"]:
            by_original.setdefault((e["class"], form), set()).add(p)
    assert all(len(ps) == 1 for ps in by_original.values())
    alice = next(p for p, e in reverse.items() if e["class"] == "user" and e["original"] == "alice")
    sections = [k for k in ("memory", "mapping", "processes") if alice in json.dumps(r.doc[k])]
    assert sections == ["memory", "mapping", "processes"]
    gpu0 = r.sanitizer.uuid(GPU_UUID)  # the full UUID, its prefix and its forms: one pseudonym
    assert (
        r.sanitizer.cuda_visible_devices(GPU_UUID[:12])
        == gpu0
        == r.sanitizer.uuid(GPU_UUID.upper())
    )
    assert gpu0 in r.doc["mapping"]["this_shell"]["CUDA_VISIBLE_DEVICES"]
    assert gpu0 in r.doc["errors"]["errors"][0]["message"]
    pci = r.sanitizer.pci(BUS_NVML)
    assert (
        r.sanitizer.pci(BUS_SYSFS) == r.sanitizer.pci(BUS_XID) == r.sanitizer.pci(BUS_SHORT) == pci
    )
    assert r.doc["errors"]["errors"][0]["message"].count(pci) == 3
    host = r.doc["machine"]["host"]
    assert host in r.doc["errors"]["errors"][0]["message"]  # "GPU-NODE07" and the FQDN's host
    job = r.doc["scheduler"]["jobs"][0]["job"]
    assert (
        job in r.doc["diagnosis"]["evidence"][0]["text"]
        or r.doc["diagnosis"]["primary"] != "scheduler"
    )


def _pseudonyms(text: str) -> set[str]:
    prefixes = "|".join(sorted(PSEUDONYM_PREFIXES, key=len, reverse=True))
    return set(re.findall(rf"(?<![\w-])(?:{prefixes})-[a-z2-7]{{4,}}(?![\w-])", text))


def test_two_reports_get_different_pseudonyms(planted):
    a, b = report(planted), report(planted)
    pa, pb = _pseudonyms(a.markdown), _pseudonyms(b.markdown)
    assert len(pa) > 20 and len(pb) == len(pa)
    assert a.doc["machine"]["host"] != b.doc["machine"]["host"]
    assert len(pa & pb) <= 1  # 4 base-32 letters each: a chance collision at most
    same = report(planted, key=b"k" * 32), report(planted, key=b"k" * 32)  # a key: stable
    assert same[0].markdown == same[1].markdown


def test_the_private_map_is_0600_and_reverses_every_pseudonym(planted, tmp_path):
    r = report(planted)
    path = tmp_path / "map.json"
    path.write_text("old")
    os.chmod(path, 0o644)
    old = os.umask(0)
    try:
        write_private_map(r.sanitizer, str(path))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".*tmp"))
    m = json.loads(path.read_text())
    assert m["schema"] == "gputop-diag.private-map/1"
    reverse = m["pseudonyms"]
    raw = (json.dumps([dataclasses.asdict(s) for s in planted[0]]) + json.dumps(ENVIRON)).lower()
    raw += json.dumps(to_json(planted[1])).lower()
    shown = _pseudonyms(r.markdown) | _pseudonyms(json.dumps(r.doc))
    assert shown and shown <= set(reverse)
    for p in shown:
        e = reverse[p]
        assert p.startswith(r.sanitizer.pseudonym(e["class"], e["original"]).split("-")[0])
        # the original is what the machine said (a host's FQDN form, a path as written)
        assert e["original"].lower() in raw or e["class"] in ("domain",), (p, e)
