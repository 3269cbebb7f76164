"""The simulated machine's GPU jobs as the health checks see them: variables added to the
ranks' environments, data-loader workers in D state (state, wchan), the mounts of the machine
(/proc/<pid>/mountinfo) and the workers' open files on the data mount (/proc/<pid>/fdinfo/<fd>,
`mnt_id`), in proc(5)'s formats. Set by a scenario's `health` dict (`env`, `d_state`; see
sim/health.py)."""

from __future__ import annotations

import errno
import os

from .population import SimProc

_MOUNTS = (
    ("22", "1", "259:2", "/", "ext4", "/dev/nvme0n1p2"),
    ("25", "22", "0:5", "/dev", "devtmpfs", "udev"),
    ("26", "25", "0:24", "/dev/pts", "devpts", "devpts"),
    ("27", "22", "0:21", "/proc", "proc", "proc"),
    ("28", "22", "0:22", "/sys", "sysfs", "sysfs"),
    ("31", "22", "259:3", "/home", "ext4", "/dev/nvme0n1p3"),
    ("33", "22", "0:31", "/dev/shm", "tmpfs", "tmpfs"),
)
DATA_MOUNT_ID = "112"
DEFAULT_DATA = ("/data", "nfs4", "fs01:/export/datasets")


def sim_error(code: int, path: str) -> OSError:
    cls = {
        errno.ENOENT: FileNotFoundError,
        errno.EACCES: PermissionError,
        errno.EISDIR: IsADirectoryError,
    }.get(code, OSError)
    return cls(code, os.strerror(code), path)


class SimJobHealth:
    def __init__(self, machine, cfg: dict) -> None:
        self._m = machine
        self.cfg = cfg
        self._apply_env()
        self.stuck = self._stuck()

    def _apply_env(self) -> None:
        env = self.cfg.get("env")
        if not env:
            return
        for p in self._m.procs.values():
            if p.role in ("rank", "worker"):
                p.environ.update(env)

    def _stuck(self) -> dict[int, dict]:
        spec = self.cfg.get("d_state")
        if not spec:
            return {}
        workers = sorted(
            (p for p in self._m.procs.values() if p.role == "worker"), key=lambda p: p.pid
        )
        return {
            p.pid: dict(wchan=spec.get("wchan", "rpc_wait_bit_killable"))
            for p in workers[: spec.get("workers", 4)]
        }

    def state(self, pid: int) -> str:
        return "D" if pid in self.stuck else "S"

    def mountinfo(self) -> str:
        point, fs, source = self.cfg.get("d_state", {}).get("mount", DEFAULT_DATA)
        rows = [
            f"{mid} {parent} {dev} / {mp} rw,relatime shared:{k + 1} - {typ} {src} rw"
            for k, (mid, parent, dev, mp, typ, src) in enumerate(_MOUNTS)
        ]
        opts = "rw,vers=4.2,rsize=1048576,wsize=1048576,hard,proto=tcp,timeo=600"
        rows.append(
            f"{DATA_MOUNT_ID} 22 0:52 / {point} rw,relatime shared:61 - {fs} {source} {opts}"
        )
        return "\n".join(rows) + "\n"

    def _fds(self, p: SimProc) -> dict[str, str]:
        """fd -> mount id of its open files: the terminal, and for a worker files of the data."""
        fds = {"0": "26", "1": "26", "2": "26"}
        if p.role == "worker":
            fds.update({str(k): DATA_MOUNT_ID for k in range(3, 7)})
        return fds

    def pid_file(self, p: SimProc, rest: list[str], path: str) -> str | None:
        if rest == ["wchan"]:
            if p.pid in self.stuck:
                return self.stuck[p.pid]["wchan"]
            return "do_epoll_wait" if p.role != "worker" else "pipe_read"
        if rest == ["mountinfo"]:
            return self.mountinfo()
        if rest[:1] == ["fdinfo"]:
            if p.denied:
                raise sim_error(errno.EACCES, path)
            fds = self._fds(p)
            if len(rest) == 1:
                raise sim_error(errno.EISDIR, path)
            if len(rest) == 2 and rest[1] in fds:
                ino = 9000 + int(rest[1])
                return f"pos:\t0\nflags:\t0100000\nmnt_id:\t{fds[rest[1]]}\nino:\t{ino}\n"
            raise sim_error(errno.ENOENT, path)
        return None

    def pid_listdir(self, p: SimProc, rest: list[str], path: str) -> list[str] | None:
        if rest == ["fdinfo"]:
            if p.denied:
                raise sim_error(errno.EACCES, path)
            return list(self._fds(p))
        return None
