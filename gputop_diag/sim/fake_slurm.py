"""Slurm's `squeue`, `scontrol show job` and `sacct`, answering in their own output formats for
the scenario's jobs (`scenarios.py` `slurm`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from ..sources import CommandResult
from .machine import SimMachine

INVALID_JOB = "slurm_load_jobs error: Invalid job id specified\n"
SQUEUE_DEFAULT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
_SQUEUE_FIELD = re.compile(r"%(\.?)(\d*)([a-zA-Z%])")
_SQUEUE_HEADERS = dict(
    i="JOBID",
    j="NAME",
    u="USER",
    T="STATE",
    t="ST",
    r="REASON",
    V="SUBMIT_TIME",
    S="START_TIME",
    e="END_TIME",
    l="TIME_LIMIT",
    L="TIME_LEFT",
    M="TIME",
    D="NODES",
    b="TRES_PER_NODE",
    N="NODELIST",
    R="NODELIST(REASON)",
    P="PARTITION",
    a="ACCOUNT",
    q="QOS",
    C="CPUS",
    Q="PRIORITY",
)
_STATE_CODES = {"PENDING": "PD", "RUNNING": "R", "COMPLETED": "CD", "FAILED": "F"}
_SACCT_DEFAULT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
_SACCT_WIDTH = dict(jobid=12, exitcode=8, submit=19, start=19, end=19, elapsed=10)


def _clock(ts: float) -> str:
    # Slurm prints local time without a zone, as the real squeue/scontrol do.
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%dT%H:%M:%S")


def duration(secs: float, fixed: bool = False) -> str:
    """Slurm's elapsed-time form: `M:SS`, `H:MM:SS`, `D-HH:MM:SS` (`HH:MM:SS` when fixed)."""
    s = max(0, int(secs))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if fixed:
        return f"{h:02d}:{m:02d}:{s:02d}"
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _limit_s(limit: str) -> float:
    days, _, rest = limit.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def option(argv: Sequence[str], *names: str) -> str | None:
    """The value of an option given as `-x V`, `--long V`, `--long=V` or `-xV`."""
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                return argv[i + 1]
            if n.startswith("--") and a.startswith(n + "="):
                return a[len(n) + 1 :]
            if not n.startswith("--") and a.startswith(n) and len(a) > len(n):
                return a[len(n) :]
    return None


class FakeSlurm:
    def __init__(self, machine: SimMachine, hostname: str) -> None:
        self._m = machine
        self._host = hostname

    # -- the jobs' figures -------------------------------------------------------------------
    def fields(self, j: dict) -> dict[str, str]:
        now, start = self._m.clock.now(), self._m.clock.start
        submit = start - j["submitted_ago"]
        pending = j["state"] == "PENDING"
        began = None if pending else start - j.get("started_ago", 0)
        used = 0.0 if began is None else now - began
        nodelist = "" if pending else j.get("nodelist", self._host)
        return dict(
            i=j["id"],
            j=j["name"],
            u=j["user"],
            T=j["state"],
            t=_STATE_CODES.get(j["state"], j["state"][:2]),
            r=j["reason"] if pending else "None",
            V=_clock(submit),
            S="N/A" if began is None else _clock(began),
            e="N/A" if began is None else _clock(began + _limit_s(j["limit"])),
            l=j["limit"],
            L=j["limit"] if pending else duration(_limit_s(j["limit"]) - used),
            M=duration(used),
            D=str(j["nodes"]),
            b=j["gres"],
            N=nodelist,
            R=f"({j['reason']})" if pending else nodelist,
            P=j.get("partition", "gpu"),
            a=j.get("account", "research"),
            q="normal",
            C=str(64 * j["nodes"]),
            Q="4294901758",
            run_fixed=duration(used, fixed=True),
        )

    def _select(self, argv: list[str], me_default: bool = False) -> list[dict]:
        jobs = self._m.slurm
        ids = option(argv, "-j", "--jobs")
        if ids is not None:
            want = set(ids.split(","))
            jobs = [j for j in jobs if j["id"] in want]
        users = option(argv, "-u", "--user")
        if "--me" in argv or (me_default and users is None and ids is None):
            users = self._m.user
        if users is not None:
            jobs = [j for j in jobs if j["user"] in users.split(",")]
        states = option(argv, "-t", "--states")
        if states is not None and states.lower() != "all":
            want = {s.upper() for s in states.split(",")}
            jobs = [j for j in jobs if j["state"] in want or _STATE_CODES.get(j["state"]) in want]
        return jobs

    # -- squeue ------------------------------------------------------------------------------
    def squeue(self, argv: list[str]) -> CommandResult:
        fmt = option(argv, "-o", "--format") or SQUEUE_DEFAULT
        jobs = self._select(argv)
        ids = option(argv, "-j", "--jobs")
        if ids is not None and not jobs:
            return CommandResult(1, "", INVALID_JOB)
        rows = []
        if "-h" not in argv and "--noheader" not in argv:
            rows.append(self._row(fmt, lambda c: _SQUEUE_HEADERS.get(c, c.upper())))
        for j in jobs:
            f = self.fields(j)
            rows.append(self._row(fmt, lambda c, f=f: f.get(c, "")))
        return CommandResult(0, "".join(r + "\n" for r in rows))

    @staticmethod
    def _row(fmt: str, value) -> str:
        def one(m: re.Match) -> str:
            right, width, code = m.groups()
            if code == "%":
                return "%"
            v = value(code)
            if not width:
                return v
            w = int(width)
            v = v[:w]
            return v.rjust(w) if right else v.ljust(w)

        return _SQUEUE_FIELD.sub(one, fmt)

    # -- scontrol ----------------------------------------------------------------------------
    def scontrol(self, argv: list[str]) -> CommandResult:
        args = [a for a in argv[1:] if a not in ("-o", "--oneliner", "-d", "--details")]
        if args and args[0] == "listpids":
            return self.listpids(args[1:])
        if len(args) < 2 or args[0] != "show" or args[1] not in ("job", "jobid", "jobs"):
            return CommandResult(1, "", "scontrol: error: Invalid command\n")
        jobs = self._m.slurm
        if len(args) > 2:
            jobs = [j for j in jobs if j["id"] == args[2]]
            if not jobs:
                return CommandResult(1, "", INVALID_JOB)
        one = "-o" in argv or "--oneliner" in argv
        details = "-d" in argv or "--details" in argv
        blocks = [self._show(j, details) for j in jobs]
        if one:
            return CommandResult(0, "".join(" ".join(b) + "\n" for b in blocks))
        return CommandResult(
            0, "".join("\n".join([b[0], *("   " + x for x in b[1:])]) + "\n\n" for b in blocks)
        )

    def listpids(self, args: list[str]) -> CommandResult:
        """`scontrol listpids JOBID`: the local processes of a job running on this node (the
        job's user's processes here: launchers, ranks and their workers)."""
        jobs = [j for j in self._m.slurm if not args or j["id"] == args[0]]
        if args and not jobs:
            return CommandResult(1, "", INVALID_JOB)
        rows = ["PID      JOBID    STEPID   LOCALID GLOBALID"]
        for j in jobs:
            here = j.get("nodelist", self._host) == self._host
            if j["state"] != "RUNNING" or not here:
                continue
            for p in self._m.procs.values():
                if p.user == j["user"] and p.role in ("launcher", "rank", "worker", "host"):
                    rows.append(f"{p.pid:<8} {j['id']:<8} batch    -       -")
        if len(rows) == 1 and args:
            return CommandResult(
                1, "", f"slurm_pid2jobid: no processes of job {args[0]} on this node\n"
            )
        return CommandResult(0, "".join(r + "\n" for r in rows))

    def _show(self, j: dict, details: bool = False) -> list[str]:
        f = self.fields(j)
        pending = j["state"] == "PENDING"
        n = j["nodes"]
        gpus = n * int(j["gres"].rsplit(":", 1)[-1])
        start = "Unknown" if pending else f["S"]
        end = "Unknown" if pending else f["e"]
        home = j.get("workdir", f"/home/{j['user']}/llm")
        return [
            f"JobId={j['id']} JobName={j['name']}",
            f"UserId={j['user']}(1001) GroupId={j['user']}(1001) MCS_label=N/A",
            f"Priority=4294901758 Nice=0 Account={f['a']} QOS=normal",
            f"JobState={j['state']} Reason={f['r']} Dependency=(null)",
            "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0",
            f"RunTime={f['run_fixed']} TimeLimit={j['limit']} TimeMin=N/A",
            f"SubmitTime={f['V']} EligibleTime={f['V']}",
            f"AccrueTime={f['V']}",
            f"StartTime={start} EndTime={end} Deadline=N/A",
            f"SuspendTime=None SecsPreSuspend=0 LastSchedEval={_clock(self._m.clock.now())} "
            f"Scheduler=Main",
            f"Partition={f['P']} AllocNode:Sid={j.get('alloc_node', 'login01')}:4242",
            "ReqNodeList=(null) ExcNodeList=(null)",
            f"NodeList={f['N'] or '(null)'}",
            f"NumNodes={n}-{n} NumCPUs={64 * n} NumTasks={8 * n} CPUs/Task=8 ReqB:S:C:T=0:0:*:*",
            f"ReqTRES=cpu={64 * n},mem={500 * n}G,node={n},billing={64 * n},gres/gpu={gpus}",
            "AllocTRES=(null)"
            if pending
            else f"AllocTRES=cpu={64 * n},mem={500 * n}G,node={n},billing={64 * n},gres/gpu={gpus}",
            "Socks/Node=* NtasksPerN:B:S:C=8:0:*:* CoreSpec=*",
            *self._details(j, f["N"], pending, details),
            "MinCPUsNode=64 MinMemoryNode=500G MinTmpDiskNode=0",
            "Features=(null) DelayBoot=00:00:00",
            "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)",
            f"Command={home}/{j['name']}.sbatch",
            f"WorkDir={home}",
            f"StdErr={home}/slurm-{j['id']}.out",
            "StdIn=/dev/null",
            f"StdOut={home}/slurm-{j['id']}.out",
            f"TresPerNode={j['gres']}",
        ]

    @staticmethod
    def _details(j: dict, nodelist: str, pending: bool, details: bool) -> list[str]:
        """`scontrol show job -d`: the job's GRES, then per node its CPUs and GPU indices
        (`GRES=gpu:8(IDX:0-7)`, Slurm's global numbering of that node's GPUs)."""
        if not details or pending:
            return []
        per_node = int(j["gres"].rsplit(":", 1)[-1])
        idx = j.get("gpu_idx", f"0-{per_node - 1}" if per_node > 1 else "0")
        return [
            f"JOB_GRES=gpu:{per_node * j['nodes']}",
            f"  Nodes={nodelist} CPU_IDs=0-63 Mem=512000 GRES=gpu:{per_node}(IDX:{idx})",
        ]

    # -- sacct -------------------------------------------------------------------------------
    def sacct(self, argv: list[str]) -> CommandResult:
        spec = option(argv, "-o", "--format") or _SACCT_DEFAULT
        cols = []
        for c in spec.split(","):
            name, _, width = c.partition("%")
            cols.append(
                (name, int(width) if width.isdigit() else _SACCT_WIDTH.get(name.lower(), 10))
            )
        rows = [[self._sacct_value(j, name) for name, _ in cols] for j in self._select(argv, True)]
        parsable = "-P" in argv or "--parsable2" in argv or "-p" in argv or "--parsable" in argv
        header = "-n" not in argv and "--noheader" not in argv
        if parsable:
            end = "|" if ("-p" in argv or "--parsable" in argv) else ""
            lines = ["|".join(n for n, _ in cols) + end] if header else []
            lines += ["|".join(r) + end for r in rows]
            return CommandResult(0, "".join(x + "\n" for x in lines))
        lines = []
        if header:
            lines.append(" ".join(self._cell(n, w, n) for n, w in cols) + " ")
            lines.append(" ".join("-" * w for _, w in cols) + " ")
        for r in rows:
            cells = (self._cell(v, w, n) for v, (n, w) in zip(r, cols, strict=True))
            lines.append(" ".join(cells) + " ")
        return CommandResult(0, "".join(x + "\n" for x in lines))

    @staticmethod
    def _cell(v: str, w: int, name: str) -> str:
        if len(v) > w:
            v = v[: w - 1] + "+"
        return v.ljust(w) if name.lower() == "jobid" else v.rjust(w)

    def _sacct_value(self, j: dict, name: str) -> str:
        f = self.fields(j)
        pending = j["state"] == "PENDING"
        n = j["nodes"]
        values = dict(
            jobid=j["id"],
            jobname=j["name"],
            user=j["user"],
            partition=f["P"],
            account=f["a"],
            alloccpus="0" if pending else str(64 * n),
            state=j["state"],
            exitcode="0:0",
            submit=f["V"],
            start="Unknown" if pending else f["S"],
            end="Unknown",
            elapsed=f["run_fixed"],
            timelimit=j["limit"],
            nnodes=str(n),
            nodelist="None assigned" if pending else f["N"],
            reason=j["reason"],
            reqtres=f"billing={64 * n},cpu={64 * n},gres/gpu={8 * n},mem={500 * n}G,node={n}",
            alloctres="" if pending else f"cpu={64 * n},gres/gpu={8 * n},node={n}",
        )
        return values.get(name.lower(), "")
