"""The sanitizer against what real machines print, on every headless command.

A property test: for each seed, identifiers are generated at random (user and host names,
FQDNs under unknown top-level domains, peers never seen in the environment, cloud host names
with an IP in them, IPv4 in dotted, leading-zero, dashed and glued forms, MACs with and without
separators, GPU UUIDs, serials, PCI bus ids in every form NVML, the kernel, lspci and NCCL
print, JWTs, bearer tokens, Hugging Face/GitHub/AWS keys, `--password VALUE`, cloud instance
ids, Kubernetes pod names, job ids of one, two and seven digits, job, run, project, partition
and account names, project directories under system paths) and planted through the
simulator's own inputs (`sim/plant.py`): argv and rewritten process titles, comm and thread
names, process environments and working directories, the shell's environment, /etc/passwd,
NVML's strings, kernel-log lines, Slurm's answers and the interpreter's answer to
`driver --probe-python`. Then every sanitized command runs as a user runs it (`main([...])`)
and no planted form may survive in what it prints, nor may it refuse to print.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import string
from dataclasses import dataclass, field

import pytest

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.sim.plant import PLANT_ENV, Plant, PlantedGpu, PlantedProcess

_K8S = "bcdfghjklmnpqrstvwxz2456789"
_B64URL = string.ascii_letters + string.digits + "-_"
_B64 = string.ascii_letters + string.digits + "+/"


@dataclass
class Secret:
    """One planted identifier: the forms planted, and how to look for them in output."""

    what: str
    forms: list[str]
    case: bool = False  # match the letter case exactly (tokens)
    numeric: bool = False  # a number: not inside another number


@dataclass
class Corpus:
    secrets: list[Secret] = field(default_factory=list)

    def add(self, what: str, *forms: str, case: bool = False, numeric: bool = False) -> None:
        self.secrets.append(Secret(what, [f for f in forms if f], case, numeric))

    def survivors(self, text: str) -> list[str]:
        out = []
        for s in self.secrets:
            for form in s.forms:
                if _found(text, form, s.case, s.numeric):
                    out.append(f"{s.what}: {form!r}")
        return out


def _found(text: str, form: str, case: bool, numeric: bool) -> bool:
    if numeric:
        return re.search(rf"(?<![\d.]){re.escape(form)}(?![\d]|\.\d)", text) is not None
    left = r"(?<![A-Za-z0-9])" if form[0].isalnum() else ""
    right = r"(?![A-Za-z0-9])" if form[-1].isalnum() else ""
    return re.search(left + re.escape(form) + right, text, 0 if case else re.I) is not None


class Gen:
    """Random identifiers in the forms real tools write them."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.used: set[str] = set()

    def word(self, lo: int = 5, hi: int = 8) -> str:
        while True:  # consonant-vowel words: never one of the tool's own words
            n = self.r.randint(lo, hi)
            w = "".join(
                self.r.choice("bcdfgjkmnpqrstvwxz" if k % 2 == 0 else "aeiou") for k in range(n)
            )
            if w not in self.used:
                self.used.add(w)
                return w

    def hexs(self, n: int) -> str:
        return "".join(self.r.choice("0123456789abcdef") for _ in range(n))

    def digits(self, n: int) -> str:
        return str(self.r.randint(1, 9)) + "".join(
            self.r.choice(string.digits) for _ in range(n - 1)
        )

    def octets(self) -> list[int]:  # not loopback: 127/8 names no one and is kept
        return [self.r.choice([*range(11, 127), *range(128, 224)])] + [
            self.r.randint(1, 254) for _ in range(3)
        ]

    def mac(self) -> str:
        return self.hexs(2).replace("1", "c") + "".join(self.hexs(2) for _ in range(5))

    def bus(self) -> int:  # a bus byte with a hex letter in it: `3b`, not `18` (a time)
        while True:
            b = self.r.randint(0x1A, 0xFE)
            if re.search("[a-f]", f"{b:02x}"):
                return b

    def b64(self, n: int, alphabet: str = _B64URL) -> str:
        return "".join(self.r.choice(alphabet) for _ in range(n))


def build_case(seed: int, scenario: str) -> tuple[Plant, Corpus, dict[str, str]]:
    """A plant with every class of identifier in every form, the corpus to look for, and the
    paths of the command lines (the interpreter to probe)."""
    g = Gen(seed)
    c = Corpus()
    user, user2 = g.word(), g.word()
    c.add("user", user, user.upper(), user.capitalize())
    c.add("user", user2, user2.upper())
    site = g.word()
    tld = g.r.choice(["zone", "corp", "lab", "grid", "farm"])
    domain = f"{site}.{tld}"
    stem = g.word(3, 5)
    host = f"{stem}-{g.digits(2)}"
    fqdn = f"{host}.hpc.{domain}"
    c.add("host", host, host.upper(), fqdn, f"hpc.{domain}")
    peer = f"{g.word(3, 4)}-{g.word(1, 1)}-{g.digits(2)}"
    peer_fqdn = f"{g.word(3, 5)}{g.digits(2)}.{g.word()}.{tld}"
    c.add("peer host", peer, peer_fqdn)
    o = g.octets()
    ip = ".".join(map(str, o))
    ip0 = ".".join(f"{x:03d}" for x in o)
    ipdash = "-".join(map(str, o))
    ip2 = ".".join(map(str, g.octets()))
    c.add("IPv4", ip, ip0, ipdash, ip2, numeric=True)
    c.add("cloud host", f"ip-{ipdash}")
    mac = g.mac()
    macs = [
        ":".join(mac[k : k + 2] for k in range(0, 12, 2)),
        "-".join(mac[k : k + 2] for k in range(0, 12, 2)).upper(),
        mac,
        mac.upper(),
        ".".join(mac[k : k + 4] for k in range(0, 12, 4)),
    ]
    c.add("MAC", *macs)
    gpus = []
    bus_forms: list[str] = []
    for i in range(2):
        b = g.bus()
        uuid = f"GPU-{g.hexs(8)}-{g.hexs(4)}-{g.hexs(4)}-{g.hexs(4)}-{g.hexs(12)}"
        serial = g.digits(13)
        gpus.append(PlantedGpu(i, uuid=uuid, serial=serial, bus=[0, b, 0]))
        forms = [
            f"00000000:{b:02X}:00.0",
            f"0000:{b:02x}:00.0",
            f"0000:{b:02x}:00",
            f"{b:02x}:00.0",
            f"busId {b:02x}000",
            f"GPU/{b:02X}000",
            f"GPU/0-{b:02x}000",
            f"{b:02X}:00",
            f"0:{b:02x}:00.0",
        ]
        bus_forms += forms
        c.add("PCI bus id", *forms)
        c.add("GPU UUID", uuid[4:12], uuid[-12:])
        c.add("serial", serial, numeric=True)
    jwt = "eyJ" + g.b64(30) + ".eyJ" + g.b64(60) + "." + g.b64(43)
    bearer = g.b64(36)
    hf = "hf_" + g.b64(34, string.ascii_letters + string.digits)
    ghp = "ghp_" + g.b64(36, string.ascii_letters + string.digits)
    akia = "AKIA" + "".join(g.r.choice(string.ascii_uppercase + string.digits) for _ in range(16))
    aws = g.b64(18, _B64) + "/" + g.b64(10, _B64) + "+" + "Ab9" + g.b64(8, _B64)
    password = g.word() + g.digits(4) + "!"
    token = g.word() + g.digits(6)
    apikey = g.b64(24, string.ascii_letters + string.digits)
    for t in (jwt, bearer, hf, ghp, akia, aws, password, token, apikey):
        c.add("token", t, t[:16], case=True)
    instance = "i-" + g.hexs(17)
    pod = (
        f"{g.word()}-{''.join(g.r.choice(_K8S) for _ in range(10))}-"
        + "".join(g.r.choice(_K8S[:-7]) for _ in range(4))
        + g.r.choice("2456789")
    )
    kubeflow = f"{g.word()}-worker-{g.r.randint(0, 9)}"
    c.add("cloud id", instance)
    c.add("pod", pod, kubeflow)
    job7, job2, job1 = g.digits(7), g.digits(2), str(g.r.randint(1, 9))
    c.add("job id", job7, numeric=True)
    jobname, run, project = f"{g.word()}-{g.word(3, 4)}", f"{g.word()}-{g.digits(2)}", g.word()
    partition, account = g.word(), f"{g.word()}-{g.digits(2)}"
    c.add("job name", jobname)
    c.add("run name", run)
    c.add("project", project)
    c.add("partition", partition)
    c.add("account", account)
    home = f"/home/{user}"
    sysdirs = [f"/usr/local/src/{project}/train.py", f"/usr/share/{project}/conf.yaml"]
    c.add("home path", home, f"/home/{user2}")
    venv = f"{home}/{project}/.venv/bin/python3"

    title = (
        f"{run} --run-name {run} --token={token} --password {password} --api-key {apikey} {project}"
    )
    # An `exec -a` title: argv[0] is not the program the kernel knows (comm `python3`).
    exec_a = [f"{jobname}-launcher", f"{sysdirs[0]}", "--hf-token", hf]
    processes = [
        PlantedProcess(0, user=user, name=title[:15], cmdline=[title], cwd=f"{home}/{project}"),
        PlantedProcess(
            1,
            user=user,
            name="python3",
            cmdline=exec_a,
            environ={"WANDB_PROJECT": project, "WANDB_NAME": run, "HF_TOKEN": hf},
            threads=[f"{project}-load", f"{host}-io"],
        ),
        PlantedProcess(3, user=user, name=f"{run}-x"[:15], cmdline=[f"{run}-x"]),  # no spaces
        PlantedProcess(
            2,
            user=user2,
            name="python3",
            cmdline=["python3", f"/opt/{project}/serve.py", "--model", f"/scratch/{run}/ckpt"],
        ),
    ]
    environ = {
        "USER": user,
        "LOGNAME": user,
        "HOME": home,
        "HOSTNAME": fqdn,
        "SLURM_JOB_ID": job1,
        "SLURM_JOB_NAME": jobname,
        "SLURM_JOB_PARTITION": partition,
        "SLURM_JOB_ACCOUNT": account,
        "SLURM_JOB_NODELIST": f"{stem}-[{host[-2:]},{int(host[-2:]) % 90 + 10}]",
        "MASTER_ADDR": ip2,
        "WANDB_API_KEY": apikey,
        "AWS_SECRET_ACCESS_KEY": aws,
    }
    b0 = gpus[0].bus[1]
    kernel = [
        f"NVRM: Xid (PCI:0000:{b0:02x}:00): 79, pid={g.r.randint(2000, 9000)}, "
        f"name={title[:15]}, GPU has fallen off the bus.",
        f"NVRM: GPU at PCI:0000:{b0:02x}:00: {gpus[0].uuid}",
        f"NVRM: GPU Board Serial Number: {gpus[0].serial}",
        f"nvidia 0000:{b0:02x}:00.0: {host} {ip} link {macs[0]}",
    ]
    probe = {
        "returncode": 1,
        "stdout": "",
        "stderr": (
            "Traceback (most recent call last):\n"
            f'  File "{home}/{project}/probe.py", line 3\n'
            f"RuntimeError: {user.upper()} at {fqdn} ({ip0}) Bearer {bearer} {jwt} "
            f"{' '.join(bus_forms)} {ghp} {akia} {instance} {pod} ip-{ipdash}.ec2.internal "
            f"{peer}<{g.r.randint(1024, 65000)}> {peer_fqdn} by {ip}. ip_{ip2} {macs[2]} "
            f"{macs[3]} {sysdirs[1]} serial {gpus[1].serial} {kubeflow} job {job7}"
        ),
    }
    slurm = [
        dict(
            id=job7,
            name=jobname,
            user=user,
            state="RUNNING",
            reason="None",
            submitted_ago=900,
            started_ago=600,
            limit="1-00:00:00",
            gres="gres/gpu:8",
            nodes=1,
            nodelist=host,
            partition=partition,
            account=account,
            workdir=f"{home}/{project}",
            alloc_node=peer,
        )
    ]
    plant = Plant(
        hostname=host,
        user=user,
        environ=environ,
        passwd=f"root:x:0:0::/root:/bin/bash\n{user}:x:1001:1001::{home}:/bin/bash\n"
        f"{user2}:x:1002:1002::/home/{user2}:/bin/bash\n",
        processes=processes,
        gpus=gpus,
        kernel_lines=kernel,
        slurm=slurm,
        probe=probe,
    )
    return plant, c, {"interpreter": venv, "job1": job1, "job2": job2}


@contextlib.contextmanager
def planted(monkeypatch, tmp_path, plant: Plant):
    path = tmp_path / "plant.json"
    path.write_text(json.dumps(plant.to_json()), encoding="utf-8")
    monkeypatch.setenv(PLANT_ENV, str(path))
    yield


def run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue() + "\n" + err.getvalue()


def commands(scenario: str, interpreter: str, rec: str) -> list[list[str]]:
    demo = ["--demo", scenario]
    return [
        [*demo, "snapshot", "--sanitize"],
        [*demo, "snapshot", "--sanitize", "--json"],
        [*demo, "--sanitize", "mapping"],
        [*demo, "mapping", "--sanitize", "--json"],
        [*demo, "driver", "--sanitize", "--probe-python", interpreter],
        [*demo, "driver", "--sanitize", "--json", "--probe-python", interpreter],
        [*demo, "diagnose", "--sanitize", "--seconds", "20"],
        [*demo, "diagnose", "--sanitize", "--seconds", "20", "--json"],
        [*demo, "xid", "--sanitize"],
        [*demo, "xid", "--sanitize", "--json"],
        [*demo, "report", "--seconds", "20"],
        [*demo, "report", "--seconds", "20", "--json"],
        [*demo, "record", "--sanitize", "--seconds", "20", "-o", rec],
        ["--replay", rec, "report"],
        ["--replay", rec, "report", "--json"],
        ["--replay", rec, "snapshot", "--json"],
        ["--replay", rec, "mapping"],
        ["--replay", rec, "xid", "--sanitize"],
        ["--replay", rec, "diagnose", "--sanitize"],
    ]


def sanity(argv: list[str], rc: int, text: str) -> None:
    """The command said what it says: no refusal, no left-out section, no failure."""
    assert "could not be sanitized" not in text, (argv, text[-2000:])
    assert "unexpected failure" not in text, (argv, text[-2000:])
    assert rc == 0, (argv, rc, text[-2000:])


@pytest.mark.parametrize(
    "seed,scenario", [(1, "compute-bound"), (2, "xid-app"), (3, "capacity"), (4, "mig")]
)
def test_no_planted_identifier_survives_any_headless_command(seed, scenario, monkeypatch, tmp_path):
    plant, corpus, ctx = build_case(seed, scenario)
    rec = str(tmp_path / "run.jsonl")
    with planted(monkeypatch, tmp_path, plant):
        for argv in commands(scenario, ctx["interpreter"], rec):
            rc, text = run(argv)
            sanity(argv, rc, text)
            assert corpus.survivors(text) == [], (argv, corpus.survivors(text))
            if argv[-2:] == ["-o", rec]:
                raw = open(rec, encoding="utf-8").read()
                assert corpus.survivors(raw) == [], ("the recording", corpus.survivors(raw))


def test_the_plant_reaches_the_simulated_machine(monkeypatch, tmp_path):
    """Every planted input is where the collectors read it (a planting that missed would make
    the test above pass for nothing)."""
    plant, corpus, ctx = build_case(7, "compute-bound")
    with planted(monkeypatch, tmp_path, plant):
        rc, raw = run(["--demo", "compute-bound", "snapshot", "--json"])
        src = sim.build("compute-bound")
    assert rc == 0
    doc = json.loads(raw.split("\n\n")[0] if raw.startswith("{") else raw[: raw.rindex("}") + 1])
    assert doc["system"]["hostname"] == plant.hostname
    assert doc["gpus"][0]["static"]["uuid"] == plant.gpus[0].uuid
    assert doc["gpus"][0]["static"]["serial"] == plant.gpus[0].serial
    titles = [p["cmdline"] for p in doc["processes"] if p.get("cmdline")]
    assert [plant.processes[0].cmdline[0]] in titles
    assert src.environ["SLURM_JOB_ID"] == ctx["job1"]
    assert src.procfs.read_text("/etc/passwd") == plant.passwd
    assert src.psutil.Process(min(src.sim.procs)).cwd() == plant.processes[0].cwd
    squeue = src.run_command(["squeue", "-h", "-o", "%j|%P|%a"], 5).stdout
    job = plant.slurm[0]
    assert f"{job['name']}|{job['partition']}|{job['account']}" in squeue
    assert any(plant.kernel_lines[0] == t for _, t in src.sim.kernel_lines)


def _job_output(plant: Plant, corpus: Corpus, g: Gen) -> list[str]:
    """Failure lines as CUDA, PyTorch and NCCL print them, with the planted names in them."""
    host = plant.hostname
    user = plant.user
    b = plant.gpus[0].bus[1]
    env = plant.environ
    forms = {s.what: s.forms for s in corpus.secrets}
    tokens = [s.forms[0] for s in corpus.secrets if s.what == "token"]
    ip, ip0, ipdash = forms["IPv4"][:3]
    peer, peer_fqdn = forms["peer host"]
    pod, kubeflow = forms["pod"]
    macs = forms["MAC"]
    project = forms["project"][0]
    pid = g.r.randint(1000, 99999)
    return [
        f"{host}:{pid}:{pid + 7} [0] NCCL INFO cudaDev 0 nvmlDev 0 busId {b:x}000 commId "
        f"0x{g.hexs(16)} - Init COMPLETE",
        f"{host.upper()}:{pid}:{pid} [3] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC "
        f"GPU/{b:X}000 NIC/0-{b + 1:x}000",
        f"{host}:{pid}:{pid} [1] transport/net_ib.cc:1293 NCCL WARN NET/IB : Got completion from "
        f"peer {ip}<{g.r.randint(1024, 65535)}> with error 12, opcode 0, len 0, vendor err 129 "
        f"(Recv) localGid ::ffff:{ip0} hca mlx5_0 {macs[1]}",
        f"[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
        f"timeout: WorkNCCL(SeqNum=4411, OpType=ALLREDUCE) ran for 600000 milliseconds on "
        f"{peer_fqdn} (peer {peer}) pod {pod}; the client socket has timed out while trying "
        f"to connect to ({peer}, 29500)",
        f"RuntimeError: CUDA error: an illegal memory access was encountered at "
        f"/usr/local/src/{project}/kernels.cu:88 by {user.capitalize()} on {b:02X}:00 "
        f"0:{b:02x}:00.0 ip-{ipdash}.ec2.internal {kubeflow}",
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        f"total capacity of 79.19 GiB; job {env['SLURM_JOB_ID']} user={user} "
        f"(node {host}, {macs[2]}, {macs[4]}) connect to {ip}.",
        f"curl -H 'Authorization: Bearer {tokens[1]}' https://api.example.{plant.hostname[:3]}"
        f"?key={tokens[8]} --password {tokens[6]} --api-key {tokens[8]} {tokens[0]} "
        f"{tokens[2]} {tokens[3]} {tokens[4]} aws_secret_access_key={tokens[5]} ip_{ip}",
    ]


@pytest.mark.parametrize("seed", range(6))
def test_job_output_lines_are_sanitized_whole_before_any_cut(seed, monkeypatch, tmp_path):
    """The lines `watch` takes from a job's output, through the sanitizer every surface uses
    (`commands.common.seeded_sanitizer`), whole and cut after sanitizing (`text(line,
    limit=160)`): no planted form, whole or as a token's first 16 characters, survives."""
    from gputop_diag.commands.common import sample_once, seeded_sanitizer

    plant, corpus, _ = build_case(100 + seed, "compute-bound")
    with planted(monkeypatch, tmp_path, plant):
        sources = sim.build("compute-bound")
    s = seeded_sanitizer(sources, [sample_once(sources, fast=True)])
    for line in _job_output(plant, corpus, Gen(seed)):
        out = s.text(line)
        assert corpus.survivors(out) == [], (line, out)
        assert not s.leaks(out), (line, out)
        cut = s.text(line, limit=160)
        assert len(cut) <= 160 and corpus.survivors(cut) == [], cut


def test_a_sanitized_report_keeps_what_it_is_about(monkeypatch, tmp_path):
    """GPU model, driver/NVML/CUDA versions, the class, the evidence figures and the Xid codes
    read the same in the sanitized report as in the raw diagnosis of the same run."""
    plant, corpus, _ = build_case(11, "xid-app")
    with planted(monkeypatch, tmp_path, plant):
        rc, raw = run(["--demo", "xid-app", "diagnose", "--seconds", "90", "--json"])
        assert rc == 0
        diag = json.loads(raw[: raw.rindex("}") + 1])
        rc, raw = run(["--demo", "xid-app", "snapshot", "--json"])
        snap = json.loads(raw[: raw.rindex("}") + 1])
        rc, out = run(["--demo", "xid-app", "report", "--seconds", "90", "--json"])
    assert rc == 0 and corpus.survivors(out) == []
    doc = json.loads(out[: out.rindex("}") + 1])
    assert doc["redactions"]["left_out"] == []
    m = doc["machine"]
    assert m["gpu_models"] == [{"model": "NVIDIA H100 80GB HBM3", "count": 8}]
    assert m["driver_version"] == snap["system"]["driver_version"] == "570.124.06"
    assert m["nvml_version"] == snap["system"]["nvml_version"]
    assert m["driver_max_cuda"] == snap["system"]["driver_max_cuda"] == "12.8"
    d = doc["diagnosis"]
    assert d["primary"] == diag["primary"] == "compute"
    assert [e["text"] for e in d["evidence"]] == [e["text"] for e in diag["evidence"]]
    assert [e["value"] for e in d["evidence"]] == [e["value"] for e in diag["evidence"]]
    assert [r["text"] for r in d["ruled_out"]] == [r["text"] for r in diag["ruled_out"]]
    assert {c["xid"] for c in doc["xid"]["codes"]} >= {13, 43}


def test_an_account_named_nvidia_and_short_job_ids_leave_the_report_whole(monkeypatch, tmp_path):
    """Jetson's default account is `nvidia`; a young cluster's job ids have one or two digits.
    Replaced where they stand as a user and a job; `nvidia-smi`, NVIDIA's model names, the
    percentages and counts that equal the job ids read as they are; nothing is left out."""
    plant, corpus, _ = build_case(12, "compute-bound")
    rc, raw = run(["--demo", "compute-bound", "diagnose", "--seconds", "20", "--json"])
    diag = json.loads(raw[: raw.rindex("}") + 1])
    figure = re.search(r"\b(\d{2}) %", diag["evidence"][0]["text"]).group(1)
    plant.user = "nvidia"
    for p in plant.processes:
        p.user = "nvidia"
    plant.processes[2].cmdline = ["python3", "/home/nvidia/run.py", "--user=nvidia"]
    plant.environ.update(USER="nvidia", LOGNAME="nvidia", HOME="/home/nvidia", SLURM_JOB_ID=figure)
    plant.passwd += "nvidia:x:1000:1000::/home/nvidia:/bin/bash\n"
    plant.slurm[0]["id"] = "8"  # the GPU count
    plant.slurm[0]["user"] = "nvidia"
    with planted(monkeypatch, tmp_path, plant):
        rc, md = run(["--demo", "compute-bound", "report", "--seconds", "20"])
        rc2, out = run(["--demo", "compute-bound", "report", "--seconds", "20", "--json"])
    assert rc == rc2 == 0
    doc = json.loads(out[: out.rindex("}") + 1])
    assert doc["redactions"]["left_out"] == [] and "Left out" not in md
    assert [e["text"] for e in doc["diagnosis"]["evidence"]] == [
        e["text"] for e in diag["evidence"]
    ]
    assert f"{figure} %" in md and "nvidia-smi --query" in md and "NVIDIA H100 80GB HBM3" in md
    assert doc["machine"]["gpu_count"] == 8 and "8 GPU" in md
    assert "/home/nvidia" not in md and "user=nvidia" not in md and "~nvidia" not in md
    users = {p["user"] for p in doc["processes"]["processes"] if p.get("user")}
    assert users and all(u.startswith("user-") for u in users)
    job = doc["scheduler"]["jobs"][0]["job"]
    assert job.startswith("job-") and job != "8"
