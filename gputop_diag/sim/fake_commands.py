"""Stand-ins for the commands the tool runs: `journalctl -k`, `squeue`, `scontrol`.

Each answers in the real program's output format; a program the scenario lacks raises
FileNotFoundError, as when it is not installed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import datetime, timezone

from ..sources import CommandResult
from .machine import SimMachine


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+0000")


def _slurm_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def _since(argv: Sequence[str]) -> float | None:
    for i, a in enumerate(argv):
        val = None
        if a in ("--since", "-S") and i + 1 < len(argv):
            val = argv[i + 1]
        elif a.startswith("--since="):
            val = a.split("=", 1)[1]
        if val is None:
            continue
        if val.startswith("@"):
            return float(val[1:])
        try:
            return (
                datetime.fromisoformat(val.replace(" ", "T"))
                .replace(tzinfo=timezone.utc)
                .timestamp()
            )
        except ValueError:
            return None
    return None


class FakeCommands:
    def __init__(self, machine: SimMachine, hostname: str) -> None:
        self._m = machine
        self._host = hostname

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        prog = argv[0].rsplit("/", 1)[-1]
        if prog == "journalctl":
            return self._journalctl(argv)
        slurm = self._m.spec.get("slurm")
        if prog in ("squeue", "scontrol", "sacct") and slurm:
            return self._squeue(argv, slurm) if prog == "squeue" else self._scontrol(argv, slurm)
        raise FileNotFoundError(2, "No such file or directory", prog)

    def _journalctl(self, argv: Sequence[str]) -> CommandResult:
        if "-k" not in argv and "--dmesg" not in argv:
            return CommandResult(0, "-- No entries --\n")
        now = self._m.clock.now()
        since = _since(argv)
        out = []
        for t, text in self._m.kernel_lines:
            if t > now or (since is not None and t < since):
                continue
            out.append(f"{_iso(t)} {self._host} kernel: {text}")
        return CommandResult(0, "\n".join(out) + "\n" if out else "-- No entries --\n")

    def _jobs(self, argv: Sequence[str], slurm: list[dict]) -> list[dict]:
        jobs = slurm
        if "-j" in argv:
            want = argv[argv.index("-j") + 1].split(",")
            jobs = [j for j in jobs if j["id"] in want]
        if "-u" in argv:
            jobs = [j for j in jobs if j["user"] == argv[argv.index("-u") + 1]]
        return jobs

    def _fields(self, j: dict) -> dict[str, str]:
        now = self._m.clock.now()
        submit = self._m.clock.start - j["submitted_ago"]
        pending = j["state"] == "PENDING"
        return {
            "i": j["id"],
            "j": j["name"],
            "u": j["user"],
            "T": j["state"],
            "r": j["reason"] if pending else "None",
            "V": _slurm_time(submit),
            "S": "N/A" if pending else _slurm_time(submit + 60),
            "l": j["limit"],
            "M": "0:00" if pending else time.strftime("%H:%M:%S", time.gmtime(now - submit - 60)),
            "D": str(j["nodes"]),
            "b": j["gres"],
            "N": "" if pending else self._host,
        }

    def _squeue(self, argv: Sequence[str], slurm: list[dict]) -> CommandResult:
        fmt = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
        if "-o" in argv:
            fmt = argv[argv.index("-o") + 1]
        elif any(a.startswith("--format=") for a in argv):
            fmt = next(a for a in argv if a.startswith("--format="))[9:]
        jobs = self._jobs(argv, slurm)
        rows = []
        if "-h" not in argv and "--noheader" not in argv:
            rows.append(re.sub(r"%\.?\d*(\w)", lambda m: m.group(1).upper(), fmt))
        for j in jobs:
            f = self._fields(j)
            f.update(
                P="gpu",
                t="PD" if j["state"] == "PENDING" else "R",
                R=f"({j['reason']})" if j["state"] == "PENDING" else self._host,
            )
            rows.append(
                re.sub(
                    r"%\.?(\d*)(\w)",
                    lambda m, f=f: f.get(m.group(2), "").rjust(int(m.group(1) or 0)),
                    fmt,
                )
            )
        return CommandResult(0, "\n".join(rows) + ("\n" if rows else ""))

    def _scontrol(self, argv: Sequence[str], slurm: list[dict]) -> CommandResult:
        if len(argv) < 4 or argv[1:3] != ["show", "job"]:
            return CommandResult(1, "", "scontrol: error: Invalid command\n")
        j = next((j for j in slurm if j["id"] == argv[3]), None)
        if j is None:
            return CommandResult(1, "", "slurm_load_jobs error: Invalid job id specified\n")
        f = self._fields(j)
        text = (
            f"JobId={j['id']} JobName={j['name']}\n"
            f"   UserId={j['user']}(1001) GroupId={j['user']}(1001) MCS_label=N/A\n"
            f"   Priority=4294901758 Nice=0 Account=research QOS=normal\n"
            f"   JobState={j['state']} Reason={f['r']} Dependency=(null)\n"
            f"   RunTime={f['M']} TimeLimit={j['limit']} TimeMin=N/A\n"
            f"   SubmitTime={f['V']} EligibleTime={f['V']}\n"
            f"   StartTime=Unknown EndTime=Unknown Deadline=N/A\n"
            f"   Partition=gpu AllocNode:Sid=login01:4242\n"
            f"   NumNodes={j['nodes']} NumCPUs=64 NumTasks={j['nodes'] * 8}\n"
            f"   TresPerNode={j['gres']}\n"
        )
        return CommandResult(0, text)
