"""What the machine itself knows of the names a sanitized output must not carry, and a snapshot
does not hold: its host names, this shell's environment, the job's working directories and, on a
real machine, the accounts in `pwd`. Read here; the sanitizer is seeded with them
(`Sanitizer.seed_machine`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class MachineNames:
    hostnames: tuple[str, ...] = ()
    environ: Mapping[str, str] = field(default_factory=dict)
    cwds: tuple[str, ...] = ()  # of the processes asked for (the job's)
    users: tuple[str, ...] = ()  # this user first, then the accounts of people (uid >= 1000)


def read_machine_names(sources: Any, pids: Iterable[int] = ()) -> MachineNames:
    """Every name that can be read; one that cannot is not in any output either."""
    hostnames: list[str] = []
    try:
        hostnames.append(sources.hostname())
    except Exception:  # noqa: BLE001 - a name we cannot read is not in the output either
        pass
    cwds = []
    for pid in pids:
        try:
            cwds.append(sources.psutil.Process(pid).cwd())
        except Exception:  # noqa: BLE001 - vanished, another user's, not supported
            continue
    users: list[str] = []
    if not getattr(sources, "simulated", False):
        import pwd
        import socket

        try:
            hostnames.append(socket.getfqdn())
        except OSError:
            pass
        try:
            users.append(pwd.getpwuid(os.getuid()).pw_name)
            users += [
                e.pw_name for e in pwd.getpwall() if e.pw_uid >= 1000 and e.pw_name != "nobody"
            ]
        except (KeyError, OSError):
            pass
    return MachineNames(
        hostnames=tuple(hostnames),
        environ=dict(getattr(sources, "environ", None) or {}),
        cwds=tuple(cwds),
        users=tuple(users),
    )
