"""The job checks: variables in the GPU processes' environments, processes stuck in D state."""

from __future__ import annotations

from ..model.formats import count
from ..model.health import DENIED, Finding, HealthEvidence, ProcessFacts
from .rules import ENV_NEXT, ENV_RULES, NETWORK_WAITS, env_is_set


def environment_findings(facts: ProcessFacts) -> list[Finding]:
    out = []
    for name, (fid, title, does, classes, severity) in ENV_RULES.items():
        hits = [
            (e, value)
            for e in facts.envs
            for k, value in e.variables
            if k == name and env_is_set(value)
        ]
        if not hits:
            continue
        evidence = tuple(
            HealthEvidence(f"{name}={value} in pid {e.pid}'s environment" + _on(e.gpus), e.source)
            for e, value in hits
        )
        pids = tuple(e.pid for e, _ in hits)
        out.append(
            Finding(
                fid,
                severity,
                title,
                evidence + (HealthEvidence(does, "what it does"),),
                ENV_NEXT[name],
                classes,
                "environment",
                tuple(sorted({g for e, _ in hits for g in e.gpus})),
                pids,
            )
        )
    denied = [e for e in facts.envs if e.problem is not None]
    if denied:
        who = ", ".join(f"{e.pid} ({e.problem})" for e in denied[:8])
        more = f" and {len(denied) - 8} more" if len(denied) > 8 else ""
        out.append(
            Finding(
                "env.unreadable",
                "info",
                f"the environment of {count(len(denied), 'GPU process', 'GPU processes')} "
                "could not be read",
                (HealthEvidence(f"pid {who}{more}", denied[0].source),),
                "sudo gputop-diag health  # another user's /proc/PID/environ is readable by "
                "root only"
                if any(e.problem == DENIED for e in denied)
                else "gputop-diag health  # again: the processes may have ended",
                (),
                "environment",
                pids=tuple(e.pid for e in denied),
            )
        )
    if not out or all(f.id == "env.unreadable" for f in out):
        read = [e for e in facts.envs if e.problem is None]
        out.append(
            Finding(
                "env.ok",
                "ok",
                "no GPU process has a variable set that slows it"
                if read
                else "no GPU process to read the environment of",
                (
                    HealthEvidence(
                        f"{count(len(read), 'environment')} read; looked for "
                        + ", ".join(ENV_RULES),
                        "/proc/<pid>/environ",
                    ),
                ),
                "",
                (),
                "environment",
            )
        )
    return out


def _on(gpus: tuple[int, ...]) -> str:
    if not gpus:
        return " (watched job)"
    return " (GPU " + ", ".join(map(str, gpus)) + ")"


def _network_wait(wchan: str | None) -> bool:
    return bool(wchan) and any(wchan.startswith(p) or p in wchan for p in NETWORK_WAITS)


def stuck_findings(facts: ProcessFacts) -> list[Finding]:
    if not facts.stuck:
        return [
            Finding(
                "procs.d_state",
                "ok",
                "no process of a GPU job is stuck in D state",
                (
                    HealthEvidence(
                        f"{count(facts.examined, 'process', 'processes')} of GPU jobs read"
                        + (f", {facts.unreadable} not readable" if facts.unreadable else ""),
                        "/proc/<pid>/stat",
                    ),
                ),
                "",
                ("input_pipeline",),
                "processes",
            )
        ]
    evidence = []
    mounts: dict[str, str] = {}  # mount point -> fs type, of the stuck processes' open files
    seen: dict[str, str] = {}  # network mounts they can see, where their files are unknown
    network = False
    for s in facts.stuck:
        wait = f" waiting in {s.wchan}" if s.wchan and s.wchan != "0" else ""
        evidence.append(
            HealthEvidence(
                f"pid {s.pid} ({s.name}) in state D{wait}, of GPU job pid {s.root_pid}",
                f"/proc/{s.pid}/stat, /proc/{s.pid}/wchan",
            )
        )
        network = network or _network_wait(s.wchan)
        for m in s.mounts:
            if m.via == "mounted":  # its open files unknown: what it can see, not what it uses
                seen.setdefault(m.mount_point, m.fs_type)
                continue
            mounts.setdefault(m.mount_point, m.fs_type)
            evidence.append(
                HealthEvidence(
                    f"pid {s.pid} has {m.mount_point} open ({m.fs_type} from {m.device}, {m.via})",
                    f"/proc/{s.pid}/fdinfo, /proc/{s.pid}/mountinfo",
                )
            )
        if s.mounts_problem:
            evidence.append(HealthEvidence(f"its open files: {s.mounts_problem}", f"/proc/{s.pid}"))
    if seen:
        evidence.append(
            HealthEvidence(
                "network mounts they can see: "
                + ", ".join(f"{mp} ({fs})" for mp, fs in seen.items()),
                "/proc/<pid>/mountinfo",
            )
        )
    network = network or bool(mounts)
    first = next(iter(mounts), None)
    if first is None and network:
        first = next(iter(seen), None)
    if first is not None:
        step = (
            f"timeout 5 stat -f {first} >/dev/null && echo answers "
            f"|| echo '{first} does not answer'"
        )
    else:
        step = f"sudo cat /proc/{facts.stuck[0].pid}/stack  # the kernel stack it waits in"
    where = f" on {', '.join(mounts)}" if mounts else ""
    return [
        Finding(
            "procs.d_state",
            "critical" if network else "warning",
            f"{count(len(facts.stuck), 'process', 'processes')} of GPU jobs stuck in "
            f"uninterruptible I/O wait{where}",
            tuple(evidence),
            step,
            ("input_pipeline",),
            "processes",
            pids=tuple(s.pid for s in facts.stuck),
        )
    ]
