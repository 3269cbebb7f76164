"""What the hooks add up between two step boundaries, and where the job synchronized.

One `Accounts` per process. The hooks check `depth` first: a measured call inside another one
(a `.item()` in a dataset's `__getitem__` while the loader's `__next__` is timed, the `.cpu()`
inside `all_gather_object`) is left to the outer one, so the parts never overlap and
wall = t_input + t_sync + t_comm_exposed + t_host. Only the thread that steps is measured
(`owner`): another thread's waits overlap the step and would double its time.
"""

from __future__ import annotations

import os
from types import CodeType, FrameType

MAX_SITES_KEPT = 4096  # distinct (code, instruction, call) keys; more are folded into one
MAX_CODES_KEPT = 65536  # code objects classified (ours, torch's or the user's)


class Accounts:
    __slots__ = (
        "depth",
        "owner",
        "open_t",
        "t_input",
        "t_sync",
        "n_sync",
        "t_comm",
        "t_comm_exposed",
        "sites",
        "user",
        "internal",
        "issued",
        "ddp",
        "device_comm",
        "coll_entered",
        "coll_done",
        "coll_op",
        "coll_bytes",
        "coll_at",
        "bucket_first",
        "bucket_last",
        "bucket_done",
    )

    def __init__(self, owner: int, internal: tuple[str, ...] = ()) -> None:
        self.depth = 0  # > 0 inside a measured call; left at 1 to switch every hook off
        self.owner = owner
        self.open_t: float | None = None  # start of the step being measured
        self.t_input = self.t_sync = self.t_comm = self.t_comm_exposed = 0.0
        self.n_sync = 0
        # (code, f_lasti, call) -> [count, seconds]; line numbers are worked out when written
        self.sites: dict[tuple, list] = {}
        self.user: dict[CodeType, bool] = {}  # code object -> written by the user, not by us
        self.internal = internal  # path prefixes of torch and of the probe
        # id(Work) of an async collective -> (issue time, sequence number)
        self.issued: dict[int, tuple[float, int]] = {}
        self.ddp = False  # a DistributedDataParallel whose all-reduce is not seen (ddp.py)
        # a collective on CUDA tensors (NCCL): it runs on the GPU's stream and returns once
        # queued, so the host's time in it is not its time
        self.device_comm = False
        # The collectives this process entered and finished so far, in the order it entered
        # them: every rank of a job enters the same ones in the same order, so the sequence
        # number one rank reached and another did not names the collective a hang is in.
        # The op, its bytes and when it was entered (perf_counter) are the newest one's.
        self.coll_entered = 0
        self.coll_done = 0
        self.coll_op: str | None = None
        self.coll_bytes: int | None = None
        self.coll_at: float | None = None
        # DistributedDataParallel's gradient buckets this step (ddp.py; perf_counter): the
        # first one issued, the last one issued (the backward's compute is over by then) and
        # the last one finished. Written from the autograd and communication threads.
        self.bucket_first: float | None = None
        self.bucket_last: float | None = None
        self.bucket_done: float | None = None

    def begin(self, now: float | None) -> None:
        self.open_t = now
        self.t_input = self.t_sync = self.t_comm = self.t_comm_exposed = 0.0
        self.n_sync = 0
        self.bucket_first = self.bucket_last = self.bucket_done = None

    def enter(self, op: str, nbytes: int | None, now: float) -> int:
        """A collective entered: its sequence number (1, 2, ...)."""
        self.coll_entered += 1
        self.coll_op = op
        self.coll_bytes = nbytes
        self.coll_at = now
        return self.coll_entered

    def finish(self, seq: int) -> None:
        """The collective `seq` finished (they finish in the order entered, per process group)."""
        if seq > self.coll_done:
            self.coll_done = seq

    def close_buckets(self) -> None:
        """DistributedDataParallel's buckets of the step now ending, added to its communication:
        in all, from the first bucket issued to the last one finished; exposed, what the host
        waited after its backward had issued the last bucket."""
        first, last, done = self.bucket_first, self.bucket_last, self.bucket_done
        if first is None or last is None or done is None:
            return
        self.t_comm += max(0.0, done - first)
        self.t_comm_exposed += max(0.0, done - last)

    def classify(self, code: CodeType) -> bool:
        user = not code.co_filename.startswith(self.internal)
        if len(self.user) >= MAX_CODES_KEPT:  # code made at run time (exec, fx) comes and goes
            self.user.clear()
        self.user[code] = user
        return user

    def user_frame(self, frame: FrameType) -> FrameType:
        """The nearest caller written by the user (the frame itself when there is none)."""
        caller = frame.f_back
        for _ in range(64):
            if caller is None:
                break
            user = self.user.get(caller.f_code)
            if user is None:
                user = self.classify(caller.f_code)
            if user:
                return caller
            caller = caller.f_back
        return frame

    def add_sync(self, frame: FrameType, call: str, seconds: float) -> None:
        """One sync of `seconds` at `frame`'s current instruction (hooks.py inlines this)."""
        self.t_sync += seconds
        self.n_sync += 1
        key = (frame.f_code, frame.f_lasti, call)
        entry = self.sites.get(key)
        if entry is None:
            self.add_site(key, seconds)
        else:
            entry[0] += 1
            entry[1] += seconds

    def add_site(self, key: tuple, seconds: float) -> None:
        if len(self.sites) >= MAX_SITES_KEPT:
            key = (None, 0, key[2])
            entry = self.sites.get(key)
            if entry is not None:
                entry[0] += 1
                entry[1] += seconds
                return
        self.sites[key] = [1, seconds]


def line_of(code: CodeType, lasti: int) -> int:
    """The source line of instruction offset `lasti` (Python 3.10+: `co_lines()`, PEP 626)."""
    for start, end, line in code.co_lines():
        if start <= lasti < end and line is not None:
            return line
    return code.co_firstlineno


def site_name(filename: str, cwd: str) -> str:
    """A file's name as the user would type it: relative to the job's directory when inside."""
    if cwd and filename.startswith(cwd + os.sep):
        return filename[len(cwd) + 1 :]
    return filename


def top_sites(sites: dict[tuple, list], cwd: str, limit: int = 10) -> list[dict]:
    """The "sync_sites" record's list: per file:line and call, most time first."""
    merged: dict[tuple[str, str], list] = {}
    for (code, lasti, call), (count, seconds) in list(sites.items()):
        if code is None:
            site = "(other sites)"
        else:
            site = f"{site_name(code.co_filename, cwd)}:{line_of(code, lasti)}"
        entry = merged.setdefault((site, call), [0, 0.0])
        entry[0] += count
        entry[1] += seconds
    ranked = sorted(merged.items(), key=lambda item: (-item[1][1], -item[1][0]))
    return [
        {"site": site, "call": call, "count": count, "seconds": round(seconds, 6)}
        for (site, call), (count, seconds) in ranked[:limit]
    ]
