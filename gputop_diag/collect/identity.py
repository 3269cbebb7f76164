"""What the machine itself knows of the names a sanitized output must not carry, and a snapshot
does not hold: its host names (the shell, /proc, the resolver), this shell's environment, the
job's processes (their environments, working directories and command lines), the accounts of
people (/etc/passwd, and `pwd` on a real machine) and the user's Slurm jobs (names, partitions,
accounts, nodes). Read here, once per output; the sanitizer is seeded with them
(`Sanitizer.seed_machine`), so every command and every view learns the same names."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_PROCESSES = 400  # of this user's, when no pids are given
MAX_ACCOUNTS = 20000
_FIRST_PERSON_UID, _NOBODY_UID = 1000, 65534
# `squeue --me`: id, name, partition, account, user, nodes (squeue(1) format codes).
SQUEUE_NAMES = "%i|%j|%P|%a|%u|%N"
_SQUEUE_CLASSES = ("job", "job_name", "partition", "account", "user", "nodes")
# Slurm asked for names only: a controller out of reach costs a sanitized output this much.
SEED_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class MachineNames:
    hostnames: tuple[str, ...] = ()
    environ: Mapping[str, str] = field(default_factory=dict)
    cwds: tuple[str, ...] = ()  # of the processes read (the job's)
    users: tuple[str, ...] = ()  # this user first, then the accounts of people (uid >= 1000)
    job_environs: tuple[Mapping[str, str], ...] = ()  # the environments of the job's processes
    cmdlines: tuple[tuple[str, ...], ...] = ()  # their command lines (run and project names)
    words: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # Slurm's, by class
    texts: tuple[str, ...] = ()  # answers to learn from (`scontrol show job`)


def read_machine_names(sources: Any, pids: Iterable[int] | None = None) -> MachineNames:
    """Every name that can be read; one that cannot is not in any output either. `pids`: the
    job's processes (the GPU's); this user's own processes are read too."""
    environ = dict(getattr(sources, "environ", None) or {})
    procs = _processes(sources, environ, pids)
    words, texts = _slurm(sources, environ)
    return MachineNames(
        hostnames=tuple(_hostnames(sources)),
        environ=environ,
        cwds=tuple(p["cwd"] for p in procs if p.get("cwd")),
        users=tuple(_accounts(sources)),
        job_environs=tuple(p["environ"] for p in procs if p.get("environ")),
        cmdlines=tuple(tuple(p["cmdline"]) for p in procs if p.get("cmdline")),
        words=words,
        texts=texts,
    )


def _hostnames(sources: Any) -> list[str]:
    out: list[str] = []
    try:
        out.append(sources.hostname())
    except Exception:  # noqa: BLE001 - a name we cannot read is not in the output either
        pass
    for path in ("/proc/sys/kernel/hostname", "/proc/sys/kernel/domainname"):
        try:
            name = sources.procfs.read_text(path).strip()
        except (OSError, AttributeError):
            continue
        if name and name != "(none)":
            out.append(name)
    if not getattr(sources, "simulated", False):
        import socket

        try:
            out.append(socket.getfqdn())
        except OSError:
            pass
    return out


def _processes(sources: Any, environ: Mapping[str, str], pids) -> list[dict[str, Any]]:
    """The environment, working directory and command line of each readable process: `pids`
    and this user's own (at most `MAX_PROCESSES`)."""
    psutil = sources.psutil
    wanted = dict.fromkeys(pids or ())
    me = environ.get("USER") or environ.get("LOGNAME") or _me(sources)
    if me:
        try:
            for p in psutil.process_iter(["pid", "username"]):
                if len(wanted) >= MAX_PROCESSES:
                    break
                if p.info.get("username") == me:
                    wanted[p.info["pid"]] = None
        except Exception:  # noqa: BLE001 - no process list: nothing of it to seed
            pass
    out = []
    for pid in wanted:
        one: dict[str, Any] = {}
        try:
            proc = psutil.Process(pid)
        except Exception:  # noqa: BLE001 - vanished
            continue
        for what in ("cwd", "environ", "cmdline"):
            try:
                one[what] = getattr(proc, what)()
            except Exception:  # noqa: BLE001 - vanished, another user's, not supported
                continue
        out.append(one)
    return out


def _me(sources: Any) -> str | None:
    if getattr(sources, "simulated", False):
        return None
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, OSError):
        return None


def parse_passwd(text: str) -> list[str]:
    """The accounts of people in /etc/passwd text: uid from 1000 up, not nobody."""
    out = []
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) < 3 or not parts[2].isdigit():
            continue
        if _FIRST_PERSON_UID <= int(parts[2]) < _NOBODY_UID and parts[0]:
            out.append(parts[0])
    return out


def _accounts(sources: Any) -> list[str]:
    users: list[str] = []
    try:
        users += parse_passwd(sources.procfs.read_text("/etc/passwd"))
    except (OSError, AttributeError):
        pass
    if not getattr(sources, "simulated", False):
        import pwd

        try:
            users.insert(0, pwd.getpwuid(os.getuid()).pw_name)
            for e in pwd.getpwall():  # the name service's too (LDAP where it enumerates)
                if _FIRST_PERSON_UID <= e.pw_uid < _NOBODY_UID:
                    users.append(e.pw_name)
                if len(users) >= MAX_ACCOUNTS:
                    break
        except (KeyError, OSError):
            pass
    return list(dict.fromkeys(users))[:MAX_ACCOUNTS]


def _slurm(sources: Any, environ: Mapping[str, str]) -> tuple[dict[str, tuple[str, ...]], tuple]:
    """The user's jobs as `squeue --me` lists them (by class), and `scontrol show job` of this
    shell's job (learnt as text: its WorkDir, Command, StdOut, NodeList, ...)."""
    words: dict[str, list[str]] = {c: [] for c in _SQUEUE_CLASSES}
    texts: list[str] = []
    run = getattr(sources, "run_command", None)
    if run is None:
        return {}, ()
    try:
        r = run(["squeue", "-h", "--me", "-o", SQUEUE_NAMES], SEED_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - no Slurm here, or it does not answer: nothing to seed
        return {}, ()
    if r.returncode == 0:
        for line in r.stdout.splitlines():
            for cls, value in zip(_SQUEUE_CLASSES, line.split("|"), strict=False):
                if value.strip() and value.strip() not in ("(null)", "N/A"):
                    words[cls].append(value.strip())
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if job and job.isdigit():
        try:
            r = run(["scontrol", "show", "job", "-o", job], SEED_TIMEOUT_S)
            if r.returncode == 0:
                texts.append(r.stdout)
        except Exception:  # noqa: BLE001 - as above
            pass
    nodes = words.pop("nodes")
    texts += [f"NodeList={n}" for n in nodes]
    return {c: tuple(v) for c, v in words.items() if v}, tuple(texts)
