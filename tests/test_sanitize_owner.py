"""Who a GPU process runs for is an identifier on every sanitized surface.

A property test: for each seed, owners are generated at random (pod uids, namespaces and pod
names in Kubernetes' DNS-label shape, 64-hex container ids, Docker and LXC container names,
Slurm job numbers, user sessions' uids, service names), put on the processes of the
simulator's `comm-bound` snapshots and written, with the prefixes and paths that name them,
into the snapshot's free text (a collector's message, the job's output, Slurm's answer). Then
every sanitized surface is read for any of them: `Sanitizer.model`, the snapshot document, and,
with the simulator's own owners renamed at random, `snapshot --sanitize` (text and JSON), a
sanitized recording and its replay, and the report. A pseudonym is stable (one owner, one
pseudonym on every tick and in every form) and distinct (two owners, two pseudonyms), and what
is no identifier (the kind, the QoS class, the runtime, the Slurm step, the pid in the
process's own namespace, the shape of a systemd unit) reads as it is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import random
import re
import string

import pytest

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.model import CollectorError, JobState, Owner, SchedulerEvidence, Snapshot
from gputop_diag.model.codec import jsonable
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.sanitize.snapshot import learn_snapshots, sanitized_snapshot_json
from gputop_diag.sim.plant import PLANT_ENV, Plant
from gputop_diag.sim.scenarios import SCENARIOS

SEEDS = range(5)
_LOWER = string.ascii_lowercase
_HEX = "0123456789abcdef"


# -- generated identifiers ------------------------------------------------------------------------
def _word(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choice(_LOWER) for _ in range(rng.randint(lo, hi)))


def _dns_label(rng: random.Random) -> str:
    """A namespace's or pod's name: lower-case letters, digits and `-`, 2 words or 3."""
    words = [_word(rng, 4, 8) for _ in range(rng.randint(2, 3))]
    label = "-".join(words)
    return label + (f"-{rng.randint(0, 99)}" if rng.random() < 0.5 else "")


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_HEX) for _ in range(n))


def _pod_uid(rng: random.Random) -> str:
    h = _hex(rng, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{rng.choice('89ab')}{h[17:20]}-{h[20:]}"


@dataclasses.dataclass
class Ids:
    namespace: str
    pod: str
    pod_uid: str
    pod_uid2: str  # a pod the node has no names for
    container: str  # the pod's container
    container2: str  # the bare pod's
    docker: str  # a Docker container's id
    docker_name: str
    lxc_name: str
    job: str
    uid: int
    user: str
    service: str

    def forbidden(self) -> dict[str, list[str]]:
        """What may never show, by kind of match."""
        uids = (self.pod_uid, self.pod_uid2)
        ids = (self.container, self.container2, self.docker)
        return {
            "hex": [
                *uids,
                *(u.replace("-", "_") for u in uids),
                *(u[:8] for u in uids),
                *ids,
                *(c[:12] for c in ids),
                *(c[:8] for c in ids),
            ],
            "name": [
                self.namespace,
                self.pod,
                self.docker_name,
                self.lxc_name,
                self.user,
                self.service,
                f"user-{self.uid}",
            ],
            "number": [self.job],
        }


def make_ids(seed: int) -> Ids:
    rng = random.Random(seed)
    return Ids(
        namespace=_dns_label(rng),
        pod=_dns_label(rng),
        pod_uid=_pod_uid(rng),
        pod_uid2=_pod_uid(rng),
        container=_hex(rng, 64),
        container2=_hex(rng, 64),
        docker=_hex(rng, 64),
        docker_name=f"{_word(rng, 5, 8)}_{_word(rng, 5, 9)}",
        lxc_name=_dns_label(rng),
        job=str(rng.randint(10_000, 9_999_999)),
        uid=rng.randint(1000, 60000),
        user=_word(rng, 5, 9),
        service=_dns_label(rng),
    )


def survivors(text: str, ids: Ids) -> list[str]:
    found = []
    bounds = {
        "hex": (r"(?<![0-9a-fA-F])", r"(?![0-9a-fA-F])"),
        "name": (r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])"),
        "number": (r"(?<![\d.])", r"(?!\d|\.\d)"),
    }
    for kind, forms in ids.forbidden().items():
        left, right = bounds[kind]
        for form in forms:
            if re.search(left + re.escape(form) + right, text, re.I):
                found.append(f"{kind}: {form!r}")
    return found


# -- snapshots whose processes carry them -------------------------------------------------------
def owners(ids: Ids) -> list[Owner]:
    return [
        Owner(
            kind="pod",
            pod_uid=ids.pod_uid,
            pod_namespace=ids.namespace,
            pod_name=ids.pod,
            qos="burstable",
            container_id=ids.container,
            container_runtime="containerd",
            ns_pid=3,
        ),
        Owner(kind="pod", pod_uid=ids.pod_uid2, qos="besteffort", container_id=ids.container2),
        Owner(
            kind="container",
            container_id=ids.docker,
            container_runtime="docker",
            container_name=ids.docker_name,
            ns_pid=7,
        ),
        Owner(kind="container", container_runtime="lxc", container_name=ids.lxc_name),
        Owner(kind="slurm", slurm_job=ids.job, slurm_step="batch"),
        Owner(kind="user", unit=f"user-{ids.uid}.slice"),
        Owner(kind="unit", unit=f"{ids.service}.service"),
        Owner(kind="unit", unit="slurmd.service"),
    ]


def free_text(ids: Ids) -> list[str]:
    """Where the same ids show in what the machine prints: cgroup paths, the labels a process
    table shows, kubectl's and Slurm's words, the kubelet's log directories."""
    uid_ = ids.pod_uid.replace("-", "_")
    return [
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/"
        f"cri-containerd-{ids.container}.scope",
        f"/sys/fs/cgroup/kubepods/besteffort/pod{ids.pod_uid2}/{ids.container2}/memory.max",
        f"ctr {ids.container[:8]} and ctr {ids.docker[:8]}; pod {ids.pod_uid2[:8]}",
        f"docker logs {ids.docker[:12]} ({ids.docker_name} exited)",
        f"kubectl logs --namespace {ids.namespace} {ids.pod} -c trainer",
        f"kubectl -n {ids.namespace} describe pod {ids.pod}",
        f'pods "{ids.pod}" is forbidden in the namespace "{ids.namespace}"',
        f"/var/log/pods/{ids.namespace}_{ids.pod}_{ids.pod_uid}/trainer/0.log",
        f"{ids.namespace}_{ids.pod}_{ids.pod_uid}",
        f"rank 0 on {ids.pod}: NCCL INFO Bootstrap",
        f"JobId={ids.job} JobName=train UserId={ids.user}({ids.uid})",
        f"SLURM_JOB_ID={ids.job} srun: job {ids.job} queued",
        f"0::/system.slice/slurmstepd.scope/job_{ids.job}/step_batch/user/task_0",
        f"0::/user.slice/user-{ids.uid}.slice/session-4.scope",
        f"0::/system.slice/{ids.service}.service",
        f"lxc-attach -n {ids.lxc_name}: 0::/lxc.payload.{ids.lxc_name}",
    ]


def comm_bound_ticks(n: int = 2) -> list[Snapshot]:
    sampler = Sampler(sim.build("comm-bound", noise=0))
    return [sampler.sample() for _ in range(n)]


def with_owners(snap: Snapshot, ids: Ids) -> Snapshot:
    own = owners(ids)
    procs = []
    for i, p in enumerate(snap.processes):
        o = own[i % len(own)]
        extra = {"uid": ids.uid, "user": ids.user} if o.kind == "user" else {}
        procs.append(dataclasses.replace(p, owner=o, **extra))
    lines = free_text(ids)
    return dataclasses.replace(
        snap,
        processes=tuple(procs),
        errors=(CollectorError("process", "; ".join(lines[:8]), "\n".join(lines[8:])),),
        job=JobState(target="pid", label="pid 4242", output_tail=tuple(lines)),
        scheduler_jobs=(SchedulerEvidence(job_id=ids.job, state="RUNNING", user=ids.user),),
    )


def dumps(obj) -> str:
    return json.dumps(obj, default=str)


@pytest.fixture(scope="module")
def ticks() -> list[Snapshot]:
    return comm_bound_ticks()


# -- the model and the snapshot document ---------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_sanitize_model_replaces_every_owner_id(seed, ticks):
    ids = make_ids(seed)
    snaps = [with_owners(t, ids) for t in ticks]
    assert survivors(repr(snaps[0]), ids)  # the raw snapshot names them

    s = Sanitizer()
    learn_snapshots(s, snaps)
    shown = [s.model(x) for x in snaps]
    doc = sanitized_snapshot_json(snaps[1], s)
    for out in (repr(shown[0]), repr(shown[1]), dumps(doc)):
        assert survivors(out, ids) == []
        assert not s.leaks(out), s.leaks(out)

    # one owner, one pseudonym on every tick; two owners, two
    first, second = ([p.owner for p in x.processes] for x in shown)
    assert first == second
    assert [d["owner"] for d in doc["processes"]] == [dataclasses.asdict(o) for o in first]
    pod, bare, ctr, lxc, job, user, unit, public = first[: len(owners(ids))]
    assert len({pod.pod_uid, bare.pod_uid}) == 2
    assert len({pod.container_id, bare.container_id, ctr.container_id}) == 3
    assert pod.pod_uid.startswith("uuid-") and pod.container_id.startswith("container-")
    assert pod.pod_namespace.startswith("ns-") and pod.pod_name.startswith("host-")
    assert ctr.container_name.startswith("ctrname-") and lxc.container_name.startswith("ctrname-")
    assert ctr.container_name != lxc.container_name
    assert job.slurm_job.startswith("job-")

    # what names no one reads as it is
    assert (pod.kind, pod.qos, pod.container_runtime, pod.ns_pid) == (
        "pod",
        "burstable",
        "containerd",
        3,
    )
    assert (ctr.container_runtime, ctr.ns_pid, lxc.container_runtime) == ("docker", 7, "lxc")
    assert job.slurm_step == "batch"
    assert user.unit == f"user-{s.user(ids.user)}.slice"
    assert re.fullmatch(r"arg-\w+\.service", unit.unit)
    assert public.unit == "slurmd.service"


@pytest.mark.parametrize("seed", SEEDS)
def test_one_id_has_one_pseudonym_in_every_form(seed, ticks):
    """The uid in a cgroup path, the 8-digit prefix in a label, `SLURM_JOB_ID`, scontrol's
    `JobId=`: each the pseudonym the owner's field shows."""
    ids = make_ids(seed)
    snap = with_owners(ticks[0], ids)
    s = Sanitizer()
    learn_snapshots(s, [snap])
    owner = {p.owner.kind + (p.owner.container_runtime or ""): p.owner for p in snap.processes}
    pod = s.owner(owner["podcontainerd"])
    bare = s.owner(owner["pod"])
    ctr = s.owner(owner["containerdocker"])
    job = s.owner(owner["slurm"])
    text = "\n".join(s.text(line) for line in free_text(ids))

    assert f"kubepods-burstable-pod{pod.pod_uid}.slice/cri-containerd-{pod.container_id}" in text
    assert f"/sys/fs/cgroup/kubepods/besteffort/pod{bare.pod_uid}/{bare.container_id}/" in text
    assert f"ctr {pod.container_id} and ctr {ctr.container_id}; pod {bare.pod_uid}" in text
    assert f"docker logs {ctr.container_id} ({ctr.container_name} exited)" in text
    assert f"--namespace {pod.pod_namespace} {pod.pod_name}" in text
    assert f"{pod.pod_namespace}_{pod.pod_name}_{pod.pod_uid}" in text
    assert f"JobId={job.slurm_job}" in text and f"SLURM_JOB_ID={job.slurm_job}" in text
    assert f"job_{job.slurm_job}/step_batch/user/task_0" in text
    assert f"/user.slice/user-{s.user(ids.user)}.slice/session-4.scope" in text
    assert survivors(text, ids) == []

    # the label a process table shows: whole pseudonyms, never a pseudonym cut at 8
    assert s.owner_label(owner["containerdocker"]) == f"ctr {ctr.container_id}"
    assert s.text(owner["containerdocker"].label) == f"ctr {ctr.container_id}"
    assert s.owner_label(owner["pod"]) == s.text(owner["pod"].label) == f"pod {bare.pod_uid}"
    assert s.owner_label(owner["podcontainerd"]) == f"pod {pod.pod_namespace}/{pod.pod_name}"
    assert s.owner_label(owner["slurm"]) == f"job {job.slurm_job}"


def test_kubernetes_own_namespaces_and_system_accounts_are_kept():
    s = Sanitizer()
    o = Owner(kind="pod", pod_uid=_pod_uid(random.Random(1)), pod_namespace="kube-system")
    assert s.owner(o).pod_namespace == "kube-system"
    assert s.owner(Owner(kind="user", unit="user-0.slice")).unit == "user-0.slice"
    assert s.owner(Owner(kind="user", unit="session-12.scope")).unit == "session-12.scope"
    assert s.text("kubectl -n kube-system get pods") == "kubectl -n kube-system get pods"


# -- the commands, with the simulator's owners renamed ------------------------------------------
def _renamed(spec, table: dict[str, str]):
    if isinstance(spec, str):
        for old, new in table.items():
            spec = spec.replace(old, new)
        return spec
    if isinstance(spec, dict):
        return {k: _renamed(v, table) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(_renamed(v, table) for v in spec)
    return spec


def run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue() + "\n" + err.getvalue()


def raw_owner_ids(scenario: str) -> dict[str, list[str]]:
    """The ids the (renamed) simulator gives its processes' owners, read unsanitized."""
    rc, out = run(["--demo", scenario, "snapshot", "--json"])
    assert rc == 0
    doc = json.loads(out)
    found: dict[str, list[str]] = {"hex": [], "name": [], "number": []}
    for p in doc["processes"]:
        o = p.get("owner") or {}
        for key in ("pod_uid", "container_id"):
            if o.get(key):
                v = o[key]
                found["hex"] += [v, v[:8], v[:12], v.replace("-", "_")]
        for key in ("pod_namespace", "pod_name", "container_name"):
            if o.get(key):
                found["name"].append(o[key])
        if o.get("slurm_job"):
            found["number"].append(o["slurm_job"])
    return found


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("planted", [False, True], ids=["owners-only", "planted"])
@pytest.mark.parametrize("scenario", ["comm-bound", "compute-bound"])
def test_commands_show_no_owner_id(seed, planted, scenario, monkeypatch, tmp_path):
    """The owners alone (nothing else names their ids), then with the job's `SLURM_JOB_ID`,
    a pod's namespace in the environment and Slurm's answer naming the same job."""
    ids = make_ids(seed + 100)
    renames = {
        "ml-research": ids.namespace,
        "llama-ddp-0": ids.pod,
        "424242": ids.job,
        "bob-notebook": ids.docker_name.replace("_", "-"),
    }
    monkeypatch.setitem(SCENARIOS, scenario, _renamed(SCENARIOS[scenario], renames))
    user = sim.build(scenario).environ["USER"]
    plant = Plant(
        environ={"SLURM_JOB_ID": ids.job, "POD_NAMESPACE": ids.namespace},
        slurm=[
            dict(
                id=ids.job,
                name="train",
                user=user,
                state="RUNNING",
                reason="None",
                submitted_ago=900,
                started_ago=600,
                limit="1-00:00:00",
                nodes=1,
                gres="gpu:8",
            )
        ],
    )
    if planted:
        path = tmp_path / "plant.json"
        path.write_text(json.dumps(plant.to_json()), encoding="utf-8")
        monkeypatch.setenv(PLANT_ENV, str(path))

    raw = raw_owner_ids(scenario)
    assert raw["hex"], "the scenario's processes carry owners"
    if scenario == "comm-bound":
        assert raw["name"] == [ids.namespace, ids.pod] * (len(raw["name"]) // 2)
    else:
        assert set(raw["number"]) == {ids.job}

    def leftover(text: str) -> list[str]:
        out = survivors(text, ids)
        for kind, forms in raw.items():
            bounds = {"hex": "0-9a-fA-F", "name": "A-Za-z0-9", "number": r"\d"}[kind]
            for form in forms:
                if re.search(rf"(?<![{bounds}]){re.escape(form)}(?![{bounds}])", text, re.I):
                    out.append(f"{kind}: {form!r}")
        return out

    rec = str(tmp_path / "f.jsonl")
    demo = ["--demo", scenario]
    for argv in (
        [*demo, "snapshot", "--json", "--sanitize"],
        [*demo, "snapshot", "--sanitize"],
        [*demo, "record", "-o", rec, "--seconds", "5", "--sanitize"],
        [*demo, "report", "--seconds", "5"],
        [*demo, "report", "--seconds", "5", "--json"],
        ["--replay", rec, "snapshot", "--json"],
    ):
        rc, out = run(argv)
        assert rc == 0, (argv, out[-2000:])
        assert leftover(out) == [], argv
    text = open(rec, encoding="utf-8").read()
    assert leftover(text) == []

    # one owner, one pseudonym on every line of the recording; two owners, two
    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    snaps = [x for x in lines if isinstance(x.get("processes"), list)]
    assert len(snaps) >= 2
    per_tick = [
        {p["pid"]: json.dumps(p["owner"], sort_keys=True) for p in x["processes"] if p["owner"]}
        for x in snaps
    ]
    assert all(t == per_tick[0] for t in per_tick[1:])
    owned = [json.loads(v) for v in per_tick[0].values()]
    shown = {o["pod_uid"] or o["container_id"] for o in owned} - {None}
    jobs = {o["slurm_job"] for o in owned} - {None}
    assert len(shown) + len(jobs) == (1 if scenario == "comm-bound" else 2)


# -- a pod's name with more after it, the uid's `_` form, the Slurm step ------------------------
_K8S_RAND = "bcdfghjklmnpqrstvwxz2456789"  # what a controller draws a pod's suffix from


def _learnt_pod(ids: Ids, pod: str) -> Sanitizer:
    s = Sanitizer()
    owner = Owner(kind="pod", pod_uid=ids.pod_uid, pod_namespace=ids.namespace, pod_name=pod)
    s.learn_document({"processes": [{"owner": jsonable(owner)}]})
    return s


@pytest.mark.parametrize("seed", SEEDS)
def test_a_pod_name_with_a_suffix_and_its_base_name_are_replaced_whole(seed):
    """`NAME-worker`, `NAME-7f9c` after a pod `NAME` is learnt: the whole token replaced (its own
    host pseudonym); the StatefulSet's, Job's or Deployment's name the pod's is built from is
    replaced too, and the pod's siblings; words no owner named are kept."""
    rng = random.Random(1000 + seed)
    ids = make_ids(seed)
    base = "-".join(_word(rng, 4, 8) for _ in range(rng.randint(2, 3)))
    ordinal = rng.randint(0, 40)
    forms = {
        "statefulset": f"{base}-{ordinal}",
        "job": f"{base}-{''.join(rng.choice(_K8S_RAND) for _ in range(5))}",
        "deployment": (
            f"{base}-{''.join(rng.choice(_K8S_RAND) for _ in range(rng.randint(6, 10)))}"
            f"-{''.join(rng.choice(_K8S_RAND) for _ in range(5))}"
        ),
    }
    for pod in forms.values():
        s = _learnt_pod(ids, pod)
        suffixes = [_word(rng, 3, 8), _hex(rng, 4), str(rng.randint(0, 99)), _dns_label(rng)]
        for suffix in suffixes:
            token = f"{pod}-{suffix}"
            shown = s.text(f"log of {token}: done")
            assert re.fullmatch(r"log of host-\w+: done", shown), (token, shown)
            assert pod.lower() not in shown.lower() and base not in shown
            assert s.text(token) == shown[len("log of ") : -len(": done")]  # stable
            assert s.text(token) != s.text(pod)  # another name, another pseudonym
        line = f"pod {base}-{ordinal + 1} and {pod}-{suffixes[0]} and the job {base}"
        shown = s.text(line)
        assert re.fullmatch(r"pod host-\w+ and host-\w+ and the job host-\w+", shown), shown
        assert base not in shown
        # the pod's own name where the kubelet joins it with `_` still reads as before
        shown = s.text(f"{ids.namespace}_{pod}_{ids.pod_uid}")
        assert shown == f"{s.text(ids.namespace)}_{s.text(pod)}_{s.text(ids.pod_uid)}"
    # words no owner named are kept, also before a `-`, as a sanitizer that learnt nothing does
    s = _learnt_pod(ids, forms["statefulset"])
    for kept in ("nccl-tests", "step-7f9c", "the worker-node started", "resnet-fast"):
        assert s.text(kept) == Sanitizer().text(kept) == kept


@pytest.mark.parametrize("seed", SEEDS)
def test_a_uid_with_underscores_is_replaced_whole(seed):
    """The `_` form of any UUID (systemd's cgroup names spell a pod's uid so), learnt or not,
    glued to letters or not: one pseudonym, its `-` form's, never a part left."""
    rng = random.Random(2000 + seed)
    ids = make_ids(seed)
    s = _learnt_pod(ids, ids.pod)
    stranger = _pod_uid(rng)
    for uid in (ids.pod_uid, ids.pod_uid2, stranger):
        under = uid.replace("-", "_")
        dashed = s.text(uid)
        assert dashed.startswith("uuid-")
        for text, want in (
            (under, dashed),
            (under.upper(), dashed),
            (f"uid {under} gone", f"uid {dashed} gone"),
            (f"a_{under}_b", f"a_{dashed}_b"),
            (f"{under}x", f"{dashed}x"),
            (f"x{under}", f"x{dashed}"),
            (f"{under}.slice", f"{dashed}.slice"),
        ):
            shown = s.text(text)
            assert shown == want, (text, shown)
            for part in under.split("_"):
                assert part not in shown.lower() or part in want.lower(), (text, shown)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_slurm_step_after_its_job_reads_as_it_is(seed):
    rng = random.Random(3000 + seed)
    job = str(rng.randint(10_000, 9_999_999))
    s = Sanitizer()
    for step in ("0", str(rng.randint(1, 99)), "batch", "extern", "interactive"):
        shown = s.text(f"slurm job_{job}/step_{step}")
        assert re.fullmatch(rf"slurm job_job-\w+/step_{step}", shown), shown
        shown = s.text(f"in job_{job}/step_{step}/user/task_0.")
        assert re.fullmatch(rf"in job_job-\w+/step_{step}/user/task_0\.", shown), shown
    # what follows the step is someone's: replaced
    name = _word(rng, 5, 9)
    shown = s.text(f"job_{job}/step_0/{name}")
    assert job not in shown and name not in shown and "/step_0/" in shown
