"""Who a process runs for, parsed from the text the node keeps (`gputop_diag/owner/`): its cgroup
in every layout Kubernetes (both kubelet drivers), the container runtimes, Slurm and systemd
write, on cgroup v1, v2 and hybrid machines; its `NSpid:`; the kubelet's log directories and
Docker's config.v2.json; and `model.Owner` itself (its label, its JSON).

Inputs are generated (random pod uids, container ids, job numbers and names from a seeded
generator), never a fixed list; hostile text (binary, huge, malformed) never raises."""

from __future__ import annotations

import json
import random
import string
import time
import uuid

import pytest

from gputop_diag.model import Owner, ProcessInfo
from gputop_diag.model.codec import from_jsonable, jsonable
from gputop_diag.owner import (
    cgroup_paths,
    docker_container_name,
    judge_host_pid_namespace,
    ns_pid,
    ns_pids,
    owner_from_cgroup,
    pod_names,
    with_ns_pid,
)

SEEDS = range(12)
V1_CONTROLLERS = ("memory", "cpu,cpuacct", "devices", "pids", "blkio", "freezer", "net_cls")


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _cid(rng: random.Random) -> str:
    return f"{rng.getrandbits(256):064x}"


def _dns_label(rng: random.Random, n: int = 12) -> str:
    body = "".join(rng.choice(string.ascii_lowercase + string.digits + "-") for _ in range(n))
    return rng.choice(string.ascii_lowercase) + body + rng.choice(string.digits)


def _v2(path: str) -> str:
    return f"0::{path}\n"


def _v1(path: str, systemd: str | None = None, rng: random.Random | None = None) -> str:
    """cgroup v1: one line per hierarchy, highest id first as the kernel writes them; the
    `name=systemd` line shows `systemd` (or the same path)."""
    ctrls = list(V1_CONTROLLERS)
    if rng is not None:
        rng.shuffle(ctrls)
    lines = [f"{len(ctrls) + 1 - k}:{c}:{path}" for k, c in enumerate(ctrls)]
    lines.append(f"1:name=systemd:{systemd or path}")
    return "\n".join(lines) + "\n"


def _hybrid(path: str, unified: str) -> str:
    return _v1(path) + f"0::{unified}\n"


# --- Kubernetes ---------------------------------------------------------------------------------


def _pod_systemd(uid: str, qos: str, runtime_prefix: str, cid: str, root: str = "") -> str:
    u = uid.replace("-", "_")
    base = f"{root}kubepods" if not root else f"{root}-kubepods"
    top = f"/{root + '.slice/' if root else ''}{base}.slice"
    if qos == "guaranteed":
        return f"{top}/{base}-pod{u}.slice/{runtime_prefix}-{cid}.scope"
    return f"{top}/{base}-{qos}.slice/{base}-{qos}-pod{u}.slice/{runtime_prefix}-{cid}.scope"


RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker"}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("qos", ["guaranteed", "burstable", "besteffort"])
def test_a_pod_with_the_systemd_driver_on_every_cgroup_version(seed, qos):
    rng = random.Random(f"systemd-{seed}-{qos}")
    uid, cid = _uid(rng), _cid(rng)
    prefix = rng.choice(sorted(RUNTIMES))
    path = _pod_systemd(uid, qos, prefix, cid)
    for text in (_v2(path), _v1(path, rng=rng), _hybrid(path, path)):
        o = owner_from_cgroup(text)
        assert o == Owner(
            kind="pod",
            pod_uid=uid,
            qos=qos,
            container_id=cid,
            container_runtime=RUNTIMES[prefix],
        ), text
        assert o.label == f"pod {uid[:8]}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("qos", ["guaranteed", "burstable", "besteffort"])
def test_a_pod_with_the_cgroupfs_driver(seed, qos):
    """`/kubepods/<qos>/pod<uid>/<id>`: the runtime is not in the path (CRI-O's `crio-<id>`
    is)."""
    rng = random.Random(f"cgroupfs-{seed}-{qos}")
    uid, cid = _uid(rng), _cid(rng)
    level = "" if qos == "guaranteed" else f"/{qos}"
    bare = f"/kubepods{level}/pod{uid}/{cid}"
    crio = f"/kubepods{level}/pod{uid}/crio-{cid}"
    for text in (_v2(bare), _v1(bare, systemd="/system.slice/containerd.service", rng=rng)):
        assert owner_from_cgroup(text) == Owner(
            kind="pod", pod_uid=uid, qos=qos, container_id=cid, container_runtime=None
        )
    assert owner_from_cgroup(_v2(crio)).container_runtime == "cri-o"


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_a_pods_path_under_a_cgroup_root_of_the_kubelets_own_and_seen_from_a_namespace(seed):
    """kind runs the kubelet under `kubelet.slice`; from inside a cgroup namespace the path
    starts with `/..`; the pod's sandbox (no container scope yet) still names the pod; a
    static pod's uid is a 32-digit hash."""
    rng = random.Random(f"root-{seed}")
    uid, cid = _uid(rng), _cid(rng)
    kind = _pod_systemd(uid, "besteffort", "cri-containerd", cid, root="kubelet")
    assert owner_from_cgroup(_v2(kind)).pod_uid == uid
    assert owner_from_cgroup(_v2("/../.." + kind)).container_id == cid
    sandbox = kind.rsplit("/", 1)[0]
    o = owner_from_cgroup(_v2(sandbox))
    assert (o.kind, o.pod_uid, o.container_id) == ("pod", uid, None)
    static = f"{rng.getrandbits(128):032x}"
    o = owner_from_cgroup(_v2(f"/kubepods/burstable/pod{static}/{cid}"))
    assert (o.pod_uid, o.qos) == (static, "burstable")


# --- containers outside Kubernetes --------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_containers_of_every_runtime(seed):
    rng = random.Random(f"ctr-{seed}")
    cid = _cid(rng)
    user = rng.randint(1000, 60000)
    cases = {
        f"/system.slice/docker-{cid}.scope": "docker",
        f"/docker/{cid}": "docker",
        f"/system.slice/cri-containerd-{cid}.scope": "containerd",
        f"/system.slice/crio-{cid}.scope": "cri-o",
        f"/machine.slice/libpod-{cid}.scope/container": "podman",
        # rootless Podman: the container wins over the user's session it runs under
        f"/user.slice/user-{user}.slice/user@{user}.service/user.slice/libpod-{cid}.scope": (
            "podman"
        ),
        f"/libpod_parent/libpod-{cid}": "podman",
        f"/system.slice/nerdctl-{cid}.scope": "containerd",
    }
    for path, runtime in cases.items():
        for text in (_v2(path), _v1(path, rng=rng)):
            o = owner_from_cgroup(text)
            assert o == Owner(kind="container", container_id=cid, container_runtime=runtime), path
            assert o.label == f"ctr {cid[:8]}"


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_lxc_containers_by_name(seed):
    rng = random.Random(f"lxc-{seed}")
    name = _dns_label(rng, rng.randint(1, 20))
    for path in (f"/lxc.payload.{name}", f"/lxc/{name}", f"/lxc.payload.{name}/init.scope"):
        o = owner_from_cgroup(_v2(path))
        assert o == Owner(kind="container", container_runtime="lxc", container_name=name), path
        assert o.label == f"ctr {name}"
    assert owner_from_cgroup(_v2(f"/lxc.monitor.{name}")) is None  # LXC's monitor, not it


def test_ids_of_the_wrong_length_or_case_name_no_container():
    rng = random.Random("lengths")
    for n in (63, 65):
        cid = "".join(rng.choice("0123456789abcdef") for _ in range(n))
        assert owner_from_cgroup(_v2(f"/docker/{cid}")) is None
        o = owner_from_cgroup(_v2(f"/system.slice/docker-{cid}.scope"))
        assert o == Owner(kind="unit", unit=f"docker-{cid}.scope")
    # CRI-O's conmon (the container's monitor) is not the container
    o = owner_from_cgroup(_v2(f"/system.slice/crio-conmon-{_cid(rng)}.scope"))
    assert o.kind == "unit"


# --- Slurm --------------------------------------------------------------------------------------


def _step(rng: random.Random) -> str:
    return rng.choice(["batch", "extern", "interactive", str(rng.randint(0, 4000))])


@pytest.mark.parametrize("seed", SEEDS)
def test_slurm_jobs_on_cgroup_v2_and_v1(seed):
    rng = random.Random(f"slurm-{seed}")
    job, step, task, uid = str(rng.randint(1, 2**31)), _step(rng), rng.randint(0, 63), 1000 + seed
    node = _dns_label(rng, 6)
    v2 = [
        f"/system.slice/slurmstepd.scope/job_{job}/step_{step}/user/task_{task}",
        f"/system.slice/{node}_slurmstepd.scope/job_{job}/step_{step}/user/task_{task}",
        f"/system.slice/slurmstepd.scope/job_{job}/step_{step}/slurm",
    ]
    v1 = [
        f"/slurm/uid_{uid}/job_{job}/step_{step}/task_{task}",
        f"/slurm_{node}/uid_{uid}/job_{job}/step_{step}",
    ]
    texts = [_v2(p) for p in v2]
    # on v1, systemd's own hierarchy shows slurmd's unit: the controllers name the job
    texts += [_v1(p, systemd="/system.slice/slurmd.service", rng=rng) for p in v1]
    for text in texts:
        o = owner_from_cgroup(text)
        assert o == Owner(kind="slurm", slurm_job=job, slurm_step=step), text
        assert o.label == f"job {job}"
    o = owner_from_cgroup(_v2(f"/system.slice/slurmstepd.scope/job_{job}"))  # the job's own
    assert (o.slurm_job, o.slurm_step) == (job, None)


def test_slurmstepd_itself_and_a_job_dir_outside_slurm_name_no_job():
    assert owner_from_cgroup(_v2("/system.slice/slurmstepd.scope/system")) == Owner(
        kind="unit", unit="slurmstepd.scope"
    )
    assert owner_from_cgroup(_v2("/jobs/job_12/step_0")) is None


# --- systemd ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS[:6])
def test_systemd_units_and_user_sessions(seed):
    rng = random.Random(f"systemd-units-{seed}")
    user, session = rng.randint(1000, 2**31), rng.randint(1, 9999)
    service = f"{_dns_label(rng, 8)}.service"
    for path in (
        f"/user.slice/user-{user}.slice/session-{session}.scope",
        f"/user.slice/user-{user}.slice/user@{user}.service/app.slice/app-{session}.scope",
    ):
        assert owner_from_cgroup(_v2(path)) == Owner(kind="user", unit=f"user-{user}.slice")
    assert owner_from_cgroup(_v2(f"/system.slice/{service}")) == Owner(kind="unit", unit=service)
    assert owner_from_cgroup(_v2("/init.scope")) == Owner(kind="unit", unit="init.scope")
    # v1: one controller shows only the user slice, systemd's the session: the fuller wins
    session = f"/user.slice/user-{user}.slice/session-1.scope"
    text = f"4:cpu,cpuacct:/user.slice\n1:name=systemd:{session}\n"
    assert owner_from_cgroup(text) == Owner(kind="user", unit=f"user-{user}.slice")
    for o in (Owner(kind="user", unit="user-1000.slice"), Owner(kind="unit", unit=service)):
        assert o.label is None  # the user column says it already


# --- a user's own subtree -----------------------------------------------------------------------


def _user_subtrees(rng: random.Random, user: int) -> list[str]:
    """Directories a user may make cgroups in: their systemd user manager's subtree (delegated to
    them), at any depth, and their slice in general."""
    return [
        f"/user.slice/user-{user}.slice/user@{user}.service",
        f"/user.slice/user-{user}.slice/user@{user}.service/app.slice",
        f"/user.slice/user-{user}.slice/user@{user}.service/user.slice",
        f"/user.slice/user-{user}.slice/user@{user}.service/app.slice/{_dns_label(rng, 6)}.slice",
        f"/user.slice/user-{user}.slice/session-{rng.randint(1, 9999)}.scope",
    ]


@pytest.mark.parametrize("seed", SEEDS)
def test_pods_and_jobs_made_in_a_users_own_subtree_are_the_users(seed):
    """A user may make any directory in the subtree systemd delegates to them: one named like a
    pod's or a Slurm job's makes their process neither, on any cgroup version."""
    rng = random.Random(f"spoof-{seed}")
    user = rng.randint(1000, 2**31)
    uid, cid, job, step = _uid(rng), _cid(rng), str(rng.randint(1, 2**31)), _step(rng)
    qos = rng.choice(["guaranteed", "burstable", "besteffort"])
    level = "" if qos == "guaranteed" else f"/{qos}"
    node = _dns_label(rng, 6)
    spoofs = [
        _pod_systemd(uid, qos, rng.choice(["cri-containerd", "crio"]), cid),  # a kubelet's runtimes
        _pod_systemd(uid, qos, "cri-containerd", cid, root="kubelet"),
        "/" + _pod_systemd(uid, qos, "crio", cid).rsplit("/", 1)[0].rsplit("/", 1)[1],
        f"/kubepods{level}/pod{uid}/{cid}",
        f"/kubepods{level}/pod{uid}",
        f"/slurm/uid_{user}/job_{job}/step_{step}/task_0",
        f"/slurm_{node}/job_{job}",
        f"/slurmstepd.scope/job_{job}/step_{step}/user/task_0",
        f"/{node}_slurmstepd.scope/job_{job}",
    ]
    for base in _user_subtrees(rng, user):
        for spoof in spoofs:
            path = base + spoof
            expected = Owner(kind="user", unit=f"user-{user}.slice")
            for text in (_v2(path), _v1(path, rng=rng), _hybrid(path, path)):
                assert owner_from_cgroup(text) == expected, path
    # a user manager's subtree seen without its slice above it is still the user's
    o = owner_from_cgroup(_v2(f"/user@{user}.service/app.slice/slurm/job_{job}"))
    assert o == Owner(kind="user", unit=f"user-{user}.slice")
    o = owner_from_cgroup(_v2(f"/user.slice/kubepods/burstable/pod{uid}/{cid}"))
    assert o == Owner(kind="user")


@pytest.mark.parametrize("seed", SEEDS)
def test_rootless_containers_in_a_users_own_subtree(seed):
    """What a user may run there: Docker, Podman and nerdctl containers run rootless, even under
    a directory named like a pod's or a job's; not CRI-O's or the CRI's scopes, which a kubelet
    makes, and not Podman's monitor."""
    rng = random.Random(f"rootless-{seed}")
    user, cid, uid = rng.randint(1000, 2**31), _cid(rng), _uid(rng)
    mine = Owner(kind="user", unit=f"user-{user}.slice")
    for base in _user_subtrees(rng, user):
        for prefix, runtime in (
            ("docker", "docker"),
            ("libpod", "podman"),
            ("nerdctl", "containerd"),
        ):
            for below in ("", f"/kubepods-pod{uid.replace('-', '_')}.slice", f"/slurm/job_{seed}"):
                path = f"{base}{below}/{prefix}-{cid}.scope"
                expected = Owner(kind="container", container_id=cid, container_runtime=runtime)
                assert owner_from_cgroup(_v2(path)) == expected, path
                assert owner_from_cgroup(_v2(path + "/container")) == expected, path
        for path in (
            f"{base}/libpod-conmon-{cid}.scope",
            f"{base}/crio-{cid}.scope",
            f"{base}/cri-containerd-{cid}.scope",
            f"{base}/docker/{cid}",
            f"{base}/{cid}",
            f"{base}/lxc.payload.{_dns_label(rng)}",
        ):
            assert owner_from_cgroup(_v2(path)) == mine, path


@pytest.mark.parametrize("seed", SEEDS[:6])
def test_pods_jobs_and_containers_outside_a_users_subtree_are_read_as_ever(seed):
    """A kubelet's `--cgroup-root`, Slurm's layouts and a container's own systemd are read
    wherever they sit outside a user's subtree; a user slice inside a pod or a container (its
    own systemd's) is the pod's or the container's."""
    rng = random.Random(f"outside-{seed}")
    uid, cid, job, user = _uid(rng), _cid(rng), str(rng.randint(1, 2**31)), rng.randint(1000, 9999)
    root = f"/{_dns_label(rng, 8)}"
    inner = f"/user.slice/user-{user}.slice/user@{user}.service/app.slice/slurm/job_{job}"
    pod = Owner(kind="pod", pod_uid=uid, qos="burstable", container_id=cid)
    for path in (
        f"{root}/kubepods/burstable/pod{uid}/{cid}",
        f"/kubepods/burstable/pod{uid}/{cid}",
    ):
        assert owner_from_cgroup(_v2(path)) == pod
        assert owner_from_cgroup(_v2(path + inner)) == pod
    o = owner_from_cgroup(_v2(_pod_systemd(uid, "besteffort", "crio", cid, root="kubelet") + inner))
    assert (o.kind, o.pod_uid, o.container_id) == ("pod", uid, cid)
    slurm = Owner(kind="slurm", slurm_job=job, slurm_step="0")
    assert owner_from_cgroup(_v2(f"{root}/slurm/uid_{user}/job_{job}/step_0/task_0")) == slurm
    o = owner_from_cgroup(_v2(f"/system.slice/slurmstepd.scope/job_{job}/step_0{inner}"))
    assert o == slurm
    ctr = Owner(kind="container", container_id=cid, container_runtime="docker")
    assert owner_from_cgroup(_v2(f"/system.slice/docker-{cid}.scope{inner}")) == ctr


def test_paths_that_name_no_owner():
    for text in ("", "0::/\n", "0::/system.slice\n", "12:memory:/\n1:name=systemd:/\n"):
        assert owner_from_cgroup(text) is None, text


# --- hostile input ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_binary_and_malformed_text_never_raises(seed):
    rng = random.Random(f"hostile-{seed}")
    junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 4096)))
    for text in (
        junk.decode("utf-8", errors="replace"),
        junk.decode("latin-1"),
        "\0".join(rng.choice(["0::", "x:y", ":::", "0::/docker/", "::/", "\n"]) for _ in range(99)),
    ):
        o = owner_from_cgroup(text)
        assert o is None or isinstance(o, Owner)
    cid = _cid(rng)
    malformed = [
        f"x::/docker/{cid}",  # not a hierarchy id
        f"0:/docker/{cid}",  # one colon
        f"0::docker/{cid}",  # not absolute
        f"0::/docker/{cid.upper()}",  # the kernel's names are lower case
        f"0::/{'a' * 300}/docker/{cid}",  # a component longer than a file name can be
    ]
    for line in malformed:
        assert owner_from_cgroup(line + "\n") is None, line
    # a good line among bad ones is still read, with Windows line ends too
    good = "\r\n".join([*malformed, f"0::/docker/{cid}", ""])
    assert owner_from_cgroup(good).container_id == cid


def test_huge_text_is_read_up_to_its_limit_and_quickly():
    rng = random.Random("huge")
    cid = _cid(rng)
    filler = "7:memory:/" + "x/" * 1000 + "\n"
    late = filler * 5000 + f"0::/docker/{cid}\n"  # ~10 MB, the owner past the lines read
    began = time.process_time()
    assert owner_from_cgroup(late) is None
    deep = "0::" + "/x" * 100_000 + f"/docker/{cid}\n"  # a path past the components read
    assert owner_from_cgroup(deep) is None
    assert time.process_time() - began < 1.0
    assert cgroup_paths("0::/a\n" * 1000) == ["/a"] * 64


# --- PID namespaces -----------------------------------------------------------------------------


def _status(pids) -> str:
    ns = "\t".join(str(p) for p in pids)
    return f"Name:\tpython\nState:\tS (sleeping)\nTgid:\t{pids[0]}\nPid:\t{pids[0]}\nNSpid:\t{ns}\n"


@pytest.mark.parametrize("seed", SEEDS)
def test_the_pid_inside_its_namespace_is_the_last_of_nspid(seed):
    rng = random.Random(f"nspid-{seed}")
    pids = tuple(rng.randint(2, 4_194_304) for _ in range(rng.randint(2, 5)))
    assert ns_pids(_status(pids)) == pids
    assert ns_pid(_status(pids)) == pids[-1]
    host = rng.randint(2, 4_194_304)
    assert ns_pid(_status((host,))) is None  # a host process
    assert ns_pid(_status((host, host))) is None  # the same pid: nothing to tell


# Decimal digits of other scripts, and characters `str.isdigit` takes that `int` refuses.
UNICODE_DIGITS = [chr(c) for c in range(0x80, 0x110000) if chr(c).isdigit() or chr(c).isdecimal()]


@pytest.mark.parametrize("seed", SEEDS)
def test_an_nspid_with_digits_of_other_scripts_is_not_read(seed):
    rng = random.Random(f"nspid-unicode-{seed}")
    pids = [str(rng.randint(2, 4_194_304)) for _ in range(rng.randint(1, 4))]
    k = rng.randrange(len(pids))
    digit = rng.choice(UNICODE_DIGITS)
    pos = rng.randint(0, len(pids[k]))
    for field in (digit, pids[k][:pos] + digit + pids[k][pos:], digit * rng.randint(1, 9)):
        bad = [*pids[:k], field, *pids[k + 1 :]]
        text = "Name:\tx\nNSpid:\t" + "\t".join(bad) + "\n"
        assert ns_pids(text) is None, ascii(text)
        assert ns_pid(text) is None
        assert judge_host_pid_namespace(text, None, False) is None
    assert ns_pids("NSpid:\t41440\t\u00b2") is None
    # a hierarchy id or a job, user or pid field in such digits names nothing either
    cid = _cid(rng)
    assert owner_from_cgroup(f"{digit}::/docker/{cid}\n") is None
    o = owner_from_cgroup(f"0::/system.slice/slurmstepd.scope/job_{digit}/step_0\n")
    assert o == Owner(kind="unit", unit="slurmstepd.scope")


@pytest.mark.parametrize("seed", SEEDS)
def test_random_bytes_as_a_status_never_raise(seed):
    rng = random.Random(f"status-bytes-{seed}")
    for _ in range(50):
        junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
        for text in (junk.decode("utf-8", errors="replace"), junk.decode("latin-1")):
            for status in (text, "NSpid:\t" + text, "NSpid:\t12\t" + text.replace("\n", "")):
                pids = ns_pids(status)
                assert pids is None or all(isinstance(p, int) for p in pids)
                ns_pid(status)
        fields = [
            rng.choice(UNICODE_DIGITS + list(string.digits)) for _ in range(rng.randint(1, 9))
        ]
        ns_pids("NSpid:\t" + "\t".join(fields) + "\n")


def test_a_status_without_a_readable_nspid():
    for text in ("", "Name:\tx\n", "NSpid:\n", "NSpid:\t12\tab\n", "NSpid:\t" + "\t1" * 40 + "\n"):
        assert ns_pid(text) is None, text
    assert ns_pid("\0\xff" * 1000) is None


def test_a_namespace_of_its_own_without_a_cgroup_owner_is_a_container():
    assert with_ns_pid(None, None) is None
    assert with_ns_pid(None, 7) == Owner(kind="container", ns_pid=7)
    assert with_ns_pid(None, 7).label == "container"
    slurm = Owner(kind="slurm", slurm_job="9")
    assert with_ns_pid(slurm, 3) == Owner(kind="slurm", slurm_job="9", ns_pid=3)
    assert with_ns_pid(slurm, None) is slurm


def test_whether_this_program_runs_in_the_hosts_pid_namespace():
    kthreadd = "Name:\tkthreadd\nUmask:\t0000\nState:\tS (sleeping)\nPid:\t2\nPPid:\t0\n"
    own_host, own_nested = _status((4242,)), _status((4242, 17))
    assert judge_host_pid_namespace(own_host, kthreadd, True) is True
    assert judge_host_pid_namespace(own_nested, kthreadd, True) is False
    # a container's /proc: PID 1 is its own init, PID 2 a process of it (or none)
    sh = "Name:\tsh\nState:\tS (sleeping)\nPid:\t2\nPPid:\t1\n"
    assert judge_host_pid_namespace(own_host, sh, True) is False
    assert judge_host_pid_namespace(own_host, None, True) is False
    impostor = "Name:\tkthreadd\nPid:\t2\nPPid:\t1\n"
    assert judge_host_pid_namespace(own_host, impostor, True) is False
    # /proc mounted with hidepid: neither PID 1 nor 2 readable, nothing decides
    assert judge_host_pid_namespace(own_host, None, False) is None
    assert judge_host_pid_namespace(None, None, False) is None


# --- names the node keeps -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_pod_names_from_the_kubelets_log_directories(seed):
    rng = random.Random(f"logdirs-{seed}")
    pods = {
        _uid(rng): (_dns_label(rng, rng.randint(1, 30)), f"{_dns_label(rng, 10)}.{k}-x")
        for k in range(rng.randint(1, 40))
    }
    dirs = [f"{ns}_{name}_{uid}" for uid, (ns, name) in pods.items()]
    bad = [
        "README",
        f"a_b_c_{_uid(rng)}",  # four parts
        f"Kube-System_pod_{_uid(rng)}",  # upper case is no DNS label
        f"ns_pod_{'z' * 36}",  # not a uid
        f"-ns_pod_{_uid(rng)}",
        "",
        None,
    ]
    mixed = dirs + bad
    rng.shuffle(mixed)
    assert pod_names(mixed) == pods


@pytest.mark.parametrize("seed", SEEDS[:6])
def test_a_docker_containers_name_from_its_config(seed):
    rng = random.Random(f"docker-{seed}")
    name = rng.choice(string.ascii_letters) + "".join(
        rng.choice(string.ascii_letters + string.digits + "_.-") for _ in range(rng.randint(1, 40))
    )
    cid = _cid(rng)
    config = {
        "ID": cid,
        "Created": "2026-01-15T10:00:00.000000000Z",
        "Path": "python",
        "Args": ["train.py"],
        "Config": {"Hostname": cid[:12], "Env": [f"X={k}" for k in range(50)]},
        "MountPoints": {"/data": {"Name": "datavol", "Destination": "/data"}},
        "Name": f"/{name}",
        "Driver": "overlay2",
    }
    text = json.dumps(config)
    assert docker_container_name(text) == name
    assert docker_container_name(text[: len(text) // 2] + text) == name  # broken JSON: searched
    assert docker_container_name(json.dumps({**config, "Name": "/bad name!"})) is None
    assert docker_container_name(json.dumps({**config, "Name": 7})) is None
    for junk in ("", "[]", "null", "{", "\0\xff" * 99, "[" * 100_000):
        assert docker_container_name(junk) is None
    huge = '{"Env": "' + "x" * (9 * 1024 * 1024) + f'", "Name": "/{name}"}}'
    assert docker_container_name(huge) is None  # past what is searched


# --- the model ----------------------------------------------------------------------------------


def test_labels_of_every_kind():
    cid = "8e1f0d2c" + "0" * 56
    assert Owner(kind="slurm", slurm_job="424242", slurm_step="0").label == "job 424242"
    uid = "3f1c2a9e-5b7d-4e21-9c0a-8d6f4b2e1a7c"
    assert Owner(kind="pod", pod_uid=uid).label == "pod 3f1c2a9e"
    named = Owner(kind="pod", pod_uid=uid, pod_namespace="ml", pod_name="ddp-0")
    assert named.label == "pod ml/ddp-0"
    assert Owner(kind="container", container_id=cid, container_name="x").label == "ctr 8e1f0d2c"
    assert Owner(kind="user", unit="user-1000.slice").label is None
    assert Owner(kind="unit", unit="foo.service").label is None


def test_an_owner_round_trips_through_the_codec_and_old_recordings_still_load():
    rng = random.Random("codec")
    o = Owner(
        kind="pod",
        pod_uid=_uid(rng),
        pod_namespace="ml",
        pod_name="ddp-0",
        qos="burstable",
        container_id=_cid(rng),
        container_runtime="containerd",
        container_name="trainer",
        slurm_job="12",
        slurm_step="batch",
        unit="kubepods.slice",
        ns_pid=7,
    )
    p = ProcessInfo(pid=41200, name="python", owner=o)
    doc = json.loads(json.dumps(jsonable(p)))
    assert doc["owner"]["pod_name"] == "ddp-0" and "label" not in doc["owner"]
    assert from_jsonable(ProcessInfo, doc) == p
    del doc["owner"]  # a recording made before owners were read
    assert from_jsonable(ProcessInfo, doc) == ProcessInfo(pid=41200, name="python")
    with pytest.raises(ValueError, match="owner"):
        from_jsonable(ProcessInfo, {"pid": 1, "owner": {"pod_uid": "x"}})  # no kind
